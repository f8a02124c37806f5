//! Queues (`/queues`): what waits and runs in each queue; pause / resume, the per-node
//! concurrency and the limits across every node (rate, per key, global concurrency), applied on
//! every node at once; and the job kinds, each paused and resumed on every node.

use std::collections::HashMap;

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::series_chart::Sparkline;

use crate::components::session::{may_act, Csrf};

use crate::components::live::use_live;
use crate::components::loaded::{failure, ActionError, Loaded};
use crate::console::queues::{
    list_kinds, list_queues, KindAction, KindInfo, QueueAction, QueueInfo,
};

#[component]
pub fn QueuesPage() -> impl IntoView {
    let live = use_live();
    let action = ServerAction::<QueueAction>::new();
    // Concurrency values being typed, by queue: kept when live updates render the table again.
    let drafts = RwSignal::new(HashMap::<String, String>::new());
    Effect::new(move |_| {
        if action.value().with(|v| matches!(v, Some(Ok(())))) {
            drafts.set(HashMap::new());
        }
    });
    let queues = Resource::new(
        // The versions are the key: an unchanged key would not refetch.
        move || (live.version.get(), action.version().get()),
        |_| list_queues(),
    );
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Queues"</h1>
            </div>
            <ActionError error=failure(action.value())/>
            <Loaded resource=queues render=move |rows| view! { <QueueTable rows action drafts/> }/>
            <KindsSection/>
        </section>
    }
}

/// The job kinds, each with its pause and resume on every node.
#[component]
fn KindsSection() -> impl IntoView {
    let live = use_live();
    let action = ServerAction::<KindAction>::new();
    let kinds = Resource::new(
        move || (live.version.get(), action.version().get()),
        |_| list_kinds(),
    );
    view! {
        <h2>"Job kinds"</h2>
        <p class="hint">"A paused kind is held on every node: its jobs stay where they are (attempts already running finish) until it is resumed."</p>
        <ActionError error=failure(action.value())/>
        <Loaded resource=kinds render=move |rows| view! { <KindTable rows action/> }/>
    }
}

#[component]
fn KindTable(rows: Vec<KindInfo>, action: ServerAction<KindAction>) -> impl IntoView {
    let act = may_act();
    view! {
        <div class="table-wrap">
            <table class="grid" aria-label="Job kinds">
                <thead>
                    <tr>
                        <th scope="col">"Kind"</th>
                        <th scope="col">"Status"</th>
                        {act.then(|| view! { <th scope="col">"Actions"</th> })}
                    </tr>
                </thead>
                <tbody>
                    {rows
                        .into_iter()
                        .map(|k| {
                            let (verb, op) = if k.paused { ("Resume", "resume") } else { ("Pause", "pause") };
                            let label = format!("{verb} kind {}", k.kind);
                            let kind = k.kind.clone();
                            view! {
                                <tr data-kind=k.kind.clone()>
                                    <th scope="row"><a href=crate::base::href(&format!("/jobs?kind={}", k.kind))>{k.kind.clone()}</a></th>
                                    <td>
                                        {if k.paused {
                                            view! { <span class="badge state-retryable">"paused"</span> " " <span class="muted">{k.paused_note.clone().unwrap_or_default()}</span> }.into_any()
                                        } else {
                                            view! { <span class="badge state-completed">"running"</span> }.into_any()
                                        }}
                                    </td>
                                    {act.then(|| view! {
                                        <td>
                                            <ActionForm action>
                                                <Csrf/>
                                                <input type="hidden" name="kind" value=kind/>
                                                <button type="submit" name="action" value=op aria-label=label>{verb}</button>
                                            </ActionForm>
                                        </td>
                                    })}
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
    }
}

#[component]
pub fn QueueTable(
    rows: Vec<QueueInfo>,
    /// With an action: pause / resume and concurrency controls.
    #[prop(optional)]
    action: Option<ServerAction<QueueAction>>,
    /// Concurrency values being typed, by queue (with `action`).
    #[prop(optional)]
    drafts: Option<RwSignal<HashMap<String, String>>>,
) -> impl IntoView {
    let drafts = drafts.unwrap_or_else(|| RwSignal::new(HashMap::new()));
    let action = action.filter(|_| may_act());
    if rows.is_empty() {
        return view! { <p class="empty">"No queues yet: a queue appears when a node serves it or a job names it."</p> }
            .into_any();
    }
    view! {
        <div class="table-wrap">
            <table class="grid" aria-label="Queues">
                <thead>
                    <tr>
                        <th scope="col">"Queue"</th>
                        <th scope="col">"Status"</th>
                        <th scope="col">"Available"</th>
                        <th scope="col">"Scheduled"</th>
                        <th scope="col">"Executing"</th>
                        <th scope="col">"Failed"</th>
                        <th scope="col">"Last 24 h"</th>
                        <th scope="col">"Concurrency per node"</th>
                        <th scope="col">"Limits on all nodes"</th>
                        {action.is_some().then(|| view! { <th scope="col">"Actions"</th> })}
                    </tr>
                </thead>
                <tbody>
                    {rows
                        .into_iter()
                        .map(|q| {
                            let name = q.name.clone();
                            let row_name = q.name.clone();
                            let failed = q.retryable + q.discarded;
                            let configured = q
                                .configured
                                .iter()
                                .map(|(_, n)| n.to_string())
                                .collect::<Vec<_>>();
                            let configured = if configured.is_empty() {
                                "no node serves it".to_string()
                            } else {
                                format!("configured {}", configured.join(" / "))
                            };
                            let limit = q
                                .concurrency
                                .map(|c| format!("{c} (set here)"))
                                .unwrap_or_else(|| configured.clone());
                            let failed_href = format!("/failures?queue={}", q.name);
                            view! {
                                <tr data-queue=row_name>
                                    <th scope="row"><a href=crate::base::href(&format!("/jobs?queue={}", q.name))>{q.name.clone()}</a></th>
                                    <td>
                                        {if q.paused {
                                            view! { <span class="badge state-retryable">"paused"</span> }.into_any()
                                        } else {
                                            view! { <span class="badge state-completed">"running"</span> }.into_any()
                                        }}
                                    </td>
                                    <td>{q.available}</td>
                                    <td>{q.scheduled}</td>
                                    <td>{q.executing}</td>
                                    <td><a href=crate::base::href(&failed_href)>{failed}</a></td>
                                    <td class="last-day">
                                        {
                                            let total: i64 = q.last_day.iter().sum();
                                            let label = format!("{total} attempts ended in the last 24 hours in queue {}", q.name);
                                            let href = format!("/history?range=24h&queue={}", q.name);
                                            let title = label.clone();
                                            view! {
                                                <a href=crate::base::href(&href) title=title>
                                                    <Sparkline values=q.last_day.clone() label=label/>
                                                    " " {total}
                                                </a>
                                            }
                                        }
                                    </td>
                                    <td>{limit}</td>
                                    <td class="queue-limits">
                                        {match q.limits.clone() {
                                            Some(limits) => {
                                                let by = if q.limits_by == "operator" { " (set here)" } else { " (configured)" };
                                                format!("{limits}{by}")
                                            }
                                            None => "none".to_string(),
                                        }}
                                        {q.window_use.clone().map(|w| view! { <div class="limit-use muted" data-window-use="">{w}</div> })}
                                        {q.held.clone().map(|h| view! { <div class="limit-held muted" data-held="">{h}</div> })}
                                    </td>
                                    {action.map(|action| {
                                        let pause_name = name.clone();
                                        let pause_label = if q.paused { format!("Resume queue {name}") } else { format!("Pause queue {name}") };
                                        let (verb, op) = if q.paused { ("Resume", "resume") } else { ("Pause", "pause") };
                                        let limit_name = name.clone();
                                        let limit_label = format!("Concurrency of queue {name}");
                                        let current = q.concurrency.map(|c| c.to_string()).unwrap_or_default();
                                        let limits_name = name.clone();
                                        let rate_now = q.rate.clone().unwrap_or_default();
                                        let per_now = q.per.clone().unwrap_or_default();
                                        let global_now = q.global_concurrency.map(|g| g.to_string()).unwrap_or_default();
                                        let draft_key = name.clone();
                                        let input_key = name.clone();
                                        let value = move || {
                                            drafts.with(|d| d.get(&draft_key).cloned()).unwrap_or_else(|| current.clone())
                                        };
                                        view! {
                                        <td>
                                            <div class="actions">
                                                <ActionForm action>
                                                    <Csrf/>
                                                    <input type="hidden" name="name" value=pause_name/>
                                                    <button type="submit" name="action" value=op aria-label=pause_label>{verb}</button>
                                                </ActionForm>
                                                <ActionForm action attr:class="inline-form">
                                                    <Csrf/>
                                                    <input type="hidden" name="name" value=limit_name/>
                                                    <input
                                                        type="number"
                                                        name="concurrency"
                                                        min="1"
                                                        max="10000"
                                                        size="5"
                                                        placeholder="default"
                                                        prop:value=value
                                                        on:input=move |ev| {
                                                            let typed = event_target_value(&ev);
                                                            drafts.update(|d| {
                                                                d.insert(input_key.clone(), typed);
                                                            });
                                                        }
                                                        aria-label=limit_label
                                                    />
                                                    <button type="submit" name="action" value="concurrency">"Set"</button>
                                                </ActionForm>
                                                <ActionForm action attr:class="inline-form limits-form">
                                                    <Csrf/>
                                                    <input type="hidden" name="name" value=limits_name/>
                                                    <input type="text" name="rate" size="8" placeholder="rate: 100/s" value=rate_now aria-label=format!("Rate of queue {name} on all nodes")/>
                                                    <input type="text" name="per" size="8" placeholder="per: host" value=per_now aria-label=format!("Rate of queue {name} counted per (host, kind, args.<field>)")/>
                                                    <input type="number" name="global" min="1" max="100000" size="5" placeholder="global" value=global_now aria-label=format!("Most executing on all nodes, queue {name}")/>
                                                    <button type="submit" name="action" value="limits">"Set limits"</button>
                                                </ActionForm>
                                            </div>
                                        </td>
                                    }})}
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
    }
    .into_any()
}
