//! The promises about a schedule's slots (docs/schedules.md, "Exactly one run per slot"):
//! [`Promise::SlotOnce`](super::Promise::SlotOnce) and
//! [`Promise::SlotsComplete`](super::Promise::SlotsComplete).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::by_hand::moved_by_hand;
use crate::chaos::history::plan::Fault;
use crate::chaos::history::plan::SCHEDULE_NAMES;
use crate::chaos::history::record::{Event, History, JobRow, Snapshot};

pub(super) fn slot_once(h: &History, s: &Snapshot) -> Vec<String> {
    let mut seen: HashMap<(i64, i64), i64> = HashMap::new();
    let mut out = Vec::new();
    for job in &s.jobs {
        let (Some(schedule), Some(slot)) = (
            job.schedule_id(),
            job.meta.get("slot_ms").and_then(|v| v.as_i64()),
        ) else {
            continue;
        };
        // A run triggered by hand is outside the slots; one an operator retried, ran now or
        // rescheduled (by name or on a filter) left its slot because they said so.
        if job.triggered()
            || (job.state == "cancelled" && job.attempt == 0)
            || moved_by_hand(h, job)
        {
            continue;
        }
        if let Some(other) = seen.insert((schedule, slot), job.id) {
            out.push(format!(
                "schedule {schedule}: slot {slot} has two runs, jobs {other} and {}",
                job.id
            ));
        }
    }
    out
}

/// How close to a fault a slot must pass for its run to be missed: a node starts a run within
/// its grace (1 s, `RUN_GRACE`) of its slot, and a node that lost its database reconnects (its
/// pool, then its timer) within a few seconds of PostgreSQL's return.
const MISSED_BEFORE_FAULT_MS: i64 = 1_500;
const MISSED_AFTER_FAULT_MS: i64 = 5_000;

/// Why the run `job` of schedule `name`, cancelled, was cancelled, if the history does not show
/// it: a pause, a change or a deletion of its schedule sent before the cancel and not refused
/// (acknowledged, or without a verdict) explains it, and so does its slot passing during a fault
/// that stopped a node or the database (the missed-run policy, applied by the next node to
/// start). Its creation, a resume, a trigger or a refused request do not. A run held after its
/// slot by a paused queue or kind, a limit or a backlog was there to be started: the policy must
/// leave it alone.
pub(super) fn run_cancel_unexplained(h: &History, job: &JobRow, name: &str) -> Option<String> {
    let slot = job.meta.get("slot_ms").and_then(Value::as_i64)?;
    let asked = h.events.iter().any(|e| {
        on_schedule(e, name)
            && matches!(
                (e.method, e.route),
                ("PATCH" | "DELETE", "/schedules/{name}") | ("POST", "/schedules/{name}/pause")
            )
            && !(400..500).contains(&e.status)
            && job.finalized_at.is_none_or(|f| e.sent <= f)
    });
    if asked {
        return None;
    }
    if job.attempt == 0 {
        let missed = h.faults.iter().any(|f| {
            !matches!(f.fault, Fault::CutListener { .. })
                && f.at.timestamp_millis() - MISSED_BEFORE_FAULT_MS <= slot
                && slot <= f.done.timestamp_millis() + MISSED_AFTER_FAULT_MS
        });
        if missed {
            return None;
        }
    }
    let at = DateTime::<Utc>::from_timestamp_millis(slot).unwrap_or_default();
    Some(format!(
        "run {} of schedule {name} (slot {at}, attempt {}) cancelled: no request on its schedule \
         and no fault near its slot, so it was held, not missed (its overlap policy was always \
         allow, nothing cancelled it by name)",
        job.id, job.attempt
    ))
}

/// What the history knows of one schedule name at a point of its record: which schedule holds
/// it (by id), its interval, whether it is paused, the queues its runs went to. `None`: not
/// known (a request without a verdict, a name deleted).
#[derive(Default)]
struct Known {
    id: Option<i64>,
    every_ms: Option<i64>,
    paused: Option<bool>,
    queues: Vec<String>,
}

/// Whether `e` is about schedule `s<name>`: its creation, or a request on its path.
fn on_schedule(e: &Event, name: &str) -> bool {
    let path = format!("/schedules/{name}");
    if e.route == "/schedules" {
        return e.method == "POST"
            && e.body.as_ref().and_then(|b| b.get("name")?.as_str()) == Some(name);
    }
    e.path == path || e.path.starts_with(&format!("{path}/"))
}

pub(super) fn slots_complete(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for n in 0..SCHEDULE_NAMES {
        let name = format!("s{n}");
        let mut known = Known::default();
        let mut since: Option<DateTime<Utc>> = None;
        for e in h.events.iter().filter(|e| on_schedule(e, &name)) {
            // Reads and triggers change nothing; a refusal changes nothing.
            if e.method == "GET" || e.route.ends_with("/trigger") || (400..500).contains(&e.status)
            {
                continue;
            }
            if let Some(from) = since.take() {
                out.extend(missing(h, s, &known, from, e.sent));
            }
            let body = e.body.clone().unwrap_or(Value::Null);
            let ok = e.ok();
            match (e.method, e.route) {
                ("POST", "/schedules") => {
                    known = Known {
                        id: e.answer.get("id").and_then(Value::as_i64).filter(|_| ok),
                        every_ms: body.get("every_ms").and_then(Value::as_i64),
                        paused: Some(false),
                        queues: Vec::new(),
                    };
                    if let Some(q) = body.pointer("/job/queue").and_then(Value::as_str) {
                        known.queues.push(q.to_string());
                    }
                }
                ("PATCH", _) => {
                    known.every_ms = body.get("every_ms").and_then(Value::as_i64).filter(|_| ok);
                    if let Some(q) = body.get("queue").and_then(Value::as_str) {
                        known.queues.push(q.to_string());
                    }
                }
                ("POST", "/schedules/{name}/pause") => known.paused = ok.then_some(true),
                ("POST", "/schedules/{name}/resume") => known.paused = ok.then_some(false),
                _ => known.id = None,
            }
            since = ok.then_some(e.answered);
        }
        if let Some(from) = since {
            out.extend(missing(h, s, &known, from, s.now));
        }
    }
    out
}

/// The slots of `known`'s schedule in `(from, to)` without a run, while it was known to be there,
/// unpaused, with a known interval. A run a bulk delete on one of its queues may have taken is
/// not looked for.
fn missing(
    h: &History,
    s: &Snapshot,
    known: &Known,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<String> {
    let (Some(id), Some(every), Some(false)) = (known.id, known.every_ms, known.paused) else {
        return Vec::new();
    };
    if every <= 0 {
        return Vec::new();
    }
    let deleted = h.acknowledged("POST", "/jobs/bulk").any(|e| {
        let body = e.body.as_ref();
        e.sent >= from
            && body.and_then(|b| b.get("action")?.as_str()) == Some("delete")
            && body
                .and_then(|b| b.get("filter")?.get("queue")?.as_str())
                .is_some_and(|q| known.queues.iter().any(|k| k == q))
    });
    if deleted {
        return Vec::new();
    }
    let runs: HashMap<i64, i64> = s
        .jobs
        .iter()
        .filter(|j| j.schedule_id() == Some(id) && !j.triggered())
        .filter_map(|j| Some((j.meta.get("slot_ms")?.as_i64()?, j.id)))
        .collect();
    let (from, to) = (from.timestamp_millis(), to.timestamp_millis());
    let mut out = Vec::new();
    let mut slot = (from.div_euclid(every) + 1) * every;
    while slot < to {
        if !runs.contains_key(&slot) {
            let at = DateTime::<Utc>::from_timestamp_millis(slot).unwrap_or_default();
            out.push(format!(
                "schedule {id}: its slot {at} has no run (every {every} ms, not paused)"
            ));
        }
        slot += every;
    }
    out
}
