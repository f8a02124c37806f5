//! The promises a history is checked against, each from the README or a guide, each a function of
//! the history and the final database alone ([`History`], [`Snapshot`]), so that a planted
//! violation (a record edited by hand) shows that the check can fail.
//!
//! To add a promise: a variant of [`Promise`] with the sentence it checks, a function below (or
//! in a module of its own) that returns its violations, a line in [`check`], and a test planting
//! a violation of it.

mod alerts;
mod by_hand;
mod games;
mod limits;
mod map_steps;
mod slots;
mod sql_actions;
mod workflows;

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::Value;

use self::by_hand::{bulk_on, moved_by_hand, on_job};
use super::plan::{Fault, Role, KINDS, QUEUES};
use super::record::{Event, History, JobRow, RunRow, Snapshot, StepRow};
use crate::engine::job::RESERVED_META;

/// What Kickoff promises, and where it says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Promise {
    /// README: every timed action "survives restarts and crashes, retries, is rescued": every
    /// acknowledged job reaches a final state, or is still legitimately waiting and something
    /// names what holds it (its queue or kind paused, its time not come).
    JobsSettle,
    /// docs/api.md: cancel stops a job; a job cancelled before it started never starts (no
    /// attempt after the acknowledged cancel, unless an operator retried it).
    CancelHolds,
    /// docs/limits.md: a paused queue or kind starts no attempt until it is resumed (checked on
    /// webhook calls: the receiver sees when an attempt really started).
    PauseHolds,
    /// Nothing cancels a job but an action or a policy that names it: a cancel (one or bulk, or
    /// of the workflow run it is a step of), a skip of its step, its schedule's pause, change,
    /// deletion, overlap or missed-run policy, its question's deletion.
    /// docs/schedules.md: a run triggered by hand is never counted as missed, nor a run held by
    /// a paused queue or kind, a limit or a backlog: the missed-run policy cancels a run only when
    /// its slot passed while a fault left no node to start it.
    CancelExplained,
    /// docs/schedules.md: exactly one run per slot (a run cancelled before it started, by a
    /// change of its schedule that makes the runs ahead anew, never ran; a run an operator
    /// retried, ran now or rescheduled left its slot because they asked).
    SlotOnce,
    /// docs/ARCHITECTURE.md: a database effect happens exactly once per completion (a counting
    /// job's tally equals its completions: one, plus at most one per acknowledged retry; a
    /// workflow step's jobs count each under their own id, its retries making jobs of the same
    /// args).
    EffectOnce,
    /// README: a question stops taking predictions exactly at game time: every question whose
    /// time passed is locked (never before its time), no prediction is kept from after it, and
    /// every acknowledged prediction of a question still there is kept.
    QuestionsLock,
    /// docs/security.md: a secret is shown whole only to admins and to the job's creator.
    SecretsHidden,
    /// docs/security.md: a viewer only reads; every change it asks for is refused (403; a 503 while
    /// the database is unreachable changes nothing either).
    ViewersOnlyRead,
    /// docs/dashboard.md: every state-changing REST call that succeeded has its audit entry.
    AuditComplete,
    /// docs/limits.md: at most N attempts of a queue start in each window of its rate (per key
    /// when partitioned), and at most its global concurrency execute at once, on all nodes
    /// together, by the database clock (from a change's answer plus the 1 s backstop poll).
    LimitsHold,
    /// docs/webhooks-and-alerts.md: an incident notifies at most once when it fires and once
    /// when it resolves, and an alert's own notification is never the subject of an incident.
    AlertsNotifyOnce,
    /// README and docs/api.md: a job's time goes by the database's clock, whatever a node's
    /// clock says: `schedule_in_ms` counts from the insert, and no attempt starts before its time.
    DueByDatabaseClock,
    /// docs/schedules.md: every slot of a schedule that is there and not paused gets its run
    /// (made ahead; cancelled by a policy perhaps, but made), whatever nodes or the database do.
    SlotsComplete,
    /// docs/api.md, docs/schedules.md: the keys Kickoff reserves in a job's meta
    /// (`crate::engine::job::RESERVED_META`: a schedule run's markers, a question's `owner`, an
    /// alert's) are its own: an insert setting one is refused, so nobody forges a run of a
    /// schedule (taking its slot) or passes for an alert's notification.
    ReservedMetaRefused,
    /// docs/workflows.md: a step's job is made only once each of its dependencies settled in a
    /// way that lets it run, and never claimed before a dependency's job settled; a step's state
    /// follows its job's; a dependency that failed leaves no step blocked for ever; a run's
    /// counters equal its steps' states, and it settles with the last of them; nothing of a run
    /// starts after its cancel was answered.
    WorkflowsHold,
    /// docs/embedding.md: what an application does from SQL (an insert, a cancel, a signal)
    /// commits with its rows of its transaction: a job added from SQL exists or runs only with
    /// them (a rolled-back one never), an action whose commit was answered kept them, a
    /// rolled-back or refused one left none, and a signal stored from SQL came with them.
    SqlActionsAtomic,
    /// docs/workers.md: a webhook call answered with `kickoff-no-retry: true` fails its job for
    /// good at once: no call of a later attempt comes, and it ends discarded (unless an operator
    /// moved it by hand, or cancelled it as it ran).
    NoRetryHolds,
}

impl Promise {
    pub const ALL: [Promise; 18] = [
        Promise::JobsSettle,
        Promise::CancelHolds,
        Promise::PauseHolds,
        Promise::CancelExplained,
        Promise::SlotOnce,
        Promise::EffectOnce,
        Promise::QuestionsLock,
        Promise::SecretsHidden,
        Promise::ViewersOnlyRead,
        Promise::AuditComplete,
        Promise::LimitsHold,
        Promise::AlertsNotifyOnce,
        Promise::DueByDatabaseClock,
        Promise::SlotsComplete,
        Promise::ReservedMetaRefused,
        Promise::WorkflowsHold,
        Promise::SqlActionsAtomic,
        Promise::NoRetryHolds,
    ];
}

/// A promise broken, with what shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub promise: Promise,
    pub detail: String,
}

/// How long after its due time a job may still be on its way when the snapshot is read: the
/// driver waits for quiet first, so this only covers what came due in the last moments.
const SETTLE_GRACE: Duration = Duration::milliseconds(1_500);

/// How long a webhook call may take from its attempt's start to the receiver (a connection on
/// loopback, a busy machine): a call received this soon after a pause's answer may have started
/// before it.
const CALL_SLACK: Duration = Duration::milliseconds(100);

/// How long after a pause's answer a node may still start a job it claimed before the pause
/// (fetched ahead, claimed ahead of its due time): until it hears of the pause, by its
/// notification or at the latest at its next settings poll (a second). A claim after the pause
/// takes nothing (the claim reads the pauses in its statement).
const PAUSE_HEARD: Duration = Duration::milliseconds(1_100);

/// [`Promise::WorkflowsHold`]: the runs and their steps, the map steps' tasks, and the game's
/// notify step's pages.
fn workflows_hold(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = workflows::workflows_hold(h, s);
    out.extend(map_steps::map_steps_hold(h, s));
    out.extend(games::notify_pages_hold(h, s));
    out
}

/// Every promise's violations.
pub fn check(h: &History, s: &Snapshot) -> Vec<Violation> {
    let checks: [fn(&History, &Snapshot) -> Vec<String>; 18] = [
        jobs_settle,
        cancel_holds,
        pause_holds,
        cancel_explained,
        slots::slot_once,
        effect_once,
        questions_lock,
        secrets_hidden,
        viewers_only_read,
        audit_complete,
        limits::limits_hold,
        alerts::alerts_notify_once,
        due_by_database_clock,
        slots::slots_complete,
        reserved_meta_refused,
        workflows_hold,
        sql_actions::sql_actions_atomic,
        no_retry_holds,
    ];
    Promise::ALL
        .iter()
        .zip(checks)
        .flat_map(|(p, f)| {
            f(h, s).into_iter().map(|detail| Violation {
                promise: *p,
                detail,
            })
        })
        .collect()
}

/// Jobs whose insert was acknowledged, with the time the answer came.
fn acknowledged_jobs(h: &History) -> Vec<(i64, DateTime<Utc>)> {
    let mut jobs: Vec<(i64, DateTime<Utc>)> = h
        .events
        .iter()
        .filter(|e| {
            e.ok()
                && matches!(
                    (e.method, e.route),
                    ("POST" | "SQL", "/jobs") | ("POST", "/schedules/{name}/trigger")
                )
        })
        .filter_map(|e| Some((e.job_id()?, e.answered)))
        .collect();
    jobs.sort();
    jobs.dedup_by_key(|j| j.0);
    jobs
}

/// Whether `job` (acknowledged at `at`) may have been deleted: by name, or by a bulk delete sent
/// after it (its queue is not known once it is gone).
fn deleted(h: &History, job: i64, at: DateTime<Utc>) -> bool {
    h.acknowledged("DELETE", "/jobs/{id}")
        .any(|e| e.subject == Some(job))
        || h.acknowledged("POST", "/jobs/bulk").any(|e| {
            e.answered >= at
                && e.body.as_ref().and_then(|b| b.get("action")?.as_str()) == Some("delete")
        })
}

fn jobs_settle(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (id, at) in acknowledged_jobs(h) {
        if s.job(id).is_none() && !deleted(h, id, at) {
            out.push(format!(
                "job {id}: acknowledged, then gone without a delete"
            ));
        }
    }
    // Every job in the table, acknowledged or not (a schedule's runs, a question's lock, an
    // insert whose answer was lost with its node).
    for job in s.jobs.iter().filter(|j| !j.is_final()) {
        let held_by_queue = s.paused_queues.contains(&job.queue);
        let held_by_kind = s.paused_kinds.contains(&job.kind);
        let waiting = matches!(job.state.as_str(), "scheduled" | "retryable" | "available")
            && job.scheduled_at > s.now - SETTLE_GRACE;
        // Came due as the database was read, and started.
        let just_started = job.state == "executing"
            && job.attempted_at.is_some_and(|at| {
                at > s.now - SETTLE_GRACE && job.scheduled_at > s.now - SETTLE_GRACE
            });
        if !(held_by_queue || held_by_kind || waiting || just_started) {
            out.push(format!(
                "job {} ({}, queue {}) is {} since {}, attempt {}: nothing holds it",
                job.id, job.kind, job.queue, job.state, job.scheduled_at, job.attempt
            ));
        }
    }
    out
}

/// Retries acknowledged for `job` (one or bulk on its queue) after `t`.
fn retried_after(h: &History, job: &JobRow, t: DateTime<Utc>) -> bool {
    on_job(h, "/jobs/{id}/retry", job.id).any(|e| e.sent >= t)
        || bulk_on(h, "retry", job).any(|e| e.sent >= t)
}

fn cancel_holds(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    // The API's cancels and the application's from SQL (`kickoff_cancel_job`), alike.
    for e in h
        .acknowledged("POST", "/jobs/{id}/cancel")
        .chain(h.acknowledged("SQL", "/jobs/{id}/cancel"))
    {
        let Some(id) = e.subject else { continue };
        let Some(job) = s.job(id) else { continue };
        let Some(attempt) = e.answer.get("attempt").and_then(serde_json::Value::as_i64) else {
            continue;
        };
        if retried_after(h, job, e.sent) {
            continue;
        }
        if i64::from(job.attempt) > attempt || job.state != "cancelled" {
            out.push(format!(
                "job {id}: cancelled at attempt {attempt} ({}), now {} at attempt {}",
                e.answered, job.state, job.attempt
            ));
        }
        // A call received after the cancel, for a later attempt than the cancel saw: it started
        // after. (One received before it may carry a higher number: a snoozed attempt's number
        // is given back.)
        for d in h.deliveries.get(&id).into_iter().flatten() {
            if d.at > e.sent && i64::from(d.attempt) > attempt {
                out.push(format!(
                    "job {id}: cancelled at attempt {attempt}, then called for attempt {} at {}",
                    d.attempt, d.at
                ));
            }
        }
    }
    out
}

fn no_retry_holds(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (id, calls) in &h.deliveries {
        let Some(refused) = calls.iter().find(|d| d.for_good) else {
            continue;
        };
        let job = s.job(*id);
        // Moved by hand after the refusal: by its id, or by a bulk action that may have matched
        // it (a job deleted since has no queue left to tell: any bulk retry or run now may have).
        let moved = match job {
            Some(j) => moved_by_hand(h, j),
            None => {
                [
                    "/jobs/{id}/retry",
                    "/jobs/{id}/run-now",
                    "/jobs/{id}/reschedule",
                ]
                .into_iter()
                .any(|route| on_job(h, route, *id).any(|e| e.sent >= refused.at))
                    || h.acknowledged("POST", "/jobs/bulk").any(|e| {
                        e.sent >= refused.at
                            && e.body
                                .as_ref()
                                .and_then(|b| b.get("action"))
                                .and_then(|a| a.as_str())
                                .is_some_and(|a| matches!(a, "retry" | "run_now"))
                    })
            }
        };
        // The refusal's outcome may not have been written: its node killed or stopped, the
        // database crashed or the node's connections cut before it was (from a lease before
        // the call: an attempt is rescued once its lease lapsed), and the job rescued.
        let lost_after = |end: DateTime<Utc>| {
            h.faults.iter().any(|f| {
                !matches!(f.fault, Fault::CutListener { .. })
                    && f.at <= end
                    && f.done >= refused.at - chrono::Duration::seconds(3)
            })
        };
        if moved {
            continue;
        }
        for later in calls
            .iter()
            .filter(|d| d.attempt > refused.attempt && !lost_after(d.at))
        {
            out.push(format!(
                "job {id}: answered kickoff-no-retry at attempt {} ({}), then called for attempt \
                 {} at {}",
                refused.attempt, refused.at, later.attempt, later.at
            ));
        }
        let ended_otherwise =
            job.filter(|j| !matches!(j.state.as_str(), "discarded" | "cancelled"));
        if let Some(j) = ended_otherwise.filter(|_| !lost_after(s.now)) {
            out.push(format!(
                "job {id}: answered kickoff-no-retry at attempt {}, now {} at attempt {}",
                refused.attempt, j.state, j.attempt
            ));
        }
    }
    out
}

fn pause_holds(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let queues: HashMap<&str, Vec<Span>> = QUEUES
        .iter()
        .map(|q| (*q, paused_spans(h, "queues", q, s.now)))
        .collect();
    let webhook_kind = paused_spans(h, "kinds", "webhook", s.now);
    let kinds: HashMap<&str, Vec<Span>> = KINDS
        .iter()
        .map(|k| (*k, paused_spans(h, "kinds", k, s.now)))
        .collect();
    // The claim of a finished job's last attempt (the attempt that ran: a claim handed back is
    // claimed again, and written again).
    for job in s
        .jobs
        .iter()
        .filter(|j| matches!(j.state.as_str(), "completed" | "discarded"))
    {
        let Some(claimed) = job.attempted_at else {
            continue;
        };
        let held = [
            ("queue", queues.get(job.queue.as_str())),
            ("kind", kinds.get(job.kind.as_str())),
        ];
        for (what, spans) in held {
            let spans = spans.map(Vec::as_slice).unwrap_or_default();
            if let Some((from, to)) = spans
                .iter()
                .find(|(f, t)| claimed > *f + CALL_SLACK && claimed < *t)
            {
                out.push(format!(
                    "job {} ({}, queue {}): attempt {} claimed at {claimed} while its {what} was \
                     paused ({from} until {to})",
                    job.id, job.kind, job.queue, job.attempt
                ));
            }
        }
    }
    for (id, calls) in &h.deliveries {
        let Some(job) = s.job(*id) else { continue };
        let by_queue = queues.get(job.queue.as_str()).map(Vec::as_slice);
        for d in calls {
            let held = [
                ("queue", by_queue.unwrap_or_default()),
                ("kind", webhook_kind.as_slice()),
            ];
            // When the call's attempt was claimed: known for the job's last attempt only (an
            // earlier one may have been claimed before any pause).
            let claimed = (d.attempt == job.attempt)
                .then_some(job.attempted_at)
                .flatten();
            for (what, spans) in held {
                let started = d.at - CALL_SLACK;
                // A call of an attempt claimed before the pause, while its node had not heard
                // of the pause yet, holds the promise.
                let unheard = |from: DateTime<Utc>| {
                    claimed.is_none_or(|c| c <= from + CALL_SLACK) && d.at < from + PAUSE_HEARD
                };
                if let Some((from, to)) = spans
                    .iter()
                    .find(|(f, t)| started > *f && d.at < *t && !unheard(*f))
                {
                    out.push(format!(
                        "job {id} ({}): attempt {} called at {} while its {what} was paused \
                         ({from} until {to})",
                        job.queue, d.attempt, d.at
                    ));
                }
            }
        }
    }
    out
}

type Span = (DateTime<Utc>, DateTime<Utc>);

/// The spans during which a queue or a kind (`what`: `queues` or `kinds`) was paused: from each
/// acknowledged pause's answer until the next resume was sent that may have been done (one
/// acknowledged, or without a verdict), or the end.
fn paused_spans(h: &History, what: &str, name: &str, end: DateTime<Utc>) -> Vec<Span> {
    let pause = format!("/{what}/{name}/pause");
    let resume = format!("/{what}/{name}/resume");
    let mut changes: Vec<(&Event, bool)> = h
        .events
        .iter()
        .filter(|e| e.method == "POST" && !(400..500).contains(&e.status))
        .filter_map(|e| {
            if e.path == pause && e.ok() {
                Some((e, true))
            } else if e.path == resume {
                Some((e, false))
            } else {
                None
            }
        })
        .collect();
    changes.sort_by_key(|(e, _)| e.sent);
    let mut spans = Vec::new();
    let mut since: Option<DateTime<Utc>> = None;
    for (e, paused) in changes {
        match (paused, since) {
            (true, None) => since = Some(e.answered),
            (false, Some(from)) => {
                if e.sent > from {
                    spans.push((from, e.sent));
                }
                since = None;
            }
            _ => {}
        }
    }
    if let Some(from) = since {
        spans.push((from, end));
    }
    spans
}

fn cancel_explained(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    // Overlap policies a schedule ever had that cancel runs (by schedule name).
    let mut cancelling_overlap: HashSet<String> = HashSet::new();
    for e in h
        .events
        .iter()
        .filter(|e| e.ok() && matches!(e.route, "/schedules" | "/schedules/{name}"))
    {
        if let Some(b) = &e.body {
            let overlap = b.get("overlap").and_then(|v| v.as_str()).unwrap_or("allow");
            let name = b
                .get("name")
                .and_then(|v| v.as_str())
                .map(str::to_string)
                .or_else(|| e.path.strip_prefix("/schedules/").map(str::to_string));
            if overlap != "allow" {
                if let Some(n) = name {
                    cancelling_overlap.insert(n);
                }
            }
        }
    }
    let questions_ended: HashSet<i64> = h
        .events
        .iter()
        .filter(|e| {
            e.ok()
                && ((e.method == "DELETE" && e.route == "/questions/{id}")
                    || e.route == "/questions/{id}/settle")
        })
        .filter_map(|e| e.subject)
        .collect();
    // The jobs of workflow runs whose cancel was acknowledged: it cancels their ready steps' jobs.
    let runs_cancelled: HashSet<i64> = h
        .acknowledged("POST", "/workflows/{id}/cancel")
        .filter_map(|e| e.subject)
        .collect();
    // A step skipped by hand (perhaps: a skip that was not answered may have committed) cancels
    // its job.
    let skips: HashSet<(i64, &str)> = h
        .events
        .iter()
        .filter(|e| e.route == "/workflows/{id}/skip" && !(400..500).contains(&e.status))
        .filter_map(|e| {
            let name = e.body.as_ref()?.get("step")?.as_str()?;
            Some((e.subject?, name))
        })
        .collect();
    let steps: HashMap<i64, &StepRow> = s.workflow_steps.iter().map(|st| (st.id, st)).collect();
    for job in s.jobs.iter().filter(|j| j.state == "cancelled") {
        let step = job.step_id.and_then(|id| steps.get(&id));
        let named = on_job(h, "/jobs/{id}/cancel", job.id).next().is_some()
            || bulk_on(h, "cancel", job).next().is_some()
            || step.is_some_and(|st| {
                runs_cancelled.contains(&st.run_id)
                    || skips.contains(&(st.run_id, st.name.as_str()))
            });
        if named {
            continue;
        }
        if job.kind == "lock_question" {
            let q = job.args.get("question_id").and_then(|v| v.as_i64());
            if q.is_some_and(|q| questions_ended.contains(&q)) {
                continue;
            }
            out.push(format!(
                "lock job {} of question {q:?} cancelled, the question neither deleted nor settled",
                job.id
            ));
            continue;
        }
        if job.schedule_id().is_some() {
            let schedule = job
                .meta
                .get("schedule")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string();
            if cancelling_overlap.contains(&schedule) {
                continue;
            }
            if !job.triggered() {
                // A run of a slot: its schedule's pause, change or deletion may cancel it, and
                // the missed-run policy when its slot passed with no node to start it; never
                // while it was held (a paused queue or kind, a limit, a backlog).
                out.extend(slots::run_cancel_unexplained(h, job, &schedule));
                continue;
            }
            out.push(format!(
                "run {} of schedule {schedule}, triggered by hand, cancelled (its overlap policy \
                 was always allow, nothing cancelled it by name): counted as missed?",
                job.id
            ));
            continue;
        }
        out.push(format!(
            "job {} ({}, queue {}) cancelled, and no cancel named it",
            job.id, job.kind, job.queue
        ));
    }
    out
}

/// The tally a counting job of a history raises: its own, named after the step that inserted it
/// (and after its id for a workflow step's job: the step's retries make jobs of the same args).
pub fn tally_of(job: &JobRow) -> Option<String> {
    let tally = job.args.get("tally").and_then(|v| v.as_str())?;
    Some(
        if job.args.get("tally_by_job") == Some(&Value::Bool(true)) {
            format!("{tally}#{}", job.id)
        } else {
            tally.to_string()
        },
    )
}

fn effect_once(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for job in &s.jobs {
        let Some(tally) = tally_of(job) else { continue };
        let count = s.tallies.get(&tally).copied().unwrap_or(0);
        let retries = (on_job(h, "/jobs/{id}/retry", job.id).count()
            + bulk_on(h, "retry", job).count()) as i64;
        let (low, high) = if job.state == "completed" {
            (1, 1 + retries)
        } else {
            (0, retries)
        };
        if count < low || count > high {
            out.push(format!(
                "job {} ({}, {} acknowledged retries): its effect happened {count} times",
                job.id, job.state, retries
            ));
        }
    }
    out
}

/// The game a run is the built-in game workflow of (`game`, keyed `game:<game>`).
pub(super) fn game_of(run: &RunRow) -> Option<&str> {
    (run.name == "game")
        .then(|| run.key.as_deref()?.strip_prefix("game:"))
        .flatten()
}

/// A game's run started with its question (and never retried) kicks off no later than the
/// earliest of its game's open questions until its lock ran: a question created or moved
/// earlier takes the run with it, a move of the run takes the questions by as much. (After the
/// lock, its `kickoff_at` anchors the settle's deadline alone: a move of it leaves the questions
/// asked during the game, and they lock by their own jobs.)
fn games_lead_their_questions(h: &History, s: &Snapshot) -> Vec<String> {
    let started: Vec<i64> = h
        .acknowledged("POST", "/questions")
        .filter_map(|e| e.answer.get("workflow")?.get("run")?.as_i64())
        .collect();
    let retried = workflows::retries_by_run(h);
    let mut out = Vec::new();
    for run in &s.workflow_runs {
        let Some(game) = game_of(run) else { continue };
        if run.state != "running" || !started.contains(&run.id) || retried.contains_key(&run.id) {
            continue;
        }
        let locked = s.workflow_steps.iter().any(|st| {
            st.run_id == run.id
                && st.name == "lock"
                && !matches!(st.state.as_str(), "blocked" | "ready")
        });
        if locked {
            continue;
        }
        let kickoff = run
            .times
            .get("kickoff_at")
            .and_then(|t| serde_json::from_value::<DateTime<Utc>>(t.clone()).ok());
        let earliest = s
            .questions
            .iter()
            .filter(|q| q.game == game && q.status == "open")
            .min_by_key(|q| q.game_time);
        if let (Some(kickoff), Some(q)) = (kickoff, earliest) {
            if kickoff > q.game_time {
                out.push(format!(
                    "game run {}: kicks off at {kickoff}, after its open question {} at {}",
                    run.id, q.id, q.game_time
                ));
            }
        }
    }
    out
}

fn questions_lock(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for q in &s.questions {
        if q.game_time < s.now - SETTLE_GRACE && q.status == "open" {
            out.push(format!(
                "question {}: game time {} passed, still open",
                q.id, q.game_time
            ));
        }
        // Settling an open question locks it first, whatever the time: an operator's choice.
        let settled = h
            .acknowledged("POST", "/questions/{id}/settle")
            .any(|e| e.subject == Some(q.id));
        if let (Some(locked), false) = (q.locked_at, settled) {
            if locked < q.game_time {
                out.push(format!(
                    "question {}: locked at {locked}, before its game time {}",
                    q.id, q.game_time
                ));
            }
        }
    }
    out.extend(games_lead_their_questions(h, s));
    for p in &s.predictions {
        if let Some(q) = s.questions.iter().find(|q| q.id == p.question_id) {
            if p.at >= q.game_time {
                out.push(format!(
                    "question {}: {}'s prediction kept from {}, after game time {}",
                    q.id, p.player, p.at, q.game_time
                ));
            }
        }
    }
    for e in h.acknowledged("POST", "/questions/{id}/predictions") {
        let Some(q) = e.subject else { continue };
        if !s.questions.iter().any(|r| r.id == q) {
            continue;
        }
        let player = e
            .body
            .as_ref()
            .and_then(|b| b.get("player")?.as_str())
            .unwrap_or_default();
        if !s
            .predictions
            .iter()
            .any(|p| p.question_id == q && p.player == player)
        {
            out.push(format!(
                "question {q}: {player}'s acknowledged prediction is not kept"
            ));
        }
    }
    out
}

fn secrets_hidden(h: &History, _s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for e in h.events.iter().filter(|e| e.role != Role::Admin) {
        let text = e.answer.to_string();
        for secret in h.secrets.iter().filter(|s| text.contains(s.as_str())) {
            out.push(format!(
                "{:?}'s {} {} answered with the secret {secret}",
                e.role, e.method, e.path
            ));
        }
    }
    out
}

fn viewers_only_read(h: &History, _s: &Snapshot) -> Vec<String> {
    // 403, or no verdict at all: with the database down (503, or no answer from a dying node) the
    // server cannot tell who asks, and nothing changes.
    h.events
        .iter()
        .filter(|e| e.role == Role::Viewer && e.asks_for_change())
        .filter(|e| !matches!(e.status, 403 | 503 | 0))
        .map(|e| {
            format!(
                "a viewer's {} {} answered {} (not 403)",
                e.method, e.path, e.status
            )
        })
        .collect()
}

fn audit_complete(h: &History, s: &Snapshot) -> Vec<String> {
    // (action, target without the token's suffix) -> entries that say ok.
    let mut entries: HashMap<(String, String), usize> = HashMap::new();
    for a in s.audit.iter().filter(|a| a.ok) {
        let target = a
            .target
            .split(" (token ")
            .next()
            .unwrap_or_default()
            .to_string();
        *entries.entry((a.action.clone(), target)).or_default() += 1;
    }
    let mut wanted: HashMap<(String, String), usize> = HashMap::new();
    // Reads, predictions (the players' own, not an operator's) and plain SQL are not audited.
    for e in h
        .events
        .iter()
        .filter(|e| e.ok() && e.asks_for_change() && e.route != "/questions/{id}/predictions")
    {
        let key = (
            format!("api.{} {}", e.method, e.route),
            format!("/api/v1{}", e.path),
        );
        *wanted.entry(key).or_default() += 1;
    }
    let mut out = Vec::new();
    for (key, n) in wanted {
        let have = entries.get(&key).copied().unwrap_or(0);
        if have < n {
            out.push(format!(
                "{} on {}: {n} acknowledged, {have} audit entries",
                key.0, key.1
            ));
        }
    }
    out.sort();
    out
}

fn reserved_meta_refused(h: &History, _s: &Snapshot) -> Vec<String> {
    h.acknowledged("POST", "/jobs")
        .filter_map(|e| {
            let meta = e.body.as_ref()?.get("meta")?.as_object()?;
            let key = RESERVED_META.iter().find(|k| meta.contains_key(**k))?;
            Some(format!(
                "{:?}'s insert setting meta.{key} answered {} (job {:?}): not refused",
                e.role,
                e.status,
                e.job_id()
            ))
        })
        .collect()
}

/// How far apart two readings of one clock may be and still be read as the same instant here: the
/// driver's clock and the database's are the machine's, read a moment apart.
const CLOCK_SLACK: Duration = Duration::milliseconds(50);

fn due_by_database_clock(h: &History, _s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let instant = |v: Option<&serde_json::Value>| {
        v.and_then(|v| v.as_str())
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    };
    for e in h
        .acknowledged("POST", "/jobs")
        .chain(h.acknowledged("SQL", "/jobs"))
    {
        let job = e.answer.get("job").unwrap_or(&e.answer);
        if e.answer.get("existing").and_then(|v| v.as_bool()) == Some(true) {
            continue;
        }
        let (Some(id), Some(due), Some(delay)) = (
            e.job_id(),
            instant(job.get("scheduled_at")),
            e.body
                .as_ref()
                .and_then(|b| b.get("schedule_in_ms")?.as_i64()),
        ) else {
            continue;
        };
        let delay = Duration::milliseconds(delay);
        if due < e.sent + delay - CLOCK_SLACK || due > e.answered + delay + CLOCK_SLACK {
            out.push(format!(
                "job {id}: asked for in {} ms at {}, due at {due}",
                delay.num_milliseconds(),
                e.sent
            ));
            continue;
        }
        // Its first call came no sooner than its time, unless an operator moved it (a retry of
        // a cancelled job runs it at once).
        let moved = [
            "/jobs/{id}/run-now",
            "/jobs/{id}/reschedule",
            "/jobs/{id}/retry",
        ]
        .into_iter()
        .any(|route| on_job(h, route, id).next().is_some())
            || h.acknowledged("POST", "/jobs/bulk").any(|b| {
                let action = b.body.as_ref().and_then(|b| b.get("action")?.as_str());
                matches!(action, Some("run_now" | "retry"))
            });
        let first = h
            .deliveries
            .get(&id)
            .and_then(|calls| calls.iter().filter(|d| d.attempt == 1).map(|d| d.at).min());
        if let (Some(called), false) = (first, moved) {
            if called < due {
                out.push(format!(
                    "job {id}: due at {due}, its first attempt called at {called}"
                ));
            }
        }
    }
    out
}

/// Each promise's check, shown able to fail: a clean history and database pass every check, and
/// one planted violation of each promise is reported as that promise, and only it.
#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::{json, Value};

    use super::*;
    use crate::chaos::history::plan::Fault;
    use crate::chaos::history::record::{
        AuditRow, FaultEvent, IncidentRow, PredictionRow, QuestionRow, DASHBOARD_AUDIT,
        DASHBOARD_SIGN_IN,
    };
    use crate::chaos::receiver::Delivery;

    fn t(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_800_000_000_000 + ms).unwrap()
    }

    fn event(role: Role, method: &'static str, route: &'static str, path: &str, at: i64) -> Event {
        Event {
            step: 0,
            role,
            node: 0,
            method,
            route,
            path: path.to_string(),
            body: None,
            status: 200,
            answer: Value::Null,
            sent: t(at),
            answered: t(at + 5),
            subject: None,
        }
    }

    fn job(id: i64, queue: &str, kind: &str, state: &str, attempt: i32) -> JobRow {
        JobRow {
            id,
            queue: queue.into(),
            kind: kind.into(),
            state: state.into(),
            attempt,
            scheduled_at: t(0),
            attempted_at: Some(t(10)),
            finalized_at: Some(t(20)),
            args: json!({}),
            meta: json!({}),
            inserted_at: t(0),
            step_id: None,
        }
    }

    fn audited(e: &Event) -> AuditRow {
        AuditRow {
            action: format!("api.{} {}", e.method, e.route),
            target: format!("/api/v1{} (token 1)", e.path),
            ok: true,
        }
    }

    /// A history where every promise holds: a noop job inserted and completed, a webhook job
    /// called once, a cancelled job, a queue paused and resumed, a question locked with a
    /// prediction before its time, a schedule's runs, a viewer refused, a secret kept.
    fn clean() -> (History, Snapshot) {
        let mut h = History::default();
        let insert = |id: i64, at: i64| {
            let mut e = event(Role::Operator, "POST", "/jobs", "/jobs", at);
            e.status = 201;
            e.answer = json!({ "job": { "id": id }, "existing": false });
            e
        };
        h.events.push(insert(1, 0));
        h.events.push(insert(2, 10));
        h.events.push(insert(3, 20));
        let mut cancel = event(
            Role::Operator,
            "POST",
            "/jobs/{id}/cancel",
            "/jobs/3/cancel",
            30,
        );
        cancel.subject = Some(3);
        cancel.answer = json!({ "id": 3, "state": "cancelled", "attempt": 0 });
        h.events.push(cancel);
        h.events.push(event(
            Role::Operator,
            "POST",
            "/queues/{name}/pause",
            "/queues/hooks/pause",
            100,
        ));
        h.events.push(event(
            Role::Operator,
            "POST",
            "/queues/{name}/resume",
            "/queues/hooks/resume",
            1_000,
        ));
        let mut predict = event(
            Role::Operator,
            "POST",
            "/questions/{id}/predictions",
            "/questions/9/predictions",
            300,
        );
        predict.status = 201;
        predict.subject = Some(9);
        predict.body = Some(json!({ "player": "p1", "choice": "Home" }));
        h.events.push(predict);
        let mut viewer = event(Role::Viewer, "POST", "/jobs", "/jobs", 400);
        viewer.status = 403;
        h.events.push(viewer);
        let mut read = event(Role::Viewer, "GET", "/jobs", "/jobs?limit=500", 410);
        read.answer = json!([{ "args": { "headers": { "authorization": "[redacted]" } } }]);
        h.events.push(read);
        h.secrets.push("sekret-1-5".into());
        h.deliveries.insert(
            2,
            vec![Delivery {
                attempt: 1,
                at: t(1_250),
                for_good: false,
            }],
        );

        let mut noop = job(1, "default", "noop", "completed", 1);
        noop.args = json!({ "tally": "h1-0" });
        let mut run = job(4, "default", "noop", "completed", 1);
        run.meta = json!({ "schedule_id": 1, "schedule": "s0", "slot_ms": 1000 });
        let mut run2 = run.clone();
        run2.id = 5;
        run2.meta["slot_ms"] = json!(2000);
        // Cancelled before it ever started.
        let mut never = job(3, "default", "noop", "cancelled", 0);
        never.attempted_at = None;
        let mut s = Snapshot {
            now: t(10_000),
            jobs: vec![
                noop,
                job(2, "hooks", "webhook", "completed", 1),
                never,
                run,
                run2,
            ],
            questions: vec![QuestionRow {
                id: 9,
                game: "Game 1".into(),
                status: "locked".into(),
                game_time: t(500),
                locked_at: Some(t(501)),
                lock_job_id: None,
            }],
            predictions: vec![PredictionRow {
                question_id: 9,
                player: "p1".into(),
                choice: "Home".into(),
                at: t(300),
            }],
            ..Snapshot::default()
        };
        s.tallies.insert("h1-0".into(), 1);
        s.audit = h
            .events
            .iter()
            .filter(|e| e.ok() && e.method != "GET" && e.route != "/questions/{id}/predictions")
            .map(audited)
            .collect();
        (h, s)
    }

    /// An operator's acknowledged (and audited) retry of `job` at 40 ms.
    fn retry(h: &mut History, s: &mut Snapshot, job: i64) {
        let path = format!("/jobs/{job}/retry");
        let mut e = event(Role::Operator, "POST", "/jobs/{id}/retry", &path, 40);
        e.subject = Some(job);
        s.audit.push(audited(&e));
        h.events.push(e);
    }

    fn broken(h: &History, s: &Snapshot) -> Vec<Promise> {
        let mut p: Vec<Promise> = check(h, s).into_iter().map(|v| v.promise).collect();
        p.dedup();
        p
    }

    /// A game's run started with its question kicks off no later than its earliest open
    /// question: a run left behind by a question moved earlier is reported, one that followed
    /// it (or was retried since, or whose question locked) is not.
    #[test]
    fn a_game_run_behind_its_question_is_reported() {
        let mut h = History::default();
        let mut create = event(Role::Operator, "POST", "/questions", "/questions", 100);
        create.status = 201;
        create.answer = json!({ "id": 9, "workflow": { "run": 1, "existing": false } });
        h.events.push(create);
        let question = |status: &str, at: i64| QuestionRow {
            id: 9,
            game: "Game w900".into(),
            status: status.into(),
            game_time: t(at),
            locked_at: None,
            lock_job_id: None,
        };
        let run = |kickoff: i64| RunRow {
            id: 1,
            name: "game".into(),
            key: Some("game:Game w900".into()),
            state: "running".into(),
            steps: 3,
            counts: [2, 1, 0, 0, 0, 0],
            times: json!({ "kickoff_at": t(kickoff) }),
        };
        let s = |kickoff: i64, status: &str, at: i64| Snapshot {
            now: t(1_000),
            questions: vec![question(status, at)],
            workflow_runs: vec![run(kickoff)],
            ..Snapshot::default()
        };
        assert_eq!(
            games_lead_their_questions(&h, &s(900, "open", 900)),
            Vec::<String>::new()
        );
        assert_eq!(
            games_lead_their_questions(&h, &s(900, "open", 5_000)),
            Vec::<String>::new()
        );
        assert_eq!(
            games_lead_their_questions(&h, &s(9_000, "locked", 5_000)),
            Vec::<String>::new()
        );
        let behind = games_lead_their_questions(&h, &s(9_000, "open", 5_000));
        assert_eq!(behind.len(), 1, "{behind:?}");
        assert!(
            behind[0].starts_with("game run 1: kicks off at"),
            "{behind:?}"
        );
        // Once its lock ran, the run's time is its deadline's anchor alone.
        let mut locked = s(9_000, "open", 5_000);
        locked.workflow_steps = vec![StepRow {
            id: 1,
            run_id: 1,
            name: "lock".into(),
            state: "completed".into(),
            ..StepRow::default()
        }];
        assert_eq!(
            games_lead_their_questions(&h, &locked),
            Vec::<String>::new()
        );
        let mut retried = h.clone();
        let mut retry = event(
            Role::Operator,
            "POST",
            "/workflows/{id}/retry",
            "/workflows/1/retry",
            200,
        );
        retry.subject = Some(1);
        retried.events.push(retry);
        assert_eq!(
            games_lead_their_questions(&retried, &s(9_000, "open", 5_000)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_clean_history_breaks_nothing() {
        let (h, s) = clean();
        assert_eq!(check(&h, &s), vec![]);
    }

    #[test]
    fn a_job_left_available_with_nothing_holding_it_is_reported() {
        let (h, mut s) = clean();
        s.jobs[0].state = "available".into();
        s.jobs[0].finalized_at = None;
        s.tallies.clear();
        assert_eq!(broken(&h, &s), vec![Promise::JobsSettle]);
        // Held by its paused queue, it is waiting legitimately.
        s.paused_queues.push("default".into());
        assert_eq!(broken(&h, &s), vec![]);
        // Executing long after its time: nothing finished it. Just due and started: on its way.
        let (h, mut s) = clean();
        s.jobs[0].state = "executing".into();
        s.jobs[0].finalized_at = None;
        s.tallies.clear();
        assert_eq!(broken(&h, &s), vec![Promise::JobsSettle]);
        s.jobs[0].scheduled_at = t(9_500);
        s.jobs[0].attempted_at = Some(t(9_600));
        assert_eq!(broken(&h, &s), vec![]);
        // An acknowledged job gone without a delete.
        let (h, mut s) = clean();
        s.jobs.remove(1);
        assert_eq!(broken(&h, &s), vec![Promise::JobsSettle]);
    }

    #[test]
    fn an_attempt_after_a_cancel_is_reported() {
        let (mut h, mut s) = clean();
        s.jobs[2].attempt = 1;
        s.jobs[2].state = "completed".into();
        assert_eq!(broken(&h, &s), vec![Promise::CancelHolds]);
        // Unless an operator retried it after the cancel.
        retry(&mut h, &mut s, 3);
        assert_eq!(broken(&h, &s), vec![]);
        // A call after the cancel, for an attempt it had not seen; but not one before it (an
        // attempt snoozed by the receiver gives its number back: the cancel saw attempt 0).
        let (mut h, s) = clean();
        h.deliveries.insert(
            3,
            vec![Delivery {
                attempt: 1,
                at: t(20),
                for_good: false,
            }],
        );
        assert_eq!(broken(&h, &s), vec![]);
        h.deliveries.insert(
            3,
            vec![Delivery {
                attempt: 1,
                at: t(40),
                for_good: false,
            }],
        );
        assert_eq!(broken(&h, &s), vec![Promise::CancelHolds]);
    }

    #[test]
    fn a_call_after_kickoff_no_retry_or_a_job_not_discarded_is_reported() {
        let (mut h, mut s) = clean();
        let webhook = s.jobs.iter().position(|j| j.id == 2).unwrap();
        h.deliveries.get_mut(&2).unwrap()[0].for_good = true;
        s.jobs[webhook].state = "discarded".into();
        assert_eq!(broken(&h, &s), vec![]);
        h.deliveries.get_mut(&2).unwrap().push(Delivery {
            attempt: 2,
            at: t(1_400),
            for_good: false,
        });
        assert_eq!(broken(&h, &s), vec![Promise::NoRetryHolds]);
        // Unless a fault may have lost the refusal's outcome before it was written (its node
        // killed, the job rescued and called again); a listener cut loses no write.
        h.faults.push(FaultEvent {
            step: 0,
            fault: Fault::CutListener { node: 0 },
            at: t(1_260),
            done: t(1_270),
        });
        assert_eq!(broken(&h, &s), vec![Promise::NoRetryHolds]);
        h.faults.push(FaultEvent {
            step: 0,
            fault: Fault::Kill { node: 0 },
            at: t(1_260),
            done: t(1_300),
        });
        assert_eq!(broken(&h, &s), vec![]);
        h.faults.clear();
        h.deliveries.get_mut(&2).unwrap().pop();
        s.jobs[webhook].state = "completed".into();
        assert_eq!(broken(&h, &s), vec![Promise::NoRetryHolds]);
        // Unless an operator retried it: then it runs again; so too when it was deleted since.
        retry(&mut h, &mut s, 2);
        assert_eq!(broken(&h, &s), vec![]);
        let (mut h, mut s) = clean();
        h.deliveries.get_mut(&2).unwrap()[0].for_good = true;
        h.deliveries.get_mut(&2).unwrap().push(Delivery {
            attempt: 2,
            at: t(1_400),
            for_good: false,
        });
        s.jobs.retain(|j| j.id != 2);
        assert!(broken(&h, &s).contains(&Promise::NoRetryHolds));
        // A retry sent before the refusal explains nothing after it; one sent after does.
        retry(&mut h, &mut s, 2);
        assert!(broken(&h, &s).contains(&Promise::NoRetryHolds));
        h.events.last_mut().unwrap().sent = t(1_300);
        assert!(!broken(&h, &s).contains(&Promise::NoRetryHolds));
    }

    #[test]
    fn a_call_while_the_queue_is_paused_is_reported() {
        // Job 2 (hooks) ran from a claim at 10 ms; hooks was paused from 105 ms (here until
        // 3 s).
        let (mut h, s) = clean();
        h.events[5].sent = t(3_000);
        h.events[5].answered = t(3_005);
        h.deliveries.get_mut(&2).unwrap()[0].at = t(1_300);
        assert_eq!(broken(&h, &s), vec![Promise::PauseHolds]);
        // Before the node could have heard of the pause (a second and its slack): a call of an
        // attempt claimed before it.
        h.deliveries.get_mut(&2).unwrap()[0].at = t(1_150);
        assert_eq!(broken(&h, &s), vec![]);
        let (mut h, s) = clean();
        // A call received 45 ms after the pause's answer may have started before it.
        h.deliveries.get_mut(&2).unwrap()[0].at = t(150);
        assert_eq!(broken(&h, &s), vec![]);
        // Claimed before the pause, it may start until its node hears of the pause (seed 9628:
        // a node restarted a moment before, 163 ms late, under load).
        h.deliveries.get_mut(&2).unwrap()[0].at = t(500);
        assert_eq!(broken(&h, &s), vec![]);
        // Not when its claim came after the pause's answer.
        let (mut h, mut s) = clean();
        s.jobs[1].attempted_at = Some(t(300));
        h.deliveries.get_mut(&2).unwrap()[0].at = t(500);
        assert!(broken(&h, &s).contains(&Promise::PauseHolds));
    }

    #[test]
    fn a_claim_while_the_queue_or_kind_is_paused_is_reported() {
        // Job 2 (hooks, webhook) ran from a claim at 10 ms; hooks was paused from 105 ms.
        let (h, mut s) = clean();
        s.jobs[1].attempted_at = Some(t(500));
        assert_eq!(broken(&h, &s), vec![Promise::PauseHolds]);
        // A resume without a verdict may have been done: nothing is known after it was sent.
        let (mut h, mut s) = clean();
        h.events[5].status = 503;
        s.audit.retain(|a| !a.target.contains("resume"));
        s.jobs[1].attempted_at = Some(t(1_100));
        assert_eq!(broken(&h, &s), vec![]);
        // A kind paused.
        let (mut h, mut s) = clean();
        let mut pause = event(
            Role::Operator,
            "POST",
            "/kinds/{kind}/pause",
            "/kinds/noop/pause",
            2_000,
        );
        pause.answer = json!({ "kind": "noop", "paused": true });
        s.audit.push(audited(&pause));
        h.events.push(pause);
        assert_eq!(broken(&h, &s), vec![]);
        s.jobs[0].attempted_at = Some(t(3_000));
        assert_eq!(broken(&h, &s), vec![Promise::PauseHolds]);
    }

    #[test]
    fn a_cancel_nothing_asked_for_and_a_triggered_run_cancelled_are_reported() {
        let (h, mut s) = clean();
        s.jobs[0].state = "cancelled".into();
        s.tallies.clear();
        assert_eq!(broken(&h, &s), vec![Promise::CancelExplained]);
        let (mut h, mut s) = clean();
        s.jobs[3].state = "cancelled".into();
        s.jobs[3].attempt = 0;
        s.jobs[3].meta["slot_ms"] = json!(t(1_000).timestamp_millis());
        // Its schedule's creation, a resume and a refused pause explain nothing.
        let mut create = event(Role::Operator, "POST", "/schedules", "/schedules", -500);
        create.status = 201;
        create.body = Some(json!({ "name": "s0" }));
        let resume = event(
            Role::Operator,
            "POST",
            "/schedules/{name}/resume",
            "/schedules/s0/resume",
            12,
        );
        let mut refused = event(
            Role::Operator,
            "POST",
            "/schedules/{name}/pause",
            "/schedules/s0/pause",
            13,
        );
        refused.status = 404;
        for e in [create, resume, refused] {
            if e.ok() {
                s.audit.push(audited(&e));
            }
            h.events.push(e);
        }
        // A run whose slot passed with a node there to start it was held (a paused queue, a
        // limit, a backlog), not missed: the missed-run policy may not cancel it ...
        assert_eq!(broken(&h, &s), vec![Promise::CancelExplained]);
        // ... unless its slot passed while a fault stopped the nodes or the database ...
        h.faults.push(FaultEvent {
            step: 0,
            fault: Fault::Kill { node: 0 },
            at: t(900),
            done: t(1_400),
        });
        assert_eq!(broken(&h, &s), vec![]);
        // ... which cannot explain a run that had started.
        s.jobs[3].attempt = 1;
        assert_eq!(broken(&h, &s), vec![Promise::CancelExplained]);
        // Its schedule's pause, change or deletion, sent before the cancel, may cancel it.
        h.faults.clear();
        let pause = event(
            Role::Operator,
            "POST",
            "/schedules/{name}/pause",
            "/schedules/s0/pause",
            15,
        );
        s.audit.push(audited(&pause));
        h.events.push(pause);
        assert_eq!(broken(&h, &s), vec![]);
        // A run triggered by hand may not be counted as missed.
        s.jobs[3].meta["trigger"] = json!(true);
        assert_eq!(broken(&h, &s), vec![Promise::CancelExplained]);
    }

    #[test]
    fn two_runs_of_one_slot_are_reported() {
        let (h, mut s) = clean();
        s.jobs[4].meta["slot_ms"] = json!(1000);
        assert_eq!(broken(&h, &s), vec![Promise::SlotOnce]);
        // A run made again after its schedule changed: the first was cancelled before it started.
        let mut h = h;
        let mut change = event(
            Role::Operator,
            "PATCH",
            "/schedules/{name}",
            "/schedules/s0",
            15,
        );
        change.body = Some(json!({ "every_ms": 1000 }));
        s.audit.push(audited(&change));
        h.events.push(change);
        s.jobs[3].state = "cancelled".into();
        s.jobs[3].attempt = 0;
        assert_eq!(broken(&h, &s), vec![]);
        // One that had started was a run.
        s.jobs[3].attempt = 1;
        assert_eq!(broken(&h, &s), vec![Promise::SlotOnce]);
        // Unless an operator retried it: it ran again because they asked.
        retry(&mut h, &mut s, 4);
        assert_eq!(broken(&h, &s), vec![]);
    }

    #[test]
    fn an_effect_twice_or_missing_is_reported() {
        let (h, mut s) = clean();
        s.tallies.insert("h1-0".into(), 2);
        assert_eq!(broken(&h, &s), vec![Promise::EffectOnce]);
        s.tallies.insert("h1-0".into(), 0);
        assert_eq!(broken(&h, &s), vec![Promise::EffectOnce]);
    }

    #[test]
    fn a_question_open_after_its_time_or_a_late_prediction_is_reported() {
        let (h, mut s) = clean();
        s.questions[0].status = "open".into();
        s.questions[0].locked_at = None;
        assert_eq!(broken(&h, &s), vec![Promise::QuestionsLock]);
        let (h, mut s) = clean();
        s.predictions[0].at = t(600);
        assert_eq!(broken(&h, &s), vec![Promise::QuestionsLock]);
        let (h, mut s) = clean();
        s.questions[0].locked_at = Some(t(499));
        assert_eq!(broken(&h, &s), vec![Promise::QuestionsLock]);
        let (h, mut s) = clean();
        s.predictions.clear();
        assert_eq!(broken(&h, &s), vec![Promise::QuestionsLock]);
    }

    #[test]
    fn a_secret_in_a_viewers_answer_is_reported() {
        let (mut h, s) = clean();
        h.events[8].answer =
            json!([{ "args": { "headers": { "authorization": "Bearer sekret-1-5" } } }]);
        assert_eq!(broken(&h, &s), vec![Promise::SecretsHidden]);
    }

    #[test]
    fn a_secret_in_a_readers_delivery_record_export_or_audit_page_is_reported() {
        // The receiver echoed job 2's headers back; a viewer reads its delivery record.
        let (mut h, s) = clean();
        let mut calls = event(
            Role::Viewer,
            "GET",
            "/webhook-deliveries",
            "/webhook-deliveries?job_id=2",
            2_000,
        );
        calls.subject = Some(2);
        calls.answer = json!({ "deliveries": [{ "job_id": 2, "status": 500,
            "response_body": r#"{"authorization":"[redacted]"}"#,
            "response_headers": { "x-echo-authorization": "[redacted]" } }] });
        h.events.push(calls);
        assert_eq!(broken(&h, &s), vec![]);
        h.events.last_mut().unwrap().answer["deliveries"][0]["response_headers"]
            ["x-echo-authorization"] = json!("Bearer sekret-1-5");
        assert_eq!(broken(&h, &s), vec![Promise::SecretsHidden]);
        // An operator's export: CSV, text kept as a JSON string.
        let (mut h, s) = clean();
        let mut export = event(
            Role::Operator,
            "GET",
            "/jobs/export",
            "/jobs/export?format=csv",
            2_000,
        );
        export.answer = Value::String(
            "id,kind,last_error\n2,webhook,\"HTTP 500: {\"\"authorization\"\":\"\"Bearer \
             sekret-1-5\"\"}\"\n"
                .into(),
        );
        h.events.push(export);
        assert_eq!(broken(&h, &s), vec![Promise::SecretsHidden]);
        // A viewer signs in and reads the audit page's server function (posts that change
        // nothing): an admin's error search, nested in an edit's filter, must be hidden.
        let (mut h, s) = clean();
        let sign_in = event(
            Role::Viewer,
            "POST",
            DASHBOARD_SIGN_IN,
            DASHBOARD_SIGN_IN,
            2_000,
        );
        let mut audit = event(
            Role::Viewer,
            "POST",
            DASHBOARD_AUDIT,
            DASHBOARD_AUDIT,
            2_100,
        );
        audit.answer = json!({ "now_ms": 0, "next_before": null, "rows": [{
            "action": "api.POST /jobs/edit",
            "filter": r#"{"edit":{"priority":3},"filter":{"error":"[redacted]","max_id":5}}"# }] });
        h.events.extend([sign_in, audit]);
        assert_eq!(broken(&h, &s), vec![]);
        h.events.last_mut().unwrap().answer["rows"][0]["filter"] =
            json!(r#"{"edit":{"priority":3},"filter":{"error":"sekret-1-5","max_id":5}}"#);
        assert_eq!(broken(&h, &s), vec![Promise::SecretsHidden]);
    }

    #[test]
    fn an_insert_setting_a_reserved_meta_key_is_reported() {
        for key in RESERVED_META {
            let (mut h, mut s) = clean();
            let mut forged = event(Role::Operator, "POST", "/jobs", "/jobs", 50);
            let mut meta = json!({ "tenant": 7 });
            meta[key] = json!(1);
            forged.body = Some(json!({ "kind": "noop", "meta": meta }));
            forged.status = 422;
            h.events.push(forged.clone());
            assert_eq!(broken(&h, &s), vec![], "meta.{key} refused");
            // Taken: a job like any other, and the promise broken.
            forged.status = 201;
            forged.answer = json!({ "job": { "id": 78 }, "existing": false });
            s.jobs.push(job(78, "default", "noop", "completed", 1));
            s.audit.push(audited(&forged));
            *h.events.last_mut().unwrap() = forged;
            assert_eq!(
                broken(&h, &s),
                vec![Promise::ReservedMetaRefused],
                "meta.{key}"
            );
        }
        // A meta of the caller's own keys is the caller's.
        let (mut h, mut s) = clean();
        let mut own = event(Role::Operator, "POST", "/jobs", "/jobs", 50);
        own.body = Some(json!({ "kind": "noop", "meta": { "tenant": 7 } }));
        own.status = 201;
        own.answer = json!({ "job": { "id": 78 }, "existing": false });
        s.jobs.push(job(78, "default", "noop", "completed", 1));
        s.audit.push(audited(&own));
        h.events.push(own);
        assert_eq!(broken(&h, &s), vec![]);
    }

    #[test]
    fn an_error_search_explains_only_the_cancels_of_jobs_that_sent_its_text() {
        // Job 2 (a webhook) cancelled; an admin cancelled every job up to job 5 whose error holds
        // a planted secret (searched without regard to case).
        let (mut h, mut s) = clean();
        s.jobs[1].state = "cancelled".into();
        let mut search = event(Role::Admin, "POST", "/jobs/bulk", "/jobs/bulk", 1_500);
        search.body = Some(json!({ "action": "cancel",
                                   "filter": { "error": "SEKRET-1-5", "max_id": 5 } }));
        s.audit.push(audited(&search));
        h.events.push(search);
        assert_eq!(broken(&h, &s), vec![Promise::CancelExplained]);
        // It sent the secret: the receiver may have echoed it into its error ...
        s.jobs[1].args = json!({ "headers": { "authorization": "Bearer sekret-1-5" } });
        assert_eq!(broken(&h, &s), vec![]);
        // ... but it came after the search's snapshot.
        h.events.last_mut().unwrap().body.as_mut().unwrap()["filter"]["max_id"] = json!(1);
        assert_eq!(broken(&h, &s), vec![Promise::CancelExplained]);
    }

    #[test]
    fn a_viewers_change_accepted_is_reported() {
        let (mut h, mut s) = clean();
        h.events[7].status = 201;
        h.events[7].answer = json!({ "job": { "id": 77 } });
        s.jobs.push(job(77, "default", "noop", "completed", 1));
        s.audit.push(audited(&h.events[7]));
        assert_eq!(broken(&h, &s), vec![Promise::ViewersOnlyRead]);
    }

    #[test]
    fn a_change_without_its_audit_entry_is_reported() {
        let (h, mut s) = clean();
        s.audit.remove(0);
        assert_eq!(broken(&h, &s), vec![Promise::AuditComplete]);
    }

    /// An acknowledged `PATCH /queues/default` (audited) setting `body`.
    fn limit(h: &mut History, s: &mut Snapshot, body: Value) {
        let mut e = event(
            Role::Operator,
            "PATCH",
            "/queues/{name}",
            "/queues/default",
            -5_000,
        );
        e.body = Some(body);
        s.audit.push(audited(&e));
        h.events.push(e);
    }

    #[test]
    fn attempts_past_a_global_concurrency_or_a_rate_are_reported() {
        // Three attempts of `default` run together from 10 ms to 20 ms.
        let (mut h, mut s) = clean();
        limit(&mut h, &mut s, json!({ "global_concurrency": 3 }));
        assert_eq!(broken(&h, &s), vec![]);
        limit(&mut h, &mut s, json!({ "global_concurrency": 2 }));
        assert_eq!(broken(&h, &s), vec![Promise::LimitsHold]);
        // One of them ended before the others started: two at once.
        s.jobs[3].attempted_at = Some(t(0));
        s.jobs[3].finalized_at = Some(t(9));
        assert_eq!(broken(&h, &s), vec![]);
        // Three starts in the second from 0 ms, by one key or by kind.
        limit(&mut h, &mut s, json!({ "rate": "2/s" }));
        assert_eq!(broken(&h, &s), vec![Promise::LimitsHold]);
        limit(&mut h, &mut s, json!({ "rate": "2/s", "per": "kind" }));
        assert_eq!(broken(&h, &s), vec![Promise::LimitsHold]);
        s.jobs[3].kind = "webhook".into();
        assert_eq!(broken(&h, &s), vec![]);
        // By an argument: the three are of one tenant, then of two (a number is a key as text).
        for j in [0, 3, 4] {
            s.jobs[j].args["tenant"] = json!("7");
        }
        limit(
            &mut h,
            &mut s,
            json!({ "rate": "2/s", "per": "args.tenant" }),
        );
        assert_eq!(broken(&h, &s), vec![Promise::LimitsHold]);
        s.jobs[4].args["tenant"] = json!(8);
        assert_eq!(broken(&h, &s), vec![]);
        s.jobs[4].args["tenant"] = json!(7);
        assert_eq!(broken(&h, &s), vec![Promise::LimitsHold]);
        // By host: calls to one host, however spelled (a job without a URL has the empty key).
        s.jobs[0].args["url"] = json!("http://Hooks.example:8080/a");
        s.jobs[3].args["url"] = json!("http://user@hooks.example/b");
        limit(&mut h, &mut s, json!({ "rate": "2/s", "per": "host" }));
        assert_eq!(broken(&h, &s), vec![]);
        s.jobs[4].args["url"] = json!("http://hooks.EXAMPLE:9/c");
        assert_eq!(broken(&h, &s), vec![Promise::LimitsHold]);
        limit(&mut h, &mut s, json!({ "rate": "3/s" }));
        assert_eq!(broken(&h, &s), vec![]);
        // A change without a verdict leaves the limits unknown: nothing is claimed of them.
        limit(&mut h, &mut s, json!({ "rate": "1/s" }));
        h.events.last_mut().unwrap().status = 0;
        assert_eq!(broken(&h, &s), vec![]);
    }

    #[test]
    fn an_incident_notified_twice_or_about_a_notification_is_reported() {
        let notification = |id: i64, incident: i64| {
            let mut j = job(id, "default", "webhook", "discarded", 3);
            j.meta = json!({ "alert_incident": incident, "alert_event": "fired" });
            j
        };
        let (h, mut s) = clean();
        s.jobs.push(notification(20, 7));
        s.incidents.push(IncidentRow {
            id: 7,
            rule_id: 1,
            subject: "question 9".into(),
        });
        assert_eq!(broken(&h, &s), vec![]);
        s.jobs.push(notification(21, 7));
        assert_eq!(broken(&h, &s), vec![Promise::AlertsNotifyOnce]);
        // A digest naming an incident notified by itself.
        s.jobs.pop();
        let mut digest = job(22, "default", "webhook", "completed", 1);
        digest.meta = json!({ "alert_rule": 1, "alert_event": "fired", "alert_digest": 1 });
        digest.args = json!({ "body": { "data": { "incident_ids": [7] } } });
        s.jobs.push(digest);
        assert_eq!(broken(&h, &s), vec![Promise::AlertsNotifyOnce]);
        s.jobs.pop();
        // An incident about a discarded notification (marked, or named by its meta).
        s.incidents.push(IncidentRow {
            id: 8,
            rule_id: 2,
            subject: "job 20".into(),
        });
        assert_eq!(broken(&h, &s), vec![Promise::AlertsNotifyOnce]);
        s.jobs.pop();
        s.alert_notifications.push(20);
        assert_eq!(broken(&h, &s), vec![Promise::AlertsNotifyOnce]);
    }

    #[test]
    fn a_delay_counted_from_another_clock_or_a_call_before_its_time_is_reported() {
        let (mut h, s) = clean();
        // Job 2 (a webhook) was asked for in 1 s; it was called at 1,250 ms.
        h.events[1].body = Some(json!({ "kind": "webhook", "schedule_in_ms": 1_000 }));
        h.events[1].answer = json!({ "job": { "id": 2, "scheduled_at": t(1_010).to_rfc3339() } });
        assert_eq!(broken(&h, &s), vec![]);
        // Due 90 s later: the node counted from its own clock.
        h.events[1].answer["job"]["scheduled_at"] = json!(t(91_010).to_rfc3339());
        assert_eq!(broken(&h, &s), vec![Promise::DueByDatabaseClock]);
        // Called before its time.
        h.events[1].answer["job"]["scheduled_at"] = json!(t(1_010).to_rfc3339());
        h.deliveries.get_mut(&2).unwrap()[0].at = t(50);
        assert_eq!(broken(&h, &s), vec![Promise::DueByDatabaseClock]);
        // Unless an operator retried it (a cancelled job retried runs at once).
        let mut s = s;
        retry(&mut h, &mut s, 2);
        assert_eq!(broken(&h, &s), vec![]);
    }

    #[test]
    fn a_slot_without_a_run_while_its_schedule_ran_is_reported() {
        // Schedule s0 (id 1), every second from 500 ms; runs for 1 s and 2 s (jobs 4 and 5).
        let (mut h, mut s) = clean();
        s.jobs[3].meta["slot_ms"] = json!(t(1_000).timestamp_millis());
        s.jobs[4].meta["slot_ms"] = json!(t(2_000).timestamp_millis());
        let mut create = event(Role::Operator, "POST", "/schedules", "/schedules", 495);
        create.status = 201;
        create.body =
            Some(json!({ "name": "s0", "every_ms": 1000, "job": { "queue": "default" } }));
        create.answer = json!({ "id": 1 });
        let mut pause = event(
            Role::Operator,
            "POST",
            "/schedules/{name}/pause",
            "/schedules/s0/pause",
            2_500,
        );
        pause.answer = json!({ "paused": true });
        for e in [&create, &pause] {
            s.audit.push(audited(e));
        }
        h.events.extend([create, pause]);
        assert_eq!(broken(&h, &s), vec![]);
        // The run of 2 s is missing.
        s.jobs.remove(4);
        assert_eq!(broken(&h, &s), vec![Promise::SlotsComplete]);
        // Paused before 2 s: that slot is the pause's.
        h.events.last_mut().unwrap().sent = t(1_500);
        assert_eq!(broken(&h, &s), vec![]);
        // A pause without a verdict: nothing is known after it.
        h.events.last_mut().unwrap().sent = t(2_500);
        h.events.last_mut().unwrap().status = 503;
        assert_eq!(broken(&h, &s), vec![Promise::SlotsComplete]);
        h.events.last_mut().unwrap().sent = t(1_500);
        assert_eq!(broken(&h, &s), vec![]);
    }
}
