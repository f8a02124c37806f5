//! Map steps (docs/workflows.md) on the runs a history made, part of
//! [`super::Promise::WorkflowsHold`]: a map step's counters equal its tasks' states, each task's
//! state follows its current job's, and the step settles once after every task settled
//! (completed only when each completed); its tasks' jobs are made together when it starts, and
//! again only by a retry of its run that covers them (then one for each task that did not
//! complete, unless the step runs again whole); none starts before the step's dependencies
//! settled, none after its run's cancel was answered, none at all behind a dependency skipped
//! with what follows it.

use std::collections::{BTreeMap, HashMap};

use super::super::record::{Event, History, JobRow, Snapshot, StepRow, TaskRow};
use super::workflows::{allows, mode_of, retries_by_run};

/// The state a task settles in when its job is in `job_state`.
fn task_state_of(job_state: &str) -> &'static str {
    match job_state {
        "completed" => "completed",
        "discarded" => "failed",
        "cancelled" => "cancelled",
        _ => "pending",
    }
}

pub(super) fn map_steps_hold(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let steps: HashMap<i64, &StepRow> = s.workflow_steps.iter().map(|st| (st.id, st)).collect();
    let jobs: HashMap<i64, &JobRow> = s.jobs.iter().map(|j| (j.id, j)).collect();
    let retries = retries_by_run(h);
    let cancels: Vec<&Event> = h.acknowledged("POST", "/workflows/{id}/cancel").collect();
    for step in s.workflow_steps.iter() {
        let Some(total) = step.tasks else { continue };
        let tasks: Vec<&TaskRow> = s
            .workflow_tasks
            .iter()
            .filter(|t| t.step_id == step.id)
            .collect();
        let mut made: Vec<&JobRow> = s
            .jobs
            .iter()
            .filter(|j| j.step_id == Some(step.id))
            .collect();
        made.sort_by_key(|j| (j.inserted_at, j.id));
        let id = step.id;

        // Its counters and its tasks' rows; each task's state and its current job's.
        let count = |state: &str| tasks.iter().filter(|t| t.state == state).count() as i32;
        let counted = [count("completed"), count("failed"), count("cancelled")];
        // A step a rerun kept has its counters and not its tasks (they are the rerun run's).
        if counted != step.tasks_counts && step.kept_from.is_none() {
            out.push(format!(
                "map step {id}: counters {:?}, its tasks {counted:?}",
                step.tasks_counts
            ));
        }
        if !tasks.is_empty() && tasks.len() as i32 != total {
            out.push(format!("map step {id}: {} tasks of {total}", tasks.len()));
        }
        for t in &tasks {
            if let Some(job) = jobs.get(&t.job_id) {
                if task_state_of(&job.state) != t.state {
                    out.push(format!(
                        "map step {id}: task {} is {} while its job {} is {}",
                        t.task, t.state, job.id, job.state
                    ));
                }
            }
        }
        let pending = count("pending");
        let settled_ok = match step.state.as_str() {
            "ready" => pending > 0,
            "blocked" => pending == 0,
            // Kept by a rerun: its tasks are the run's it reruns.
            "completed" if step.kept_from.is_some() => true,
            "completed" => !tasks.is_empty() && counted[0] == total,
            // Skipped by hand while its tasks ran: their cancel follows in its transaction.
            _ => pending == 0,
        };
        if !settled_ok {
            out.push(format!(
                "map step {id}: {} with its tasks (done, failed, cancelled) {counted:?}, {pending} \
                 pending",
                step.state
            ));
        }
        if step.state == "completed" && step.kept_from.is_none() {
            let last = tasks
                .iter()
                .filter_map(|t| jobs.get(&t.job_id).and_then(|j| j.finalized_at))
                .max();
            if let (Some(last), Some(finished)) = (last, step.finished_at) {
                if finished < last {
                    out.push(format!(
                        "map step {id}: completed at {finished}, before its last task at {last}"
                    ));
                }
            }
        }

        // Its jobs by the transaction that made them: the first when it started, each next one
        // by a retry of its run that covers it (sent before, answered after the one before
        // settled), one job for each task that did not complete since it last started whole.
        let mut batches: BTreeMap<_, Vec<&JobRow>> = BTreeMap::new();
        for job in &made {
            batches.entry(job.inserted_at).or_default().push(job);
        }
        let batches: Vec<Vec<&JobRow>> = batches.into_values().collect();
        let all_there = tasks.iter().all(|t| jobs.contains_key(&t.job_id));
        let mut done_since_whole = 0;
        for (n, batch) in batches.iter().enumerate() {
            let whole = batch.len() as i32 == total;
            if n > 0 {
                let before = &batches[n - 1];
                let made_at = batch[0].inserted_at;
                let Some(settled) = before
                    .iter()
                    .map(|j| j.finalized_at)
                    .collect::<Option<Vec<_>>>()
                    .and_then(|f| f.into_iter().max())
                else {
                    out.push(format!(
                        "map step {id}: jobs made at {made_at} while its tasks' jobs before ran"
                    ));
                    continue;
                };
                let covering: Vec<&&Event> = retries
                    .get(&step.run_id)
                    .map(|rs| {
                        rs.iter()
                            .filter(|r| r.sent <= made_at && (!r.ok() || settled <= r.answered))
                            .collect()
                    })
                    .unwrap_or_default();
                if covering.is_empty() {
                    out.push(format!(
                        "map step {id}: {} jobs made at {made_at}, and no retry of run {} covers \
                         them",
                        batch.len(),
                        step.run_id
                    ));
                }
                let afresh = covering.iter().any(|r| mode_of(r) != "failed");
                let resumed = batch.len() as i32 == total - done_since_whole;
                if all_there && !resumed && !(whole && afresh) {
                    out.push(format!(
                        "map step {id}: {} jobs made at {made_at}, {done_since_whole} of its \
                         {total} tasks done before",
                        batch.len()
                    ));
                }
            }
            if whole {
                done_since_whole = 0;
            }
            done_since_whole += batch.iter().filter(|j| j.state == "completed").count() as i32;
        }

        // Never before its dependencies allowed it, never behind one skipped with what follows.
        let deps: Vec<(&StepRow, &str)> = s
            .workflow_edges
            .iter()
            .filter(|e| e.step_id == id)
            .filter_map(|e| steps.get(&e.dep_id).map(|d| (*d, e.on_failure.as_str())))
            .collect();
        if deps.iter().any(|(d, _)| d.skip_following) && !made.is_empty() {
            out.push(format!(
                "map step {id}: {} jobs after a dependency skipped with what follows it",
                made.len()
            ));
        }
        let current: Vec<&JobRow> = tasks
            .iter()
            .filter_map(|t| jobs.get(&t.job_id).copied())
            .collect();
        let retried_since = |at| {
            retries
                .get(&step.run_id)
                .is_some_and(|rs| rs.iter().any(|r| r.sent >= at))
        };
        for job in current.iter().filter(|j| !retried_since(j.inserted_at)) {
            for (dep, on_failure) in &deps {
                if !allows(dep, on_failure) {
                    out.push(format!(
                        "map step {id}: task job {} made, but its dependency {} is {} \
                         (on_failure {on_failure})",
                        job.id, dep.id, dep.state
                    ));
                }
                let dep_done = dep
                    .job_id
                    .and_then(|j| jobs.get(&j))
                    .and_then(|j| j.finalized_at)
                    .or(dep.finished_at.filter(|_| dep.tasks.is_some()));
                if let (Some(started), Some(done)) = (job.attempted_at, dep_done) {
                    if started < done {
                        out.push(format!(
                            "map step {id}: task job {} started at {started}, before its \
                             dependency {}'s settled at {done}",
                            job.id, dep.id
                        ));
                    }
                }
            }
        }
        for cancel in cancels.iter().filter(|c| c.subject == Some(step.run_id)) {
            for job in &made {
                let late = job.inserted_at > cancel.answered
                    || job.attempted_at.is_some_and(|at| at > cancel.answered);
                if late {
                    out.push(format!(
                        "map step {id}: task job {} made at {} or started at {:?}, after its \
                         run's cancel was answered at {}",
                        job.id, job.inserted_at, job.attempted_at, cancel.answered
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::super::record::{EdgeRow, RunRow};
    use super::*;
    use chrono::{TimeZone, Utc};

    fn t(ms: i64) -> chrono::DateTime<Utc> {
        Utc.timestamp_millis_opt(ms).unwrap()
    }

    fn job(id: i64, state: &str, made_ms: i64, finalized_ms: Option<i64>) -> JobRow {
        JobRow {
            id,
            queue: "default".into(),
            kind: "noop".into(),
            state: state.into(),
            attempt: 1,
            scheduled_at: t(made_ms),
            attempted_at: Some(t(made_ms + 1)),
            finalized_at: finalized_ms.map(t),
            args: serde_json::json!({}),
            meta: serde_json::json!({}),
            inserted_at: t(made_ms),
            step_id: Some(2),
        }
    }

    fn step(id: i64, state: &str, tasks: Option<i32>, finished_ms: Option<i64>) -> StepRow {
        StepRow {
            id,
            run_id: 1,
            name: format!("s{id}"),
            state: state.into(),
            deps_left: 0,
            skip_following: false,
            job_id: None,
            job_inserted_at: None,
            kept_from: None,
            at_time: None,
            at_ms: None,
            signal: None,
            deadline_at: None,
            finished_at: finished_ms.map(t),
            tasks,
            tasks_counts: [0; 3],
        }
    }

    fn task(task: i32, job_id: i64, state: &str) -> TaskRow {
        TaskRow {
            step_id: 2,
            task,
            job_id,
            state: state.into(),
        }
    }

    /// Step 1 (one job, completed at 100) → map step 2 of three tasks, all completed by 300.
    fn run() -> Snapshot {
        let mut first = step(1, "completed", None, Some(100));
        first.job_id = Some(10);
        let mut map = step(2, "completed", Some(3), Some(300));
        map.tasks_counts = [3, 0, 0];
        let mut dep_job = job(10, "completed", 0, Some(100));
        dep_job.step_id = Some(1);
        Snapshot {
            jobs: vec![
                dep_job,
                job(20, "completed", 100, Some(200)),
                job(21, "completed", 100, Some(250)),
                job(22, "completed", 100, Some(290)),
            ],
            workflow_runs: vec![RunRow {
                id: 1,
                name: "h".into(),
                key: None,
                state: "completed".into(),
                steps: 2,
                counts: [0, 0, 2, 0, 0, 0],
                times: serde_json::json!({}),
            }],
            workflow_steps: vec![first, map],
            workflow_edges: vec![EdgeRow {
                dep_id: 1,
                step_id: 2,
                on_failure: "fail".into(),
            }],
            workflow_tasks: vec![
                task(0, 20, "completed"),
                task(1, 21, "completed"),
                task(2, 22, "completed"),
            ],
            ..Snapshot::default()
        }
    }

    fn retry(mode: &str, sent_ms: i64, answered_ms: i64) -> Event {
        Event {
            step: 0,
            role: super::super::super::plan::Role::Operator,
            node: 0,
            method: "POST",
            route: "/workflows/{id}/retry",
            path: "/workflows/1/retry".into(),
            body: Some(serde_json::json!({ "mode": mode })),
            status: 200,
            answer: serde_json::json!({}),
            sent: t(sent_ms),
            answered: t(answered_ms),
            subject: Some(1),
        }
    }

    #[test]
    fn a_clean_map_step_holds_and_each_planted_break_is_reported() {
        let h = History::default();
        assert_eq!(map_steps_hold(&h, &run()), Vec::<String>::new());

        // Counters that do not count the tasks' rows.
        let mut s = run();
        s.workflow_steps[1].tasks_counts = [2, 0, 0];
        assert!(
            map_steps_hold(&h, &s)[0].contains("counters"),
            "{:?}",
            map_steps_hold(&h, &s)
        );

        // Completed with a task still to do, or before its last task.
        let mut s = run();
        s.workflow_tasks[2].state = "pending".into();
        s.jobs[3].state = "executing".into();
        s.jobs[3].finalized_at = None;
        s.workflow_steps[1].tasks_counts = [2, 0, 0];
        let found = map_steps_hold(&h, &s);
        assert!(found.iter().any(|v| v.contains("1 pending")), "{found:?}");
        let mut s = run();
        s.workflow_steps[1].finished_at = Some(t(280));
        let found = map_steps_hold(&h, &s);
        assert!(
            found.iter().any(|v| v.contains("before its last task")),
            "{found:?}"
        );

        // A task's state that is not its job's.
        let mut s = run();
        s.jobs[2].state = "discarded".into();
        let found = map_steps_hold(&h, &s);
        assert!(
            found
                .iter()
                .any(|v| v.contains("task 1 is completed while")),
            "{found:?}"
        );

        // A task's job started before the step's dependency settled.
        let mut s = run();
        s.jobs[1].attempted_at = Some(t(90));
        let found = map_steps_hold(&h, &s);
        assert!(
            found.iter().any(|v| v.contains("before its dependency 1")),
            "{found:?}"
        );

        // A second batch of jobs: none without a retry covering it; with a retry of the failed,
        // one for each task that had not completed (here task 2, failed).
        let mut s = run();
        s.jobs[3].state = "discarded".into();
        s.jobs.push(job(23, "completed", 400, Some(450)));
        s.workflow_tasks[2].job_id = 23;
        s.workflow_steps[1].finished_at = Some(t(460));
        let found = map_steps_hold(&h, &s);
        assert!(
            found.iter().any(|v| v.contains("no retry of run 1 covers")),
            "{found:?}"
        );
        let mut h = History::default();
        h.events.push(retry("failed", 350, 360));
        assert_eq!(map_steps_hold(&h, &s), Vec::<String>::new());
        // A second batch that runs a completed task again under a retry of the failed.
        s.jobs.push(job(24, "completed", 400, Some(450)));
        let found = map_steps_hold(&h, &s);
        assert!(
            found.iter().any(|v| v.contains("2 jobs made at")),
            "{found:?}"
        );
        // A whole batch again is a retry that runs it afresh.
        s.jobs.push(job(25, "completed", 400, Some(450)));
        let found = map_steps_hold(&h, &s);
        assert!(
            found.iter().any(|v| v.contains("3 jobs made at")),
            "{found:?}"
        );
        let mut h = History::default();
        h.events.push(retry("all", 350, 360));
        assert_eq!(map_steps_hold(&h, &s), Vec::<String>::new());

        // Jobs behind a dependency skipped with what follows it.
        let mut s = run();
        s.workflow_steps[0].state = "skipped".into();
        s.workflow_steps[0].skip_following = true;
        let found = map_steps_hold(&History::default(), &s);
        assert!(
            found
                .iter()
                .any(|v| v.contains("skipped with what follows")),
            "{found:?}"
        );
    }
}
