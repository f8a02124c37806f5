//! Webhook calls (`/calls`): the delivery record of every webhook call, newest first, searched by
//! status (`500`, `5xx`, `none` for no answer), refreshed live. Each row links to its job, whose
//! page shows the call's headers and body.

use crate::components::get_form::GetForm;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::components::live::use_live;
use crate::components::loaded::Loaded;
use crate::components::table::{Column, DataTable};
use crate::components::time::{span, use_clock, When};
use crate::console::webhooks::{list_calls, CallsPage, CallsQuery};
use crate::console::{nonempty, query_string};

const CALL_COLUMNS: &[Column] = &[
    ("When", false),
    ("Job", false),
    ("Status", false),
    ("Late", true),
    ("Took", false),
    ("To", true),
    ("Error", false),
];

#[component]
pub fn CallsPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let params = use_query_map();
    let query = Memo::new(move |_| {
        let p = params.read();
        CallsQuery {
            status: nonempty(p.get("status")),
            before: p.get("before").and_then(|b| b.parse().ok()),
        }
    });
    // The version is part of the key: an unchanged key would not refetch.
    let page = Resource::new(
        move || (query.get(), live.version.get()),
        |(q, _)| list_calls(q),
    );
    clock.follow(page, |p: &CallsPage| p.now_ms);
    let q = move || query.get();
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Webhook calls"</h1>
            </div>
            <GetForm action="/calls" attr:class="filters" attr:role="search" attr:aria-label="Search the calls">
                <label>
                    "Status"
                    <input name="status" size="6" placeholder="5xx" prop:value=move || q().status.unwrap_or_default()/>
                </label>
                <span class="muted">"a code (" <code>"500"</code> "), a class (" <code>"5xx"</code> ") or " <code>"none"</code> " (no answer)"</span>
                <button type="submit">"Search"</button>
            </GetForm>
            <Loaded resource=page render=move |p: CallsPage| {
                if p.rows.is_empty() {
                    return view! { <p class="empty">"No webhook call matches."</p> }.into_any();
                }
                let now = p.now_ms;
                let next = p.next_before.map(|b| {
                    let mut pairs = Vec::new();
                    if let Some(s) = query.get_untracked().status {
                        pairs.push(("status", s));
                    }
                    pairs.push(("before", b.to_string()));
                    format!("/calls?{}", query_string(&pairs))
                });
                view! {
                    <DataTable label="Webhook calls" columns=CALL_COLUMNS>
                        {p.rows
                            .into_iter()
                            .map(|c| {
                                let ok = c.status.is_some_and(|s| (200..300).contains(&s));
                                // The whole error is on the job's page.
                                let error = c.error.clone().unwrap_or_default();
                                let error = if error.chars().count() > 120 {
                                    error.chars().take(120).collect::<String>() + "…"
                                } else {
                                    error
                                };
                                let status = c.status.map(|s| s.to_string()).unwrap_or_else(|| "no answer".into());
                                view! {
                                    <tr data-call=c.id>
                                        <td><When at_ms=c.started_ms base_ms=now/></td>
                                        <td>
                                            <a href=crate::base::href(&format!("/jobs/{}", c.job_id))>{format!("job {}", c.job_id)}</a>
                                            <span class="muted">{format!(" · attempt {}", c.attempt)}</span>
                                        </td>
                                        <td class:error-text=!ok>{status}</td>
                                        <td class="wide">{if c.late_ms < 0 { format!("−{}", span(c.late_ms)) } else { span(c.late_ms) }}</td>
                                        <td>{span(i64::from(c.duration_ms))}</td>
                                        <td class="wide"><code>{c.address.clone().unwrap_or_default()}</code></td>
                                        <td class="error-text">{error}</td>
                                    </tr>
                                }
                            })
                            .collect_view()}
                    </DataTable>
                    <nav class="pager" aria-label="Pages">
                        {next.map(|href| view! { <a href=crate::base::href(&href)>"Older →"</a> })}
                    </nav>
                }
                .into_any()
            }/>
        </section>
    }
}
