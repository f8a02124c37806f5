//! The engine's client: what applications and operators do to jobs and queues. It validates input
//! before anything is written and maps guarded updates that matched no row to clear errors.

use std::sync::Arc;

use crate::db::{in_transaction, Db};
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use sqlx::PgConnection;

use super::announcer::{Announcer, Wakeup};
use super::history_cache::HistoryCache;
use super::job::{Inserted, Job, JobId, NewJob, Schedule};
use super::store::jobs::{self as job_store, JobFilter};
use super::worker::Workers;

pub use super::job::{
    MAX_ARGS_BYTES, MAX_JSON_NUMBER, MAX_META_BYTES, MAX_SCHEDULE_AHEAD_DAYS,
    MAX_SCHEDULE_PAST_HOURS, MAX_TAGS, MAX_TAG_CHARS, MAX_UNIQUE_KEY_CHARS,
};
/// The largest page of a listing.
pub const MAX_PAGE: i64 = 500;
impl From<crate::engine::job_edit::EditRefused> for ClientError {
    fn from(e: crate::engine::job_edit::EditRefused) -> Self {
        if e.by_the_job {
            // The job's state refuses it (409), as an edit of a running job is.
            return ClientError::Conflict(format!("{}: {}", e.field, e.message));
        }
        invalid(e.field, e.message)
    }
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
    Database(sqlx::Error),
}

/// The fields the SQL rules (`kickoff_check_job`, `kickoff_check_question`, the SQL actions of
/// migration `20261231000001_sql_actions.sql`) name in a refusal's COLUMN.
const RULE_FIELDS: [&str; 20] = [
    "kind",
    "args",
    "meta",
    "tags",
    "queue",
    "priority",
    "max_attempts",
    "unique_key",
    "scheduled_at",
    "schedule_in_ms",
    "created_by",
    "id",
    "run",
    "name",
    "payload",
    "source",
    "game",
    "prompt",
    "choices",
    "game_time",
];

/// A refusal of the rules every insert applies (`kickoff_check_job`, SQLSTATE class `KO`: see
/// migration `20261230000001_sql_inserts.sql`) or of another SQL action (`KO005`: not found),
/// read back into the error the engine answers.
fn rule_refusal(e: &sqlx::Error) -> Option<ClientError> {
    let db = e.as_database_error()?;
    let code = db.code()?;
    if !code.starts_with("KO") {
        return None;
    }
    let column = db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .and_then(|pg| pg.column())
        .unwrap_or("job");
    let field = RULE_FIELDS
        .into_iter()
        .find(|f| *f == column)
        .unwrap_or("job");
    let message = db.message();
    let message = message
        .strip_prefix(column)
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message)
        .to_string();
    Some(match code.as_ref() {
        "KO002" => ClientError::UnknownKind(
            message
                .trim_start_matches("unknown job kind `")
                .trim_end_matches('`')
                .to_string(),
        ),
        "KO003" => ClientError::Conflict(message),
        "KO004" => ClientError::OutOfWindow { field, message },
        "KO005" => ClientError::NotFound(message.trim_end_matches(" not found").to_string()),
        _ => ClientError::Invalid { field, message },
    })
}

impl From<sqlx::Error> for ClientError {
    fn from(e: sqlx::Error) -> Self {
        rule_refusal(&e).unwrap_or(ClientError::Database(e))
    }
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

/// `new` continuing the trace of the span the insert runs in (an API call's, say), when traces are
/// exported and it does not name one itself: a question's lock job, a schedule's triggered run
/// and every job a traced request inserts join its trace.
pub(super) fn in_current_trace(new: &NewJob) -> std::borrow::Cow<'_, NewJob> {
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

pub(crate) fn inconsistent(field: &'static str, message: impl Into<String>) -> ClientError {
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
    pub(super) pool: Db,
    pub(super) workers: Arc<Workers>,
    pub(super) announcer: Announcer,
    /// The closed steps of long history series (shared by this client's clones).
    pub(super) history: Arc<HistoryCache>,
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

    /// Inserts a run of a schedule in the caller's transaction (see [`Self::known_worker`]).
    pub(crate) async fn insert_run_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<Inserted, ClientError> {
        let host = self.known_worker(new)?.call_host(&new.args);
        let rules = self.rules(true);
        let inserted =
            job_store::job_insert(conn, &in_current_trace(new), host.as_deref(), rules).await?;
        refuse_foreign_holder(new, inserted)
    }

    /// Inserts a job (or returns the live job holding its unique key).
    pub async fn insert(&self, new: &NewJob) -> Result<Inserted, ClientError> {
        let mut conn = self.pool.unit().await?;
        let inserted = self.insert_with(&mut conn, new).await?;
        conn.commit().await?;
        let job = &inserted.job;
        self.announcer
            .tell_here_of(&job.queue, job.state, job.scheduled_at.timestamp_millis());
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
        self.insert_as(conn, new, false).await
    }

    /// [`Self::insert_with`] for a job of Kickoff's own domains, whose meta carries the keys it
    /// writes (a question's lock job, an alert's notification, a schedule's triggered run).
    pub(crate) async fn insert_own_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<Inserted, ClientError> {
        self.insert_as(conn, new, true).await
    }

    async fn insert_as(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
        as_kickoff: bool,
    ) -> Result<Inserted, ClientError> {
        let host = self.worker_checked(&mut *conn, new, as_kickoff).await?;
        let rules = self.rules(as_kickoff);
        let inserted =
            job_store::job_insert(conn, &in_current_trace(new), host.as_deref(), rules).await?;
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
        let host = self.worker_checked(&mut *conn, new, false).await?;
        let inserted = job_store::job_insert_notifying(
            &mut *conn,
            &in_current_trace(new),
            host.as_deref(),
            self.rules(false),
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
        let host = self.worker_checked(&mut conn, new, false).await?;
        let job = job_store::job_insert_alone(
            &mut conn,
            &in_current_trace(new),
            host.as_deref(),
            self.rules(false),
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
            hosts.push(self.worker_checked(&mut tx, new, false).await?);
        }
        let (unique, plain): (Vec<_>, Vec<_>) = jobs
            .iter()
            .zip(hosts)
            .partition(|(j, _)| j.unique_key.is_some());
        let (plain, plain_hosts): (Vec<NewJob>, Vec<Option<String>>) =
            plain.into_iter().map(|(j, host)| (j.clone(), host)).unzip();
        let rules = self.rules(false);
        let mut n = job_store::job_insert_many(&mut *tx, &plain, &plain_hosts, rules).await?;
        for (new, host) in unique {
            let inserted = job_store::job_insert(&mut tx, new, host.as_deref(), rules).await?;
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

    /// [`Self::cancel`] on the caller's connection or inside the caller's transaction: the
    /// SQL function `kickoff_cancel_job`, which an application calls from its own (the one
    /// place a cancel's rules are written: not a job that belongs to something else, such as a
    /// question's lock job, while it lives; not a finished one).
    pub async fn cancel_one_with(
        &self,
        conn: &mut PgConnection,
        id: JobId,
    ) -> Result<Job, ClientError> {
        Ok(job_store::job_cancel_one(conn, id).await?)
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
        // A lock job run now would lock its question before the game; a step's first start
        // before its run's time.
        refuse_owned(&mut *conn, id, "run now", true).await?;
        refuse_step_start(&mut *conn, id, "run it now").await?;
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
        refuse_step_start(&mut *conn, id, "reschedule it").await?;
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
        Ok(Some(job)) if job.step_id.is_some() && job.finalized_at.is_some() => {
            ClientError::Conflict(format!(
                "cannot {op} job {id}: it is the job of a workflow step that settled with it \
                 (a step runs again through its run)"
            ))
        }
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

/// An operator's run now or reschedule of a workflow step's job before its first start: refused,
/// because the step starts when its run lets it (its dependencies, its signal, its time: a
/// timer run now fired before its run's time). Its run's times move it, a skip ends it; once it
/// ran, a retry's wait is the job's own and may be hurried.
async fn refuse_step_start(
    conn: &mut PgConnection,
    id: JobId,
    action: &str,
) -> Result<(), ClientError> {
    match job_store::job_step_before_start(conn, id).await? {
        Some(step) => Err(ClientError::Conflict(format!(
            "job {id} is the job of workflow step {step}, which starts when its run lets it: \
             cannot {action} before its first start (move the run's times, or skip the step)"
        ))),
        None => Ok(()),
    }
}

pub(super) fn check_limit(limit: i64) -> Result<(), ClientError> {
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
pub(super) fn check_filter(filter: &JobFilter) -> Result<(), ClientError> {
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

pub(super) fn check_instant(field: &'static str, at: DateTime<Utc>) -> Result<(), ClientError> {
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
