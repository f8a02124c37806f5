//! Jobs: the newest jobs, filtered by state (`/jobs?state=retryable`), refreshed live.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::components::live::{use_live_events, LiveBadge};
use crate::console::{list_jobs, CancelJob, RetryJob};

const STATES: [&str; 7] = [
    "scheduled",
    "available",
    "executing",
    "retryable",
    "completed",
    "discarded",
    "cancelled",
];

#[component]
pub fn JobsPage() -> impl IntoView {
    let live = use_live_events();
    let query = use_query_map();
    let state = move || {
        query
            .read()
            .get("state")
            .filter(|s| STATES.contains(&s.as_str()))
    };
    let cancel = ServerAction::<CancelJob>::new();
    let retry = ServerAction::<RetryJob>::new();
    let jobs = Resource::new(
        move || {
            (
                state(),
                live.version.get(),
                cancel.version().get(),
                retry.version().get(),
            )
        },
        |(state, ..)| list_jobs(state),
    );
    // The last action's refusal (a job that finished meanwhile, say), shown above the table.
    let action_error = move || {
        [
            cancel.value().get().and_then(|r| r.err()),
            retry.value().get().and_then(|r| r.err()),
        ]
        .into_iter()
        .flatten()
        .next()
        .map(|e| e.to_string())
    };
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Jobs"</h1>
                <LiveBadge live/>
            </div>
            <nav class="filters" aria-label="Filter by state">
                <a href="/jobs" class:active=move || state().is_none()>"all"</a>
                {STATES
                    .iter()
                    .map(|s| {
                        let s = *s;
                        view! {
                            <a href=format!("/jobs?state={s}") class:active=move || state().as_deref() == Some(s)>
                                {s}
                            </a>
                        }
                    })
                    .collect_view()}
            </nav>
            {move || action_error().map(|e| view! { <p class="error" role="alert">{e}</p> })}
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match jobs.await {
                        Ok(rows) if rows.is_empty() => {
                            view! { <p class="empty">"No jobs here."</p> }.into_any()
                        }
                        Ok(rows) => view! {
                            <table class="grid" aria-label="Jobs">
                                <thead>
                                    <tr>
                                        <th scope="col">"Id"</th>
                                        <th scope="col">"Kind"</th>
                                        <th scope="col">"Queue"</th>
                                        <th scope="col">"State"</th>
                                        <th scope="col">"Attempt"</th>
                                        <th scope="col">"Scheduled at (UTC)"</th>
                                        <th scope="col">"Last error"</th>
                                        <th scope="col">"Actions"</th>
                                    </tr>
                                </thead>
                                <tbody>
                                    {rows
                                        .into_iter()
                                        .map(|j| {
                                            let badge = format!("badge state-{}", j.state);
                                            let final_state = matches!(
                                                j.state.as_str(),
                                                "completed" | "discarded" | "cancelled"
                                            );
                                            let can_retry = final_state || j.state == "retryable";
                                            let (cancel_id, retry_id) = (j.id.to_string(), j.id.to_string());
                                            let cancel_label = format!("Cancel job {}", j.id);
                                            let retry_label = format!("Retry job {}", j.id);
                                            let when = j.scheduled_at.replace('T', " ");
                                            let when: String = when.chars().take(23).collect();
                                            view! {
                                                <tr>
                                                    <td>{j.id}</td>
                                                    <td>{j.kind}</td>
                                                    <td>{j.queue}</td>
                                                    <td><span class=badge>{j.state}</span></td>
                                                    <td>{format!("{} / {}", j.attempt, j.max_attempts)}</td>
                                                    <td>{when}</td>
                                                    <td class="error-text">{j.last_error.unwrap_or_default()}</td>
                                                    <td class="actions">
                                                        {(!final_state).then(|| view! {
                                                            <ActionForm action=cancel>
                                                                <input type="hidden" name="id" value=cancel_id/>
                                                                <button type="submit" aria-label=cancel_label>"Cancel"</button>
                                                            </ActionForm>
                                                        })}
                                                        {can_retry.then(|| view! {
                                                            <ActionForm action=retry>
                                                                <input type="hidden" name="id" value=retry_id/>
                                                                <button type="submit" aria-label=retry_label>"Retry"</button>
                                                            </ActionForm>
                                                        })}
                                                    </td>
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
