//! Questions: game questions, upcoming first, with their status, refreshed live.

use leptos::prelude::*;

use crate::components::live::{use_live_events, LiveBadge};
use crate::console::list_questions;

#[component]
pub fn QuestionsPage() -> impl IntoView {
    let live = use_live_events();
    let questions = Resource::new(move || live.version.get(), |_| list_questions());
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Questions"</h1>
                <LiveBadge live/>
            </div>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match questions.await {
                        Ok(rows) if rows.is_empty() => view! {
                            <p class="empty">"No questions yet. Create one with POST /api/v1/questions, or run kickoff demo."</p>
                        }
                        .into_any(),
                        Ok(rows) => view! {
                            <table class="grid" aria-label="Questions">
                                <thead>
                                    <tr>
                                        <th scope="col">"Game"</th>
                                        <th scope="col">"Question"</th>
                                        <th scope="col">"Game time (UTC)"</th>
                                        <th scope="col">"Status"</th>
                                        <th scope="col">"Lock job"</th>
                                    </tr>
                                </thead>
                                <tbody>
                                    {rows
                                        .into_iter()
                                        .map(|q| {
                                            let badge = format!("badge status-{}", q.status);
                                            let when: String = q.game_time.replace('T', " ").chars().take(19).collect();
                                            view! {
                                                <tr>
                                                    <td>{q.game}</td>
                                                    <td>{q.prompt}</td>
                                                    <td>{when}</td>
                                                    <td><span class=badge>{q.status}</span></td>
                                                    <td>{q.lock_job_id.map(|id| format!("#{id}")).unwrap_or_default()}</td>
                                                </tr>
                                            }
                                        })
                                        .collect_view()}
                                </tbody>
                            </table>
                        }
                        .into_any(),
                        Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}
