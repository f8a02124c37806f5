//! docs/workflows.md on the runs a history made ([`super::Promise::WorkflowsHold`]): a step's
//! job is made only once each of its dependencies settled in a way that lets it run, and never
//! starts before the job of one settled; a step's state follows its job's; a dependency that failed
//! leaves no step blocked for ever; a run's counters equal its steps' states, and it settles
//! with the last of them.

use std::collections::HashMap;

use super::super::record::{History, JobRow, Snapshot, StepRow, STEP_STATES};

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
fn allows(dep: &StepRow, on_failure: &str) -> bool {
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
        if step.job_id.is_some() {
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
            match step.job_id.and_then(|j| jobs.get(&j)) {
                Some(job) => {
                    let want = step_state_of(&job.state).unwrap_or("ready");
                    if step.state != want {
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
        } else if step.state == "ready" || step.state == "completed" {
            out.push(format!("step {}: {} without a job", step.id, step.state));
        }
        let deps_settled = deps
            .iter()
            .all(|(d, _)| !matches!(d.state.as_str(), "blocked" | "ready"));
        if step.state == "blocked" && deps_settled {
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
    out
}

#[cfg(test)]
mod tests {
    use super::super::super::plan::Role;
    use super::super::super::record::{EdgeRow, Event, RunRow};
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
        }
    }

    fn step(id: i64, state: &str, job_id: Option<i64>, made_ms: Option<i64>) -> StepRow {
        StepRow {
            id,
            run_id: 1,
            state: state.into(),
            deps_left: 0,
            skip_following: false,
            job_id,
            job_inserted_at: made_ms.map(|ms| Utc.timestamp_millis_opt(ms).unwrap()),
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
                state: "failed".into(),
                steps: 3,
                counts: [0, 0, 2, 1, 0, 0],
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
            state: "running".into(),
            steps: 3,
            counts: [1, 0, 1, 1, 0, 0],
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

        let mut unsettled = s;
        unsettled.workflow_runs[0].state = "running".into();
        assert_eq!(
            workflows_hold(&History::default(), &unsettled).len(),
            1,
            "a run not settled with its steps"
        );
    }
}
