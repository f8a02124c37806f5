//! Job listings: `/jobs` (every job, filtered from the address bar) and `/failures` (retryable and
//! discarded jobs). Filters by state, queue, kind, args and time range; keyset pages; a checkbox
//! selection; bulk cancel / retry / run now / delete on the selection or on everything matching
//! the filter, confirmed with the count first. Without JavaScript every part is a plain form.
//!
//! A list the operator is reading (scrolled, on an older page, or with a selection) is frozen at
//! its newest job: live changes still update the rows shown, and new jobs are announced as
//! "N new" instead of pushing the rows down.

use std::collections::BTreeSet;

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::get_form::GetForm;
use crate::components::session::{may_act, Csrf};
use leptos_router::hooks::use_query_map;
use leptos_router::params::ParamsMap;

use crate::components::live::use_live;
use crate::components::loaded::{error_text, failure, ActionError, Loaded};
use crate::components::replica_lag::ReplicaLag;
use crate::components::time::{use_clock, Countdown, When};
use crate::components::time_field::{TimeField, ZoneInput};
use crate::console::jobs::{
    bulk_preview, get_job_choices, list_jobs, BulkDone, BulkJobs, JobAction, JobLimits, JobPage,
    JobQuery, JobRow, BULK_ACTIONS, FAILED_STATES, STATES,
};
use crate::console::{nonempty, query_string};

/// The listing's query from the address bar; `default_state` applies when it names none.
fn job_query(q: &ParamsMap, default_state: Option<&str>) -> JobQuery {
    JobQuery {
        state: nonempty(q.get("state")).or(default_state.map(String::from)),
        queue: nonempty(q.get("queue")),
        kind: nonempty(q.get("kind")),
        args: nonempty(q.get("args")),
        from: nonempty(q.get("from")),
        to: nonempty(q.get("to")),
        zone: nonempty(q.get("zone")),
        from_which: nonempty(q.get("from_which")),
        to_which: nonempty(q.get("to_which")),
        late: nonempty(q.get("late")),
        tags: nonempty(q.get("tags")),
        error: nonempty(q.get("error")),
        before: q.get("before").and_then(|b| b.parse().ok()),
        max_id: None,
    }
}

#[component]
pub fn JobsPage() -> impl IntoView {
    view! { <JobList title="Jobs" path="/jobs" default_state=None/> }
}

#[component]
pub fn FailuresPage() -> impl IntoView {
    view! { <JobList title="Failures" path="/failures" default_state=Some(FAILED_STATES)/> }
}

#[component]
fn JobList(
    title: &'static str,
    path: &'static str,
    default_state: Option<&'static str>,
) -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let params = use_query_map();
    let query = Memo::new(move |_| job_query(&params.read(), default_state));
    let action = ServerAction::<JobAction>::new();
    let bulk = ServerAction::<BulkJobs>::new();
    let selected = RwSignal::new(BTreeSet::<i64>::new());
    // The newest job shown, and whether to follow new jobs on the next load regardless.
    let head = StoredValue::new(None::<i64>);
    let follow = RwSignal::new(0u32);
    let reading = move || {
        query.with_untracked(|q| q.before.is_some())
            || !selected.with_untracked(BTreeSet::is_empty)
            || scrolled()
    };
    let jobs = Resource::new(
        move || {
            let mut q = query.get();
            if q.before.is_none() && reading() {
                q.max_id = head.get_value();
            }
            // The versions are part of the key: an unchanged key would not refetch.
            let versions = (
                live.version.get(),
                action.version().get(),
                bulk.version().get(),
                follow.get(),
            );
            (q, versions)
        },
        |(q, _)| list_jobs(q),
    );
    Effect::new(move |_| {
        if let Some(Ok(page)) = jobs.get() {
            clock.sync(page.now_ms);
            if query.with_untracked(|q| q.before.is_none()) {
                if let Some(first) = page.rows.first() {
                    head.set_value(Some(head.get_value().map_or(first.id, |h| h.max(first.id))));
                }
            }
        }
    });
    // A new filter or page starts a new selection and a new head.
    Effect::new(move |prev: Option<JobQuery>| {
        let q = query.get();
        if prev.is_some_and(|p| p != q) {
            selected.set(BTreeSet::new());
            head.set_value(None);
        }
        q
    });
    let show_new = move |_| {
        head.set_value(None);
        selected.set(BTreeSet::new());
        scroll_to_top();
        follow.update(|f| *f += 1);
    };
    let bulk_param = move || params.read().get("bulk");
    // A finished bulk action ends on the list, with its result in the address.
    let bulk_result = move || BulkDone::from_params(&params.read()).map(|d| d.summary());
    // What was acted on is no longer selected.
    Effect::new(move |_| {
        if bulk.version().get() > 0 {
            selected.set(BTreeSet::new());
        }
    });

    view! {
        <section class="page">
            <div class="page-head">
                <h1>{title}</h1>
                {(path == "/failures").then(|| {
                    view! {
                        <a class="button" href=move || crate::base::href(&bulk_href(path, &query.get(), "retry"))>
                            "Retry all…"
                        </a>
                    }
                })}
                <a class="button" href=move || crate::base::href(&export_href(&query.get(), "csv")) download="">"Export CSV"</a>
                <a class="button" href=move || crate::base::href(&export_href(&query.get(), "jsonl")) download="">"Export JSON lines"</a>
                <a class="button primary" href=crate::base::href("/jobs/new")>"New job"</a>
            </div>
            <Filters path query/>
            {move || bulk_result().map(|text| view! { <p role="status" class="ok">{text}</p> })}
            {move || {
                bulk_param()
                    .map(|b| {
                        view! { <BulkConfirm path action_name=b query=query.get() bulk/> }
                    })
            }}
            <ActionError error=failure(action.value())/>
            <Loaded
                resource=jobs
                render=move |page: JobPage| {
                    let q = query.get_untracked();
                    let newer = page.newer;
                    let lag_ms = page.replica_lag_ms;
                    let next = page
                        .next_before
                        .map(|b| {
                            let mut pairs = q.filter_pairs();
                            pairs.push(("before", b.to_string()));
                            format!("{path}?{}", query_string(&pairs))
                        });
                    let first_page = q.before.is_some().then(|| {
                        format!("{path}?{}", query_string(&q.filter_pairs()))
                    });
                    view! {
                        <ReplicaLag lag_ms/>
                        {(newer > 0)
                            .then(|| {
                                let label = if newer >= 100 {
                                    "100+ new jobs: show".to_string()
                                } else if newer == 1 {
                                    "1 new job: show".to_string()
                                } else {
                                    format!("{newer} new jobs: show")
                                };
                                view! {
                                    <button type="button" class="new-banner" on:click=show_new>
                                        {label}
                                    </button>
                                }
                            })}
                        <JobTable page path action selected/>
                        <nav class="pager" aria-label="Pages">
                            {first_page.map(|href| view! { <a href=crate::base::href(&href)>"← Newest"</a> })}
                            {next.map(|href| view! { <a href=crate::base::href(&href)>"Older →"</a> })}
                        </nav>
                    }
                }
            />
        </section>
    }
}

/// The list's filter as an export (at most 100,000 rows, newest first: the server's default).
fn export_href(q: &JobQuery, format: &str) -> String {
    let mut pairs = q.filter_pairs();
    pairs.push(("format", format.to_string()));
    format!("/jobs/export?{}", query_string(&pairs))
}

fn bulk_href(path: &str, q: &JobQuery, action: &str) -> String {
    let mut pairs = q.filter_pairs();
    pairs.push(("bulk", action.to_string()));
    pairs.push(("scope", "filter".to_string()));
    format!("{path}?{}", query_string(&pairs))
}

/// Whether the operator scrolled down the page (reading, not watching the top).
fn scrolled() -> bool {
    #[cfg(feature = "hydrate")]
    {
        web_sys::window()
            .and_then(|w| w.scroll_y().ok())
            .is_some_and(|y| y > 120.0)
    }
    #[cfg(not(feature = "hydrate"))]
    false
}

fn scroll_to_top() {
    #[cfg(feature = "hydrate")]
    if let Some(w) = web_sys::window() {
        w.scroll_to_with_x_and_y(0.0, 0.0);
    }
}

/// The filter form: a GET form, so the filter lives in the address and works without JavaScript;
/// once hydrated, the router's form filters without loading a new page.
#[component]
fn Filters(path: &'static str, query: Memo<JobQuery>) -> impl IntoView {
    let clock = use_clock();
    let q = move || query.get();
    // The times in the address are in the zone the address names; new ones in the clock's.
    let zone = Signal::derive(move || {
        query
            .get()
            .filter_pairs()
            .into_iter()
            .find(|(k, _)| *k == "zone")
            .map(|(_, z)| z)
            .unwrap_or_else(|| clock.zone.get())
    });
    let from = Signal::derive(move || q().from.unwrap_or_default());
    let to = Signal::derive(move || q().to.unwrap_or_default());
    // A new address starts from what it says.
    let from_draft = RwSignal::new(None);
    let to_draft = RwSignal::new(None);
    Effect::new(move |_| {
        query.track();
        from_draft.set(None);
        to_draft.set(None);
    });
    view! {
        <GetForm action=path attr:class="filters" attr:role="search" attr:aria-label="Filter jobs">
            <label>
                "State"
                <select name="state">
                    <option value="" selected=move || q().state.is_none()>"any"</option>
                    <option value=FAILED_STATES selected=move || q().state.as_deref() == Some(FAILED_STATES)>
                        "failed (retryable or discarded)"
                    </option>
                    {STATES
                        .iter()
                        .map(|s| {
                            let s = *s;
                            view! {
                                <option value=s selected=move || q().state.as_deref() == Some(s)>{s}</option>
                            }
                        })
                        .collect_view()}
                </select>
            </label>
            <label>
                "Queue"
                <input name="queue" size="10" list="suggest-queues" prop:value=move || q().queue.unwrap_or_default()/>
            </label>
            <label>
                "Kind"
                <input name="kind" size="12" list="suggest-kinds" prop:value=move || q().kind.unwrap_or_default()/>
            </label>
            <label>
                "Args contain"
                <input
                    name="args"
                    size="18"
                    list="suggest-args"
                    placeholder="game_id=42"
                    title="key=value pairs separated by commas, or a JSON object"
                    prop:value=move || q().args.unwrap_or_default()
                />
            </label>
            <label>
                "Tags"
                <input
                    name="tags"
                    size="10"
                    list="suggest-tags"
                    title="jobs carrying every one of these tags, separated by commas"
                    prop:value=move || q().tags.unwrap_or_default()
                />
            </label>
            <label>
                "Error contains"
                <input
                    name="error"
                    size="12"
                    maxlength="200"
                    title="text in the last error, case-insensitive"
                    prop:value=move || q().error.unwrap_or_default()
                />
            </label>
            <label>
                "Late by over (ms)"
                <input
                    name="late"
                    size="6"
                    inputmode="numeric"
                    placeholder="100"
                    title="jobs with an attempt that started more than this many ms after it was due"
                    prop:value=move || q().late.unwrap_or_default()
                />
            </label>
            <TimeField label="Due from" name="from" which_name="from_which" draft=from_draft initial=from zone/>
            <TimeField label="to" name="to" which_name="to_which" draft=to_draft initial=to zone/>
            <ZoneInput name="zone" zone/>
            <button type="submit">"Filter"</button>
            <Suggestions/>
            {move || query.get().has_filter().then(|| view! { <a href=crate::base::href(path)>"Clear"</a> })}
        </GetForm>
        <nav class="chips" aria-label="Filter by state">
            {STATES
                .iter()
                .map(|s| {
                    let s = *s;
                    view! {
                        <a
                            href=crate::base::href(&format!("{path}?state={s}"))
                            class:active=move || q().state.as_deref() == Some(s)
                        >
                            {s}
                        </a>
                    }
                })
                .collect_view()}
        </nav>
    }
}

/// The filter fields' autocomplete: the kinds, queues, tags and args keys of recent jobs (the
/// same list as `GET /api/v1/jobs/suggestions`), read once the page is in the browser.
#[component]
fn Suggestions() -> impl IntoView {
    let choices = LocalResource::new(get_job_choices);
    let list = |id: &'static str, items: Vec<String>| {
        view! {
            <datalist id=id>
                {items.into_iter().map(|v| view! { <option value=v></option> }).collect_view()}
            </datalist>
        }
    };
    move || {
        let c = choices.get().and_then(Result::ok).unwrap_or_default();
        let args: Vec<String> = c.args_keys.iter().map(|k| format!("{k}=")).collect();
        view! {
            {list("suggest-kinds", c.seen_kinds)}
            {list("suggest-queues", c.queues)}
            {list("suggest-tags", c.tags)}
            {list("suggest-args", args)}
        }
    }
}

/// The table, its selection boxes, and the bulk form they belong to.
#[component]
fn JobTable(
    page: JobPage,
    path: &'static str,
    action: ServerAction<JobAction>,
    selected: RwSignal<BTreeSet<i64>>,
) -> impl IntoView {
    if page.rows.is_empty() {
        return view! { <p class="empty">"No jobs match. Jobs appear here as soon as they are inserted, by any node."</p> }
            .into_any();
    }
    let params = use_query_map();
    let ids: Vec<i64> = page.rows.iter().map(|r| r.id).collect();
    let all_ids = ids.clone();
    let all_selected = move || {
        let ids = all_ids.clone();
        selected.with(|s| !ids.is_empty() && ids.iter().all(|id| s.contains(id)))
    };
    let toggle_all = move |ev: leptos::ev::Event| {
        let on = event_target_checked(&ev);
        selected.update(|s| {
            for id in &ids {
                if on {
                    s.insert(*id);
                } else {
                    s.remove(id);
                }
            }
        });
    };
    let now_ms = page.now_ms;
    let hidden_filter = move || {
        job_query(&params.read(), None)
            .filter_pairs()
            .into_iter()
            .map(|(k, v)| view! { <input type="hidden" name=k value=v/> })
            .collect_view()
    };
    view! {
        // The router's form: once hydrated, the confirmation opens without loading a new page.
        <GetForm
            action=path
            attr:id="bulk"
            attr:class="bulk-bar"
            attr:aria-label="Bulk actions"
            attr:hidden=!may_act()
        >
            {hidden_filter}
            <label>
                "With "
                {move || {
                    let n = selected.with(BTreeSet::len);
                    if n == 0 { "the selection".to_string() } else { format!("{n} selected") }
                }}
                ": "
                <select name="bulk" aria-label="Bulk action">
                    {BULK_ACTIONS
                        .iter()
                        .map(|(value, verb, _)| view! { <option value=*value>{*verb}</option> })
                        .collect_view()}
                </select>
            </label>
            <button type="submit" name="scope" value="selected">"Apply to selected…"</button>
            <button type="submit" name="scope" value="filter">"Apply to all matching…"</button>
        </GetForm>
        <div class="table-wrap">
            <table class="grid" aria-label="Jobs">
                <thead>
                    <tr>
                        <th scope="col">
                            <input
                                type="checkbox"
                                aria-label="Select all on this page"
                                prop:checked=all_selected
                                on:change=toggle_all
                            />
                        </th>
                        <th scope="col">"Id"</th>
                        <th scope="col">"Kind"</th>
                        <th scope="col" class="wide">"Queue"</th>
                        <th scope="col">"State"</th>
                        <th scope="col" class="wide">"Attempt"</th>
                        <th scope="col">"Due"</th>
                        <th scope="col" class="wide">"Args"</th>
                        <th scope="col">"Last error"</th>
                        <th scope="col">"Actions"</th>
                    </tr>
                </thead>
                <tbody>
                    {page
                        .rows
                        .into_iter()
                        .map(|j| view! { <JobRowView j now_ms action selected/> })
                        .collect_view()}
                </tbody>
            </table>
        </div>
    }
    .into_any()
}

#[component]
fn JobRowView(
    j: JobRow,
    now_ms: i64,
    action: ServerAction<JobAction>,
    selected: RwSignal<BTreeSet<i64>>,
) -> impl IntoView {
    let id = j.id;
    let badge = format!("badge state-{}", j.state);
    let due = if j.is_waiting() {
        view! { <Countdown at_ms=j.scheduled_ms base_ms=now_ms/> }.into_any()
    } else {
        view! { <When at_ms=j.finalized_ms.unwrap_or(j.scheduled_ms) base_ms=now_ms/> }.into_any()
    };
    view! {
        <tr data-job=id>
            <td>
                <input
                    type="checkbox"
                    name="ids"
                    form="bulk"
                    value=id
                    aria-label=format!("Select job {id}")
                    prop:checked=move || selected.with(|s| s.contains(&id))
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        selected.update(|s| {
                            if on { s.insert(id); } else { s.remove(&id); }
                        });
                    }
                />
            </td>
            <td><a href=crate::base::href(&format!("/jobs/{id}"))>{id}</a></td>
            <td>{j.kind.clone()}</td>
            <td class="wide">{j.queue.clone()}</td>
            <td><span class=badge>{j.state.clone()}</span></td>
            <td class="wide">{format!("{} / {}", j.attempt, j.max_attempts)}</td>
            <td>{due}</td>
            <td class="wide"><code class="args">{j.args_preview.clone()}</code></td>
            <td class="error-text">{j.last_error.clone().unwrap_or_default()}</td>
            <td><JobButtons j action/></td>
        </tr>
    }
}

/// Cancel / Retry / Run now for one job, as forms (the pressed button names the action).
#[component]
pub fn JobButtons(j: JobRow, action: ServerAction<JobAction>) -> impl IntoView {
    let id = j.id;
    if !may_act() {
        return ().into_any();
    }
    view! {
        <ActionForm action attr:class="actions">
            <Csrf/>
            <input type="hidden" name="id" value=id/>
            {(!j.is_final()).then(|| view! {
                <button type="submit" name="action" value="cancel" aria-label=format!("Cancel job {id}")>"Cancel"</button>
            })}
            {j.can_retry().then(|| view! {
                <button type="submit" name="action" value="retry" aria-label=format!("Retry job {id}")>"Retry"</button>
            })}
            {(j.state == "scheduled" || j.state == "retryable").then(|| view! {
                <button type="submit" name="action" value="run_now" aria-label=format!("Run job {id} now")>"Run now"</button>
            })}
        </ActionForm>
    }
    .into_any()
}

/// The confirmation of a bulk action: says what it will touch and how many jobs, then runs it.
#[component]
fn BulkConfirm(
    path: &'static str,
    action_name: String,
    query: JobQuery,
    bulk: ServerAction<BulkJobs>,
) -> impl IntoView {
    let params = use_query_map();
    let Some((value, verb, _)) = BULK_ACTIONS
        .iter()
        .find(|(v, ..)| *v == action_name)
        .copied()
    else {
        return view! { <p class="error" role="alert">{format!("Unknown bulk action `{action_name}`.")}</p> }
            .into_any();
    };
    let back = format!("{path}?{}", query_string(&query.filter_pairs()));
    let by_filter = params.read_untracked().get("scope").as_deref() != Some("selected");
    let ids: Vec<i64> = params
        .read_untracked()
        .get_all("ids")
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i.parse().ok())
        .collect();
    if !by_filter && ids.is_empty() {
        return view! {
            <div class="confirm" role="alert">
                <p>"Select jobs with the boxes first, or apply the action to everything matching the filter."</p>
                <a href=crate::base::href(&back)>"Back"</a>
            </div>
        }
        .into_any();
    }
    let filter_text = {
        let pairs: Vec<String> = query
            .filter_pairs()
            .into_iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        if pairs.is_empty() {
            "every job".to_string()
        } else {
            pairs.join(", ")
        }
    };
    let preview_query = query.clone();
    let preview = Resource::new(
        move || (),
        move |_| {
            let q = preview_query.clone();
            async move {
                if by_filter {
                    bulk_preview(q).await.map(Some)
                } else {
                    Ok(None)
                }
            }
        },
    );
    let ids_text = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    let n_selected = ids.len();
    view! {
        <div class="confirm" role="region" aria-label="Confirm bulk action">
            // Done, the server sends the browser back to the list with the result; only a refusal
            // shows here.
            {move || {
                bulk.value()
                    .get()
                    .and_then(Result::err)
                    .map(|e| view! { <p class="error" role="alert">{error_text(&e)}</p> })
            }}
            <Suspense fallback=|| view! { <p class="muted">"Counting…"</p> }>
                {move || {
                    let query = query.clone();
                    let ids_text = ids_text.clone();
                    let filter_text = filter_text.clone();
                    let back = back.clone();
                    Suspend::new(async move {
                        let (question, max_id, nothing) = match preview.await {
                            Ok(Some(p)) => (
                                format!(
                                    "{verb} {}{} jobs matching {filter_text}?",
                                    if p.capped { "more than " } else { "" },
                                    p.count
                                ),
                                p.max_id,
                                p.count == 0,
                            ),
                            Ok(None) => (format!("{verb} the {n_selected} selected jobs?"), None, false),
                            Err(e) => return view! { <p class="error" role="alert">{error_text(&e)}</p> }.into_any(),
                        };
                        // No filter at all sends no `query` field: the server reads the default.
                        let hidden = query
                            .filter_pairs()
                            .into_iter()
                            .map(|(k, v)| view! { <input type="hidden" name=format!("query[{k}]") value=v/> })
                            .collect_view();
                        view! {
                            <p class="question">{question}</p>
                            {(!nothing).then({
                                let back = back.clone();
                                move || view! {
                                <ActionForm action=bulk>
                                    <Csrf/>
                                    <input type="hidden" name="action" value=value/>
                                    <input type="hidden" name="back" value=back.clone()/>
                                    {(!by_filter).then(|| view! { <input type="hidden" name="ids" value=ids_text.clone()/> })}
                                    {hidden}
                                    {max_id.map(|m| view! { <input type="hidden" name="query[max_id]" value=m/> })}
                                    <ChangeFields action=value by_filter/>
                                    <button type="submit" class="danger">{format!("Yes, {}", verb.to_lowercase())}</button>
                                    " "
                                    <a href=crate::base::href(&back)>"Back"</a>
                                </ActionForm>
                            }})}
                            {nothing.then(|| view! { <a href=crate::base::href(&back)>"Back"</a> })}
                        }
                        .into_any()
                    })
                }}
            </Suspense>
        </div>
    }
    .into_any()
}

/// The fields a bulk "move in time" or "edit" needs beside its confirmation. A selection moves its
/// jobs, and the questions whose lock jobs it holds with them; a filter also moves the questions
/// of a game.
#[component]
fn ChangeFields(action: &'static str, by_filter: bool) -> impl IntoView {
    // The edit's ranges, as the server states them (read once the form is in the browser).
    let choices = LocalResource::new(get_job_choices);
    let limit = move |f: fn(&JobLimits) -> String| {
        move || {
            choices
                .get()
                .and_then(Result::ok)
                .and_then(|c| c.limits)
                .as_ref()
                .map(f)
        }
    };
    match action {
        "shift" => view! {
            <label>
                "Move by "
                <input name="change[by]" required size="8" placeholder="2h, -30m, 1d"
                    pattern="[+-]?([0-9]+(ms|s|m|h|d))+"
                    title="a duration: 90s, -2h, 1h30m, 3d (negative: earlier)"/>
            </label>
            " "
            {by_filter.then(|| view! {
                <label>
                    "and the open questions of the game "
                    <input name="change[game]" size="20" placeholder="(none)"
                        title="its name exactly; questions whose lock job the filter matches move too"/>
                </label>
            })}
        }
        .into_any(),
        "edit" => view! {
            <fieldset class="inline-fields">
                <legend>"Set (blank: unchanged)"</legend>
                <label>"Priority " <input type="number" name="change[priority]" size="3"
                    min=limit(|l| l.priority_min.to_string()) max=limit(|l| l.priority_max.to_string())/></label>
                <label>"Queue " <input name="change[queue]" size="10" pattern="[a-z0-9_-]{1,64}"/></label>
                <label>"Max attempts " <input type="number" name="change[max_attempts]" size="4"
                    min=limit(|l| l.max_attempts_min.to_string()) max=limit(|l| l.max_attempts_max.to_string())/></label>
                <label>"Tags " <input name="change[tags]" size="14" placeholder="a, b"/></label>
            </fieldset>
        }
        .into_any(),
        _ => ().into_any(),
    }
}
