//! Schedules (`/schedules`): every recurring job with its rule in words, its next run (a live
//! countdown) and its latest run; one schedule (`/schedules/:name`) with its next slots, its runs
//! and its edit form; a new one (`/schedules/new`). The form previews the next slots as the rule
//! is typed, in the schedule's zone and in the browser's.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::console::history::{get_history, HistoryPage, HistoryQuery};
use crate::pages::history::RunsSummary;
use leptos_router::hooks::{use_navigate, use_params_map};

use crate::components::late_start::LateStartFields;
use crate::components::live::use_live;
use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::session::{may_act, Csrf};
use crate::components::table::{Column, DataTable};
use crate::components::time::{use_clock, Countdown, When};
use crate::console::schedules::{
    get_schedule, list_schedules, preview_rule, schedule_kinds, SaveSchedule, ScheduleAction,
    ScheduleDetail, ScheduleForm, ScheduleRow, SchedulesPage as Schedules,
};

const COLUMNS: &[Column] = &[
    ("Schedule", false),
    ("Rule", false),
    ("Next run", false),
    ("Last run", false),
    ("Status", false),
    ("Actions", false),
];

const RUN_COLUMNS: &[Column] = &[
    ("Job", false),
    ("Due", false),
    ("State", false),
    ("Attempt", true),
    ("Last error", true),
];

#[component]
pub fn SchedulesPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let action = ServerAction::<ScheduleAction>::new();
    let schedules = Resource::new(
        // The versions are the key: an unchanged key would not refetch.
        move || (live.version.get(), action.version().get()),
        |_| list_schedules(),
    );
    clock.follow(schedules, |s: &Schedules| s.now_ms);
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Schedules"</h1>
                {may_act().then(|| view! { <a class="button primary" href=crate::base::href("/schedules/new")>"New schedule"</a> })}
            </div>
            <ActionError error=failure(action.value())/>
            <Loaded resource=schedules render=move |s: Schedules| {
                if s.rows.is_empty() {
                    return view! {
                        <p class="empty">"No schedules yet: a schedule runs a job on a cron rule or an interval, in a time zone."</p>
                    }
                    .into_any();
                }
                let now = s.now_ms;
                view! {
                    <DataTable label="Schedules" columns=COLUMNS>
                        {s.rows.into_iter().map(|r| view! { <ScheduleLine r now action/> }).collect_view()}
                    </DataTable>
                }
                .into_any()
            }/>
        </section>
    }
}

#[component]
fn ScheduleLine(r: ScheduleRow, now: i64, action: ServerAction<ScheduleAction>) -> impl IntoView {
    let href = format!("/schedules/{}", r.name);
    let name = r.name.clone();
    view! {
        <tr data-schedule=r.name.clone()>
            <th scope="row">
                <a href=crate::base::href(&href)>{r.name.clone()}</a>
                {(r.source == "code").then(|| view! { " " <span class="badge" title="declared in a service's code">"code"</span> })}
            </th>
            <td>
                <span class="rule-text">{r.rule_text.clone()}</span>
                <br/>
                <code class="args">{r.rule.clone()}</code>
                " · "{r.kind.clone()}" on "{r.queue.clone()}
            </td>
            <td>
                {match (r.next_ms, r.next_job) {
                    (Some(at), Some(job)) => view! {
                        <Countdown at_ms=at base_ms=now/>
                        <br/>
                        <When at_ms=at base_ms=now/>
                        " "
                        <a href=crate::base::href(&format!("/jobs/{job}"))>{format!("#{job}")}</a>
                    }.into_any(),
                    _ => view! { <span class="muted">"none"</span> }.into_any(),
                }}
            </td>
            <td>
                {r.last.clone().map(|l| view! {
                    <a href=crate::base::href(&format!("/jobs/{}", l.job_id))>{format!("#{}", l.job_id)}</a>
                    " "
                    <span class=format!("badge state-{}", l.state)>{l.state.clone()}</span>
                    {l.late_ms.map(|ms| format!(" started {ms:.1} ms late"))}
                })}
            </td>
            <td>
                {if r.paused {
                    view! { <span class="badge state-retryable">"paused"</span> }.into_any()
                } else {
                    view! { <span class="badge state-completed">"active"</span> }.into_any()
                }}
            </td>
            <td><ScheduleButtons name paused=r.paused action/></td>
        </tr>
    }
}

/// Pause or resume, and trigger now (operators).
#[component]
fn ScheduleButtons(
    name: String,
    paused: bool,
    action: ServerAction<ScheduleAction>,
) -> impl IntoView {
    if !may_act() {
        return ().into_any();
    }
    let (verb, op) = if paused {
        ("Resume", "resume")
    } else {
        ("Pause", "pause")
    };
    let toggle_name = name.clone();
    let label = format!("{verb} schedule {name}");
    let trigger_label = format!("Run schedule {name} now");
    view! {
        <div class="actions">
            <ActionForm action>
                <Csrf/>
                <input type="hidden" name="name" value=toggle_name/>
                <button type="submit" name="action" value=op aria-label=label>{verb}</button>
            </ActionForm>
            <ActionForm action>
                <Csrf/>
                <input type="hidden" name="name" value=name/>
                <button type="submit" name="action" value="trigger" aria-label=trigger_label>"Run now"</button>
            </ActionForm>
        </div>
    }
    .into_any()
}

#[component]
pub fn ScheduleDetailPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let params = use_params_map();
    let name = move || params.read().get("name").unwrap_or_default();
    let action = ServerAction::<ScheduleAction>::new();
    let save = ServerAction::<SaveSchedule>::new();
    let navigate = use_navigate();
    Effect::new(move |_| {
        if action.value().with(|v| matches!(v, Some(Ok(()))))
            && action
                .input()
                .with(|i| i.as_ref().is_some_and(|i| i.action == "delete"))
        {
            navigate("/schedules", Default::default());
        }
    });
    let detail = Resource::new(
        move || {
            (
                name(),
                live.version.get(),
                action.version().get(),
                save.version().get(),
            )
        },
        |(name, ..)| get_schedule(name),
    );
    clock.follow(detail, |d: &ScheduleDetail| d.now_ms);
    // Its runs' history, from the rollups: it outlives the pruned runs.
    let runs = Resource::new(
        move || (name(), live.version.get()),
        |(name, _)| {
            get_history(HistoryQuery {
                range: Some("7d".into()),
                by: Some("kind".into()),
                schedule: Some(name),
                ..HistoryQuery::default()
            })
        },
    );
    view! {
        <section class="page">
            <div class="page-head">
                <h1>{move || format!("Schedule {}", name())}</h1>
                <a href=crate::base::href("/schedules")>"All schedules"</a>
            </div>
            <ActionError error=failure(action.value())/>
            <Loaded resource=detail render=move |d: ScheduleDetail| view! { <Detail d action save/> }/>
            <h2>"Its runs, last 7 days"</h2>
            <Loaded resource=runs render=move |p: HistoryPage| view! { <RunsSummary page=p/> }/>
        </section>
    }
}

#[component]
fn Detail(
    d: ScheduleDetail,
    action: ServerAction<ScheduleAction>,
    save: ServerAction<SaveSchedule>,
) -> impl IntoView {
    let r = d.row.clone();
    let now = d.now_ms;
    let name = r.name.clone();
    let delete_name = r.name.clone();
    view! {
        <p class="lead"><strong>{r.rule_text.clone()}</strong></p>
        <dl class="facts">
            <dt>"Rule"</dt>
            <dd><code>{r.rule.clone()}</code>" in "{r.time_zone.clone()}</dd>
            <dt>"Job"</dt>
            <dd>{r.kind.clone()}" on queue "{r.queue.clone()}", priority "{d.priority}", up to "{d.max_attempts}" attempts"</dd>
            <dt>"Status"</dt>
            <dd>
                {if r.paused { "paused" } else { "active" }}
                {(r.source == "code").then_some(" · declared in code")}
            </dd>
            <dt>"Overlap"</dt>
            <dd>{r.overlap.clone()}</dd>
            <dt>"Missed runs"</dt>
            <dd>{r.missed.clone()}</dd>
            <dt>"Runs"</dt>
            <dd>{format!("{} enqueued, {} skipped", r.runs_enqueued, r.runs_skipped)}</dd>
            {d.created_by.clone().map(|c| view! { <dt>"Created by"</dt><dd>{c}</dd> })}
        </dl>
        <ScheduleButtons name=name paused=r.paused action/>
        {may_act().then(|| view! {
            <ActionForm action attr:class="inline-form">
                <Csrf/>
                <input type="hidden" name="name" value=delete_name.clone()/>
                <button type="submit" name="action" value="delete" class="danger"
                    aria-label=format!("Delete schedule {delete_name}")>"Delete"</button>
            </ActionForm>
        })}
        <h2>"Next slots"</h2>
        <SlotList slots=d.next.clone() now/>
        {may_act().then(|| view! {
            <h2>"Edit"</h2>
            <ScheduleFormView form=d.form.clone() original=Some(r.name.clone()) save/>
        })}
        <h2>"Runs"</h2>
        {if d.runs.is_empty() {
            view! { <p class="empty">"No runs yet."</p> }.into_any()
        } else {
            view! {
                <DataTable label="Runs" columns=RUN_COLUMNS>
                    {d.runs.into_iter().map(|j| {
                        let id = j.id;
                        view! {
                            <tr data-job=id>
                                <td><a href=crate::base::href(&format!("/jobs/{id}"))>{format!("#{id}")}</a></td>
                                <td>
                                    {if j.is_waiting() {
                                        view! { <Countdown at_ms=j.scheduled_ms base_ms=now/> }.into_any()
                                    } else {
                                        view! { <When at_ms=j.scheduled_ms base_ms=now/> }.into_any()
                                    }}
                                </td>
                                <td><span class=format!("badge state-{}", j.state)>{j.state.clone()}</span></td>
                                <td class="wide">{format!("{}/{}", j.attempt, j.max_attempts)}</td>
                                <td class="wide">{j.last_error.clone()}</td>
                            </tr>
                        }
                    }).collect_view()}
                </DataTable>
            }.into_any()
        }}
    }
}

/// Slots: the time in the schedule's zone, and in the browser's (with how far off it is).
#[component]
fn SlotList(slots: Vec<crate::console::schedules::Slot>, now: i64) -> impl IntoView {
    view! {
        <ol class="slots" aria-label="Next slots">
            {slots.into_iter().map(|s| view! {
                <li data-slot=s.at_ms>
                    <span class="in-zone">{s.in_zone.clone()}</span>
                    " · your time "
                    <When at_ms=s.at_ms base_ms=now/>
                </li>
            }).collect_view()}
        </ol>
    }
}

#[component]
pub fn NewSchedulePage() -> impl IntoView {
    let save = ServerAction::<SaveSchedule>::new();
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(name)) = save.value().get() {
            navigate(&format!("/schedules/{name}"), Default::default());
        }
    });
    let clock = use_clock();
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"New schedule"</h1>
                <a href=crate::base::href("/schedules")>"All schedules"</a>
            </div>
            {move || {
                let form = ScheduleForm {
                    rule_type: "cron".into(),
                    cron: "0 6 * * *".into(),
                    every_secs: "60".into(),
                    // The browser's zone once hydrated (UTC when rendered on the server).
                    time_zone: clock.zone.get(),
                    kind: "webhook".into(),
                    queue: "webhooks".into(),
                    args: "{\n  \"url\": \"https://partner.example/fixtures\"\n}".into(),
                    overlap: "allow".into(),
                    missed: "run_once".into(),
                    late_then: "run".into(),
                    ..ScheduleForm::default()
                };
                view! { <ScheduleFormView form original=None save/> }
            }}
        </section>
    }
}

/// The create / edit form, with the live preview of the rule being typed.
#[component]
fn ScheduleFormView(
    form: ScheduleForm,
    /// The schedule being edited (its name is fixed); `None` for a new one.
    original: Option<String>,
    save: ServerAction<SaveSchedule>,
) -> impl IntoView {
    let rule_type = RwSignal::new(form.rule_type.clone());
    let cron = RwSignal::new(form.cron.clone());
    let every = RwSignal::new(form.every_secs.clone());
    let zone = RwSignal::new(form.time_zone.clone());
    let kinds = Resource::new(|| (), |_| schedule_kinds());
    let preview = Resource::new(
        move || (rule_type.get(), cron.get(), every.get(), zone.get()),
        |(t, c, e, z)| preview_rule(t, c, e, z),
    );
    let clock = use_clock();
    let editing = original.is_some();
    let label = if editing {
        "Edit schedule"
    } else {
        "New schedule"
    };
    let submit = if editing {
        "Save changes"
    } else {
        "Create schedule"
    };
    let selected = |v: &str, current: &str| v == current;
    let overlap = form.overlap.clone();
    let missed = form.missed.clone();
    view! {
        <ActionError error=failure(save.value())/>
        <ActionForm action=save attr:class="form-card" attr:aria-label=label>
            <Csrf/>
            <input type="hidden" name="original" value=original.clone().unwrap_or_default()/>
            <label>
                "Name"
                <input name="name" required maxlength="100" pattern="[A-Za-z0-9_.:\\-]{1,100}"
                    value=form.name.clone() readonly=editing placeholder="nightly-fixtures"/>
            </label>
            <fieldset class="rule">
                <legend>"Rule"</legend>
                <label>
                    "Kind of rule"
                    <select name="rule_type" on:change=move |ev| rule_type.set(event_target_value(&ev))>
                        <option value="cron" selected=form.rule_type == "cron">"Cron expression"</option>
                        <option value="every" selected=form.rule_type == "every">"Every N seconds"</option>
                    </select>
                </label>
                <label hidden=move || rule_type.get() != "cron">
                    "Cron expression (minute hour day-of-month month day-of-week; a seconds field may come first)"
                    <input name="cron" prop:value=move || cron.get()
                        on:input=move |ev| cron.set(event_target_value(&ev)) placeholder="0 6 * * *"/>
                </label>
                <label hidden=move || rule_type.get() != "every">
                    "Every (seconds)"
                    <input name="every_secs" type="number" min="1" step="any" prop:value=move || every.get()
                        on:input=move |ev| every.set(event_target_value(&ev))/>
                </label>
                <label>
                    "Time zone (IANA)"
                    <input name="time_zone" required prop:value=move || zone.get()
                        on:input=move |ev| zone.set(event_target_value(&ev)) placeholder="Europe/London"/>
                </label>
                <div class="preview" aria-live="polite" aria-label="Preview of the next slots">
                    <Suspense fallback=|| view! { <p class="muted">"…"</p> }>
                        {move || preview.get().map(|p| match p {
                            Ok(p) => {
                                let now = clock.now_ms.get_untracked();
                                view! {
                                    <p class="rule-text">{p.rule_text.clone()}</p>
                                    <SlotList slots=p.slots now/>
                                }.into_any()
                            }
                            Err(e) => view! {
                                <p class="error" role="alert">{crate::components::loaded::error_text(&e)}</p>
                            }.into_any(),
                        })}
                    </Suspense>
                </div>
            </fieldset>
            <fieldset>
                <legend>"Job"</legend>
                <label>
                    "Kind"
                    <input name="kind" required list="schedule-kinds" value=form.kind.clone()/>
                    <datalist id="schedule-kinds">
                        <Suspense fallback=|| ()>
                            {move || kinds.get().and_then(Result::ok).map(|ks| ks.into_iter().map(|k| view! { <option value=k/> }).collect_view())}
                        </Suspense>
                    </datalist>
                </label>
                <label>"Queue" <input name="queue" required value=form.queue.clone()/></label>
                <label>
                    "Args (JSON)"
                    <textarea name="args" rows="5">{form.args.clone()}</textarea>
                </label>
            </fieldset>
            <label>
                "While the previous run is not final"
                <select name="overlap">
                    <option value="allow" selected=selected("allow", &overlap)>"Run anyway"</option>
                    <option value="skip" selected=selected("skip", &overlap)>"Skip this run"</option>
                    <option value="cancel_previous" selected=selected("cancel_previous", &overlap)>"Cancel the previous run"</option>
                </select>
            </label>
            <label>
                "Slots missed while no node ran"
                <select name="missed">
                    <option value="run_once" selected=selected("run_once", &missed)>"Run the latest once"</option>
                    <option value="run_all" selected=selected("run_all", &missed)>"Run each (up to 10)"</option>
                    <option value="skip" selected=selected("skip", &missed)>"Skip them"</option>
                </select>
            </label>
            <LateStartFields after_name="late_after_secs" then_name="late_then"
                after=form.late_after_secs.clone() then=form.late_then.clone()/>
            <button type="submit" class="primary">{submit}</button>
        </ActionForm>
    }
}
