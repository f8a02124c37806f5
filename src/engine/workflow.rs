//! Workflows (issue 49): a run of named steps, each an ordinary job once its dependencies allow
//! it, unblocked in the transaction that settles the job of its last dependency.
//!
//! ```no_run
//! # use kickoff::engine::{Client, NewJob};
//! # use kickoff::engine::workflow::{OnDepFailure, Workflow};
//! # use serde_json::json;
//! # async fn f(client: Client) -> Result<(), kickoff::engine::ClientError> {
//! let game = Workflow::new("game")
//!     .key("game:8812")
//!     .step("lock", NewJob::new("lock_question", json!({ "question_id": 7 })))
//!     .step("settle", NewJob::new("settle", json!({ "game": 8812 })))
//!     .after("lock")
//!     .step("leaderboard", NewJob::new("publish", json!({ "game": 8812 })))
//!     .after_or("settle", OnDepFailure::Run);
//! let run = client.insert_workflow(&game).await?;
//! # Ok(()) }
//! ```
//!
//! A step names only steps declared before it, so a run's graph cannot have a cycle. What a
//! step's dependency that failed (or was cancelled) does to it is its edge's [`OnDepFailure`]; a
//! completed or skipped dependency lets it go on. The rules live in the database
//! (`kickoff_step_settle`), where every path that settles a job reaches them: docs/workflows.md.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Duration, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

use super::client::{check_instant, in_current_trace, inconsistent, invalid, Client, ClientError};
use super::job::{JobState, NewJob, Schedule};
use super::store::workflows::{self as store, StepInsert};
pub use super::store::workflows::{RunRow, StepRow};

/// At most this many steps in a run (a large fan-out is a map step's tasks, not steps).
pub const MAX_STEPS: usize = 200;
/// At most this many dependencies of one step.
pub const MAX_DEPS: usize = 50;
/// A run's and a step's name: 1 to this many characters.
pub const MAX_NAME_CHARS: usize = 128;
/// A run's key: 1 to this many characters.
pub const MAX_KEY_CHARS: usize = 255;
/// A map step's tasks: 1 to this many (a million players are a thousand tasks of a thousand).
pub const MAX_TASKS: u32 = 10_000;
/// At most this many named times in a run.
pub const MAX_TIMES: usize = 16;
/// A named time's name: 1 to this many characters.
pub const MAX_TIME_NAME_CHARS: usize = 64;

/// What a dependency that failed or was cancelled does to the step waiting for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDepFailure {
    /// The step fails without running (the default).
    #[default]
    Fail,
    /// The step is skipped; the steps after it go on as after a completed one.
    Skip,
    /// The step and every step after it are skipped.
    SkipFollowing,
    /// The step runs anyway.
    Run,
}

impl OnDepFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnDepFailure::Fail => "fail",
            OnDepFailure::Skip => "skip",
            OnDepFailure::SkipFollowing => "skip_following",
            OnDepFailure::Run => "run",
        }
    }
}

/// A time of a run's (`kickoff_at`) and an offset from it: where a step's timer or deadline is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    pub time: String,
    pub offset: Duration,
}

/// A step: its name, the job it becomes, the steps it waits for, and what more it waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub name: String,
    pub job: NewJob,
    pub after: Vec<(String, OnDepFailure)>,
    /// Its job is due then, not before (a timer): once its dependencies allow, it waits for it.
    pub at: Option<Anchor>,
    /// The run's signal it waits for, after its dependencies, until its deadline.
    pub signal: Option<String>,
    /// When it fails if its signal has not come.
    pub deadline: Option<Anchor>,
    /// A map step: this many tasks, each a job of the step's kind and args (its handler reads
    /// its index, [`JobContext::task`](super::worker::JobContext::task)), retried alone and
    /// resumed from the cursor it checkpointed; the step settles once every task settled.
    pub tasks: Option<u32>,
}

/// A workflow to insert as a run ([`Client::insert_workflow`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    pub name: String,
    /// Unique among the live runs: inserting a run whose key a live run holds returns that run.
    pub key: Option<String>,
    pub created_by: Option<String>,
    /// The run's named times (`kickoff_at`): its steps' timers and deadlines are anchored to
    /// them, and move with them ([`Client::move_workflow_times`]).
    pub times: BTreeMap<String, DateTime<Utc>>,
    pub steps: Vec<Step>,
}

impl Workflow {
    pub fn new(name: impl Into<String>) -> Self {
        Workflow {
            name: name.into(),
            key: None,
            created_by: None,
            times: BTreeMap::new(),
            steps: Vec::new(),
        }
    }

    /// Names a time of the run (`kickoff_at`).
    pub fn time(mut self, name: impl Into<String>, at: DateTime<Utc>) -> Self {
        self.times.insert(name.into(), at);
        self
    }

    /// The last step added is due at the run's time `time` plus `offset` (not before: a step
    /// whose dependencies settle later starts then).
    pub fn at(mut self, time: impl Into<String>, offset: Duration) -> Self {
        if let Some(last) = self.steps.last_mut() {
            last.at = Some(Anchor {
                time: time.into(),
                offset,
            });
        }
        self
    }

    /// The last step added waits, once its dependencies allow, for the run's signal `name`
    /// (one that came before is used), until its time `time` plus `offset`: then it fails.
    pub fn signal(
        mut self,
        name: impl Into<String>,
        time: impl Into<String>,
        offset: Duration,
    ) -> Self {
        if let Some(last) = self.steps.last_mut() {
            last.signal = Some(name.into());
            last.deadline = Some(Anchor {
                time: time.into(),
                offset,
            });
        }
        self
    }

    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a step that becomes `job` (due as soon as its dependencies allow: its own schedule
    /// must be [`Schedule::Now`]).
    pub fn step(mut self, name: impl Into<String>, job: NewJob) -> Self {
        self.steps.push(Step {
            name: name.into(),
            job,
            after: Vec::new(),
            at: None,
            signal: None,
            deadline: None,
            tasks: None,
        });
        self
    }

    /// The last step added is a map step of `tasks` tasks (1 to [`MAX_TASKS`]): each an
    /// ordinary job of the step's kind and args, retried alone, resuming from the cursor its
    /// handler checkpointed ([`JobContext::checkpoint_with`](super::worker::JobContext)); the
    /// step completes once every task completed (its output: the tasks and items done), and
    /// fails once every task settled if one failed.
    pub fn map(mut self, tasks: u32) -> Self {
        if let Some(last) = self.steps.last_mut() {
            last.tasks = Some(tasks);
        }
        self
    }

    /// The last step added waits for step `dep` (declared before it), and fails without running
    /// if `dep` fails.
    pub fn after(self, dep: impl Into<String>) -> Self {
        self.after_or(dep, OnDepFailure::Fail)
    }

    /// The last step added waits for step `dep`; `on_failure` says what `dep` failing does to it.
    pub fn after_or(mut self, dep: impl Into<String>, on_failure: OnDepFailure) -> Self {
        if let Some(last) = self.steps.last_mut() {
            last.after.push((dep.into(), on_failure));
        }
        self
    }

    /// The run's own rules, before any step's job is checked: names, the key, the number of
    /// steps, each dependency on a step declared before (so no cycle), none twice.
    fn check_shape(&self) -> Result<(), ClientError> {
        let name_ok = |n: &str, max: usize| {
            let chars = n.chars().count();
            (1..=max).contains(&chars) && !n.contains('\0')
        };
        if !name_ok(&self.name, MAX_NAME_CHARS) {
            return Err(invalid(
                "name",
                format!("1 to {MAX_NAME_CHARS} characters, without NUL"),
            ));
        }
        if let Some(key) = &self.key {
            if !name_ok(key, MAX_KEY_CHARS) {
                return Err(invalid(
                    "key",
                    format!("1 to {MAX_KEY_CHARS} characters, without NUL"),
                ));
            }
        }
        if self.steps.is_empty() || self.steps.len() > MAX_STEPS {
            return Err(invalid("steps", format!("1 to {MAX_STEPS} steps")));
        }
        if self.times.len() > MAX_TIMES {
            return Err(invalid("times", format!("at most {MAX_TIMES} named times")));
        }
        for (name, at) in &self.times {
            if !name_ok(name, MAX_TIME_NAME_CHARS) {
                return Err(invalid(
                    "times",
                    format!("a time's name is 1 to {MAX_TIME_NAME_CHARS} characters, without NUL"),
                ));
            }
            check_instant("times", *at)?;
        }
        let mut declared = HashSet::new();
        for step in &self.steps {
            if !name_ok(&step.name, MAX_NAME_CHARS) {
                return Err(invalid(
                    "steps",
                    format!("a step's name is 1 to {MAX_NAME_CHARS} characters, without NUL"),
                ));
            }
            if step.after.len() > MAX_DEPS {
                return Err(invalid(
                    "steps",
                    format!("step {:?}: at most {MAX_DEPS} dependencies", step.name),
                ));
            }
            let mut deps = HashSet::new();
            for (dep, _) in &step.after {
                if !declared.contains(dep.as_str()) {
                    return Err(inconsistent(
                        "steps",
                        format!(
                            "step {:?} waits for {dep:?}, which is not a step declared before it",
                            step.name
                        ),
                    ));
                }
                if !deps.insert(dep.as_str()) {
                    return Err(inconsistent(
                        "steps",
                        format!("step {:?} names {dep:?} twice", step.name),
                    ));
                }
            }
            if !declared.insert(step.name.as_str()) {
                return Err(inconsistent(
                    "steps",
                    format!("two steps are named {:?}", step.name),
                ));
            }
            if step.job.schedule != Schedule::Now {
                return Err(invalid(
                    "steps",
                    format!(
                        "step {:?}: a step's job starts when its dependencies allow (its schedule \
                         must be now)",
                        step.name
                    ),
                ));
            }
            for (what, anchor) in [("at", &step.at), ("deadline", &step.deadline)] {
                let Some(anchor) = anchor else { continue };
                let Some(base) = self.times.get(&anchor.time) else {
                    return Err(inconsistent(
                        "steps",
                        format!(
                            "step {:?}: its {what} names the time {:?}, which the run does not have",
                            step.name, anchor.time
                        ),
                    ));
                };
                let at = base.checked_add_signed(anchor.offset).ok_or_else(|| {
                    invalid(
                        "steps",
                        format!("step {:?}: {what} out of range", step.name),
                    )
                })?;
                check_instant("steps", at)?;
            }
            if let Some(signal) = &step.signal {
                if !name_ok(signal, MAX_NAME_CHARS) {
                    return Err(invalid(
                        "steps",
                        format!(
                            "step {:?}: a signal's name is 1 to {MAX_NAME_CHARS} characters, \
                             without NUL",
                            step.name
                        ),
                    ));
                }
            }
            if step.signal.is_some() != step.deadline.is_some() {
                return Err(inconsistent(
                    "steps",
                    format!(
                        "step {:?}: a step that waits for a signal has a deadline, and only it",
                        step.name
                    ),
                ));
            }
            if let Some(tasks) = step.tasks {
                if !(1..=MAX_TASKS).contains(&tasks) {
                    return Err(invalid(
                        "steps",
                        format!(
                            "step {:?}: a map step has 1 to {MAX_TASKS} tasks",
                            step.name
                        ),
                    ));
                }
            }
            if step.job.unique_key.is_some() {
                return Err(invalid(
                    "steps",
                    format!(
                        "step {:?}: a step's job has no unique key (the run's key is its identity)",
                        step.name
                    ),
                ));
            }
        }
        let tasks: u64 = self
            .steps
            .iter()
            .filter_map(|s| s.tasks)
            .map(u64::from)
            .sum();
        if tasks > u64::from(MAX_TASKS) {
            return Err(invalid(
                "steps",
                format!("a run's map steps have at most {MAX_TASKS} tasks in all"),
            ));
        }
        Ok(())
    }
}

/// What a step waits for (or why it failed without running), for the pages to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepWait {
    /// Dependencies still to settle, of its `total`.
    Deps { left: i32, total: i64 },
    /// Its signal, until its deadline.
    Signal { name: String, until: DateTime<Utc> },
    /// Its time: its job is due then (a time of the run's and an offset, when anchored).
    Time {
        due: DateTime<Utc>,
        anchor: Option<(String, i64)>,
    },
    /// It failed without running: its deadline passed without its signal.
    DeadlinePassed { name: String, at: DateTime<Utc> },
    /// A map step's tasks that have not settled, and its progress.
    Tasks {
        done: i32,
        failed: i32,
        total: i32,
        items: i64,
    },
}

impl StepWait {
    /// In a sentence, times in UTC: "waits for the signal \"final\" until 2026-12-07 01:00:00 UTC".
    pub fn sentence(&self) -> String {
        let utc = |t: &DateTime<Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
        let (before, at, after) = self.parts();
        match at {
            Some(at) => format!("{before}{}{after}", utc(&at)),
            None => format!("{before}{after}"),
        }
    }

    /// The sentence around its time: what comes before it, the time, what comes after it (a
    /// page shows the time in the reader's zone).
    pub fn parts(&self) -> (String, Option<DateTime<Utc>>, String) {
        match self {
            StepWait::Deps { left, total } => (
                format!("waits for {left} of its {total} dependencies"),
                None,
                String::new(),
            ),
            StepWait::Signal { name, until } => (
                format!("waits for the signal {name:?} until "),
                Some(*until),
                String::new(),
            ),
            StepWait::Time { due, anchor } => (
                "waits for its time: ".to_string(),
                Some(*due),
                anchor
                    .as_ref()
                    .map(|(time, ms)| format!(" ({time} {:+} s)", *ms as f64 / 1000.0))
                    .unwrap_or_default(),
            ),
            StepWait::DeadlinePassed { name, at } => (
                "its deadline ".to_string(),
                Some(*at),
                format!(" passed without the signal {name:?}"),
            ),
            StepWait::Tasks {
                done,
                failed,
                total,
                items,
            } => {
                let failed = match failed {
                    0 => String::new(),
                    n => format!(", {n} failed"),
                };
                (
                    format!("waits for its tasks: {done} of {total} done{failed}, {items} items"),
                    None,
                    String::new(),
                )
            }
        }
    }
}

impl StepRow {
    /// What this step waits for, if it waits (`signals`: the names of its run's signals).
    pub fn wait(&self, signals: &[String]) -> Option<StepWait> {
        match self.state.as_str() {
            "blocked" if self.deps_left > 0 => Some(StepWait::Deps {
                left: self.deps_left,
                total: self.deps,
            }),
            "blocked" => match (&self.signal, self.deadline_at) {
                (Some(name), Some(until)) if !signals.contains(name) => Some(StepWait::Signal {
                    name: name.clone(),
                    until,
                }),
                _ => None,
            },
            "ready" => match (self.due_at, self.tasks) {
                (Some(due), _) => Some(StepWait::Time {
                    due,
                    anchor: self.at_time.clone().zip(self.at_ms),
                }),
                (None, Some(total)) => Some(StepWait::Tasks {
                    done: self.tasks_done,
                    failed: self.tasks_failed + self.tasks_cancelled,
                    total,
                    items: self.items,
                }),
                (None, None) => None,
            },
            "failed" if self.job_id.is_none() => {
                let (name, at) = self.signal.clone().zip(self.deadline_at)?;
                Some(StepWait::DeadlinePassed { name, at })
            }
            _ => None,
        }
    }
}

/// A run's named times as stored: to the microsecond, as PostgreSQL keeps a timestamp (the
/// timers computed from them are the database's).
pub(super) fn times_json(times: &BTreeMap<String, DateTime<Utc>>) -> serde_json::Value {
    let stored: BTreeMap<&String, DateTime<Utc>> = times
        .iter()
        .map(|(name, at)| (name, at.trunc_subsecs(6)))
        .collect();
    serde_json::to_value(stored).unwrap_or_default()
}

/// A run inserted, or the live run that holds its key (`existing`: nothing was written).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunInserted {
    pub run: RunRow,
    pub existing: bool,
}

impl Client {
    /// Inserts `workflow` as a run: its steps, their dependencies, and the jobs of the steps that
    /// wait for nothing, in one transaction (or returns the live run holding its key).
    pub async fn insert_workflow(&self, workflow: &Workflow) -> Result<RunInserted, ClientError> {
        let mut tx = self.pool.begin().await?;
        let (inserted, queues) = self.insert_workflow_in(&mut tx, workflow).await?;
        tx.commit().await?;
        let now = chrono::Utc::now().timestamp_millis();
        for queue in queues {
            self.announcer
                .tell_here_of(&queue, JobState::Available, now);
        }
        Ok(inserted)
    }

    /// [`Self::insert_workflow`] inside the caller's transaction (`&mut *tx`): the run and its
    /// first jobs commit (or not) with the caller's own writes.
    pub async fn insert_workflow_with(
        &self,
        conn: &mut PgConnection,
        workflow: &Workflow,
    ) -> Result<RunInserted, ClientError> {
        Ok(self.insert_workflow_in(conn, workflow).await?.0)
    }

    async fn insert_workflow_in(
        &self,
        conn: &mut PgConnection,
        workflow: &Workflow,
    ) -> Result<(RunInserted, Vec<String>), ClientError> {
        workflow.check_shape()?;
        let mut hosts = Vec::with_capacity(workflow.steps.len());
        for step in &workflow.steps {
            let host = self
                .checked_with(&mut *conn, &step.job)
                .await
                .map_err(|e| match e {
                    ClientError::Invalid { field, message } => {
                        invalid("steps", format!("step {:?}: {field}: {message}", step.name))
                    }
                    other => other,
                })?;
            hosts.push(host);
        }
        // Each step's job joins the caller's trace, as an insert's would.
        let jobs: Vec<_> = workflow
            .steps
            .iter()
            .map(|s| in_current_trace(&s.job))
            .collect();
        let created_by = workflow.created_by.as_deref();
        let times = times_json(&workflow.times);
        // A live run holding the key is the answer; one that settles between the insert and
        // its read frees the key, and the insert is tried again.
        let mut tries = 0;
        let run = loop {
            tries += 1;
            let inserted = store::run_insert(
                &mut *conn,
                &workflow.name,
                workflow.key.as_deref(),
                created_by,
                workflow.steps.len() as i32,
                &times,
            )
            .await?;
            if let Some(run) = inserted {
                break run;
            }
            let key = workflow.key.as_deref().unwrap_or_default();
            match store::run_live_by_key(&mut *conn, key).await? {
                Some(run) => {
                    return Ok((
                        RunInserted {
                            run,
                            existing: true,
                        },
                        Vec::new(),
                    ))
                }
                None if tries < 3 => continue,
                None => {
                    return Err(ClientError::Conflict(format!(
                        "the key {key:?} is taken and freed again as this run is inserted: try \
                         again"
                    )))
                }
            }
        };
        let steps: Vec<StepInsert<'_>> = workflow
            .steps
            .iter()
            .zip(&jobs)
            .zip(hosts)
            .map(|((s, job), call_host)| StepInsert {
                name: &s.name,
                queue: &job.queue,
                kind: &job.kind,
                args: &job.args,
                priority: job.priority,
                max_attempts: job.max_attempts,
                tags: &job.tags,
                meta: &job.meta,
                created_by: job.created_by.as_deref().or(created_by),
                call_host,
                deps: s.after.len() as i32,
                at: s
                    .at
                    .as_ref()
                    .map(|a| (a.time.as_str(), a.offset.num_milliseconds())),
                signal: s.signal.as_deref(),
                deadline: s
                    .deadline
                    .as_ref()
                    .map(|a| (a.time.as_str(), a.offset.num_milliseconds())),
                tasks: s.tasks.map(|t| t as i32),
            })
            .collect();
        store::steps_insert(&mut *conn, run, &steps).await?;
        let edges: Vec<(&str, &str, &str)> = workflow
            .steps
            .iter()
            .flat_map(|s| {
                s.after
                    .iter()
                    .map(move |(dep, on)| (dep.as_str(), s.name.as_str(), on.as_str()))
            })
            .collect();
        if !edges.is_empty() {
            let (deps, rest): (Vec<&str>, Vec<(&str, &str)>) =
                edges.iter().map(|(d, s, o)| (*d, (*s, *o))).unzip();
            let (names, policies): (Vec<&str>, Vec<&str>) = rest.into_iter().unzip();
            store::edges_insert(&mut *conn, run, &deps, &names, &policies).await?;
        }
        let queues = store::steps_start_free(&mut *conn, run).await?;
        let row = store::run_get(&mut *conn, run)
            .await?
            .ok_or_else(|| ClientError::NotFound(format!("run {run}")))?;
        Ok((
            RunInserted {
                run: row,
                existing: false,
            },
            queues,
        ))
    }

    /// Run `id` as stored.
    pub async fn workflow_run(&self, id: i64) -> Result<RunRow, ClientError> {
        store::run_get(&self.pool, id)
            .await?
            .ok_or_else(|| ClientError::NotFound(format!("workflow run {id}")))
    }

    /// Runs newest first, in `state` if given, with an id below `before`: at most `limit`.
    /// `waiting`: only running runs none of whose steps changed state for longer than that.
    pub async fn workflow_runs(
        &self,
        state: Option<&str>,
        before: Option<i64>,
        limit: i64,
        waiting: Option<std::time::Duration>,
    ) -> Result<Vec<RunRow>, ClientError> {
        let secs = waiting.map(|w| w.as_secs_f64());
        Ok(store::runs_list(&self.pool, state, before, limit, secs).await?)
    }

    /// The steps of run `id`, in the order they were declared.
    pub async fn workflow_steps(&self, id: i64) -> Result<Vec<StepRow>, ClientError> {
        Ok(store::run_steps(&self.pool, id).await?)
    }

    /// [`Self::workflow_run`] inside the caller's transaction.
    pub async fn workflow_run_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
    ) -> Result<RunRow, ClientError> {
        store::run_get(conn, id)
            .await?
            .ok_or_else(|| ClientError::NotFound(format!("workflow run {id}")))
    }

    /// [`Self::workflow_steps`] inside the caller's transaction.
    pub async fn workflow_steps_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
    ) -> Result<Vec<StepRow>, ClientError> {
        Ok(store::run_steps(conn, id).await?)
    }

    /// The live run holding `key` when it is a run of the workflow `name`, read inside the
    /// caller's transaction.
    pub async fn live_workflow_with(
        &self,
        conn: &mut PgConnection,
        key: &str,
        name: &str,
    ) -> Result<Option<RunRow>, ClientError> {
        Ok(store::run_live_by_key_of(conn, key, &[name.to_string()]).await?)
    }
}
