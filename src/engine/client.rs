//! The engine's client: what applications and operators do to jobs and queues. It validates input
//! before anything is written and maps guarded updates that matched no row to clear errors.

use std::sync::Arc;
use std::time::Duration;

use crate::db::{in_transaction, Db};
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

use super::announcer::{Announcer, Wakeup};
use super::control::Control;
use super::history_cache::HistoryCache;
use super::job::{is_valid_queue_name, Claim, Inserted, Job, JobId, JobState, NewJob, Schedule};
use super::limits::{self, QueueLimits};
use super::store::history::{
    self as history_store, AttemptRecord, HistoryFilter, HistoryGroup, HistoryPoint, MINUTES_KEPT,
};
use super::store::jobs::{self as job_store, JobFilter};
use super::store::kinds::{self as kind_store, KindPause};
use super::store::leader::{self as leader_store, LeaderRow, LEADER_NAME};
use super::store::nodes::{self as node_store, NodeRow};
use super::store::queues::{self as queue_store, QueueRow};
use super::store::schedules as schedule_store;
use super::store::stats::{self as stats_store, ThroughputMinute, STATS_RETENTION};
use super::worker::ArgsRefused;
use super::worker::Workers;

pub use super::job::{
    MAX_ARGS_BYTES, MAX_JSON_NUMBER, MAX_META_BYTES, MAX_SCHEDULE_AHEAD_DAYS,
    MAX_SCHEDULE_PAST_HOURS, MAX_TAGS, MAX_TAG_CHARS, MAX_UNIQUE_KEY_CHARS,
};
/// How many of the newest jobs a filter's suggestions read.
pub const SUGGEST_RECENT_JOBS: i64 = 1_000;
/// How many suggestions of each sort (kinds, queues, tags, args keys) at most.
pub const SUGGEST_EACH: i64 = 100;
/// The largest page of a listing.
pub const MAX_PAGE: i64 = 500;
/// The most ids one bulk action by ids takes.
pub const MAX_BULK_IDS: usize = 1000;
/// Jobs per batch (and per short transaction) of a bulk action on a filter.
pub const BULK_BATCH: i64 = 1000;
/// Nodes whose heartbeat is younger than this count as alive: several missed heartbeats at any
/// sane lease (the heartbeat runs at a fifth of the lease, 1 s by default).
pub const NODE_ALIVE_WITHIN: Duration = Duration::from_secs(30);

/// A question to the attempts' history: which attempts, split how, over which range, in which
/// steps.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryQuery {
    pub filter: HistoryFilter,
    pub group: HistoryGroup,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub step: Duration,
}

impl HistoryQuery {
    /// The shortest and longest step, in seconds.
    pub const STEPS: std::ops::RangeInclusive<u64> = 60..=86_400;
    /// The most steps one answer holds.
    pub const MAX_POINTS: i64 = 1_500;
    /// The longest range: the longest retention the history can be given.
    pub const MAX_RANGE_DAYS: i64 = 400;

    /// Why the rollups cannot answer this query at `now`, if they cannot.
    pub fn check(&self, now: DateTime<Utc>) -> Result<(), ClientError> {
        let step = self.step.as_secs();
        if !Self::STEPS.contains(&step) || !step.is_multiple_of(60) || self.step.subsec_nanos() != 0
        {
            return Err(invalid(
                "step",
                "must be a whole number of minutes, from 60 to 86400 seconds",
            ));
        }
        if self.from >= self.to {
            return Err(inconsistent("from", "must be before `to`"));
        }
        if self.to - self.from > ChronoDuration::days(Self::MAX_RANGE_DAYS) {
            return Err(inconsistent(
                "from",
                format!("the range may span at most {} days", Self::MAX_RANGE_DAYS),
            ));
        }
        let points = (self.to - self.from).num_seconds() / step as i64;
        if points > Self::MAX_POINTS {
            return Err(inconsistent(
                "step",
                format!(
                    "{points} steps over this range; at most {} (take a longer step)",
                    Self::MAX_POINTS
                ),
            ));
        }
        // Steps of whole hours read the hours; finer ones the minutes, kept for a day.
        let minutes_from = now - ChronoDuration::from_std(MINUTES_KEPT).unwrap_or_default();
        if !step.is_multiple_of(3600) && self.from < minutes_from {
            return Err(ClientError::OutOfWindow {
                field: "step",
                message:
                    "the history is kept per minute for the last 24 hours and per hour before: \
                 take a step of whole hours (3600, 7200, ...), or a range within the last day"
                        .into(),
            });
        }
        Ok(())
    }
}

/// An action applied to many jobs at once, with the state rules of the single-job operation.
#[derive(schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Cancel jobs that are not final (executing attempts are stopped on their node).
    Cancel,
    /// Run retryable and final jobs again.
    Retry,
    /// Make scheduled, retryable and available jobs due now.
    RunNow,
    /// Delete jobs that are not executing.
    Delete,
}

impl BulkAction {
    pub const ALL: [BulkAction; 4] = [
        BulkAction::Cancel,
        BulkAction::Retry,
        BulkAction::RunNow,
        BulkAction::Delete,
    ];

    /// The name used in the API and the UI.
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Cancel => "cancel",
            BulkAction::Retry => "retry",
            BulkAction::RunNow => "run_now",
            BulkAction::Delete => "delete",
        }
    }
}

impl std::str::FromStr for BulkAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BulkAction::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| format!("unknown action `{s}` (cancel, retry, run_now or delete)"))
    }
}

/// What a bulk walk does to each job it matches: an action, a move in time or an edit.
#[derive(Debug, Clone, PartialEq)]
pub enum BulkChange {
    Action(BulkAction),
    /// Moves waiting jobs by this many ms (see [`crate::engine::job_edit::ShiftBy`]).
    Shift {
        by_ms: i64,
    },
    /// Edits waiting jobs, each checked by its kind's worker.
    Edit(crate::engine::job_edit::JobEdit),
}

impl From<crate::engine::job_edit::EditRefused> for ClientError {
    fn from(e: crate::engine::job_edit::EditRefused) -> Self {
        if e.by_the_job {
            // The job's state refuses it (409), as an edit of a running job is.
            return ClientError::Conflict(format!("{}: {}", e.field, e.message));
        }
        invalid(e.field, e.message)
    }
}

impl From<BulkAction> for BulkChange {
    fn from(action: BulkAction) -> Self {
        BulkChange::Action(action)
    }
}

/// What a bulk action did.
#[derive(schemars::JsonSchema, Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BulkReport {
    /// Jobs the action changed.
    pub changed: u64,
    /// Jobs matched (or listed) but left alone: their state did not allow the action (a retry
    /// whose unique key a live job holds included), they changed meanwhile, they belong to a
    /// question, a move would take them out of the schedulable range, or (by ids) they do not
    /// exist.
    pub skipped: u64,
    /// Jobs an edit would have made invalid (their kind's check refused it), left as they were
    /// (always 0 for the other actions).
    pub refused: u64,
    /// Why the first of them was refused.
    pub refusal: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("unknown job kind `{0}`")]
    UnknownKind(String),
    /// The kind's worker refused the args (a rule of its own, which may read the database).
    #[error("args: {0}")]
    ArgsRefused(String),
    /// Fields that do not fit together (an end before its start).
    #[error("{field}: {message}")]
    Inconsistent {
        field: &'static str,
        message: String,
    },
    /// A time too far from now.
    #[error("{field}: {message}")]
    OutOfWindow {
        field: &'static str,
        message: String,
    },
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// Not the caller's to do (a change to what it may not see).
    #[error("{0}")]
    Forbidden(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// The live job holding `new`'s unique key, when its owner is not `new`'s (a question's lock job
/// found by another insert, or an owned insert finding a job nobody owns): not the caller's to be
/// answered with nor to adopt (the store's `on_conflict: reschedule` moves neither), so refused
/// as a conflict.
fn refuse_foreign_holder(new: &NewJob, inserted: Inserted) -> Result<Inserted, ClientError> {
    let owner =
        |meta: &serde_json::Value| meta.get("owner").and_then(|o| o.as_str()).map(String::from);
    let (held_by, wanted_by) = (owner(&inserted.job.meta), owner(&new.meta));
    if !inserted.existing || held_by == wanted_by {
        return Ok(inserted);
    }
    let holder = held_by.unwrap_or_else(|| "nobody".into());
    Err(ClientError::Conflict(format!(
        "the unique key is held by job {}, which {holder} owns: choose another key",
        inserted.job.id
    )))
}

/// The unique keys of a schedule's runs (`schedule:{id}:{slot_ms}`): a caller's job holding one
/// would pass for the run of that slot, and the run would never be inserted.
pub const SCHEDULE_KEY_PREFIX: &str = "schedule:";

/// Whether every number in `value` reads back from PostgreSQL's jsonb: it keeps a number's
/// decimals exactly, and one near the largest float (1.7976931348623157e308) no longer reads as
/// a float, so its row could not be read (a job list, a claim) again.
fn numbers_read_back(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Number(n) => n.as_f64().is_some_and(|f| f.abs() <= MAX_JSON_NUMBER),
        serde_json::Value::Array(items) => items.iter().all(numbers_read_back),
        serde_json::Value::Object(map) => map.values().all(numbers_read_back),
        _ => true,
    }
}

/// `new` continuing the trace of the span the insert runs in (an API call's, say), when traces are
/// exported and it does not name one itself: a question's lock job, a schedule's triggered run
/// and every job a traced request inserts join its trace.
fn in_current_trace(new: &NewJob) -> std::borrow::Cow<'_, NewJob> {
    use crate::telemetry::{current_traceparent, META_TRACEPARENT};
    let names_one = new.meta.get(META_TRACEPARENT).is_some();
    match current_traceparent() {
        Some(tp) if !names_one && new.meta.is_object() => {
            let mut traced = new.clone();
            traced.meta[META_TRACEPARENT] = tp.into();
            std::borrow::Cow::Owned(traced)
        }
        _ => std::borrow::Cow::Borrowed(new),
    }
}

impl ClientError {
    /// The input was refused (not a missing record, a conflict or the database).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ClientError::Invalid { .. }
                | ClientError::UnknownKind(_)
                | ClientError::ArgsRefused(_)
                | ClientError::OutOfWindow { .. }
                | ClientError::Inconsistent { .. }
        )
    }
}

fn inconsistent(field: &'static str, message: impl Into<String>) -> ClientError {
    ClientError::Inconsistent {
        field,
        message: message.into(),
    }
}

pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> ClientError {
    ClientError::Invalid {
        field,
        message: message.into(),
    }
}

/// Inserts jobs and acts on them. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    pool: Db,
    workers: Arc<Workers>,
    announcer: Announcer,
    /// The closed steps of long history series (shared by this client's clones).
    history: Arc<HistoryCache>,
}

impl Client {
    pub fn new(pool: Db, workers: Arc<Workers>) -> Self {
        Client {
            announcer: Announcer::new(&pool),
            pool,
            workers,
            history: Arc::default(),
        }
    }

    pub fn pool(&self) -> &Db {
        &self.pool
    }

    /// This client's workers over another pool (the web side's, say, or a standby's). The closed
    /// history steps it keeps are its own: they are what its pool read, and a standby's (behind,
    /// or not caught up yet) must never answer for the primary's.
    pub fn with_pool(&self, pool: Db) -> Client {
        Client {
            pool,
            workers: self.workers.clone(),
            announcer: self.announcer.clone(),
            history: Arc::default(),
        }
    }

    pub fn workers(&self) -> &Workers {
        &self.workers
    }

    /// Checks a new job before anything is written (on a connection of the pool, if its worker
    /// reads the database to check).
    pub async fn validate(&self, new: &NewJob) -> Result<(), ClientError> {
        let mut conn = self.pool.unit().await?;
        self.validate_with(&mut conn, new).await?;
        Ok(conn.commit().await?)
    }

    /// [`Self::validate`] on the caller's connection (a worker's check that reads the database
    /// reads it there: no second connection while the caller holds one).
    pub async fn validate_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<(), ClientError> {
        self.checked_with(conn, new).await.map(drop)
    }

    /// [`Self::validate_with`], then the host the job's call goes to as its worker reads it
    /// (`Worker::call_host`), to be kept with the job: what a rate per host counts.
    pub(crate) async fn checked_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<Option<String>, ClientError> {
        self.refuse_kickoffs_own(new)?;
        self.checked_own_with(conn, new).await
    }

    /// [`Self::checked_with`] for a job Kickoff's own code makes, whose meta carries the keys
    /// Kickoff writes ([`super::job::RESERVED_META`]: a question's lock job its `owner`, an
    /// alert's notification its incident, a triggered run its schedule).
    pub(crate) async fn checked_own_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<Option<String>, ClientError> {
        let worker = self.validate_shape(new)?;
        worker
            .validate(&new.args)
            .map_err(ClientError::ArgsRefused)?;
        worker
            .validate_in(conn, &new.args)
            .await
            .map_err(|e| match e {
                ArgsRefused::Invalid(m) => ClientError::ArgsRefused(m),
                ArgsRefused::Database(e) => ClientError::Database(e),
            })?;
        Ok(worker.call_host(&new.args))
    }

    /// [`Self::validate`] but for the worker's own check of the args: for the runs of a
    /// schedule, whose template was checked when it was saved. A later refusal (a webhook host
    /// taken off the allowlist) then shows as a failed run, not as runs that never appear.
    fn validate_shape(
        &self,
        new: &NewJob,
    ) -> Result<&Arc<dyn crate::engine::worker::Worker>, ClientError> {
        let worker = self
            .workers
            .get(&new.kind)
            .ok_or_else(|| ClientError::UnknownKind(new.kind.clone()))?;
        if !new.args.is_object() {
            return Err(invalid("args", "must be a JSON object"));
        }
        // Postgres text and jsonb cannot hold NUL characters.
        let has_nul = |v: &serde_json::Value| v.to_string().contains("\\u0000");
        if has_nul(&new.args) || has_nul(&new.meta) {
            return Err(invalid("args", "must not contain NUL (\\u0000) characters"));
        }
        if new
            .tags
            .iter()
            .chain(new.unique_key.iter())
            .any(|t| t.contains('\0'))
            || new.kind.contains('\0')
        {
            return Err(invalid("tags", "text must not contain NUL characters"));
        }
        if !numbers_read_back(&new.args) || !numbers_read_back(&new.meta) {
            return Err(invalid(
                "args",
                format!("numbers in args and meta are at most {MAX_JSON_NUMBER:e} in magnitude"),
            ));
        }
        if new.args.to_string().len() > MAX_ARGS_BYTES {
            return Err(invalid(
                "args",
                format!("larger than {MAX_ARGS_BYTES} bytes"),
            ));
        }
        if !new.meta.is_object() {
            return Err(invalid("meta", "must be a JSON object"));
        }
        super::late_start::LatePolicy::from_meta(&new.meta).map_err(|m| invalid("meta", m))?;
        if new.meta.to_string().len() > MAX_META_BYTES {
            return Err(invalid(
                "meta",
                format!("larger than {MAX_META_BYTES} bytes"),
            ));
        }
        if new
            .created_by
            .as_ref()
            .is_some_and(|c| c.is_empty() || c.chars().count() > 200 || c.contains('\0'))
        {
            return Err(invalid("created_by", "must be 1 to 200 characters"));
        }
        if !is_valid_queue_name(&new.queue) {
            return Err(invalid(
                "queue",
                "must be 1 to 64 characters of a-z, 0-9, `_` and `-`",
            ));
        }
        super::job::check_priority(new.priority.into()).map_err(|m| invalid("priority", m))?;
        super::job::check_max_attempts(new.max_attempts.into())
            .map_err(|m| invalid("max_attempts", m))?;
        if let Some(key) = &new.unique_key {
            let n = key.chars().count();
            if n == 0 || n > MAX_UNIQUE_KEY_CHARS {
                return Err(invalid(
                    "unique_key",
                    format!("must be 1 to {MAX_UNIQUE_KEY_CHARS} characters"),
                ));
            }
            // `kind:...` is that kind's namespace (a question's `lock_question:42`): another
            // kind's job taking such a key would stand in for the job it names.
            if let Some((prefix, _)) = key.split_once(':') {
                if prefix != new.kind && self.workers.get(prefix).is_some() {
                    return Err(ClientError::Conflict(format!(
                        "unique keys `{prefix}:...` are the {prefix} jobs' own"
                    )));
                }
            }
        }
        if new.tags.len() > MAX_TAGS
            || new
                .tags
                .iter()
                .any(|t| t.is_empty() || t.chars().count() > MAX_TAG_CHARS)
        {
            return Err(invalid(
                "tags",
                format!("at most {MAX_TAGS} tags of 1 to {MAX_TAG_CHARS} characters"),
            ));
        }
        match new.schedule {
            Schedule::Now => {}
            Schedule::At(at) => check_instant("scheduled_at", at)?,
            Schedule::In(d) => {
                if d > std::time::Duration::from_secs(MAX_SCHEDULE_AHEAD_DAYS as u64 * 86_400) {
                    return Err(invalid(
                        "schedule_in_ms",
                        format!("more than {MAX_SCHEDULE_AHEAD_DAYS} days ahead"),
                    ));
                }
            }
        }
        Ok(worker)
    }

    /// What of a caller's job only Kickoff writes, refused with its name: a meta key it writes
    /// ([`super::job::RESERVED_META`]), a schedule's run's unique key, a kind only its own code
    /// inserts ([`crate::engine::Worker::kickoffs_own`]).
    fn refuse_kickoffs_own(&self, new: &NewJob) -> Result<(), ClientError> {
        if let Some(key) = super::job::reserved_meta_key(&new.meta) {
            return Err(invalid(
                "meta",
                format!(
                    "meta.{key} is set by Kickoff (reserved: {})",
                    super::job::RESERVED_META.join(", ")
                ),
            ));
        }
        if new
            .unique_key
            .as_deref()
            .is_some_and(|k| k.starts_with(SCHEDULE_KEY_PREFIX))
        {
            return Err(ClientError::Conflict(format!(
                "unique keys `{SCHEDULE_KEY_PREFIX}...` are the schedules' runs' own"
            )));
        }
        if self
            .workers
            .get(&new.kind)
            .is_some_and(|w| w.kickoffs_own())
        {
            return Err(invalid(
                "kind",
                format!(
                    "`{}` jobs are inserted by Kickoff alone (a question's): create or change the \
                     question instead",
                    new.kind
                ),
            ));
        }
        Ok(())
    }

    /// Inserts a run of a schedule in the caller's transaction (see [`Self::validate_shape`]).
    pub(crate) async fn insert_run_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<Inserted, ClientError> {
        let host = self.validate_shape(new)?.call_host(&new.args);
        let inserted = job_store::job_insert(conn, &in_current_trace(new), host.as_deref()).await?;
        refuse_foreign_holder(new, inserted)
    }

    /// Inserts a job (or returns the live job holding its unique key).
    pub async fn insert(&self, new: &NewJob) -> Result<Inserted, ClientError> {
        let mut conn = self.pool.unit().await?;
        let inserted = self.insert_with(&mut conn, new).await?;
        conn.commit().await?;
        Ok(inserted)
    }

    /// Inserts a job on the caller's connection or inside the caller's transaction
    /// (`&mut *tx`), so that it commits (or not) with the caller's own writes. Its meta may not
    /// set a key Kickoff writes ([`super::job::RESERVED_META`]).
    #[tracing::instrument(level = "debug", skip_all, fields(kind = %new.kind, queue = %new.queue))]
    pub async fn insert_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<Inserted, ClientError> {
        self.refuse_kickoffs_own(new)?;
        self.insert_own_with(conn, new).await
    }

    /// [`Self::insert_with`] for a job of Kickoff's own domains, whose meta carries the keys it
    /// writes (a question's lock job, an alert's notification, a schedule's triggered run).
    pub(crate) async fn insert_own_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<Inserted, ClientError> {
        let host = self.checked_own_with(&mut *conn, new).await?;
        let inserted = job_store::job_insert(conn, &in_current_trace(new), host.as_deref()).await?;
        refuse_foreign_holder(new, inserted)
    }

    /// Inserts like [`Client::insert_with`], in the caller's transaction, without the notifications
    /// the insert's triggers would send from it: the [`Wakeup`] sends them once the caller's
    /// transaction committed (see `announcer`). Durable commits that notify run one at a time;
    /// these do not.
    pub async fn insert_quietly_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<(Inserted, Wakeup), ClientError> {
        let host = self.checked_with(&mut *conn, new).await?;
        let inserted = job_store::job_insert_notifying(
            &mut *conn,
            &in_current_trace(new),
            host.as_deref(),
            false,
        )
        .await?;
        let inserted = refuse_foreign_holder(new, inserted)?;
        let wakeup = self.announcer.wakeup(&inserted.job, inserted.existing);
        Ok((inserted, wakeup))
    }

    /// Inserts a job and its `companion` (an audit entry) in one statement of its own, without
    /// notifications from it (the [`Wakeup`] sends them; see `announcer`): one round trip and
    /// one commit. `None` when a live job holds its unique key: nothing was written, and the
    /// caller takes the ordinary path ([`Client::insert_quietly_with`]), which finds or moves
    /// that job.
    pub async fn insert_alone(
        &self,
        new: &NewJob,
        companion: job_store::Companion<'_>,
    ) -> Result<Option<(Inserted, Wakeup)>, ClientError> {
        let mut conn = self.pool.unit().await?;
        let host = self.checked_with(&mut conn, new).await?;
        let job = job_store::job_insert_alone(
            &mut conn,
            &in_current_trace(new),
            host.as_deref(),
            companion,
        )
        .await?;
        conn.commit().await?;
        let Some(job) = job else {
            return Ok(None);
        };
        let wakeup = self.announcer.wakeup(&job, false);
        Ok(Some((
            Inserted {
                job,
                existing: false,
            },
            wakeup,
        )))
    }

    /// Inserts many jobs in one statement. Jobs with unique keys are inserted one by one.
    #[tracing::instrument(level = "debug", skip_all, fields(jobs = jobs.len()))]
    pub async fn insert_many(&self, jobs: &[NewJob]) -> Result<u64, ClientError> {
        let mut tx = self.pool.begin().await?;
        let mut hosts = Vec::with_capacity(jobs.len());
        for new in jobs {
            hosts.push(self.checked_with(&mut tx, new).await?);
        }
        let (unique, plain): (Vec<_>, Vec<_>) = jobs
            .iter()
            .zip(hosts)
            .partition(|(j, _)| j.unique_key.is_some());
        let (plain, plain_hosts): (Vec<NewJob>, Vec<Option<String>>) =
            plain.into_iter().map(|(j, host)| (j.clone(), host)).unzip();
        let mut n = job_store::job_insert_many(&mut *tx, &plain, &plain_hosts).await?;
        for (new, host) in unique {
            let inserted = job_store::job_insert(&mut tx, new, host.as_deref()).await?;
            if !refuse_foreign_holder(new, inserted)?.existing {
                n += 1;
            }
        }
        tx.commit().await?;
        Ok(n)
    }

    pub async fn get(&self, id: JobId) -> Result<Job, ClientError> {
        self.find(id)
            .await?
            .ok_or_else(|| ClientError::NotFound(format!("job {id}")))
    }

    /// The job, if it exists.
    pub async fn find(&self, id: JobId) -> Result<Option<Job>, ClientError> {
        Ok(job_store::job_get(&self.pool, id).await?)
    }

    /// The job, if it exists, read on `conn` (inside the caller's transaction, its changes
    /// included).
    pub async fn find_with(conn: &mut PgConnection, id: JobId) -> Result<Option<Job>, ClientError> {
        Ok(job_store::job_get(conn, id).await?)
    }

    /// The database's clock now (the one clock every node and every due time goes by).
    pub async fn db_now(&self) -> Result<DateTime<Utc>, ClientError> {
        Ok(job_store::db_now(&self.pool).await?)
    }

    /// How far behind its primary the server this client reads is, in milliseconds: `None` on
    /// a primary (see `store::replica`).
    pub async fn replica_lag_ms(&self) -> Result<Option<f64>, ClientError> {
        Ok(super::store::replica::replica_lag_ms(&self.pool).await?)
    }

    pub async fn list(
        &self,
        filter: &JobFilter,
        before: Option<JobId>,
        limit: i64,
    ) -> Result<Vec<Job>, ClientError> {
        check_limit(limit)?;
        check_filter(filter)?;
        Ok(job_store::job_list(&self.pool, filter, before, limit).await?)
    }

    /// Cancels a job that has not finished; an executing attempt is stopped on whichever node runs it.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn cancel(&self, id: JobId) -> Result<Job, ClientError> {
        in_transaction!(self, |tx| self.cancel_one_with(tx, id))
    }

    /// [`Self::cancel`] on the caller's connection or inside the caller's transaction.
    pub async fn cancel_one_with(
        &self,
        conn: &mut PgConnection,
        id: JobId,
    ) -> Result<Job, ClientError> {
        refuse_owned(&mut *conn, id, "cancel", true).await?;
        if self.cancel_with(&mut *conn, &[id]).await? == 0 {
            return Err(why_not(conn, id, "cancel", "it is already finished").await);
        }
        get_with(conn, id).await
    }

    /// Cancels every listed job that has not finished. Returns how many were cancelled.
    pub async fn cancel_many(&self, ids: &[JobId]) -> Result<usize, ClientError> {
        in_transaction!(self, |tx| self.cancel_with(tx, ids))
    }

    /// Cancels the listed jobs that have not finished on the caller's connection or inside the
    /// caller's transaction (`&mut *tx`); the nodes running their attempts are told at commit.
    /// Returns how many were cancelled.
    pub async fn cancel_with(
        &self,
        conn: &mut PgConnection,
        ids: &[JobId],
    ) -> Result<usize, ClientError> {
        let cancelled = job_store::job_cancel_many(&mut *conn, ids).await?;
        notify_cancelled(conn, &cancelled).await?;
        Ok(cancelled.len())
    }

    /// Runs a job again: a retryable job now, a finished one (completed, discarded, cancelled) as a
    /// rerun with at least one more attempt.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn retry(&self, id: JobId) -> Result<Job, ClientError> {
        in_transaction!(self, |tx| self.retry_with(tx, id))
    }

    /// [`Self::retry`] on the caller's connection or inside the caller's transaction.
    pub async fn retry_with(&self, conn: &mut PgConnection, id: JobId) -> Result<Job, ClientError> {
        // A lock job that ran locked its question: running it again is a second lock.
        refuse_owned(&mut *conn, id, "retry", false).await?;
        match job_store::job_retry(&mut *conn, id).await {
            Ok(Some(job)) => Ok(job),
            Ok(None) => Err(why_not(
                conn,
                id,
                "retry",
                "only retryable or finished jobs can be retried",
            )
            .await),
            Err(e) if is_unique_violation(&e) => Err(ClientError::Conflict(format!(
                "job {id} cannot run again: another live job holds its unique key"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes a waiting job (scheduled or retryable) due now.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn run_now(&self, id: JobId) -> Result<Job, ClientError> {
        in_transaction!(self, |tx| self.run_now_with(tx, id))
    }

    /// [`Self::run_now`] on the caller's connection or inside the caller's transaction.
    pub async fn run_now_with(
        &self,
        conn: &mut PgConnection,
        id: JobId,
    ) -> Result<Job, ClientError> {
        // A lock job run now would lock its question before the game.
        refuse_owned(&mut *conn, id, "run now", true).await?;
        match job_store::job_run_now(&mut *conn, id).await? {
            Some(job) => Ok(job),
            None => Err(why_not(
                conn,
                id,
                "run now",
                "only scheduled, retryable or available jobs can",
            )
            .await),
        }
    }

    /// Moves a waiting job to `at`.
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn reschedule(&self, id: JobId, at: DateTime<Utc>) -> Result<Job, ClientError> {
        in_transaction!(self, |tx| self.reschedule_with(tx, id, at))
    }

    /// [`Self::reschedule`] on the caller's connection or inside the caller's transaction.
    pub async fn reschedule_with(
        &self,
        conn: &mut PgConnection,
        id: JobId,
        at: DateTime<Utc>,
    ) -> Result<Job, ClientError> {
        check_instant("scheduled_at", at)?;
        refuse_owned(&mut *conn, id, "reschedule", true).await?;
        match job_store::job_reschedule(&mut *conn, id, at).await? {
            Some(job) => Ok(job),
            None => Err(why_not(
                conn,
                id,
                "reschedule",
                "only jobs that have not started can be",
            )
            .await),
        }
    }

    /// Deletes a job that is not executing (cancel an executing job first).
    #[tracing::instrument(level = "debug", skip(self))]
    pub async fn delete(&self, id: JobId) -> Result<(), ClientError> {
        in_transaction!(self, |tx| self.delete_with(tx, id))
    }

    /// [`Self::delete`] on the caller's connection or inside the caller's transaction.
    pub async fn delete_with(&self, conn: &mut PgConnection, id: JobId) -> Result<(), ClientError> {
        refuse_owned(&mut *conn, id, "delete", true).await?;
        if job_store::job_delete(&mut *conn, id).await? {
            Ok(())
        } else {
            Err(why_not(conn, id, "delete", "it is executing: cancel it first").await)
        }
    }

    /// What a job filter may suggest: the kinds the workers run and the queues that exist,
    /// with the kinds, queues, tags and top-level args keys of the newest
    /// [`SUGGEST_RECENT_JOBS`] jobs; each list sorted, at most [`SUGGEST_EACH`].
    pub async fn job_suggestions(&self) -> Result<job_store::JobSuggestions, ClientError> {
        let mut s =
            job_store::job_suggestions(&self.pool, SUGGEST_RECENT_JOBS, SUGGEST_EACH).await?;
        let queues = queue_store::queue_list(&self.pool).await?;
        let merge = |list: &mut Vec<String>, more: Vec<String>| {
            list.extend(more);
            list.sort();
            list.dedup();
            list.truncate(SUGGEST_EACH as usize);
        };
        merge(
            &mut s.kinds,
            self.workers.kinds().into_iter().map(String::from).collect(),
        );
        merge(&mut s.queues, queues.into_iter().map(|q| q.name).collect());
        Ok(s)
    }

    pub async fn queues(&self) -> Result<Vec<QueueRow>, ClientError> {
        Ok(queue_store::queue_list(&self.pool).await?)
    }

    /// Pauses or resumes a queue on every node.
    pub async fn set_queue_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<QueueRow, ClientError> {
        in_transaction!(self, |tx| self.set_queue_paused_with(tx, name, paused))
    }

    /// [`Self::set_queue_paused`] inside the caller's transaction (the nodes are told at commit).
    pub async fn set_queue_paused_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
        paused: bool,
    ) -> Result<QueueRow, ClientError> {
        if !is_valid_queue_name(name) {
            return Err(ClientError::NotFound(format!("queue `{name}`")));
        }
        let row = queue_store::queue_set_paused(&mut *conn, name, paused).await?;
        Control::QueueChanged(name.to_string())
            .send(&mut *conn)
            .await?;
        Ok(row)
    }

    /// Sets a queue's per-node concurrency on every node (`None`: each node's configured limit).
    pub async fn set_queue_concurrency(
        &self,
        name: &str,
        concurrency: Option<i32>,
    ) -> Result<QueueRow, ClientError> {
        in_transaction!(self, |tx| self.set_queue_concurrency_with(
            tx,
            name,
            concurrency
        ))
    }

    /// [`Self::set_queue_concurrency`] inside the caller's transaction (the nodes are told at
    /// commit).
    pub async fn set_queue_concurrency_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
        concurrency: Option<i32>,
    ) -> Result<QueueRow, ClientError> {
        if !is_valid_queue_name(name) {
            return Err(ClientError::NotFound(format!("queue `{name}`")));
        }
        if let Some(c) = concurrency {
            if !(1..=10_000).contains(&c) {
                return Err(invalid("concurrency", "must be between 1 and 10000"));
            }
        }
        let row = queue_store::queue_set_concurrency(&mut *conn, name, concurrency).await?;
        Control::QueueChanged(name.to_string())
            .send(&mut *conn)
            .await?;
        Ok(row)
    }

    /// A queue's row (`None`: the queue has no row).
    pub async fn queue(&self, name: &str) -> Result<Option<QueueRow>, ClientError> {
        Ok(queue_store::queue_get(&self.pool, name).await?)
    }

    /// A queue's row, read on the caller's connection (`None`: the queue has no row).
    pub async fn queue_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
    ) -> Result<Option<QueueRow>, ClientError> {
        Ok(queue_store::queue_get(&mut *conn, name).await?)
    }

    /// Sets a queue's limits across every node (a rate, its partition, a global concurrency) as
    /// an operator's: a node's configuration no longer overwrites them at its start.
    pub async fn set_queue_limits(
        &self,
        name: &str,
        limits: &QueueLimits,
    ) -> Result<QueueRow, ClientError> {
        in_transaction!(self, |tx| self.set_queue_limits_with(tx, name, limits))
    }

    /// [`Self::set_queue_limits`] inside the caller's transaction (the nodes are told at commit).
    pub async fn set_queue_limits_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
        limits: &QueueLimits,
    ) -> Result<QueueRow, ClientError> {
        if !is_valid_queue_name(name) {
            return Err(ClientError::NotFound(format!("queue `{name}`")));
        }
        limits.check().map_err(|e| invalid("limits", e))?;
        let row = queue_store::queue_set_limits(&mut *conn, name, limits, "operator").await?;
        Control::QueueChanged(name.to_string())
            .send(&mut *conn)
            .await?;
        Ok(row)
    }

    /// Attempts started in the current window of each rate-limited queue: `(queue, used, limit)`.
    pub async fn queue_window_use(&self) -> Result<Vec<(String, i64, i32)>, ClientError> {
        Ok(queue_store::queue_window_use(&self.pool).await?)
    }

    /// Where each queue with limits across every node stands: its current window's use and the
    /// available jobs its limits hold back (of the first [`limits::PARTITION_SCAN`]).
    pub async fn queue_limit_use(&self) -> Result<Vec<queue_store::LimitUse>, ClientError> {
        Ok(queue_store::queue_limit_use(&self.pool, limits::PARTITION_SCAN).await?)
    }

    /// The room `queue`'s limits leave now for `job` (its key's use of the current rate window,
    /// the attempts executing on all nodes).
    pub async fn queue_limit_room(
        &self,
        queue: &str,
        job: &Job,
    ) -> Result<Option<queue_store::LimitRoom>, ClientError> {
        Ok(queue_store::queue_limit_room(&self.pool, queue, job).await?)
    }

    /// The kinds paused on every node.
    pub async fn paused_kinds(&self) -> Result<Vec<KindPause>, ClientError> {
        Ok(kind_store::kind_pause_list(&self.pool).await?)
    }

    /// Every kind this node's workers run and any other kind paused (a kind another release
    /// runs), sorted, each with its pause if it is paused: what the kinds' pages list.
    pub async fn kinds_and_pauses(&self) -> Result<Vec<(String, Option<KindPause>)>, ClientError> {
        let mut kinds: std::collections::BTreeMap<String, Option<KindPause>> = self
            .workers()
            .kinds()
            .into_iter()
            .map(|kind| (kind.to_string(), None))
            .collect();
        for pause in self.paused_kinds().await? {
            kinds.insert(pause.kind.clone(), Some(pause));
        }
        Ok(kinds.into_iter().collect())
    }

    /// Pauses a kind on every node: no node claims its jobs (they stay as they are: available,
    /// scheduled) until it is resumed; attempts already running finish. Pausing a paused kind
    /// keeps the first pause. A kind no worker of this node runs is refused.
    pub async fn pause_kind_with(
        &self,
        conn: &mut PgConnection,
        kind: &str,
        by: Option<&str>,
    ) -> Result<KindPause, ClientError> {
        if self.workers.get(kind).is_none() {
            return Err(ClientError::UnknownKind(kind.to_string()));
        }
        let row = kind_store::kind_pause(&mut *conn, kind, by).await?;
        Control::KindsChanged.send(&mut *conn).await?;
        Ok(row)
    }

    /// Resumes a paused kind on every node. Returns whether it was paused.
    pub async fn resume_kind_with(
        &self,
        conn: &mut PgConnection,
        kind: &str,
    ) -> Result<bool, ClientError> {
        let was = kind_store::kind_resume(&mut *conn, kind).await?;
        if was {
            Control::KindsChanged.send(&mut *conn).await?;
        }
        Ok(was)
    }

    /// [`Self::pause_kind_with`] in a transaction of its own.
    pub async fn pause_kind(&self, kind: &str, by: Option<&str>) -> Result<KindPause, ClientError> {
        in_transaction!(self, |tx| self.pause_kind_with(tx, kind, by))
    }

    /// [`Self::resume_kind_with`] in a transaction of its own.
    pub async fn resume_kind(&self, kind: &str) -> Result<bool, ClientError> {
        in_transaction!(self, |tx| self.resume_kind_with(tx, kind))
    }

    /// Job counts per queue and state (states without jobs left out), from the maintained counts:
    /// exact, and as fast at a million jobs as at ten.
    pub async fn counts(&self) -> Result<Vec<(String, JobState, i64)>, ClientError> {
        Ok(stats_store::job_counts_list(&self.pool).await?)
    }

    /// Completed and failed attempts per minute over the last `minutes` minutes (1 to 120),
    /// including the current one, oldest first, one entry per minute.
    pub async fn throughput(&self, minutes: i32) -> Result<Vec<ThroughputMinute>, ClientError> {
        let most = (STATS_RETENTION.as_secs() / 60) as i32;
        if !(1..=most).contains(&minutes) {
            return Err(invalid("minutes", format!("must be between 1 and {most}")));
        }
        Ok(stats_store::job_stats_minute_list(&self.pool, minutes).await?)
    }

    /// The records of a job's attempts that ended, oldest first (empty for an unknown job).
    pub async fn attempts(&self, id: JobId) -> Result<Vec<AttemptRecord>, ClientError> {
        Ok(history_store::job_attempts_of(&self.pool, id).await?)
    }

    /// What `job`'s running attempt (its current claim) has logged and recorded so far, as a record
    /// whose outcome is `running`, when its node wrote any (it does once a second for an attempt
    /// that ran a second or longer and logged since); `None` for a job not running.
    pub async fn attempt_so_far(&self, job: &Job) -> Result<Option<AttemptRecord>, ClientError> {
        let Some(claim) = job.claim().filter(|_| job.state == JobState::Executing) else {
            return Ok(None);
        };
        let live = job_store::attempt_live_of(&self.pool, claim).await?;
        let started_at = job.attempted_at.unwrap_or(job.scheduled_at);
        Ok(live.map(|(output, logs, logs_dropped)| AttemptRecord {
            job_id: job.id,
            attempt: job.attempt,
            node: job.attempted_by.clone().unwrap_or_default(),
            due_at: job.scheduled_at,
            started_at,
            finished_at: started_at,
            late_ms: (started_at - job.scheduled_at)
                .num_microseconds()
                .map_or(0.0, |us| us as f64 / 1000.0),
            duration_ms: 0.0,
            outcome: "running".into(),
            error: None,
            output,
            logs,
            logs_dropped,
        }))
    }

    /// The latest completed attempt of each of these jobs.
    pub async fn completed_attempts(
        &self,
        ids: &[JobId],
    ) -> Result<Vec<AttemptRecord>, ClientError> {
        Ok(history_store::job_attempts_last(&self.pool, ids, "completed").await?)
    }

    /// The id of the schedule named `name`, if there is one.
    pub async fn schedule_id(&self, name: &str) -> Result<Option<i64>, ClientError> {
        Ok(schedule_store::schedule_get(&self.pool, name)
            .await?
            .map(|s| s.id))
    }

    /// The history's filter, its schedule named (`NotFound` for a name no schedule has): what
    /// the API's and the dashboard's history ask for.
    pub async fn history_filter(
        &self,
        queue: Option<String>,
        kind: Option<String>,
        schedule: Option<&str>,
    ) -> Result<HistoryFilter, ClientError> {
        let schedule_id = match schedule {
            None => None,
            Some(name) => Some(
                self.schedule_id(name)
                    .await?
                    .ok_or_else(|| ClientError::NotFound(format!("schedule {name}")))?,
            ),
        };
        Ok(HistoryFilter {
            queue,
            kind,
            schedule_id,
        })
    }

    /// The history of the attempts `q` selects (see [`HistoryQuery`]), refused when its range
    /// or step is not one the rollups can answer.
    pub async fn history(&self, q: &HistoryQuery) -> Result<Vec<HistoryPoint>, ClientError> {
        let now = self.db_now().await?;
        q.check(now)?;
        Ok(self
            .history
            .series(&self.pool, &q.filter, q.group, q.from, q.to, q.step, now)
            .await?)
    }

    /// The nodes alive (heartbeat within [`NODE_ALIVE_WITHIN`]), oldest first, and the current
    /// leader, if its lease has not expired.
    pub async fn nodes(&self) -> Result<(Vec<NodeRow>, Option<LeaderRow>), ClientError> {
        let nodes =
            node_store::node_list_alive(&self.pool, NODE_ALIVE_WITHIN.as_secs_f64()).await?;
        let leader = leader_store::leader_get(&self.pool, LEADER_NAME).await?;
        Ok((nodes, leader))
    }

    /// Up to `limit` jobs waiting to run (scheduled, retryable, available), oldest `scheduled_at`
    /// first, so overdue jobs lead; and the database clock, read in the same transaction, to
    /// measure countdowns and lateness against.
    pub async fn timers(&self, limit: i64) -> Result<(Vec<Job>, DateTime<Utc>), ClientError> {
        check_limit(limit)?;
        let mut tx = self.pool.begin().await?;
        let jobs = job_store::job_list_waiting(&mut *tx, limit).await?;
        let now = job_store::db_now(&mut *tx).await?;
        tx.commit().await?;
        Ok((jobs, now))
    }

    /// How many jobs match `filter`, counting at most `cap`.
    ///
    /// A filter on states and queue only (and `max_id`) is answered from the maintained counts,
    /// exactly and at once: "all 800,000 completed jobs" needs no scan. Other filters count rows,
    /// stopping at `cap`.
    pub async fn count_matching(&self, filter: &JobFilter, cap: i64) -> Result<i64, ClientError> {
        check_filter(filter)?;
        if cap < 1 {
            return Err(invalid("cap", "must be at least 1"));
        }
        let n = if filter.is_counted() {
            stats_store::job_counts_total(
                &self.pool,
                &filter.states,
                filter.queue.as_deref(),
                filter.max_id,
            )
            .await?
            .min(cap)
        } else {
            job_store::job_count_matching(&self.pool, filter, cap).await?
        };
        Ok(n)
    }

    /// Applies `action` to the listed jobs (at most [`MAX_BULK_IDS`]; duplicates count once), in
    /// one transaction.
    #[tracing::instrument(level = "debug", skip_all, fields(action = ?action, jobs = ids.len()))]
    pub async fn bulk_ids(
        &self,
        action: BulkAction,
        ids: &[JobId],
    ) -> Result<BulkReport, ClientError> {
        in_transaction!(self, |tx| self.bulk_ids_with(tx, action, ids))
    }

    /// [`Self::bulk_ids`] on the caller's connection or inside the caller's transaction.
    pub async fn bulk_ids_with(
        &self,
        conn: &mut PgConnection,
        action: impl Into<BulkChange>,
        ids: &[JobId],
    ) -> Result<BulkReport, ClientError> {
        if ids.len() > MAX_BULK_IDS {
            return Err(invalid(
                "ids",
                format!("at most {MAX_BULK_IDS} ids at once; act on a filter for more"),
            ));
        }
        let change = action.into();
        check_change(&change)?;
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut report = BulkReport::default();
        bulk_batch(
            self,
            conn,
            &change,
            &ids,
            &JobFilter::default(),
            &mut report,
        )
        .await?;
        report.skipped = ids.len() as u64 - report.changed - report.refused;
        Ok(report)
    }

    /// Applies `action` to every job matching `filter`, newest first, in batches of
    /// [`BULK_BATCH`], each in a short transaction of its own, so no lock is held for long and
    /// workers keep completing jobs meanwhile. Jobs with an id above `filter.max_id` (the snapshot
    /// the operator confirmed; when `None`, the newest id at the start) are left alone, so jobs
    /// inserted during the action are not touched.
    ///
    /// Not atomic: an error stops the walk with the batches before it applied.
    pub async fn bulk_filter(
        &self,
        action: impl Into<BulkChange>,
        filter: &JobFilter,
    ) -> Result<BulkReport, ClientError> {
        let mut walk = self.bulk_walk(action, filter).await?;
        while let Some(batch) = walk.next().await? {
            walk.commit(batch).await?;
        }
        Ok(walk.report)
    }

    /// [`Self::bulk_filter`] one batch at a time, so that the caller can add to each batch's
    /// transaction (an audit entry, say) before it commits.
    pub async fn bulk_walk(
        &self,
        action: impl Into<BulkChange>,
        filter: &JobFilter,
    ) -> Result<BulkWalk, ClientError> {
        check_filter(filter)?;
        let action = action.into();
        check_change(&action)?;
        let mut filter = filter.clone();
        let mut done = false;
        if filter.max_id.is_none() {
            match job_store::job_max_id(&self.pool).await? {
                Some(newest) => filter.max_id = Some(newest),
                None => done = true,
            }
        }
        Ok(BulkWalk {
            client: self.clone(),
            action,
            filter,
            before: None,
            done,
            report: BulkReport::default(),
        })
    }

    /// Inserts a copy of a job (queue, kind, args, priority, max attempts, tags, meta; no unique
    /// key), due now. The copy is checked like any new job: a kind no longer registered is refused.
    pub async fn clone_job(&self, id: JobId) -> Result<Job, ClientError> {
        in_transaction!(self, |tx| self.clone_job_with(tx, id))
    }

    /// [`Self::clone_job`] on the caller's connection or inside the caller's transaction.
    pub async fn clone_job_with(
        &self,
        conn: &mut PgConnection,
        id: JobId,
    ) -> Result<Job, ClientError> {
        let mut job = get_with(&mut *conn, id).await?;
        // An alert's notification is Kickoff's own job, and its URL's path is the rule's secret
        // (hidden by what its meta says): a copy would be neither.
        if ["alert_incident", "alert_rule"]
            .iter()
            .any(|k| job.meta.get(k).is_some())
        {
            return Err(ClientError::Conflict(format!(
                "job {id} is an alert's notification, Kickoff's own: retry it instead of copying it"
            )));
        }
        if let Some(field) = &job.unreadable {
            return Err(ClientError::Conflict(format!(
                "job {id} cannot be read as stored ({field}): it cannot be copied"
            )));
        }
        // The copy is nobody's: not its original's owner's (who knows only the original), nor a
        // run of its schedule. Kickoff's keys stay with the original.
        if let Some(meta) = job.meta.as_object_mut() {
            for key in super::job::RESERVED_META {
                meta.remove(key);
            }
        }
        let new = NewJob {
            kind: job.kind,
            args: job.args,
            queue: job.queue,
            priority: job.priority,
            max_attempts: job.max_attempts,
            schedule: Schedule::Now,
            unique_key: None,
            on_conflict: Default::default(),
            tags: job.tags,
            meta: job.meta,
            // The copy's args are its original's author's, secrets included.
            created_by: job.created_by,
        };
        Ok(self.insert_with(conn, &new).await?.job)
    }
}

/// A bulk action on a filter, walked one batch at a time (see [`Client::bulk_walk`]).
pub struct BulkWalk {
    client: Client,
    action: BulkChange,
    filter: JobFilter,
    /// Where the next batch starts (the last batch's oldest id).
    before: Option<JobId>,
    done: bool,
    /// What the committed batches did.
    pub report: BulkReport,
}

/// One batch of a [`BulkWalk`]: its change made in its own transaction, not committed yet.
pub struct BulkBatch {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    /// What the batch did (its `skipped` not counted yet).
    done: BulkReport,
    listed: u64,
}

impl BulkBatch {
    /// The batch's transaction, to add to before it commits.
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// How many jobs the batch changed.
    pub fn changed(&self) -> u64 {
        self.done.changed
    }
}

impl BulkWalk {
    /// The next batch, applied and not committed; `None` once every matching job was walked.
    pub async fn next(&mut self) -> Result<Option<BulkBatch>, ClientError> {
        if self.done {
            return Ok(None);
        }
        let pool = &self.client.pool;
        let ids = job_store::job_list_ids(pool, &self.filter, self.before, BULK_BATCH).await?;
        let Some(&oldest) = ids.last() else {
            self.done = true;
            return Ok(None);
        };
        self.before = Some(oldest);
        self.done = (ids.len() as i64) < BULK_BATCH;
        let mut tx = pool.begin().await?;
        let mut done = BulkReport::default();
        bulk_batch(
            &self.client,
            &mut tx,
            &self.action,
            &ids,
            &self.filter,
            &mut done,
        )
        .await?;
        Ok(Some(BulkBatch {
            tx,
            done,
            listed: ids.len() as u64,
        }))
    }

    /// Whether the batch [`Self::next`] gave last was the walk's last (a short one). A walk that
    /// ends on a full batch learns it only from the next `None`.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Commits a batch and counts it in [`Self::report`].
    pub async fn commit(&mut self, batch: BulkBatch) -> Result<(), ClientError> {
        batch.tx.commit().await?;
        let done = batch.done;
        self.report.changed += done.changed;
        self.report.refused += done.refused;
        self.report.skipped += batch.listed - done.changed - done.refused;
        if self.report.refusal.is_none() {
            self.report.refusal = done.refusal;
        }
        Ok(())
    }
}

/// The job, read on `conn` (so inside the caller's transaction, its own changes included).
async fn get_with(conn: &mut PgConnection, id: JobId) -> Result<Job, ClientError> {
    job_store::job_get(conn, id)
        .await?
        .ok_or_else(|| ClientError::NotFound(format!("job {id}")))
}

/// The error for an operation whose guarded update matched no row: the job is missing, or its
/// state does not allow the operation.
async fn why_not(conn: &mut PgConnection, id: JobId, op: &str, rule: &str) -> ClientError {
    match job_store::job_get(conn, id).await {
        Ok(Some(job)) => ClientError::Conflict(format!(
            "cannot {op} job {id} while it is {}: {rule}",
            job.state.as_str()
        )),
        Ok(None) => ClientError::NotFound(format!("job {id}")),
        Err(e) => ClientError::Database(e),
    }
}

/// An operator's cancel, reschedule, delete or run now of a job that belongs to something else (a
/// question's lock job: `meta.owner`) while it lives (`live`), or its retry at any time: refused,
/// because its owner's promise rests on it (a question locks at its game time, once). The
/// owner's own code moves and ends it (`cancel_with`, an insert with `OnConflict::Reschedule`); a
/// bulk action skips it.
async fn refuse_owned(
    conn: &mut PgConnection,
    id: JobId,
    action: &str,
    live: bool,
) -> Result<(), ClientError> {
    match job_store::job_owner(conn, id, live).await? {
        Some(owner) => Err(ClientError::Conflict(format!(
            "job {id} belongs to {owner}, which moves, runs and ends it: cannot {action} it by \
             itself (change {owner} instead)"
        ))),
        None => Ok(()),
    }
}

/// One batch of a bulk action on `conn`: the listed jobs that still match `filter`. Returns how
/// many changed.
async fn bulk_batch(
    client: &Client,
    conn: &mut PgConnection,
    change: &BulkChange,
    ids: &[JobId],
    filter: &JobFilter,
    report: &mut BulkReport,
) -> Result<(), ClientError> {
    if ids.is_empty() {
        return Ok(());
    }
    let action = match change {
        BulkChange::Action(action) => *action,
        BulkChange::Shift { by_ms } => {
            let (earliest, latest) = crate::engine::job_edit::shift_window(Utc::now());
            report.changed +=
                job_store::job_shift_matching(&mut *conn, ids, filter, *by_ms, earliest, latest)
                    .await?;
            return Ok(());
        }
        BulkChange::Edit(edit) => {
            for job in job_store::job_lock_waiting_matching(&mut *conn, ids, filter).await? {
                match client.write_edit(conn, &job, edit).await {
                    Ok(Some(_)) => report.changed += 1,
                    Ok(None) => {}
                    // A job its own state refuses (its attempts made) is counted, as an invalid
                    // one is: the others of the batch go on.
                    Err(e) if e.is_refusal() || matches!(e, ClientError::Conflict(_)) => {
                        report.refused += 1;
                        report
                            .refusal
                            .get_or_insert_with(|| format!("job {}: {e}", job.id));
                    }
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        }
    };
    report.changed += match action {
        BulkAction::Cancel => {
            let cancelled = job_store::job_cancel_matching(&mut *conn, ids, filter).await?;
            notify_cancelled(conn, &cancelled).await?;
            cancelled.len() as u64
        }
        BulkAction::Retry => match retry_matching(conn, ids, filter).await? {
            Some(n) => n,
            // A job took one of the batch's unique keys after the statement's snapshot: the
            // statement failed as a whole (and was undone to its savepoint), so go one job at a
            // time, skipping the conflicts.
            None => {
                let mut n = 0;
                for id in ids {
                    n += retry_matching(conn, &[*id], filter).await?.unwrap_or(0);
                }
                n
            }
        },
        BulkAction::RunNow => job_store::job_run_now_matching(&mut *conn, ids, filter).await?,
        BulkAction::Delete => job_store::job_delete_matching(&mut *conn, ids, filter).await?,
    };
    Ok(())
}

/// Retries the listed jobs that match `filter` under a savepoint; `None` when a unique key
/// conflict undid them (the caller's transaction carries on).
async fn retry_matching(
    conn: &mut PgConnection,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<Option<u64>, ClientError> {
    let mut savepoint = sqlx::Connection::begin(&mut *conn).await?;
    match job_store::job_retry_matching(&mut *savepoint, ids, filter).await {
        Ok(n) => {
            savepoint.commit().await?;
            Ok(Some(n))
        }
        Err(e) if is_unique_violation(&e) => {
            savepoint.rollback().await?;
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Tells the nodes running the cancelled jobs that were executing to stop them; sent at commit,
/// with the cancellation. Each attempt is named by its claim, so that a node which already runs
/// a newer attempt of the job (retried and claimed again at once) stops only the cancelled one.
pub(crate) async fn notify_cancelled(
    conn: &mut PgConnection,
    cancelled: &[job_store::CancelledJob],
) -> Result<(), sqlx::Error> {
    let claims: Vec<Claim> = cancelled.iter().filter_map(|c| c.claim()).collect();
    for message in Control::stop_claims(&claims) {
        message.send(&mut *conn).await?;
    }
    Ok(())
}

/// What is wrong with a bulk change itself, before any job is read: an edit's own rules, a move
/// past the schedulable range.
fn check_change(change: &BulkChange) -> Result<(), ClientError> {
    match change {
        BulkChange::Action(_) => Ok(()),
        BulkChange::Edit(edit) => Ok(edit.check()?),
        BulkChange::Shift { by_ms } => {
            if by_ms.unsigned_abs() > crate::engine::job_edit::MAX_SHIFT_MS as u64 {
                return Err(invalid("by_ms", "at most 10 years either way"));
            }
            Ok(())
        }
    }
}

fn check_limit(limit: i64) -> Result<(), ClientError> {
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(invalid(
            "limit",
            format!("must be between 1 and {MAX_PAGE}"),
        ));
    }
    Ok(())
}

/// A filter's args must be an object: the args of every job are, so anything else matches nothing
/// and is surely a mistake.
fn check_filter(filter: &JobFilter) -> Result<(), ClientError> {
    if filter.args.as_ref().is_some_and(|a| !a.is_object()) {
        return Err(invalid("args", "the args filter must be a JSON object"));
    }
    if filter.tags.iter().any(|t| t.contains('\0'))
        || filter.error.as_ref().is_some_and(|e| e.contains('\0'))
    {
        return Err(invalid("tags", "text must not contain NUL characters"));
    }
    Ok(())
}

fn check_instant(field: &'static str, at: DateTime<Utc>) -> Result<(), ClientError> {
    let now = Utc::now();
    if at > now + ChronoDuration::days(MAX_SCHEDULE_AHEAD_DAYS) {
        return Err(ClientError::OutOfWindow {
            field,
            message: format!("more than {MAX_SCHEDULE_AHEAD_DAYS} days ahead"),
        });
    }
    if at < now - ChronoDuration::hours(MAX_SCHEDULE_PAST_HOURS) {
        return Err(ClientError::OutOfWindow {
            field,
            message: format!("more than {MAX_SCHEDULE_PAST_HOURS} hours in the past"),
        });
    }
    Ok(())
}

/// Whether a database error is a unique-constraint violation.
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}
