//! What an operator (or a partner) does to a workflow run (issue 49): cancel it, retry its failed
//! steps, skip a step, run it again from a step, send it a signal, move its named times. Each is
//! one SQL function holding the run's lock (`kickoff_run_cancel_steps`, `kickoff_run_retry`,
//! `kickoff_step_skip`, `kickoff_run_rerun`, `kickoff_run_signal`, `kickoff_run_move_times`),
//! so none interleaves with a step's settle; the Rust side names the refusals and cancels the
//! jobs the database hands back through the jobs' own cancel (which stops running attempts).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;

use super::client::{check_instant, inconsistent, invalid, Client, ClientError};
use super::job::JobId;
use super::sight::Sight;
use super::store::history::{self as history_store, AttemptRecord};
pub use super::store::workflows::SignalRow;
use super::store::workflows::{self as store, StepRow};
use super::validation::refuse_nul_json;
use super::workflow::{times_json, RunRow, MAX_NAME_CHARS};
use crate::db::in_transaction;

/// Which steps a retry runs again. A completed step runs again only under
/// [`RetryMode::FailedAndFollowing`] (when it follows one that did not complete) or
/// [`RetryMode::All`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryMode {
    /// The steps that failed, were cancelled or skipped; never a completed one.
    #[default]
    Failed,
    /// Those, and every step after them, completed ones included (their inputs change).
    FailedAndFollowing,
    /// Every step (none may be running).
    All,
}

impl RetryMode {
    const ALL: [RetryMode; 3] = [
        RetryMode::Failed,
        RetryMode::FailedAndFollowing,
        RetryMode::All,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RetryMode::Failed => "failed",
            RetryMode::FailedAndFollowing => "failed_and_following",
            RetryMode::All => "all",
        }
    }

    /// The mode named `name` (as [`Self::as_str`] writes it).
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

/// A map step's tasks whose attempts a run's timeline shows (the first, by task).
const TIMELINE_TASKS: i64 = 20;

/// A step's jobs whose attempts a run's timeline shows (its newest tries).
const TIMELINE_TRIES: i64 = 20;

fn not_found(id: i64) -> ClientError {
    ClientError::NotFound(format!("workflow run {id}"))
}

/// A run's steps, signals and attempts, as a caller sees them ([`Client::workflow_seen`]).
#[derive(Debug, Clone)]
pub struct RunSeen {
    pub steps: Vec<StepRow>,
    pub signals: Vec<SignalRow>,
    /// The attempts of its steps' jobs (a retried step's earlier jobs' too, its newest 20; a map
    /// step's first 20 tasks'), with the step's name, in the order they started.
    pub attempts: Vec<(String, AttemptRecord)>,
}

impl Client {
    /// Cancels run `id`: nothing of it starts once this commits. Its blocked steps are
    /// cancelled, and its ready steps' jobs (running attempts stopped on their nodes), each step
    /// with its job; the run ends `cancelled`. 409 when it is not running.
    pub async fn cancel_workflow(&self, id: i64) -> Result<RunRow, ClientError> {
        let mut tx = self.pool.begin().await?;
        let run = self.cancel_workflow_with(&mut tx, id).await?;
        tx.commit().await?;
        Ok(run)
    }

    /// [`Self::cancel_workflow`] inside the caller's transaction (`&mut *tx`).
    pub async fn cancel_workflow_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
    ) -> Result<RunRow, ClientError> {
        store::lock_ready_jobs(&mut *conn, id, None).await?;
        let Some(ready) = store::run_cancel_steps(&mut *conn, id).await? else {
            return Err(match store::run_get(&mut *conn, id).await? {
                Some(run) => ClientError::Conflict(format!(
                    "cannot cancel workflow run {id}: it is {}",
                    run.state
                )),
                None => ClientError::NotFound(format!("workflow run {id}")),
            });
        };
        let jobs: Vec<JobId> = ready.into_iter().map(JobId).collect();
        self.cancel_with(&mut *conn, &jobs).await?;
        store::run_mark_cancelled(&mut *conn, id).await?;
        store::run_get(&mut *conn, id)
            .await?
            .ok_or_else(|| ClientError::NotFound(format!("workflow run {id}")))
    }

    /// Retries run `id`'s steps by `mode`: the steps it names wait again for their dependencies,
    /// and those whose dependencies completed get their job at once; the run is running again.
    /// 409 when the run was cancelled (run it again instead), has nothing failed, has running
    /// steps (for [`RetryMode::All`]), or its key is held by a live run.
    pub async fn retry_workflow(&self, id: i64, mode: RetryMode) -> Result<RunRow, ClientError> {
        in_transaction!(self, |tx| self.retry_workflow_with(tx, id, mode))
    }

    /// [`Self::retry_workflow`] inside the caller's transaction (`&mut *tx`).
    pub async fn retry_workflow_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        mode: RetryMode,
    ) -> Result<RunRow, ClientError> {
        let refused =
            |why: &str| ClientError::Conflict(format!("cannot retry workflow run {id}: {why}"));
        match store::run_retry(&mut *conn, id, mode.as_str())
            .await?
            .as_str()
        {
            "ok" => {}
            "not_found" => return Err(not_found(id)),
            "cancelled" => return Err(refused("it was cancelled (run it again from a step)")),
            "nothing_failed" => {
                return Err(refused(
                    "none of its steps failed, was cancelled or skipped",
                ))
            }
            "steps_running" => {
                return Err(refused(
                    "some of its steps are running (retrying all waits for them)",
                ))
            }
            "key_taken" => return Err(refused("a live run holds its key")),
            other => return Err(refused(other)),
        }
        store::run_get(&mut *conn, id)
            .await?
            .ok_or_else(|| not_found(id))
    }

    /// Skips step `step` of running run `id`: it settles `skipped` and the steps after it go on
    /// as after a completed one; its job, if it had one, is cancelled (a running attempt is
    /// stopped). 409 when the run is not running or the step has settled; 422 for a step the
    /// run does not have.
    pub async fn skip_workflow_step(&self, id: i64, step: &str) -> Result<RunRow, ClientError> {
        in_transaction!(self, |tx| self.skip_workflow_step_with(tx, id, step))
    }

    /// [`Self::skip_workflow_step`] inside the caller's transaction (`&mut *tx`).
    pub async fn skip_workflow_step_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        step: &str,
    ) -> Result<RunRow, ClientError> {
        store::lock_ready_jobs(&mut *conn, id, Some(step)).await?;
        let (outcome, job) = store::step_skip(&mut *conn, id, step).await?;
        match outcome.as_str() {
            "skipped" => {}
            "not_found" => return Err(not_found(id)),
            "unknown_step" => {
                return Err(inconsistent(
                    "step",
                    format!("workflow run {id} has no step {step:?}"),
                ))
            }
            other => {
                let (what, state) = other.split_once('_').unwrap_or(("run", other));
                let whose = if what == "run" {
                    format!("the run is {state}")
                } else {
                    format!("the step is {state}")
                };
                return Err(ClientError::Conflict(format!(
                    "cannot skip step {step:?} of workflow run {id}: {whose}"
                )));
            }
        }
        if let Some(job) = job {
            // The step settled first: its job's cancel leaves it skipped.
            self.cancel_with(&mut *conn, &[JobId(job)]).await?;
        }
        // A map step's tasks that have not settled: their cancel leaves it skipped too.
        let tasks = store::step_task_jobs(&mut *conn, id, step).await?;
        if !tasks.is_empty() {
            let tasks: Vec<JobId> = tasks.into_iter().map(JobId).collect();
            self.cancel_with(&mut *conn, &tasks).await?;
        }
        store::run_get(&mut *conn, id)
            .await?
            .ok_or_else(|| not_found(id))
    }

    /// Runs settled run `id` again from step `from`, as a new run (returned) of the same shape
    /// and key: `from`, every step that did not complete and every step after either run again;
    /// the others keep their completion and output. 409 while the run is running or when a live
    /// run holds its key; 422 for a step the run does not have.
    pub async fn rerun_workflow(
        &self,
        id: i64,
        from: &str,
        by: Option<&str>,
    ) -> Result<RunRow, ClientError> {
        in_transaction!(self, |tx| self.rerun_workflow_with(tx, id, from, by))
    }

    /// [`Self::rerun_workflow`] inside the caller's transaction (`&mut *tx`); `by` is who asks
    /// (the new run's and its new jobs' creator).
    pub async fn rerun_workflow_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        from: &str,
        by: Option<&str>,
    ) -> Result<RunRow, ClientError> {
        let refused =
            |why: &str| ClientError::Conflict(format!("cannot run workflow run {id} again: {why}"));
        let (outcome, new_run) = store::run_rerun(&mut *conn, id, from, by).await?;
        match (outcome.as_str(), new_run) {
            ("created", Some(run)) => store::run_get(&mut *conn, run)
                .await?
                .ok_or_else(|| not_found(run)),
            ("not_found", _) => Err(not_found(id)),
            ("unknown_step", _) => Err(inconsistent(
                "from",
                format!("workflow run {id} has no step {from:?}"),
            )),
            ("running", _) => Err(refused(
                "it is running (cancel it, or retry its failed steps)",
            )),
            ("key_taken", _) => Err(refused("a live run holds its key")),
            (other, _) => Err(refused(other)),
        }
    }

    /// Sends run `id` its signal `name`: stored (`true`) and the steps waiting for it started,
    /// or, when one of that name came first, that one stands (`false`: nothing changed). A
    /// signal no step waits for yet is kept for the step that will. `source` says who sent it.
    /// 409 when the run is not running.
    pub async fn signal_workflow(
        &self,
        id: i64,
        name: &str,
        payload: &Value,
        source: &str,
    ) -> Result<(SignalRow, bool), ClientError> {
        in_transaction!(self, |tx| self
            .signal_workflow_with(tx, id, name, payload, source))
    }

    /// [`Self::signal_workflow`] inside the caller's transaction (`&mut *tx`).
    pub async fn signal_workflow_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        name: &str,
        payload: &Value,
        source: &str,
    ) -> Result<(SignalRow, bool), ClientError> {
        // What SQL cannot hold; the rest is `kickoff_signal`'s (migration
        // `20261231000001_sql_actions.sql`), which an application calls from its own
        // transaction: the one place a signal's rules are written.
        if name.contains('\0') {
            return Err(invalid(
                "name",
                format!("1 to {MAX_NAME_CHARS} characters, without NUL"),
            ));
        }
        refuse_nul_json("payload", payload)?;
        Ok(store::run_signal(&mut *conn, id, name, payload, source).await?)
    }

    /// Sends its signal `name` to the live run holding `key` when that run is one of the
    /// workflows `names` (what a partner may signal), as [`Self::signal_workflow_with`]; the run
    /// with the answer. 404 alike for no live run of the key and for one of another workflow.
    pub async fn signal_workflow_key_with(
        &self,
        conn: &mut PgConnection,
        key: &str,
        names: &[String],
        name: &str,
        payload: &Value,
        source: &str,
    ) -> Result<(RunRow, SignalRow, bool), ClientError> {
        let run = store::run_live_by_key_of(&mut *conn, key, names)
            .await?
            .ok_or_else(|| {
                ClientError::NotFound(format!(
                    "a live run of {} with the key {key:?}",
                    names.join(" or ")
                ))
            })?;
        let (signal, stored) = self
            .signal_workflow_with(&mut *conn, run.id, name, payload, source)
            .await?;
        Ok((run, signal, stored))
    }

    /// Moves run `id`'s named times to `times` (each one the run has): the timers anchored to
    /// them move with them (a step's job that has not started is due anew), and the deadlines
    /// of the steps waiting. 409 when the run is not running; 422 for a time it does not have.
    pub async fn move_workflow_times(
        &self,
        id: i64,
        times: &BTreeMap<String, DateTime<Utc>>,
    ) -> Result<RunRow, ClientError> {
        in_transaction!(self, |tx| self.move_workflow_times_with(tx, id, times))
    }

    /// [`Self::move_workflow_times`] inside the caller's transaction (`&mut *tx`).
    pub async fn move_workflow_times_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        times: &BTreeMap<String, DateTime<Utc>>,
    ) -> Result<RunRow, ClientError> {
        if times.is_empty() {
            return Err(invalid("times", "name at least one time to move"));
        }
        for at in times.values() {
            check_instant("times", *at)?;
        }
        let moved = times_json(times);
        // The jobs it may move first, then the run: the order of a completion and of a cancel.
        store::lock_ready_jobs(&mut *conn, id, None).await?;
        match store::run_move_times(&mut *conn, id, &moved)
            .await?
            .as_str()
        {
            "moved" => {}
            "not_found" => return Err(not_found(id)),
            other => {
                if let Some(name) = other.strip_prefix("unknown_time:") {
                    return Err(inconsistent(
                        "times",
                        format!("workflow run {id} has no time {name:?}"),
                    ));
                }
                return Err(ClientError::Conflict(format!(
                    "cannot move the times of workflow run {id}: it is {}",
                    other.trim_start_matches("run_")
                )));
            }
        }
        store::run_get(&mut *conn, id)
            .await?
            .ok_or_else(|| not_found(id))
    }

    /// Run `run`'s steps, signals and its steps' attempts as `sight` sees them: each step's
    /// output, each signal's payload and each attempt's error, output and log lines through the
    /// rule of who sees a job's data (`engine::sight`), the one place every surface (the API,
    /// the dashboard) reads them from.
    pub async fn workflow_seen(
        &self,
        run: &RunRow,
        sight: &Sight<'_>,
    ) -> Result<RunSeen, ClientError> {
        let mut steps = store::run_steps(&self.pool, run.id).await?;
        let mut signals = store::run_signals(&self.pool, run.id).await?;
        let mut jobs = Vec::new();
        let mut attempts = Vec::new();
        for step in &steps {
            // A step's job, or a map step's first tasks' (`notify[3]`): all of one step's tasks
            // share its args, so the first tells what its secrets are.
            let ids: Vec<(String, JobId)> = match (step.job_id, step.tasks) {
                (None, Some(_)) => store::step_task_jobs_first(&self.pool, step.id, TIMELINE_TASKS)
                    .await?
                    .into_iter()
                    .map(|(task, job)| (format!("{}[{task}]", step.name), JobId(job)))
                    .collect(),
                // Its jobs, the earlier tries' too (a step retried keeps them while it waits to
                // start again); the current one may be another run's (a rerun keeps the
                // completions before its step).
                (current, _) => {
                    let mut ids = store::step_jobs(&self.pool, step.id, TIMELINE_TRIES).await?;
                    if let Some(id) = current.filter(|id| !ids.contains(&id.0)) {
                        ids.push(id.0);
                    }
                    ids.into_iter()
                        .map(|job| (step.name.clone(), JobId(job)))
                        .collect()
                }
            };
            for (label, id) in ids {
                let Some(job) = self.find(id).await? else {
                    continue;
                };
                let records = history_store::job_attempts_of(&self.pool, id).await?;
                attempts.extend(
                    sight
                        .attempts(&job, records)
                        .into_iter()
                        .map(|record| (label.clone(), record)),
                );
                jobs.push(job);
            }
        }
        attempts.sort_by_key(|(_, r)| (r.started_at, r.job_id.0, r.attempt));
        for step in &mut steps {
            let job = match step.job_id {
                Some(id) => jobs.iter().find(|j| j.id == id),
                None => jobs.iter().find(|j| j.step_id == Some(step.id)),
            };
            if let Some(output) = &step.output {
                step.output = Some(sight.step_output(job, run.created_by.as_deref(), output));
            }
        }
        for signal in &mut signals {
            signal.payload = sight.signal_payload(&signal.source, &jobs, &signal.payload);
        }
        Ok(RunSeen {
            steps,
            signals,
            attempts,
        })
    }

    /// The signals run `id` received, in the order they came.
    pub async fn workflow_signals(&self, id: i64) -> Result<Vec<SignalRow>, ClientError> {
        Ok(store::run_signals(&self.pool, id).await?)
    }

    /// The dependencies of run `id`'s steps: (the step, the step it waits for, `on_failure`).
    pub async fn workflow_edges(
        &self,
        id: i64,
    ) -> Result<Vec<(String, String, String)>, ClientError> {
        Ok(store::run_edges(&self.pool, id).await?)
    }
}
