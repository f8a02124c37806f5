//! The attempts' history (`/history`): completed and failed attempts per step and the lateness
//! p50 and p99, one line per queue (or per kind), over the last hour, day, week or 30 days; from
//! the rollups, so it outlives the pruned jobs. Live: it is read again as jobs change.

use crate::components::get_form::GetForm;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::components::live::use_live;
use crate::components::loaded::Loaded;
use crate::components::series_chart::{Line, SeriesChart};
use crate::console::history::{get_history, HistoryPage, HistoryQuery, HistoryStep, RANGES};
use crate::console::{nonempty, query_string};

#[component]
pub fn HistoryPageView() -> impl IntoView {
    let live = use_live();
    let params = use_query_map();
    let query = Memo::new(move |_| {
        let p = params.read();
        HistoryQuery {
            range: nonempty(p.get("range")),
            by: nonempty(p.get("by")),
            queue: nonempty(p.get("queue")),
            kind: nonempty(p.get("kind")),
            schedule: nonempty(p.get("schedule")),
        }
    });
    let page = Resource::new(
        move || (query.get(), live.version.get()),
        |(q, _)| get_history(q),
    );
    let q = move || query.get();
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"History"</h1>
            </div>
            <nav class="chips" aria-label="Range">
                {RANGES
                    .iter()
                    .map(|(name, _, _)| {
                        let name = *name;
                        let href = move || {
                            let mut pairs = vec![("range", name.to_string())];
                            let q = q();
                            for (k, v) in [("by", q.by), ("queue", q.queue), ("kind", q.kind), ("schedule", q.schedule)] {
                                if let Some(v) = v {
                                    pairs.push((k, v));
                                }
                            }
                            format!("/history?{}", query_string(&pairs))
                        };
                        let active = move || q().range.as_deref().unwrap_or("1h") == name;
                        view! { <a href=move || crate::base::href(&href()) class:active=active>{name}</a> }
                    })
                    .collect_view()}
            </nav>
            <GetForm action="/history" attr:class="filters" attr:role="search" attr:aria-label="Filter the history">
                <input type="hidden" name="range" prop:value=move || q().range.unwrap_or_else(|| "1h".into())/>
                <label>
                    "One line per"
                    <select name="by">
                        <option value="queue" selected=move || q().by.as_deref() != Some("kind")>"queue"</option>
                        <option value="kind" selected=move || q().by.as_deref() == Some("kind")>"kind"</option>
                    </select>
                </label>
                <label>"Queue" <input name="queue" size="10" prop:value=move || q().queue.unwrap_or_default()/></label>
                <label>"Kind" <input name="kind" size="12" prop:value=move || q().kind.unwrap_or_default()/></label>
                <label>"Schedule" <input name="schedule" size="12" prop:value=move || q().schedule.unwrap_or_default()/></label>
                <button type="submit">"Show"</button>
            </GetForm>
            <Loaded resource=page render=move |p: HistoryPage| view! { <HistoryCharts page=p/> }/>
        </section>
    }
}

/// A step's start as the axis shows it (UTC: the server renders it, the same for every reader).
fn axis_label(ms: i64, step_secs: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| {
            if step_secs >= 3_600 {
                t.format("%b %-d %H:%M UTC").to_string()
            } else {
                t.format("%H:%M UTC").to_string()
            }
        })
        .unwrap_or_default()
}

/// The three charts of a history page: completed, failed, lateness.
#[component]
pub fn HistoryCharts(page: HistoryPage) -> impl IntoView {
    let step = page.step_secs;
    let per = if step >= 3_600 {
        format!("{} h", step / 3_600)
    } else {
        format!("{} min", step / 60)
    };
    let from = axis_label(page.from_ms, step);
    let to = axis_label(page.to_ms, step);
    let name = |s: &str| {
        if s.is_empty() {
            "all".to_string()
        } else {
            s.to_string()
        }
    };
    let lines =
        |f: &dyn Fn(&HistoryStep) -> Option<f64>, dashed: bool, suffix: &str| -> Vec<Line> {
            page.series
                .iter()
                .enumerate()
                .map(|(i, s)| Line {
                    name: format!("{}{suffix}", name(&s.name)),
                    values: s.steps.iter().map(f).collect(),
                    dashed,
                    colour: i,
                })
                .collect()
        };
    let completed = lines(&|s| Some(s.completed as f64), false, "");
    let failed = lines(&|s| Some(s.failed as f64), false, "");
    let mut late = lines(&|s| s.late_p50_ms, false, " p50");
    late.extend(lines(&|s| s.late_p99_ms, true, " p99"));
    if page.series.is_empty() {
        return view! { <p class="empty">"No attempt ended in this range."</p> }.into_any();
    }
    view! {
        <h2>{format!("Completed per {per}")}</h2>
        <SeriesChart title=format!("Completed per {per}") unit="jobs" from_label=from.clone() to_label=to.clone() lines=completed/>
        <h2>{format!("Failed per {per}")}</h2>
        <p class="hint">"Attempts that failed (to be retried), were discarded, or were lost with their node."</p>
        <SeriesChart title=format!("Failed per {per}") unit="jobs" from_label=from.clone() to_label=to.clone() lines=failed/>
        <h2>"Lateness: how long after its due time an attempt started"</h2>
        <SeriesChart title="Lateness p50 and p99".to_string() unit="ms" from_label=from to_label=to lines=late log=true/>
    }
    .into_any()
}

/// A schedule's runs over a range, in words and as the history's charts: how many completed,
/// started late (a second or more after their slot), were skipped or cancelled, or failed.
#[component]
pub fn RunsSummary(page: HistoryPage) -> impl IntoView {
    let steps = || page.series.iter().flat_map(|s| s.steps.iter());
    let completed: i64 = steps().map(|s| s.completed).sum();
    let late: i64 = steps().map(|s| s.late).sum();
    let skipped: i64 = steps().map(|s| s.cancelled).sum();
    let failed: i64 = steps().map(|s| s.failed).sum();
    let snoozed: i64 = steps().map(|s| s.snoozed).sum();
    let attempts = completed + skipped + failed + snoozed;
    view! {
        <p class="runs-summary" data-runs="">
            {format!(
                "{completed} completed, {} on time and {late} a second or more late; \
                 {skipped} skipped or cancelled; {failed} failed.",
                (attempts - late).max(0)
            )}
        </p>
        <HistoryCharts page=page/>
    }
}
