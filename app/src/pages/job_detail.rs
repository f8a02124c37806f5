//! One job (`/jobs/:id`): args and meta as formatted JSON, the timeline of its attempts, every
//! error, a webhook's calls (the delivery record), and the operator's actions: retry, cancel, run
//! now, reschedule, delete, clone.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::session::Csrf;
use leptos_router::hooks::{use_navigate, use_params_map};

use crate::components::live::use_live;
use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::time::{fine_span, span, use_clock, Countdown, When};
use crate::components::time_field::TimeField;
use crate::console::jobs::{
    get_job, CloneJob, DeliveryRow, EditJob, EditJobInput, JobAction, JobDetail, RescheduleJob,
};
use crate::pages::jobs::JobButtons;

#[component]
pub fn JobDetailPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|i| i.parse::<i64>().ok());
    let action = ServerAction::<JobAction>::new();
    let reschedule = ServerAction::<RescheduleJob>::new();
    let clone = ServerAction::<CloneJob>::new();
    let edit = ServerAction::<EditJob>::new();
    // While an attempt runs, its page reads what it logged so far every 2 s (its node writes it
    // once a second); job changes come from the live stream.
    let running = RwSignal::new(false);
    let running_tick = move || {
        if running.get() && !live.paused.get() {
            clock.now_ms.get() / 2000
        } else {
            0
        }
    };
    let job = Resource::new(
        move || {
            // The versions are part of the key: an unchanged key would not refetch.
            (
                id(),
                live.version.get(),
                action.version().get(),
                reschedule.version().get(),
                edit.version().get(),
                running_tick(),
            )
        },
        |(id, ..)| async move {
            match id {
                Some(id) => get_job(id).await,
                None => Err(ServerFnError::new("the job id must be a number")),
            }
        },
    );
    clock.follow(job, |d: &JobDetail| d.now_ms);
    Effect::new(move |_| {
        let executing = job.with(|d| matches!(d, Some(Ok(d)) if d.job.state == "executing"));
        if running.get_untracked() != executing {
            running.set(executing);
        }
    });
    // After a delete the job is gone: back to the list. After a clone: to the copy.
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(new_id)) = clone.value().get() {
            navigate(&format!("/jobs/{new_id}"), Default::default());
        }
    });
    let delete = ServerAction::<JobAction>::new();
    let draft = RwSignal::new(None::<String>);
    let opened = RwSignal::new(std::collections::HashSet::<String>::new());
    // What the operator typed in the edit form: kept when live updates render the page again.
    let edit_draft = RwSignal::new(None::<EditJobInput>);
    Effect::new(move |_| {
        if edit.value().with(|v| matches!(v, Some(Ok(())))) {
            edit_draft.set(None);
        }
    });
    // A done reschedule shows the job's new time again.
    Effect::new(move |_| {
        if reschedule.value().with(|v| matches!(v, Some(Ok(())))) {
            draft.set(None);
        }
    });
    let navigate = use_navigate();
    Effect::new(move |_| {
        if delete.value().with(|v| matches!(v, Some(Ok(())))) {
            navigate("/jobs", Default::default());
        }
    });
    view! {
        <section class="page">
            <div class="page-head">
                <h1>{move || id().map(|i| format!("Job {i}")).unwrap_or_else(|| "Job".into())}</h1>
                <a href=crate::base::href("/jobs")>"All jobs"</a>
            </div>
            <ActionError error=failure(action.value())/>
            <ActionError error=failure(reschedule.value())/>
            <ActionError error=failure(clone.value())/>
            <ActionError error=failure(delete.value())/>
            <ActionError error=failure(edit.value())/>
            <Loaded resource=job render=move |d: JobDetail| view! { <Detail d action reschedule clone delete draft opened edit edit_draft/> }/>
        </section>
    }
}

#[component]
fn Detail(
    d: JobDetail,
    action: ServerAction<JobAction>,
    reschedule: ServerAction<RescheduleJob>,
    clone: ServerAction<CloneJob>,
    delete: ServerAction<JobAction>,
    /// What the operator typed as the new time: kept when live updates render the page again.
    draft: RwSignal<Option<String>>,
    /// The attempts' outputs and logs the operator opened (`output-N`, `logs-N`), kept open when
    /// live updates render the page again (every 2 s while an attempt runs).
    opened: RwSignal<std::collections::HashSet<String>>,
    edit: ServerAction<EditJob>,
    edit_draft: RwSignal<Option<EditJobInput>>,
) -> impl IntoView {
    let j = d.job.clone();
    let id = j.id;
    let now = d.now_ms;
    let badge = format!("badge state-{}", j.state);
    let waiting = j.is_waiting();
    let scheduled_ms = j.scheduled_ms;
    let executing = j.state == "executing";
    let is_open = move |key: String| opened.with_untracked(|o| o.contains(&key));
    let remember = move |key: String| {
        move |ev: leptos::ev::Event| {
            let open = event_target::<leptos::web_sys::Element>(&ev).has_attribute("open");
            opened.update(|o| {
                if open {
                    o.insert(key.clone());
                } else {
                    o.remove(&key);
                }
            });
        }
    };
    view! {
        <div class="detail-grid">
            <dl class="facts">
                <dt>"State"</dt>
                <dd><span class=badge>{j.state.clone()}</span></dd>
                <dt>"Kind"</dt>
                <dd>{j.kind.clone()}</dd>
                <dt>"Queue"</dt>
                <dd><a href=crate::base::href(&format!("/jobs?queue={}", j.queue))>{j.queue.clone()}</a></dd>
                <dt>"Priority"</dt>
                <dd>{j.priority}</dd>
                <dt>"Attempt"</dt>
                <dd>{format!("{} of {}", j.attempt, j.max_attempts)}</dd>
                <dt>"Due"</dt>
                <dd>
                    <When at_ms=scheduled_ms base_ms=now/>
                    {waiting.then(|| view! { " · " <Countdown at_ms=scheduled_ms base_ms=now/> })}
                </dd>
                <dt>"Inserted"</dt>
                <dd>
                    <When at_ms=d.inserted_ms base_ms=now/>
                    {d.created_by.clone().map(|c| view! { " by " <span data-created-by="">{c}</span> })}
                </dd>
                {j.finalized_ms.map(|f| view! { <dt>"Finished"</dt><dd><When at_ms=f base_ms=now/></dd> })}
                {d.lease_ms.map(|l| view! { <dt>"Lease until"</dt><dd><When at_ms=l base_ms=now/></dd> })}
                {d.held.clone().map(|h| view! { <dt>"Held"</dt><dd data-held="">{h}</dd> })}
                {d.schedule.clone().map(|s| view! {
                    <dt>"Schedule"</dt>
                    <dd><a href=crate::base::href(&format!("/schedules/{s}"))>{s.clone()}</a></dd>
                })}
                {d.unique_key.clone().map(|k| view! { <dt>"Unique key"</dt><dd><code>{k}</code></dd> })}
                {(!d.tags.is_empty()).then(|| view! { <dt>"Tags"</dt><dd>{d.tags.join(", ")}</dd> })}
            </dl>
            <div class="panel actions-panel">
                <h2>"Actions"</h2>
                <JobButtons j=j.clone() action/>
                {waiting.then(|| view! {
                    <ActionForm action=reschedule attr:class="inline-form">
                        <Csrf/>
                        <input type="hidden" name="id" value=id/>
                        <TimeField
                            label="Reschedule to "
                            name="at"
                            which_name="which"
                            zone_name="zone"
                            required=true
                            draft
                            at_ms=scheduled_ms
                        />
                        <button type="submit">"Reschedule"</button>
                    </ActionForm>
                })}
                <ActionForm action=clone attr:class="inline-form">
                    <Csrf/>
                    <input type="hidden" name="id" value=id/>
                    <button type="submit">"Clone as a new job"</button>
                </ActionForm>
                {(!executing).then(|| view! {
                    <details class="danger-zone">
                        <summary>"Delete…"</summary>
                        <ActionForm action=delete attr:class="inline-form">
                            <Csrf/>
                            <input type="hidden" name="id" value=id/>
                            <button type="submit" class="danger" name="action" value="delete">
                                {format!("Yes, delete job {id}")}
                            </button>
                        </ActionForm>
                    </details>
                })}
                {executing.then(|| view! { <p class="muted">"An executing job can be cancelled; delete it once it has stopped."</p> })}
            </div>
        </div>
        <h2>"Args"</h2>
        <pre class="json" aria-label="Args">{d.args_json.clone()}</pre>
        {waiting.then(|| view! { <EditForm d=d.clone() edit draft=edit_draft/> })}
        <h2>"Meta"</h2>
        <pre class="json" aria-label="Meta">{d.meta_json.clone()}</pre>
        <h2>"Attempts"</h2>
        {if d.attempts.is_empty() {
            view! { <p class="empty">"Not attempted yet."</p> }.into_any()
        } else {
            view! {
                <ol class="timeline" aria-label="Attempts">
                    {d.attempts
                        .into_iter()
                        .map(|a| {
                            let took = match (a.duration_ms, a.started_ms, a.ended_ms) {
                                (Some(d), _, _) => format!("took {}", fine_span(d)),
                                (None, Some(s), Some(e)) => format!("took {}", span(e - s)),
                                (None, Some(s), None) if a.outcome == "running" => format!("running for {}", span(now - s)),
                                _ => String::new(),
                            };
                            let late = a.late_ms.map(|l| {
                                if l >= 0.0 {
                                    format!("{} after its due time", fine_span(l))
                                } else {
                                    format!("{} before its due time", fine_span(l))
                                }
                            });
                            let class = format!("attempt outcome-{}", a.outcome);
                            let lines = a.logs.len();
                            let dropped = a.logs_dropped;
                            let logs = a.logs.clone();
                            view! {
                                <li class=class data-attempt=a.attempt>
                                    <strong>{format!("Attempt {}", a.attempt)}</strong>
                                    " · "
                                    <span class="outcome">{a.outcome.clone()}</span>
                                    {a.started_ms.map(|s| view! { " · started " <When at_ms=s base_ms=now/> })}
                                    {late.map(|l| view! { ", " <span class="late">{l}</span> })}
                                    {a.node.clone().map(|n| view! { " · on " <code>{n}</code> })}
                                    {(!took.is_empty()).then(|| view! { " · " {took.clone()} })}
                                    {a.error.clone().map(|e| view! { <pre class="error-text">{e}</pre> })}
                                    {a.output_json.clone().map(|o| view! {
                                        <details class="output" open=is_open(format!("output-{}", a.attempt))
                                            on:toggle=remember(format!("output-{}", a.attempt))>
                                            <summary>"Output"</summary>
                                            <pre class="json" aria-label="Output">{o}</pre>
                                        </details>
                                    })}
                                    {(lines > 0 || dropped > 0).then(|| view! {
                                        <details class="logs" open=is_open(format!("logs-{}", a.attempt))
                                            on:toggle=remember(format!("logs-{}", a.attempt))>
                                            <summary>
                                                {format!("Log ({lines} line{})", if lines == 1 { "" } else { "s" })}
                                                {(dropped > 0).then(|| format!(", {dropped} more not kept"))}
                                            </summary>
                                            <ol class="log-lines" aria-label="Log">
                                                {logs
                                                    .into_iter()
                                                    .map(|l| {
                                                        let class = format!("log-{}", l.level.to_lowercase());
                                                        view! {
                                                            <li class=class>
                                                                {l.at_ms.map(|t| view! { <When at_ms=t base_ms=now/> " " })}
                                                                <span class="level">{l.level.clone()}</span>
                                                                " "
                                                                {l.message.clone()}
                                                            </li>
                                                        }
                                                    })
                                                    .collect_view()}
                                            </ol>
                                            {(dropped > 0).then(|| view! {
                                                <p class="truncated">{format!("Truncated: {dropped} more lines were logged and not kept.")}</p>
                                            })}
                                        </details>
                                    })}
                                </li>
                            }
                        })
                        .collect_view()}
                </ol>
            }
            .into_any()
        }}
        {(!d.deliveries.is_empty()).then(|| view! { <Deliveries rows=d.deliveries.clone() now/> })}
    }
}

/// A webhook job's calls, in the order made: the delivery record.
#[component]
fn Deliveries(rows: Vec<DeliveryRow>, now: i64) -> impl IntoView {
    view! {
        <h2>"Calls"</h2>
        <ol class="timeline deliveries" aria-label="Calls">
            {rows
                .into_iter()
                .map(|c| {
                    let answered = c.status.map(|s| format!("HTTP {s}")).unwrap_or_else(|| "no answer".into());
                    let ok = c.status.is_some_and(|s| (200..300).contains(&s));
                    let class = if ok { "attempt outcome-completed" } else { "attempt outcome-failed" };
                    let late = if c.late_ms >= 0 {
                        format!("{} after its due time", span(c.late_ms))
                    } else {
                        format!("{} before its due time", span(c.late_ms))
                    };
                    let headers = c.headers.clone();
                    view! {
                        <li class=class data-delivery=c.id>
                            <strong>{format!("Attempt {}", c.attempt)}</strong>
                            " · "
                            <span class="status">{answered}</span>
                            " · started " <When at_ms=c.started_ms base_ms=now/>
                            ", " {late}
                            " · took " {span(i64::from(c.duration_ms))}
                            {c.address.clone().map(|a| view! { " · to " <code>{a}</code> })}
                            {(!headers.is_empty()).then(|| view! {
                                <details>
                                    <summary>{format!("Response headers ({})", headers.len())}</summary>
                                    <dl class="headers">
                                        {headers
                                            .into_iter()
                                            .map(|(k, v)| view! { <dt>{k}</dt><dd>{v}</dd> })
                                            .collect_view()}
                                    </dl>
                                </details>
                            })}
                            {c.body.clone().filter(|b| !b.is_empty()).map(|b| view! {
                                <pre class="response-body" aria-label="Response body">{b}</pre>
                            })}
                            {c.error.clone().map(|e| view! { <pre class="error-text">{e}</pre> })}
                        </li>
                    }
                })
                .collect_view()}
        </ol>
    }
}

/// A waiting job's edit form: args, priority, queue, attempts, tags. Only what the operator
/// changed is sent; the server checks it with the kind's worker, as an insert.
#[component]
fn EditForm(
    d: JobDetail,
    edit: ServerAction<EditJob>,
    draft: RwSignal<Option<EditJobInput>>,
) -> impl IntoView {
    let j = d.job.clone();
    let id = j.id;
    let shown = EditJobInput {
        args: d.args_json.clone(),
        args_shown: d.args_json.clone(),
        priority: j.priority.to_string(),
        queue: j.queue.clone(),
        max_attempts: j.max_attempts.to_string(),
        tags: d.tags.join(", "),
    };
    let value = draft.get_untracked().unwrap_or_else(|| shown.clone());
    let args_shown = shown.args_shown.clone();
    let update = move |field: fn(&mut EditJobInput, String)| {
        let shown = shown.clone();
        move |ev: leptos::ev::Event| {
            let v = event_target_value(&ev);
            draft.update(|d| field(d.get_or_insert_with(|| shown.clone()), v));
        }
    };
    view! {
        <section class="edit-job">
            <h2>"Edit"</h2>
            <ActionForm action=edit attr:class="form-card" attr:aria-label="Edit job">
                <Csrf/>
                <input type="hidden" name="id" value=id/>
                <input type="hidden" name="input[args_shown]" value=args_shown/>
                <label>
                    "Args (JSON)"
                    <textarea name="input[args]" rows="6" cols="60" spellcheck="false" on:input=update(|d, v| d.args = v)>
                        {value.args.clone()}
                    </textarea>
                </label>
                <div class="row">
                <label>
                    "Priority (0 highest)"
                    <input type="number" name="input[priority]" required
                        min=d.limits.priority_min.to_string() max=d.limits.priority_max.to_string()
                        value=value.priority.clone() on:input=update(|d, v| d.priority = v)/>
                </label>
                <label>
                    "Queue"
                    <input name="input[queue]" required pattern="[a-z0-9_-]{1,64}"
                        value=value.queue.clone() on:input=update(|d, v| d.queue = v)/>
                </label>
                <label>
                    "Max attempts"
                    <input type="number" name="input[max_attempts]" required
                        min=d.limits.max_attempts_min.to_string() max=d.limits.max_attempts_max.to_string()
                        value=value.max_attempts.clone() on:input=update(|d, v| d.max_attempts = v)/>
                </label>
                <label>
                    "Tags (separated by commas)"
                    <input name="input[tags]" value=value.tags.clone() on:input=update(|d, v| d.tags = v)/>
                </label>
                </div>
                <button type="submit">"Save changes"</button>
            </ActionForm>
        </section>
    }
}
