//! docs/workflows.md on the runs a history made ([`super::Promise::WorkflowsHold`]): a step's
//! job is made only once each of its dependencies settled in a way that lets it run, and never
//! starts before the job of one settled; a step's state follows its job's; a dependency that failed
//! leaves no step blocked for ever; a run's counters equal its steps' states, and it settles
//! with the last of them. An operator's actions keep their word: a step gets a second job only
//! after a retry of its run that covers it (a completed step never under a retry of the
//! failed), a skipped step stays skipped (its job cancelled), a rerun keeps only completions,
//! and runs the step it starts from again.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};

use super::super::record::{Event, History, JobRow, Snapshot, StepRow, STEP_STATES};

/// How long past its deadline a step may still wait when the database is read: the deadline
/// keeper looks every second, and a fault may have stopped every node for a while.
const DEADLINE_GRACE: Duration = Duration::seconds(10);

/// Whether a request may have done what it asked: answered 2xx, or not answered at all or with
/// a server's error (it may have committed first).
pub(super) fn may_have_done(e: &Event) -> bool {
    !(400..500).contains(&e.status)
}

/// The retries of each run that may have happened, by run.
pub(super) fn retries_by_run(h: &History) -> HashMap<i64, Vec<&Event>> {
    let mut retries: HashMap<i64, Vec<&Event>> = HashMap::new();
    for e in h
        .events
        .iter()
        .filter(|e| e.method == "POST" && e.route == "/workflows/{id}/retry" && may_have_done(e))
    {
        if let Some(run) = e.subject {
            retries.entry(run).or_default().push(e);
        }
    }
    retries
}

/// The retry mode a request asked for.
pub(super) fn mode_of(e: &Event) -> &str {
    e.body
        .as_ref()
        .and_then(|b| b.get("mode"))
        .and_then(|m| m.as_str())
        .unwrap_or("failed")
}

/// The state a step settles in when its job settles in `job_state`.
fn step_state_of(job_state: &str) -> Option<&'static str> {
    match job_state {
        "completed" => Some("completed"),
        "discarded" => Some("failed"),
        "cancelled" => Some("cancelled"),
        _ => None,
    }
}

/// Whether a dependency in this state lets the step waiting for it run, under `on_failure`.
pub(super) fn allows(dep: &StepRow, on_failure: &str) -> bool {
    match dep.state.as_str() {
        "completed" => true,
        "skipped" => !dep.skip_following,
        "failed" | "cancelled" => on_failure == "run",
        _ => false,
    }
}

pub(super) fn workflows_hold(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let steps: HashMap<i64, &StepRow> = s.workflow_steps.iter().map(|st| (st.id, st)).collect();
    let jobs: HashMap<i64, &JobRow> = s.jobs.iter().map(|j| (j.id, j)).collect();
    let retries = retries_by_run(h);
    // The moves of each run's times that may have happened.
    let mut moves: HashMap<i64, Vec<&Event>> = HashMap::new();
    for e in h
        .events
        .iter()
        .filter(|e| e.method == "POST" && e.route == "/workflows/{id}/times" && may_have_done(e))
    {
        if let Some(run) = e.subject {
            moves.entry(run).or_default().push(e);
        }
    }
    // A game's run moves with its game's questions too (a question created, moved or deleted, a
    // shift of jobs with their questions): each of those counts as a move of every game's run.
    let question_moves: Vec<&Event> = h
        .events
        .iter()
        .filter(|e| {
            may_have_done(e)
                && matches!(
                    (e.method, e.route),
                    ("POST", "/questions")
                        | ("PATCH", "/questions/{id}")
                        | ("DELETE", "/questions/{id}")
                        | ("POST", "/jobs/shift")
                )
        })
        .collect();
    for run in s
        .workflow_runs
        .iter()
        .filter(|r| super::game_of(r).is_some())
    {
        moves
            .entry(run.id)
            .or_default()
            .extend(question_moves.iter().copied());
    }
    let retried_since = |run: i64, at| {
        retries
            .get(&run)
            .is_some_and(|rs| rs.iter().any(|r| r.sent >= at))
    };
    for run in &s.workflow_runs {
        let mine: Vec<&StepRow> = s
            .workflow_steps
            .iter()
            .filter(|st| st.run_id == run.id)
            .collect();
        let counted =
            STEP_STATES.map(|state| mine.iter().filter(|st| st.state == state).count() as i32);
        if counted != run.counts || mine.len() as i32 != run.steps {
            out.push(format!(
                "run {}: counters {:?} of {} steps, its steps {counted:?} of {}",
                run.id,
                run.counts,
                run.steps,
                mine.len()
            ));
        }
        let live = counted[0] + counted[1] > 0;
        let failed = counted[3] + counted[5] > 0;
        let fits = match run.state.as_str() {
            "running" => live,
            "failed" => !live && failed,
            "completed" => !live && !failed,
            // Its cancel cancelled what was blocked or ready.
            "cancelled" => !live && counted[5] > 0,
            _ => false,
        };
        if !fits {
            out.push(format!(
                "run {}: {} with its steps {counted:?}",
                run.id, run.state
            ));
        }
    }
    for step in &s.workflow_steps {
        let deps: Vec<(&StepRow, &str)> = s
            .workflow_edges
            .iter()
            .filter(|e| e.step_id == step.id)
            .filter_map(|e| steps.get(&e.dep_id).map(|d| (*d, e.on_failure.as_str())))
            .collect();
        // A retry sent after the step's job was made may have made its dependencies run again
        // (a step completed behind a `run` edge keeps its job under a retry of the failed).
        // A job deleted since (a bulk delete of finished jobs) leaves no time: any retry of
        // its run may have come after it.
        let reset_since = match step.job_inserted_at {
            Some(at) => retried_since(step.run_id, at),
            None => retries.contains_key(&step.run_id),
        };
        if step.job_id.is_some() && !reset_since {
            for (dep, on_failure) in &deps {
                if !allows(dep, on_failure) {
                    out.push(format!(
                        "step {}: has a job, but its dependency {} is {} (on_failure {on_failure})",
                        step.id, dep.id, dep.state
                    ));
                }
                // By the database's clock: a dependency's settle is stamped with its
                // transaction's start, and the step's job is claimed only once the transaction
                // that made it committed, after every dependency's settle committed. (The job's
                // own `inserted_at` is its transaction's start too, which may come before a
                // dependency's that committed first.)
                let dep_done = dep
                    .job_id
                    .and_then(|j| jobs.get(&j))
                    .and_then(|j| j.finalized_at);
                let started = step
                    .job_id
                    .and_then(|j| jobs.get(&j))
                    .and_then(|j| j.attempted_at);
                if let (Some(started), Some(done)) = (started, dep_done) {
                    if started < done {
                        out.push(format!(
                            "step {}: its job started at {started}, before its dependency {}'s \
                             settled at {done}",
                            step.id, dep.id
                        ));
                    }
                }
            }
        }
        if step.job_id.is_some() {
            match step.job_id.and_then(|j| jobs.get(&j)) {
                Some(job) => {
                    let want = step_state_of(&job.state).unwrap_or("ready");
                    // A step skipped by hand cancels its job after it settled.
                    let skipped = step.state == "skipped" && job.state == "cancelled";
                    if step.state != want && !skipped {
                        out.push(format!(
                            "step {}: {} while its job {} is {}",
                            step.id, step.state, job.id, job.state
                        ));
                    }
                }
                // Deleted: before it settled (the step cancelled) or after (as it settled).
                None if matches!(step.state.as_str(), "blocked" | "ready") => out.push(format!(
                    "step {}: {} while its job {:?} is gone",
                    step.id, step.state, step.job_id
                )),
                None => {}
            }
        } else if step.tasks.is_none() && (step.state == "ready" || step.state == "completed") {
            out.push(format!("step {}: {} without a job", step.id, step.state));
        }
        let deps_settled = deps
            .iter()
            .all(|(d, _)| !matches!(d.state.as_str(), "blocked" | "ready"));
        let signal_at = step.signal.as_ref().and_then(|name| {
            s.workflow_signals
                .iter()
                .find(|g| g.run_id == step.run_id && &g.name == name)
                .map(|g| g.received_at)
        });
        // Waiting for its signal: never with its signal there, never long past its deadline.
        let waits = step.state == "blocked" && deps_settled && step.signal.is_some();
        if waits {
            if signal_at.is_some() {
                out.push(format!(
                    "step {}: waits for its signal {:?}, which came at {signal_at:?}",
                    step.id, step.signal
                ));
            }
            match step.deadline_at {
                Some(deadline) if deadline + DEADLINE_GRACE < s.now => out.push(format!(
                    "step {}: still waits at {}, its deadline {deadline} passed",
                    step.id, s.now
                )),
                None => out.push(format!("step {}: waits without a deadline", step.id)),
                _ => {}
            }
        }
        // A step that waits for a signal starts only once it came: the signal of the run its
        // job ran in (a step a rerun kept ran in the run it was kept from, with that run's).
        let mut origin: &StepRow = step;
        while let Some(kept) = origin.kept_from.and_then(|k| steps.get(&k)) {
            origin = *kept;
        }
        let origin_signal_at = step.signal.as_ref().and_then(|name| {
            s.workflow_signals
                .iter()
                .find(|g| g.run_id == origin.run_id && &g.name == name)
                .map(|g| g.received_at)
        });
        if let (Some(name), Some(job)) = (&step.signal, step.job_id.and_then(|j| jobs.get(&j))) {
            if let Some(started) = job.attempted_at {
                if origin_signal_at.is_none_or(|at| at > started) {
                    out.push(format!(
                        "step {}: its job started at {started}, its signal {name:?} came at \
                         {signal_at:?}",
                        step.id
                    ));
                }
            }
        }
        // Failed at its deadline: not before it, and not with its signal there before.
        if step.state == "failed" && step.job_id.is_none() && step.deadline_at.is_some() {
            let (deadline, finished) = (step.deadline_at, step.finished_at);
            let early = finished.zip(deadline).is_some_and(|(f, d)| f < d);
            let signalled = signal_at.zip(finished).is_some_and(|(g, f)| g < f);
            if early || signalled {
                out.push(format!(
                    "step {}: failed at {finished:?}, its deadline {deadline:?}, its signal at \
                     {signal_at:?}",
                    step.id
                ));
            }
        }
        // A timer: its job never starts before its time (the run's time at the end, unless a
        // move of it was sent after the job started).
        if let (Some(time), Some(ms), Some(job)) = (
            &step.at_time,
            step.at_ms,
            step.job_id.and_then(|j| jobs.get(&j)),
        ) {
            let anchor = s
                .workflow_runs
                .iter()
                .find(|r| r.id == step.run_id)
                .and_then(|r| r.times.get(time))
                .and_then(|t| serde_json::from_value::<DateTime<Utc>>(t.clone()).ok())
                .map(|t| t + chrono::Duration::milliseconds(ms));
            if let (Some(due), Some(started)) = (anchor, job.attempted_at) {
                let moved_since = moves
                    .get(&step.run_id)
                    .is_some_and(|ms| ms.iter().any(|m| m.sent >= job.inserted_at));
                if started < due && !moved_since {
                    out.push(format!(
                        "step {}: its job started at {started}, before its time {due}",
                        step.id
                    ));
                }
            }
        }
        if step.state == "blocked" && deps_settled && !waits {
            out.push(format!(
                "step {}: blocked for ever: every dependency settled ({:?})",
                step.id,
                deps.iter().map(|(d, _)| &d.state).collect::<Vec<_>>()
            ));
        }
        // Skipped with what follows it, or settled before by another dependency (the first
        // settle of a step stands): never run.
        if deps.iter().any(|(d, _)| d.skip_following)
            && !(step.job_id.is_none()
                && matches!(step.state.as_str(), "skipped" | "failed" | "cancelled"))
        {
            out.push(format!(
                "step {}: {} after a dependency skipped with what follows it",
                step.id, step.state
            ));
        }
    }
    // A step's jobs, in the order they were made: each after the first by a retry of its run
    // that was sent before it was made and answered after the one before it settled, and not a
    // retry of the failed when the one before it completed.
    let mut step_jobs: HashMap<i64, Vec<&JobRow>> = HashMap::new();
    for job in &s.jobs {
        if let Some(step) = job.step_id {
            step_jobs.entry(step).or_default().push(job);
        }
    }
    for (step, list) in &step_jobs {
        // A map step's tasks: `super::map_steps`.
        let Some(run) = steps
            .get(step)
            .filter(|st| st.tasks.is_none())
            .map(|st| st.run_id)
        else {
            continue;
        };
        for pair in list.windows(2) {
            let (before, next) = (pair[0], pair[1]);
            let Some(settled) = before.finalized_at else {
                out.push(format!(
                    "step {step}: job {} made while its job {} was {}",
                    next.id, before.id, before.state
                ));
                continue;
            };
            let covered = retries.get(&run).is_some_and(|rs| {
                rs.iter().any(|r| {
                    r.sent <= next.inserted_at
                        && (!r.ok() || settled <= r.answered)
                        && (before.state != "completed" || mode_of(r) != "failed")
                })
            });
            if !covered {
                out.push(format!(
                    "step {step}: job {} made after its job {} ({}, settled {settled}), and no \
                     retry of run {run} covers it",
                    next.id, before.id, before.state
                ));
            }
        }
    }
    for skip in h.acknowledged("POST", "/workflows/{id}/skip") {
        let (Some(run), Some(name)) = (
            skip.subject,
            skip.body
                .as_ref()
                .and_then(|b| b.get("step"))
                .and_then(|n| n.as_str()),
        ) else {
            continue;
        };
        let step = s
            .workflow_steps
            .iter()
            .find(|st| st.run_id == run && st.name == name);
        if let Some(step) = step {
            if step.state != "skipped" && !retried_since(run, skip.sent) {
                out.push(format!(
                    "step {} ({name}) of run {run}: {} after its skip was answered",
                    step.id, step.state
                ));
            }
        }
    }
    for rerun in h.acknowledged("POST", "/workflows/{id}/rerun") {
        let (Some(old), Some(new), Some(from)) = (
            rerun.subject,
            rerun.answer.pointer("/run/id").and_then(|v| v.as_i64()),
            rerun
                .body
                .as_ref()
                .and_then(|b| b.get("from"))
                .and_then(|n| n.as_str()),
        ) else {
            continue;
        };
        for step in s.workflow_steps.iter().filter(|st| st.run_id == new) {
            let Some(kept) = step.kept_from else { continue };
            let was = steps.get(&kept);
            let keeps_a_completion = step.name != from
                && step.state == "completed"
                && was.is_some_and(|w| {
                    w.run_id == old && w.state == "completed" && w.job_id == step.job_id
                });
            // A retry of either run since may have run the step again.
            let retried = retried_since(old, rerun.sent) || retried_since(new, rerun.sent);
            if !keeps_a_completion && !retried {
                out.push(format!(
                    "step {} ({}) of rerun {new} from {from}: {} keeping step {kept} ({:?})",
                    step.id,
                    step.name,
                    step.state,
                    was.map(|w| (&w.state, w.job_id))
                ));
            }
        }
    }
    for cancel in h.acknowledged("POST", "/workflows/{id}/cancel") {
        let Some(run) = cancel.subject else { continue };
        if let Some(r) = s.workflow_runs.iter().find(|r| r.id == run) {
            if r.state != "cancelled" {
                out.push(format!(
                    "run {run}: {} after its cancel was answered",
                    r.state
                ));
            }
        }
        for step in s.workflow_steps.iter().filter(|st| st.run_id == run) {
            let made = step.job_inserted_at.filter(|at| *at > cancel.answered);
            let started = step
                .job_id
                .and_then(|j| jobs.get(&j))
                .and_then(|j| j.attempted_at)
                .filter(|at| *at > cancel.answered);
            if made.is_some() || started.is_some() {
                out.push(format!(
                    "step {} of run {run}: its job made at {made:?} or started at {started:?}, \
                     after the run's cancel was answered at {}",
                    step.id, cancel.answered
                ));
            }
        }
    }
    out.extend(partners_signals(h, s));
    out.extend(polled_signals(h, s));
    out
}

/// The route a partner's signed signals come in by.
const INBOUND_SIGNALS: &str = "/inbound/{endpoint}/signals";

/// A signal whose source is a partner's endpoint came from a signed call of that endpoint's,
/// of that name, sent before it was stored, that may have done it (nobody else writes one).
fn partners_signals(h: &History, s: &Snapshot) -> Vec<String> {
    s.workflow_signals
        .iter()
        .filter_map(|g| Some((g, g.source.strip_prefix("endpoint:")?)))
        .filter(|(g, endpoint)| {
            !h.events.iter().any(|e| {
                e.route == INBOUND_SIGNALS
                    && e.path == format!("/inbound/{endpoint}/signals")
                    && may_have_done(e)
                    && e.sent <= g.received_at
                    && e.body
                        .as_ref()
                        .and_then(|b| b.get("name"))
                        .and_then(|n| n.as_str())
                        == Some(g.name.as_str())
            })
        })
        .map(|(g, endpoint)| {
            format!(
                "run {}: a signal {:?} from endpoint {endpoint} at {}, which sent none that may \
                 have stored it",
                g.run_id, g.name, g.received_at
            )
        })
        .collect()
}

/// A signal a game's `poll` step stored (source `polled <host>`) is its run's `final`, stored
/// after the partner's result API first answered that game's result final.
fn polled_signals(h: &History, s: &Snapshot) -> Vec<String> {
    s.workflow_signals
        .iter()
        .filter(|g| g.source.starts_with("polled "))
        .filter_map(|g| {
            let game = s
                .workflow_runs
                .iter()
                .find(|r| r.id == g.run_id)
                .and_then(|r| r.key.as_deref()?.strip_prefix("game:Game "));
            let answered = game.and_then(|game| h.finals.get(game));
            match answered {
                Some(at) if g.name == "final" && *at <= g.received_at => None,
                Some(at) if g.name == "final" => Some(format!(
                    "run {}: its final signal polled at {}, before the partner answered final \
                     at {at}",
                    g.run_id, g.received_at
                )),
                _ => Some(format!(
                    "run {}: a signal {:?} polled at {} that no final answer of its game's \
                     result explains",
                    g.run_id, g.name, g.received_at
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::super::plan::Role;
    use super::super::super::record::{EdgeRow, Event, RunRow, SignalRow};
    use super::*;
    use chrono::{TimeZone, Utc};

    fn job(id: i64, state: &str, finalized_ms: Option<i64>) -> JobRow {
        let t = |ms| Utc.timestamp_millis_opt(ms).unwrap();
        JobRow {
            id,
            queue: "default".into(),
            kind: "noop".into(),
            state: state.into(),
            attempt: 1,
            scheduled_at: t(0),
            attempted_at: Some(t(1)),
            finalized_at: finalized_ms.map(t),
            args: serde_json::json!({}),
            meta: serde_json::json!({}),
            inserted_at: t(0),
            step_id: None,
        }
    }

    fn step(id: i64, state: &str, job_id: Option<i64>, made_ms: Option<i64>) -> StepRow {
        StepRow {
            id,
            run_id: 1,
            name: format!("s{id}"),
            state: state.into(),
            deps_left: 0,
            skip_following: false,
            job_id,
            job_inserted_at: made_ms.map(|ms| Utc.timestamp_millis_opt(ms).unwrap()),
            kept_from: None,
            at_time: None,
            at_ms: None,
            signal: None,
            deadline_at: None,
            finished_at: None,
            tasks: None,
            tasks_counts: [0; 3],
        }
    }

    /// A run of `a` (failed) → `b` (run anyway, completed) → `c` (completed, its job deleted since).
    fn run() -> Snapshot {
        // Step 2's job started once step 1's settled.
        let mut after = job(11, "completed", Some(200));
        after.attempted_at = Some(Utc.timestamp_millis_opt(150).unwrap());
        Snapshot {
            jobs: vec![job(10, "discarded", Some(100)), after],
            workflow_runs: vec![RunRow {
                id: 1,
                name: "h".into(),
                key: None,
                state: "failed".into(),
                steps: 3,
                counts: [0, 0, 2, 1, 0, 0],
                times: serde_json::json!({}),
            }],
            workflow_steps: vec![
                step(1, "failed", Some(10), Some(0)),
                step(2, "completed", Some(11), Some(100)),
                step(3, "completed", Some(12), Some(200)),
            ],
            workflow_edges: vec![
                EdgeRow {
                    dep_id: 1,
                    step_id: 2,
                    on_failure: "run".into(),
                },
                EdgeRow {
                    dep_id: 2,
                    step_id: 3,
                    on_failure: "fail".into(),
                },
            ],
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_clean_run_holds_and_each_planted_break_is_reported() {
        // Step 3's job was deleted once it completed: its step keeps the state it settled in.
        let s = run();
        assert_eq!(
            workflows_hold(&History::default(), &s),
            Vec::<String>::new()
        );

        let mut early = s.clone();
        early.jobs[1].attempted_at = Some(Utc.timestamp_millis_opt(99).unwrap());
        assert_eq!(
            workflows_hold(&History::default(), &early).len(),
            1,
            "a job made before its dependency settled"
        );

        let mut disallowed = s.clone();
        disallowed.workflow_edges[0].on_failure = "fail".into();
        assert_eq!(
            workflows_hold(&History::default(), &disallowed).len(),
            1,
            "a job despite a failed dependency"
        );

        let mut miscounted = s.clone();
        miscounted.workflow_runs[0].counts = [0, 1, 1, 1, 0, 0];
        assert!(
            !workflows_hold(&History::default(), &miscounted).is_empty(),
            "counters off"
        );

        let mut stuck = s.clone();
        stuck.workflow_steps[2] = step(3, "blocked", None, None);
        stuck.workflow_runs[0] = RunRow {
            id: 1,
            name: "h".into(),
            key: None,
            state: "running".into(),
            steps: 3,
            counts: [1, 0, 1, 1, 0, 0],
            times: serde_json::json!({}),
        };
        assert_eq!(
            workflows_hold(&History::default(), &stuck).len(),
            1,
            "blocked for ever"
        );

        let mut drifted = s.clone();
        drifted.jobs[1].state = "cancelled".into();
        assert_eq!(
            workflows_hold(&History::default(), &drifted).len(),
            1,
            "a step not following its job"
        );

        // A cancel answered at 150 ms: the run must be cancelled, and step 3's job (made at 200
        // ms) came after it.
        let mut h = History::default();
        let at = Utc.timestamp_millis_opt(150).unwrap();
        h.events.push(Event {
            step: 0,
            role: Role::Operator,
            node: 0,
            method: "POST",
            route: "/workflows/{id}/cancel",
            path: "/workflows/1/cancel".into(),
            body: None,
            status: 200,
            answer: serde_json::json!({}),
            sent: at,
            answered: at,
            subject: Some(1),
        });
        assert_eq!(
            workflows_hold(&h, &s).len(),
            2,
            "{:?}",
            workflows_hold(&h, &s)
        );
        let mut later = s.clone();
        later.workflow_runs[0].state = "cancelled".into();
        later.workflow_runs[0].counts = [0, 0, 2, 0, 0, 1];
        later.workflow_steps[0].state = "cancelled".into();
        later.jobs[0].state = "cancelled".into();
        later.workflow_steps[2].job_inserted_at = Some(at);
        later.jobs[1].finalized_at = Some(at);
        assert_eq!(workflows_hold(&h, &later), Vec::<String>::new());

        let mut unsettled = s.clone();
        unsettled.workflow_runs[0].state = "running".into();
        assert_eq!(
            workflows_hold(&History::default(), &unsettled).len(),
            1,
            "a run not settled with its steps"
        );
    }

    fn t(ms: i64) -> chrono::DateTime<Utc> {
        Utc.timestamp_millis_opt(ms).unwrap()
    }

    /// An operator's request on run 1, answered 200 at once.
    fn asked(route: &'static str, body: serde_json::Value, at_ms: i64) -> Event {
        Event {
            step: 0,
            role: Role::Operator,
            node: 0,
            method: "POST",
            route,
            path: route.replace("{id}", "1"),
            body: Some(body),
            status: 200,
            answer: serde_json::json!({}),
            sent: t(at_ms),
            answered: t(at_ms),
            subject: Some(1),
        }
    }

    #[test]
    fn a_second_job_of_a_step_needs_a_retry_that_covers_it_and_a_skip_holds() {
        // Step 1 (failed, job 10) ran again: job 13, made at 300 ms, completed.
        let mut again = run();
        again.jobs[0].step_id = Some(1);
        let mut second = job(13, "completed", Some(400));
        second.step_id = Some(1);
        second.inserted_at = t(300);
        second.attempted_at = Some(t(350));
        again.jobs.push(second);
        again.workflow_steps[0] = step(1, "completed", Some(13), Some(300));
        again.workflow_runs[0].state = "completed".into();
        again.workflow_runs[0].counts = [0, 0, 3, 0, 0, 0];
        let retry = |mode: &str, at_ms| {
            let mut h = History::default();
            h.events.push(asked(
                "/workflows/{id}/retry",
                serde_json::json!({ "mode": mode }),
                at_ms,
            ));
            h
        };
        // (Step 2 then also started before its dependency's last job settled.)
        let unexplained = workflows_hold(&History::default(), &again);
        assert!(
            unexplained
                .iter()
                .any(|m| m.contains("no retry of run 1 covers it")),
            "a second job without a retry: {unexplained:?}"
        );
        assert_eq!(
            workflows_hold(&retry("failed", 250), &again),
            Vec::<String>::new()
        );
        assert_eq!(
            workflows_hold(&retry("failed", 310), &again).len(),
            1,
            "a retry sent after the job was made does not explain it"
        );
        let mut rerun_completed = again.clone();
        rerun_completed.jobs[0].state = "completed".into();
        assert_eq!(
            workflows_hold(&retry("failed", 250), &rerun_completed).len(),
            1,
            "a retry of the failed ran a completed step again"
        );
        assert_eq!(
            workflows_hold(&retry("all", 250), &rerun_completed),
            Vec::<String>::new()
        );

        // A skip answered: the step stays skipped (unless a retry came after it).
        let mut h = History::default();
        h.events.push(asked(
            "/workflows/{id}/skip",
            serde_json::json!({ "step": "s2" }),
            500,
        ));
        assert_eq!(
            workflows_hold(&h, &run()).len(),
            1,
            "a skipped step completed"
        );
        h.events
            .push(asked("/workflows/{id}/retry", serde_json::json!({}), 600));
        assert_eq!(workflows_hold(&h, &run()), Vec::<String>::new());
    }

    #[test]
    fn a_retry_explains_a_dependency_run_again_under_a_step_whose_job_was_deleted() {
        // Step 1 failed, step 2 completed behind its `run` edge, its job deleted since (seed
        // 9219: a bulk delete of the finished jobs); then a retry of the failed made step 1
        // ready again, with a new job.
        let mut s = run();
        s.jobs.retain(|j| j.id != 11);
        s.jobs.push(job(13, "available", None));
        s.jobs[1].attempted_at = None;
        s.workflow_steps[0] = step(1, "ready", Some(13), Some(300));
        s.workflow_steps[1] = step(2, "completed", Some(11), None);
        s.workflow_runs[0].state = "running".into();
        s.workflow_runs[0].counts = [0, 1, 2, 0, 0, 0];
        let unexplained = workflows_hold(&History::default(), &s);
        assert!(
            unexplained
                .iter()
                .any(|m| m.contains("step 2: has a job, but its dependency 1 is ready")),
            "without a retry it is a break: {unexplained:?}"
        );
        let mut h = History::default();
        h.events.push(asked(
            "/workflows/{id}/retry",
            serde_json::json!({ "mode": "failed" }),
            250,
        ));
        let retried = workflows_hold(&h, &s);
        assert!(
            !retried.iter().any(|m| m.contains("step 2")),
            "the retry explains it: {retried:?}"
        );
    }

    #[test]
    fn a_polled_signal_before_the_partners_final_answer_is_reported() {
        let mut s = run();
        s.workflow_runs[0].key = Some("game:Game w1200".into());
        s.workflow_signals.push(SignalRow {
            run_id: 1,
            name: "final".into(),
            received_at: t(300),
            source: "polled 127.0.0.1".into(),
        });
        let mut h = History::default();
        assert_eq!(
            workflows_hold(&h, &s).len(),
            1,
            "the partner never answered final"
        );
        h.finals.insert("w1200".into(), t(301));
        assert_eq!(workflows_hold(&h, &s).len(), 1, "answered final after it");
        h.finals.insert("w1200".into(), t(300));
        assert_eq!(workflows_hold(&h, &s), Vec::<String>::new());
        s.workflow_signals[0].name = "go".into();
        assert_eq!(workflows_hold(&h, &s).len(), 1, "a poll stores final only");
    }

    #[test]
    fn a_partners_signal_without_its_signed_call_is_reported() {
        let mut s = run();
        s.workflow_signals.push(SignalRow {
            run_id: 1,
            name: "go".into(),
            received_at: t(300),
            source: "endpoint:3".into(),
        });
        assert_eq!(
            workflows_hold(&History::default(), &s).len(),
            1,
            "no call at all"
        );
        let mut call = asked(INBOUND_SIGNALS, serde_json::json!({ "name": "go" }), 200);
        call.path = "/inbound/3/signals".into();
        call.status = 401;
        let mut h = History {
            events: vec![call.clone()],
            ..History::default()
        };
        assert_eq!(workflows_hold(&h, &s).len(), 1, "its call was refused");
        h.events[0].status = 201;
        h.events[0].path = "/inbound/4/signals".into();
        assert_eq!(workflows_hold(&h, &s).len(), 1, "another endpoint's call");
        h.events[0].path = "/inbound/3/signals".into();
        h.events[0].body = Some(serde_json::json!({ "name": "other" }));
        assert_eq!(workflows_hold(&h, &s).len(), 1, "a call of another name");
        h.events[0] = call;
        h.events[0].status = 0;
        assert_eq!(
            workflows_hold(&h, &s),
            Vec::<String>::new(),
            "a call whose answer was lost may have stored it"
        );
    }

    #[test]
    fn a_wait_that_does_not_hold_is_reported() {
        // Step 3 waits for the signal `go` (its deadline at 500 ms) after step 2.
        let waiting = || {
            let mut s = run();
            s.workflow_runs[0].state = "running".into();
            s.workflow_runs[0].counts = [1, 0, 1, 1, 0, 0];
            s.workflow_steps[2] = step(3, "blocked", None, None);
            s.workflow_steps[2].signal = Some("go".into());
            s.workflow_steps[2].deadline_at = Some(t(500));
            s.now = t(400);
            s
        };
        assert_eq!(
            workflows_hold(&History::default(), &waiting()),
            Vec::<String>::new()
        );
        let mut late = waiting();
        late.now = t(60_000);
        assert_eq!(
            workflows_hold(&History::default(), &late).len(),
            1,
            "still waiting long past its deadline"
        );
        let mut signalled = waiting();
        signalled.workflow_signals.push(SignalRow {
            run_id: 1,
            name: "go".into(),
            received_at: t(300),
            source: "api:test".into(),
        });
        assert_eq!(
            workflows_hold(&History::default(), &signalled).len(),
            1,
            "waiting with its signal there"
        );

        // A rerun (run 2) keeping step 2, which waited for `go`: its job ran in run 1, after
        // run 1's signal (the rerun has none of its own).
        let mut kept = run();
        kept.workflow_steps[1].signal = Some("go".into());
        kept.workflow_signals.push(SignalRow {
            run_id: 1,
            name: "go".into(),
            received_at: t(100),
            source: "api:test".into(),
        });
        let mut again = step(4, "completed", Some(11), Some(100));
        again.run_id = 2;
        again.kept_from = Some(2);
        again.signal = Some("go".into());
        kept.workflow_steps.push(again);
        assert_eq!(
            workflows_hold(&History::default(), &kept),
            Vec::<String>::new(),
            "a kept step's signal is its own run's"
        );

        // Step 2 waited for `go` too, and its job started at 150 ms.
        let mut early = run();
        early.workflow_steps[1].signal = Some("go".into());
        assert_eq!(
            workflows_hold(&History::default(), &early).len(),
            1,
            "started without its signal"
        );
        early.workflow_signals.push(SignalRow {
            run_id: 1,
            name: "go".into(),
            received_at: t(140),
            source: "api:test".into(),
        });
        assert_eq!(
            workflows_hold(&History::default(), &early),
            Vec::<String>::new()
        );

        // Step 2's timer: kickoff_at + 200 ms, its job started at 150 ms.
        let mut timer = run();
        timer.workflow_runs[0].times = serde_json::json!({ "kickoff_at": t(0) });
        timer.workflow_steps[1].at_time = Some("kickoff_at".into());
        timer.workflow_steps[1].at_ms = Some(200);
        assert_eq!(
            workflows_hold(&History::default(), &timer).len(),
            1,
            "a timer fired early"
        );
        timer.workflow_steps[1].at_ms = Some(100);
        assert_eq!(
            workflows_hold(&History::default(), &timer),
            Vec::<String>::new()
        );
    }
}
