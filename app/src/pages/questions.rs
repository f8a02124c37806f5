//! Questions (`/questions`): game questions, upcoming first, with their status and lock job.

use leptos::prelude::*;

use crate::components::live::use_live;
use crate::components::loaded::Loaded;
use crate::components::table::{Column, DataTable};
use crate::components::time::{use_clock, Countdown, When};
use crate::console::questions::{list_questions, QuestionsPage as Page};

const QUESTION_COLUMNS: &[Column] = &[
    ("Game", false),
    ("Question", false),
    ("Game time", false),
    ("Status", false),
    ("Lock job", true),
];

#[component]
pub fn QuestionsPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let questions = Resource::new(move || live.version.get(), |_| list_questions());
    clock.follow(questions, |p: &Page| p.now_ms);
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Questions"</h1>
                <a class="button primary" href=crate::base::href("/questions/new")>"New question"</a>
            </div>
            <Loaded resource=questions render=move |p: Page| {
                if p.rows.is_empty() {
                    return view! {
                        <p class="empty">"No questions yet. Create one here, with POST /api/v1/questions, or run kickoff demo."</p>
                    }
                    .into_any();
                }
                let now = p.now_ms;
                view! {
                    <DataTable label="Questions" columns=QUESTION_COLUMNS>
                                {p.rows
                                    .into_iter()
                                    .map(|q| {
                                        let badge = format!("badge status-{}", q.status);
                                        let open = q.status == "open";
                                        view! {
                                            <tr>
                                                <td>{q.game.clone()}</td>
                                                <td><a href=crate::base::href(&format!("/questions/{}", q.id))>{q.prompt.clone()}</a></td>
                                                <td>
                                                    <When at_ms=q.game_ms base_ms=now/>
                                                    {open.then(|| view! { " · locks " <Countdown at_ms=q.game_ms base_ms=now/> })}
                                                </td>
                                                <td><span class=badge>{q.status.clone()}</span></td>
                                                <td class="wide">{q.lock_job_id.map(|id| view! { <a href=crate::base::href(&format!("/jobs/{id}"))>{format!("#{id}")}</a> })}</td>
                                            </tr>
                                        }
                                    })
                                    .collect_view()}
                            </DataTable>
                }
                .into_any()
            }/>
        </section>
    }
}
