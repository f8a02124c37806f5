//! The `Worker` trait: the code that runs a job of one kind. The engine knows workers only through
//! this trait; job kinds live in `crate::workers`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::{PgConnection, Postgres, Transaction};
use tokio_util::sync::CancellationToken;

use super::attempt_log::{AttemptRecorder, OutputRefused};
use super::job::Job;
use super::store::jobs as job_store;
use super::store::workflows::TaskRow;

/// A boxed future, as workers return them (the trait must be object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a failed attempt asks the engine to do next.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkError {
    /// Try again after the worker's backoff (or discard when out of attempts).
    #[error("{0}")]
    Retryable(String),
    /// Do not try again: discard the job now.
    #[error("fatal: {0}")]
    Fatal(String),
    /// Cancel the job: it should not run (again).
    #[error("cancelled: {0}")]
    Cancel(String),
    /// Not ready yet: run again after this delay, without spending an attempt.
    #[error("snoozed for {0:?}")]
    Snooze(Duration),
    /// The handler's database connection was gone (dropped by a restart of the database or a
    /// cut): nothing it wrote on it committed. The engine runs the handler again at once, within
    /// the same attempt, after dropping the pool's dead connections; only when that fails too
    /// is the attempt failed, as [`WorkError::Retryable`].
    #[error("database connection lost: {0}")]
    ConnectionLost(String),
    /// The attempt lost its job (cancelled, rescued after its lease expired, or taken by a newer
    /// attempt); its effects were rolled back.
    #[error("the attempt lost its job (cancelled or rescued); its effects were rolled back")]
    Fenced,
}

impl WorkError {
    pub fn retryable(e: impl std::fmt::Display) -> Self {
        WorkError::Retryable(e.to_string())
    }
    pub fn fatal(e: impl std::fmt::Display) -> Self {
        WorkError::Fatal(e.to_string())
    }
}

impl From<sqlx::Error> for WorkError {
    fn from(e: sqlx::Error) -> Self {
        if super::store::errors::is_connection_lost(&e) {
            WorkError::ConnectionLost(e.to_string())
        } else {
            WorkError::Retryable(format!("database error: {e}"))
        }
    }
}

/// Why a check of a job's args that reads the database refused them.
#[derive(Debug, thiserror::Error)]
pub enum ArgsRefused {
    /// The args are wrong: refused with this message.
    #[error("{0}")]
    Invalid(String),
    /// The check could not read the database.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Runs jobs of one kind.
pub trait Worker: Send + Sync + 'static {
    /// The kind this worker runs (`jobs.kind`).
    fn kind(&self) -> &'static str;

    /// Checks a job's args at insert time; an error refuses the insert with this message.
    fn validate(&self, _args: &Value) -> Result<(), String> {
        Ok(())
    }

    /// The checks of a job's args that read the database (an allowlist kept in a table), run at
    /// insert time once [`Self::validate`] passed, on the inserting connection (inside its
    /// transaction, if any). Default: none.
    fn validate_in<'a>(
        &'a self,
        _conn: &'a mut PgConnection,
        _args: &'a Value,
    ) -> BoxFuture<'a, Result<(), ArgsRefused>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The host a job of this kind calls, read from its args by the parse its call will use: the
    /// key of a queue's rate partitioned `per: host` (see `limits`). The engine asks once, at
    /// insert, after the checks passed, and keeps the answer with the job (`jobs.call_host`), so
    /// that the rate counts the host the call reaches however the args spell it (a key read
    /// apart from the call, by a regex, was passed by spelling one host several ways). Default:
    /// none, and a rate per host reads the host of a `url` argument with a regex (as for rows
    /// written by SQL).
    fn call_host(&self, _args: &Value) -> Option<String> {
        None
    }

    /// Whether only Kickoff's own code inserts jobs of this kind (a question's lock and settle
    /// jobs: the question's promise rests on them): an insert through the API, the dashboard, the
    /// command line or the engine's client is refused. Default: no.
    fn kickoffs_own(&self) -> bool {
        false
    }

    /// Hides in `args` what a job of this kind holds secret beyond the fields named like secrets
    /// (those are hidden for every kind: see `engine::sight`), for whoever may not see the job's
    /// secrets: a webhook's header values, its URL's credentials. Each part hidden shows as
    /// [`crate::engine::sight::REDACTED`]; the values it hid are returned, as a text may quote
    /// them (an error, a log line, a partner's answer), to be hidden there too. `meta` is the
    /// job's. Default: nothing more.
    fn hide_secrets(&self, _args: &mut Value, _meta: &Value) -> Vec<String> {
        Vec::new()
    }

    /// How long one attempt may run before it counts as failed. Default: 60 s.
    fn timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    /// The wait before the next attempt after attempt `attempt` failed: `attempt^4` seconds plus one
    /// (2 s, 17 s, 82 s, 257 s, ...), capped at 6 hours, with ±10% jitter so that many jobs that
    /// failed together do not retry together.
    fn backoff(&self, attempt: i32) -> Duration {
        let base = (attempt.max(1) as f64).powi(4) + 1.0;
        let capped = base.min(6.0 * 3600.0);
        Duration::from_secs_f64(capped * (0.9 + 0.2 * fastrand::f64()))
    }

    /// Runs one attempt. `Ok(())` completes the job unless the handler already completed it inside
    /// its own transaction ([`JobContext::complete_with`]).
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>>;
}

/// What a running attempt can see and do.
#[derive(Clone)]
pub struct JobContext {
    pub job: Arc<Job>,
    pool: Db,
    cancel: CancellationToken,
    completed: Arc<AtomicBool>,
    recorder: Arc<AttemptRecorder>,
}

impl JobContext {
    pub(crate) fn new(
        job: Arc<Job>,
        pool: Db,
        cancel: CancellationToken,
        recorder: Arc<AttemptRecorder>,
    ) -> Self {
        JobContext {
            job,
            pool,
            cancel,
            completed: Arc::new(AtomicBool::new(false)),
            recorder,
        }
    }

    /// Keeps `output` with this attempt's record (shown on the job's page and by the API), in
    /// place of any earlier one: what the attempt did, for an operator ("predictions frozen:
    /// 12"). At most [`crate::engine::attempt_log::MAX_OUTPUT_BYTES`] of JSON; a larger one is
    /// refused and the earlier one kept. Recorded before [`JobContext::complete_with`], it is
    /// written in the handler's transaction.
    pub fn record(&self, output: &impl serde::Serialize) -> Result<(), OutputRefused> {
        self.recorder.record(output)
    }

    /// When the attempt started, by the database's clock.
    pub fn started_at(&self) -> chrono::DateTime<chrono::Utc> {
        self.recorder.started_at
    }

    /// The job's args, decoded.
    pub fn args<T: DeserializeOwned>(&self) -> Result<T, WorkError> {
        serde_json::from_value(self.job.args.clone())
            .map_err(|e| WorkError::Fatal(format!("invalid args for {}: {e}", self.job.kind)))
    }

    /// The output step `name` of this job's workflow run recorded ([`JobContext::record`]) when
    /// it completed: `None` when it recorded none, has not completed, the run has no such step,
    /// or this job is not a workflow step's.
    pub async fn dep_output(&self, name: &str) -> Result<Option<serde_json::Value>, WorkError> {
        let Some(step) = self.job.step_id else {
            return Ok(None);
        };
        let output = super::store::workflows::sibling_output(&self.pool, step, name).await?;
        Ok(output.flatten())
    }

    /// The payload of the signal `name` of this job's workflow run, if it came (a step that
    /// waits for a signal starts only once it did): `None` otherwise, or when this job is not a
    /// workflow step's.
    pub async fn signal(&self, name: &str) -> Result<Option<serde_json::Value>, WorkError> {
        let Some(step) = self.job.step_id else {
            return Ok(None);
        };
        Ok(super::store::workflows::step_signal(&self.pool, step, name).await?)
    }

    /// Step `name` of this job's workflow run as it is now (its run, its state, and its
    /// deadline while it waits for a signal): `None` when the run has no such step or this job
    /// is not a workflow step's. A step signals its run with the run's id
    /// ([`crate::engine::Client::signal_workflow_with`], inside its own transaction).
    pub async fn sibling(
        &self,
        name: &str,
    ) -> Result<Option<super::store::workflows::SiblingStep>, WorkError> {
        let Some(step) = self.job.step_id else {
            return Ok(None);
        };
        Ok(super::store::workflows::sibling_step(&self.pool, step, name, false).await?)
    }

    /// [`JobContext::sibling`] read inside the handler's `tx` (`&mut *tx`), the step's row held
    /// until `tx` ends: it keeps the state read until then (a signal that would start it waits).
    pub async fn sibling_with(
        &self,
        tx: &mut PgConnection,
        name: &str,
    ) -> Result<Option<super::store::workflows::SiblingStep>, WorkError> {
        let Some(step) = self.job.step_id else {
            return Ok(None);
        };
        Ok(super::store::workflows::sibling_step(tx, step, name, true).await?)
    }

    /// Makes the job of step `name` of this job's workflow run due now if it waits for a later
    /// time (a sibling polling for what this step just got, which need not wait for its next
    /// poll to learn it): whether it did.
    pub async fn wake_sibling(&self, name: &str) -> Result<bool, WorkError> {
        let Some(step) = self.job.step_id else {
            return Ok(false);
        };
        Ok(super::store::workflows::sibling_wake(&self.pool, step, name).await?)
    }

    /// This job's task, when it is a map step's ([`crate::engine::workflow::Workflow::map`]):
    /// its index (0 to `tasks - 1`), the step's number of tasks, and the cursor and items its
    /// handler last checkpointed (`None` and 0 at first; after a crash, a retry of the job or of
    /// the step, where it left off). `None` for any other job.
    pub async fn task(&self) -> Result<Option<TaskRow>, WorkError> {
        if self.job.step_id.is_none() {
            return Ok(None);
        }
        Ok(super::store::workflows::task_of_job(&self.pool, self.job.id.0).await?)
    }

    /// Keeps this task's `cursor` and the `items` it did so far inside the handler's `tx`
    /// (`&mut *tx`), which the caller commits: the work done up to the cursor and the cursor
    /// commit together, so an attempt after a crash resumes exactly where the last commit left
    /// off (nothing done twice, nothing skipped). Holds the job's row until `tx` ends, so a
    /// rescue waits for it; [`WorkError::Fenced`] when this attempt no longer owns the job
    /// (roll `tx` back), or when the job is not a map step's task.
    pub async fn checkpoint_with(
        &self,
        tx: &mut PgConnection,
        cursor: &serde_json::Value,
        items: i64,
    ) -> Result<(), WorkError> {
        let Some(claim) = self.job.claim() else {
            return Err(WorkError::Fenced);
        };
        let held = super::store::workflows::task_checkpoint(
            tx,
            claim.id.0,
            claim.token.0,
            cursor,
            items.max(0),
        )
        .await?;
        if held {
            Ok(())
        } else {
            Err(WorkError::Fenced)
        }
    }

    /// The database pool, for reads and for writes that need no exactly-once guarantee.
    pub fn pool(&self) -> &Db {
        &self.pool
    }

    /// Fires when the attempt should stop: the job was cancelled, its lease was lost, or the node is
    /// shutting down past its grace period.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Opens a transaction for the handler's database work; finish it with
    /// [`JobContext::complete_with`] so the work and the job's completion commit together.
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, WorkError> {
        Ok(self.pool.begin().await?)
    }

    /// Completes the job inside `tx` and commits: the handler's writes, the completion and the
    /// attempt's record (its output and the lines logged so far) happen together or not at all. If this attempt no longer owns the job (cancelled, rescued, or claimed
    /// again, even under the same attempt number after a lost claim), nothing is committed and
    /// [`WorkError::Fenced`] is returned.
    pub async fn complete_with(
        &self,
        mut tx: Transaction<'static, Postgres>,
    ) -> Result<(), WorkError> {
        let Some(claim) = self.job.claim() else {
            tx.rollback().await?;
            return Err(WorkError::Fenced);
        };
        let end = self.recorder.end();
        let done = job_store::job_complete_many_with(&mut *tx, &[claim], &[end]).await?;
        if done.is_empty() {
            tx.rollback().await?;
            return Err(WorkError::Fenced);
        }
        tx.commit().await?;
        self.completed.store(true, Ordering::Release);
        Ok(())
    }

    /// Snoozes the job inside `tx` and commits (as [`WorkError::Snooze`] would after the
    /// handler returned): due again after `delay`, no attempt spent, its record written; the
    /// handler then returns `Err(WorkError::Snooze(delay))`. What the handler read in `tx` under
    /// a lock holds until the snooze is written: a change that would wake the job comes after
    /// it (see [`JobContext::wake_sibling`]). [`WorkError::Fenced`] when this attempt no longer
    /// owns the job (nothing committed).
    pub async fn snooze_with(
        &self,
        mut tx: Transaction<'static, Postgres>,
        delay: Duration,
    ) -> Result<(), WorkError> {
        let Some(claim) = self.job.claim() else {
            tx.rollback().await?;
            return Err(WorkError::Fenced);
        };
        let end = self.recorder.end();
        if !job_store::job_snooze_with(&mut *tx, claim, delay, &end).await? {
            tx.rollback().await?;
            return Err(WorkError::Fenced);
        }
        tx.commit().await?;
        self.completed.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether the handler settled the job in its own transaction
    /// ([`JobContext::complete_with`], [`JobContext::snooze_with`]).
    pub(crate) fn already_completed(&self) -> bool {
        self.completed.load(Ordering::Acquire)
    }
}

/// The workers a node can run, by kind.
#[derive(Clone, Default)]
pub struct Workers {
    by_kind: HashMap<&'static str, Arc<dyn Worker>>,
    /// The kinds, sorted, and those only Kickoff's own code inserts: what every insert's rules
    /// are given (kept here, not sorted again at each insert).
    names: Vec<&'static str>,
    own_names: Vec<&'static str>,
}

impl Workers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a worker; a second worker for the same kind replaces the first.
    pub fn register(&mut self, worker: impl Worker) -> &mut Self {
        self.by_kind.insert(worker.kind(), Arc::new(worker));
        self.names = self.by_kind.keys().copied().collect();
        self.names.sort_unstable();
        self.own_names = self
            .names
            .iter()
            .copied()
            .filter(|k| self.by_kind[k].kickoffs_own())
            .collect();
        self
    }

    pub fn get(&self, kind: &str) -> Option<&Arc<dyn Worker>> {
        self.by_kind.get(kind)
    }

    /// The kinds a caller may insert (those not [`Worker::kickoffs_own`]), sorted: what the
    /// API's document states a job's `kind` is one of.
    pub fn insertable_kinds(&self) -> Vec<&'static str> {
        let mut kinds: Vec<_> = self
            .by_kind
            .iter()
            .filter(|(_, w)| !w.kickoffs_own())
            .map(|(k, _)| *k)
            .collect();
        kinds.sort_unstable();
        kinds
    }

    /// The kinds only Kickoff's own code inserts ([`Worker::kickoffs_own`]), sorted.
    pub fn own_kinds(&self) -> &[&'static str] {
        &self.own_names
    }

    /// The registered kinds, sorted.
    pub fn kinds(&self) -> &[&'static str] {
        &self.names
    }
}

/// A whole number in a job's args as its worker reads it: `5000` or `5000.0` (the API keeps a
/// number as the client wrote it, and a client's JSON library may write any number with a
/// fraction), refused when it has a fraction or does not fit. For `#[serde(deserialize_with)]`
/// (and `default` where the field may be absent).
pub fn whole_number<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    use serde::de::Error;
    use serde::Deserialize;
    let n = serde_json::Number::deserialize(deserializer)?;
    let too_large = || D::Error::custom(format!("{n} is out of range"));
    if let Some(i) = n.as_i64() {
        return T::try_from(i).map_err(|_| too_large());
    }
    if let Some(u) = n.as_u64() {
        return T::try_from(u).map_err(|_| too_large());
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
            T::try_from(f as i64).map_err(|_| too_large())
        }
        _ => Err(D::Error::custom(format!("{n} is not a whole number"))),
    }
}

/// [`whole_number`] for an optional field.
pub fn optional_whole_number<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    #[derive(serde::Deserialize)]
    struct Whole<T: TryFrom<i64> + TryFrom<u64>>(#[serde(deserialize_with = "whole_number")] T);
    use serde::Deserialize;
    Ok(Option::<Whole<T>>::deserialize(deserializer)?.map(|w| w.0))
}
