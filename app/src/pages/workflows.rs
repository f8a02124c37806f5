//! Workflows (`/workflows`): the runs, newest first, with their steps counted by state; one run
//! (`/workflows/:id`) with its graph drawn on the server (SVG, readable without JavaScript, live
//! once hydrated), each step's state and what it waits for in a sentence, its signals, and an
//! operator's actions (cancel the run, retry its failed steps, skip a step, send a signal).

use leptos::prelude::*;

use crate::components::action_form::ActionForm;
use crate::components::get_form::GetForm;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::components::live::use_live;
use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::session::{may_act, Csrf};
use crate::components::table::{Column, DataTable};
use crate::components::time::{use_clock, When};
use crate::console::workflows::{
    get_workflow, layout, list_workflows, StepView, WorkflowAction, WorkflowDetail,
    WorkflowsPage as Page,
};

const RUN_COLUMNS: &[Column] = &[
    ("Run", false),
    ("Name", false),
    ("Key", true),
    ("State", false),
    ("Steps", false),
    ("Started", true),
    ("Last step change", true),
];

/// The choices of "waiting longer than" (the duration as the list's query takes it, and words).
const WAITING: [(&str, &str); 5] = [
    ("", "any run"),
    ("5m", "5 minutes"),
    ("1h", "an hour"),
    ("6h", "6 hours"),
    ("1d", "a day"),
];

const STEP_COLUMNS: &[Column] = &[
    ("Step", false),
    ("State", false),
    ("Waits for", false),
    ("Kind", true),
    ("Job", false),
    ("Output", true),
    ("", false),
];

/// "3 of 5 done · 1 failed": a run's steps from its counters.
fn progress(r: &crate::console::workflows::WorkflowRow) -> String {
    let mut text = format!("{} of {} done", r.completed + r.skipped, r.steps);
    if r.failed + r.cancelled > 0 {
        text.push_str(&format!(" · {} failed", r.failed + r.cancelled));
    }
    if r.ready > 0 {
        text.push_str(&format!(" · {} running", r.ready));
    }
    text
}

#[component]
pub fn WorkflowsPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let params = use_query_map();
    let waiting = Memo::new(move |_| params.read().get("waiting").filter(|w| !w.is_empty()));
    let runs = Resource::new(
        move || (waiting.get(), live.version.get()),
        |(waiting, _)| list_workflows(waiting),
    );
    clock.follow(runs, |p: &Page| p.now_ms);
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Workflows"</h1>
            </div>
            <GetForm action="/workflows" attr:class="filters" attr:role="search" attr:aria-label="Filter the runs">
                <label>
                    "Running and waiting longer than "
                    <select name="waiting">
                        {WAITING
                            .iter()
                            .map(|(value, words)| {
                                let chosen = move || waiting.get().as_deref().unwrap_or("") == *value;
                                view! { <option value=*value selected=chosen>{*words}</option> }
                            })
                            .collect_view()}
                    </select>
                </label>
                <button type="submit">"Show"</button>
            </GetForm>
            <Loaded resource=runs render=move |p: Page| {
                if p.rows.is_empty() {
                    let words = if p.waiting.is_some() {
                        "No running run waits that long."
                    } else {
                        "No workflow runs yet. Insert one with POST /api/v1/workflows or Client::insert_workflow."
                    };
                    return view! { <p class="empty">{words}</p> }.into_any();
                }
                let now = p.now_ms;
                view! {
                    <DataTable label="Workflow runs" columns=RUN_COLUMNS>
                        {p.rows
                            .into_iter()
                            .map(|r| {
                                let steps = progress(&r);
                                view! {
                                    <tr>
                                        <td><a href=crate::base::href(&format!("/workflows/{}", r.id))>{format!("#{}", r.id)}</a></td>
                                        <td>{r.name.clone()}</td>
                                        <td class="wide">{r.key.clone().unwrap_or_default()}</td>
                                        <td><span class=format!("badge state-{}", r.state)>{r.state.clone()}</span></td>
                                        <td>{steps}</td>
                                        <td class="wide"><When at_ms=r.created_ms base_ms=now/></td>
                                        <td class="wide" data-progressed><When at_ms=r.progressed_ms base_ms=now/></td>
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

#[component]
pub fn WorkflowDetailPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|i| i.parse::<i64>().ok());
    let action = ServerAction::<WorkflowAction>::new();
    let run = Resource::new(
        move || (id(), live.version.get(), action.version().get()),
        |(id, ..)| async move {
            match id {
                Some(id) => get_workflow(id).await,
                None => Err(ServerFnError::new("the run id must be a number")),
            }
        },
    );
    clock.follow(run, |d: &WorkflowDetail| d.now_ms);
    view! {
        <section class="page">
            <div class="page-head">
                <h1>{move || id().map(|i| format!("Workflow run {i}")).unwrap_or_else(|| "Workflow run".into())}</h1>
                <a href=crate::base::href("/workflows")>"All workflows"</a>
            </div>
            <ActionError error=failure(action.value())/>
            {move || action.value().get().and_then(|done| done.ok().flatten()).map(|again| view! {
                <p class="notice" data-rerun=again>
                    "Running again as "<a href=crate::base::href(&format!("/workflows/{again}"))>{format!("run #{again}")}</a>
                </p>
            })}
            <Loaded resource=run render=move |d: WorkflowDetail| view! { <Detail d action/> }/>
        </section>
    }
}

#[component]
fn Detail(d: WorkflowDetail, action: ServerAction<WorkflowAction>) -> impl IntoView {
    let now = d.now_ms;
    let r = d.row.clone();
    let running = r.state == "running";
    let id = r.id;
    let act = may_act();
    let retryable = act && r.state != "cancelled" && r.failed + r.cancelled + r.skipped > 0;
    view! {
        <p class="lead"><strong>{r.name.clone()}</strong>{r.key.clone().map(|k| view! { " · " <code>{k}</code> })}</p>
        <dl class="facts">
            <dt>"State"</dt>
            <dd><span class=format!("badge state-{}", r.state)>{r.state.clone()}</span>" · "{progress(&r)}</dd>
            <dt>"Started"</dt>
            <dd>
                <When at_ms=r.created_ms base_ms=now/>
                {d.created_by.clone().map(|by| format!(" by {by}"))}
            </dd>
            {r.finished_ms.map(|f| view! { <dt>"Finished"</dt><dd><When at_ms=f base_ms=now/></dd> })}
            {r.rerun_of.map(|o| view! {
                <dt>"Runs again"</dt>
                <dd><a href=crate::base::href(&format!("/workflows/{o}"))>{format!("run #{o}")}</a></dd>
            })}
            {d.times.clone().into_iter().map(|(name, at)| view! {
                <dt>{name}</dt>
                <dd><When at_ms=at base_ms=now/></dd>
            }).collect_view()}
        </dl>
        {(act && running).then(|| view! {
            <div class="actions">
                <ActionForm action>
                    <Csrf/>
                    <input type="hidden" name="id" value=id/>
                    <button type="submit" name="action" value="cancel" aria-label=format!("Cancel workflow run {id}")>"Cancel run"</button>
                </ActionForm>
            </div>
        })}
        {retryable.then(|| view! {
            <ActionForm action attr:class="inline-form">
                <Csrf/>
                <input type="hidden" name="id" value=id/>
                <input type="hidden" name="action" value="retry"/>
                <label>"Retry "
                    <select name="detail">
                        <option value="failed">"the failed steps"</option>
                        <option value="failed_and_following">"the failed and what follows"</option>
                        <option value="all">"every step"</option>
                    </select>
                </label>
                <button type="submit">"Retry"</button>
            </ActionForm>
        })}
        {(act && running && !d.times.is_empty()).then(|| view! {
            <ActionForm action attr:class="inline-form" attr:aria-label="Move a time">
                <Csrf/>
                <input type="hidden" name="id" value=id/>
                <input type="hidden" name="action" value="move"/>
                <MoveField times=d.times.iter().map(|(name, _)| name.clone()).collect()/>
                <button type="submit">"Move"</button>
            </ActionForm>
        })}
        {(act && !running && r.state != "cancelled").then(|| {
            let names: Vec<String> = d.steps.iter().map(|s| s.name.clone()).collect();
            view! {
            <ActionForm action attr:class="inline-form" attr:aria-label="Run again from a step">
                <Csrf/>
                <input type="hidden" name="id" value=id/>
                <input type="hidden" name="action" value="rerun"/>
                <label>"Run again from "
                    <select name="detail">
                        {names.into_iter().map(|n| view! { <option value=n.clone()>{n.clone()}</option> }).collect_view()}
                    </select>
                </label>
                <button type="submit">"Run again"</button>
            </ActionForm>
            }
        })}
        <h2>"Steps"</h2>
        <Graph steps=d.steps.clone()/>
        <DataTable label="Steps" columns=STEP_COLUMNS>
            {d.steps
                .into_iter()
                .map(|s| view! { <StepRow s now run=id running action/> })
                .collect_view()}
        </DataTable>
        <h2>"Signals"</h2>
        {if d.signals.is_empty() {
            view! { <p class="empty">"No signal yet."</p> }.into_any()
        } else {
            view! {
                <DataTable label="Signals" columns=&[("Signal", false), ("From", false), ("Received", false), ("Payload", true)]>
                    {d.signals
                        .into_iter()
                        .map(|g| view! {
                            <tr>
                                <td><code>{g.name}</code></td>
                                <td>{g.source}</td>
                                <td><When at_ms=g.received_ms base_ms=now/></td>
                                <td class="wide"><code class="json" data-payload>{g.payload}</code></td>
                            </tr>
                        })
                        .collect_view()}
                </DataTable>
            }
            .into_any()
        }}
        <h2>"Attempts"</h2>
        <Timeline attempts=d.attempts now/>
    }
}

/// The run's attempts in the order they started, each with a bar on one time axis (from the
/// first start to the last end), drawn on the server.
#[component]
fn Timeline(attempts: Vec<crate::console::workflows::StepAttemptView>, now: i64) -> impl IntoView {
    if attempts.is_empty() {
        return view! { <p class="empty">"No attempt has ended yet."</p> }.into_any();
    }
    let start = attempts.iter().map(|a| a.started_ms).min().unwrap_or(0);
    let end = attempts.iter().map(|a| a.ended_ms).max().unwrap_or(start);
    let span = (end - start).max(1) as f64;
    view! {
        <DataTable label="Attempts" columns=&[("Step", false), ("Attempt", false), ("Started", false), ("Took", false), ("Outcome", false), ("Timeline", true)]>
            {attempts
                .into_iter()
                .map(|a| {
                    let left = (a.started_ms - start) as f64 / span * 100.0;
                    let width = ((a.ended_ms - a.started_ms) as f64 / span * 100.0).max(0.5);
                    let took = a.ended_ms - a.started_ms;
                    view! {
                        <tr data-attempt=format!("{}/{}", a.job_id, a.attempt)>
                            <td>{a.step}</td>
                            <td><a href=crate::base::href(&format!("/jobs/{}", a.job_id))>{format!("#{} · {}", a.job_id, a.attempt)}</a></td>
                            <td><When at_ms=a.started_ms base_ms=now/></td>
                            <td>{format!("{took} ms")}</td>
                            <td>
                                <span class=format!("badge outcome-{}", a.outcome)>{a.outcome.clone()}</span>
                                {a.error.map(|e| view! { " " <span class="muted">{e}</span> })}
                            </td>
                            <td class="wide">
                                <div class="wf-bar-track">
                                    <div class=format!("wf-bar outcome-{}", a.outcome)
                                        style=format!("left:{left:.2}%;width:{width:.2}%")></div>
                                </div>
                            </td>
                        </tr>
                    }
                })
                .collect_view()}
        </DataTable>
    }
    .into_any()
}

#[component]
fn StepRow(
    s: StepView,
    now: i64,
    run: i64,
    running: bool,
    action: ServerAction<WorkflowAction>,
) -> impl IntoView {
    let skippable = running && may_act() && matches!(s.state.as_str(), "blocked" | "ready");
    let waiting_signal = s
        .waits
        .as_ref()
        .filter(|w| w.before.starts_with("waits for the signal"))
        .and(s.signal.clone())
        .filter(|_| may_act());
    let name = s.name.clone();
    view! {
        <tr>
            <td>{s.name.clone()}{s.kept_from.map(|k| view! { " " <span class="note">{format!("(kept from step {k})")}</span> })}</td>
            <td>
                <span class=format!("badge state-{}", s.state)>{s.state.clone()}</span>
                {s.skipped_by_hand.then_some(" by an operator")}
            </td>
            <td>
                {s.waits.map(|w| view! {
                    {w.before}
                    {w.at_ms.map(|at| view! { <When at_ms=at base_ms=now/> })}
                    {w.after}
                })}
            </td>
            <td class="wide">{s.kind.clone()}</td>
            <td>
                {s.job_id.map(|j| view! { <a href=crate::base::href(&format!("/jobs/{j}"))>{format!("#{j}")}</a> })}
                {s.tasks.map(|t| view! {
                    <span data-tasks>
                        <progress max=t.total value=t.done aria-label=format!("Tasks of {}", s.name)></progress>
                        " "{format!("{} of {} tasks", t.done, t.total)}
                        {(t.failed > 0).then(|| format!(" · {} failed", t.failed))}
                        " · "{format!("{} items", t.items)}
                    </span>
                })}
            </td>
            <td class="wide">{s.output.map(|o| view! { <code class="json" data-output>{o}</code> })}</td>
            <td>
                {waiting_signal.map(|signal| view! {
                    <ActionForm action>
                        <Csrf/>
                        <input type="hidden" name="id" value=run/>
                        <input type="hidden" name="action" value="signal"/>
                        <input type="hidden" name="detail" value=signal.clone()/>
                        <button type="submit" aria-label=format!("Send the signal {signal}")>"Send signal"</button>
                    </ActionForm>
                })}
                {skippable.then(|| view! {
                    <ActionForm action>
                        <Csrf/>
                        <input type="hidden" name="id" value=run/>
                        <input type="hidden" name="action" value="skip"/>
                        <input type="hidden" name="detail" value=name.clone()/>
                        <button type="submit" aria-label=format!("Skip step {name}")>"Skip"</button>
                    </ActionForm>
                })}
            </td>
        </tr>
    }
}

/// Which of the run's times to move, and by how much (a signed duration: a postponed game is
/// moved by its delay, whatever the reader's zone). A plain form: it works before hydration.
#[component]
fn MoveField(times: Vec<String>) -> impl IntoView {
    view! {
        <label>"Move "
            <select name="detail" aria-label="The time to move">
                {times.into_iter().map(|t| view! { <option value=t.clone()>{t.clone()}</option> }).collect_view()}
            </select>
        </label>
        <label>" by "
            <input name="by" size="8" required placeholder="30m, -1h" aria-label="By how much" autocomplete="off"/>
        </label>
    }
}

const NODE_W: usize = 160;
const NODE_H: usize = 44;
const GAP_X: usize = 48;
const GAP_Y: usize = 20;

/// The run's steps as boxes in layers (each after its deepest dependency) and its dependencies
/// as arrows, drawn on the server: an edge whose dependency may fail without stopping the step
/// (`run`, `skip`) is dashed.
#[component]
fn Graph(steps: Vec<StepView>) -> impl IntoView {
    let at = layout(&steps);
    let layers = at.iter().map(|p| p.0 + 1).max().unwrap_or(1);
    let rows = at.iter().map(|p| p.1 + 1).max().unwrap_or(1);
    let width = layers * (NODE_W + GAP_X);
    let height = rows * (NODE_H + GAP_Y);
    let origin = |i: usize| (at[i].0 * (NODE_W + GAP_X), at[i].1 * (NODE_H + GAP_Y));
    let edges: Vec<_> = steps
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            s.after
                .iter()
                .filter_map(|(dep, on)| {
                    steps
                        .iter()
                        .position(|d| &d.name == dep)
                        .map(|j| (j, i, on.clone()))
                })
                .collect::<Vec<_>>()
        })
        .map(|(from, to, on)| {
            let (x1, y1) = origin(from);
            let (x2, y2) = origin(to);
            let (x1, y1) = (x1 + NODE_W, y1 + NODE_H / 2);
            let y2 = y2 + NODE_H / 2;
            let mid = (x1 + x2) / 2;
            let d = format!("M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}");
            view! { <path d=d class=format!("wf-edge on-{on}") marker-end="url(#wf-arrow)"/> }
        })
        .collect();
    let nodes: Vec<_> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (x, y) = origin(i);
            view! {
                <g class=format!("wf-node state-{}", s.state) transform=format!("translate({x},{y})")>
                    <title>{format!("{}: {}", s.name, s.state)}</title>
                    <rect width=NODE_W height=NODE_H rx="6"/>
                    <text x="10" y="18" class="wf-name">{s.name.clone()}</text>
                    <text x="10" y="35" class="wf-state">{s.state.clone()}</text>
                </g>
            }
        })
        .collect();
    view! {
        <svg class="wf-graph" role="img" aria-label="The run's steps and what each waits for"
             viewBox=format!("-4 -4 {} {}", width + 8, height + 8) width=width + 8 height=height + 8>
            <defs>
                <marker id="wf-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
                    <path d="M 0 0 L 10 5 L 0 10 z"/>
                </marker>
            </defs>
            {edges}
            {nodes}
        </svg>
    }
}
