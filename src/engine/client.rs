//! The engine's client: what applications and operators do to jobs and queues. It validates input
//! before anything is written and maps guarded updates that matched no row to clear errors.

use std::sync::Arc;

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde_json::json;
use sqlx::{PgConnection, PgPool};

use super::job::{Inserted, Job, JobId, JobState, NewJob, Schedule};
use super::store::jobs::{self as job_store, JobFilter};
use super::store::queues::{self as queue_store, QueueRow};
use super::worker::Workers;

/// Limits on what a job may carry.
pub const MAX_ARGS_BYTES: usize = 256 * 1024;
pub const MAX_META_BYTES: usize = 16 * 1024;
pub const MAX_TAGS: usize = 20;
pub const MAX_TAG_CHARS: usize = 100;
pub const MAX_UNIQUE_KEY_CHARS: usize = 255;
/// How far ahead a job may be scheduled.
pub const MAX_SCHEDULE_AHEAD_DAYS: i64 = 3650;
/// How far in the past an absolute `scheduled_at` may lie (it then runs at once); older instants
/// are almost surely a client's mistake (a wrong year, seconds taken for milliseconds).
pub const MAX_SCHEDULE_PAST_HOURS: i64 = 24;
/// The largest page of a listing.
pub const MAX_PAGE: i64 = 500;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("unknown job kind `{0}`")]
    UnknownKind(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

fn invalid(field: &'static str, message: impl Into<String>) -> ClientError {
    ClientError::Invalid {
        field,
        message: message.into(),
    }
}

/// Whether a name fits a queue (`[a-z0-9_-]{1,64}`).
pub fn is_valid_queue_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Inserts jobs and acts on them. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    pool: PgPool,
    workers: Arc<Workers>,
}

impl Client {
    pub fn new(pool: PgPool, workers: Arc<Workers>) -> Self {
        Client { pool, workers }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn workers(&self) -> &Workers {
        &self.workers
    }

    /// Checks a new job before anything is written.
    pub fn validate(&self, new: &NewJob) -> Result<(), ClientError> {
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
        if new.args.to_string().len() > MAX_ARGS_BYTES {
            return Err(invalid(
                "args",
                format!("larger than {MAX_ARGS_BYTES} bytes"),
            ));
        }
        if !new.meta.is_object() {
            return Err(invalid("meta", "must be a JSON object"));
        }
        if new.meta.to_string().len() > MAX_META_BYTES {
            return Err(invalid(
                "meta",
                format!("larger than {MAX_META_BYTES} bytes"),
            ));
        }
        if !is_valid_queue_name(&new.queue) {
            return Err(invalid(
                "queue",
                "must be 1 to 64 characters of a-z, 0-9, `_` and `-`",
            ));
        }
        if !(0..=9).contains(&new.priority) {
            return Err(invalid("priority", "must be between 0 (highest) and 9"));
        }
        if !(1..=1000).contains(&new.max_attempts) {
            return Err(invalid("max_attempts", "must be between 1 and 1000"));
        }
        if let Some(key) = &new.unique_key {
            let n = key.chars().count();
            if n == 0 || n > MAX_UNIQUE_KEY_CHARS {
                return Err(invalid(
                    "unique_key",
                    format!("must be 1 to {MAX_UNIQUE_KEY_CHARS} characters"),
                ));
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
        worker.validate(&new.args).map_err(|m| invalid("args", m))
    }

    /// Inserts a job (or returns the live job holding its unique key).
    pub async fn insert(&self, new: &NewJob) -> Result<Inserted, ClientError> {
        let mut conn = self.pool.acquire().await?;
        self.insert_with(&mut conn, new).await
    }

    /// Inserts a job on the caller's connection or inside the caller's transaction
    /// (`&mut *tx`), so that it commits (or not) with the caller's own writes.
    pub async fn insert_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<Inserted, ClientError> {
        self.validate(new)?;
        job_store::job_insert(conn, new)
            .await
            .map_err(ClientError::from)
    }

    /// Inserts many jobs in one statement. Jobs with unique keys are inserted one by one.
    pub async fn insert_many(&self, jobs: &[NewJob]) -> Result<u64, ClientError> {
        for new in jobs {
            self.validate(new)?;
        }
        let (unique, plain): (Vec<&NewJob>, Vec<&NewJob>) =
            jobs.iter().partition(|j| j.unique_key.is_some());
        let plain: Vec<NewJob> = plain.into_iter().cloned().collect();
        let mut tx = self.pool.begin().await?;
        let mut n = job_store::job_insert_many(&mut *tx, &plain).await?;
        for new in unique {
            if !job_store::job_insert(&mut tx, new).await?.existing {
                n += 1;
            }
        }
        tx.commit().await?;
        Ok(n)
    }

    pub async fn get(&self, id: JobId) -> Result<Job, ClientError> {
        job_store::job_get(&self.pool, id)
            .await?
            .ok_or_else(|| ClientError::NotFound(format!("job {id}")))
    }

    pub async fn list(
        &self,
        filter: &JobFilter,
        before: Option<JobId>,
        limit: i64,
    ) -> Result<Vec<Job>, ClientError> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(invalid(
                "limit",
                format!("must be between 1 and {MAX_PAGE}"),
            ));
        }
        Ok(job_store::job_list(&self.pool, filter, before, limit).await?)
    }

    /// Cancels a job that has not finished; an executing attempt is stopped on whichever node runs it.
    pub async fn cancel(&self, id: JobId) -> Result<Job, ClientError> {
        let cancelled = self.cancel_many(&[id]).await?;
        if cancelled == 0 {
            return Err(self.why_not(id, "cancel", "it is already finished").await);
        }
        self.get(id).await
    }

    /// Cancels every listed job that has not finished. Returns how many were cancelled.
    pub async fn cancel_many(&self, ids: &[JobId]) -> Result<usize, ClientError> {
        let mut tx = self.pool.begin().await?;
        let cancelled = job_store::job_cancel_many(&mut *tx, ids).await?;
        let executing: Vec<JobId> = cancelled
            .iter()
            .filter(|(_, before)| *before == JobState::Executing)
            .map(|(id, _)| *id)
            .collect();
        // Tell the nodes running them; sent at commit, with the cancellation.
        for chunk in executing.chunks(500) {
            job_store::control_notify(&mut *tx, &json!({ "cancel": chunk })).await?;
        }
        tx.commit().await?;
        Ok(cancelled.len())
    }

    /// Runs a job again: a retryable job now, a finished one (completed, discarded, cancelled) as a
    /// rerun with at least one more attempt.
    pub async fn retry(&self, id: JobId) -> Result<Job, ClientError> {
        match job_store::job_retry(&self.pool, id).await {
            Ok(Some(job)) => Ok(job),
            Ok(None) => Err(self
                .why_not(
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
    pub async fn run_now(&self, id: JobId) -> Result<Job, ClientError> {
        match job_store::job_run_now(&self.pool, id).await? {
            Some(job) => Ok(job),
            None => Err(self
                .why_not(
                    id,
                    "run now",
                    "only scheduled, retryable or available jobs can",
                )
                .await),
        }
    }

    /// Moves a waiting job to `at`.
    pub async fn reschedule(&self, id: JobId, at: DateTime<Utc>) -> Result<Job, ClientError> {
        check_instant("scheduled_at", at)?;
        match job_store::job_reschedule(&self.pool, id, at).await? {
            Some(job) => Ok(job),
            None => Err(self
                .why_not(id, "reschedule", "only jobs that have not started can be")
                .await),
        }
    }

    /// Deletes a job that is not executing (cancel an executing job first).
    pub async fn delete(&self, id: JobId) -> Result<(), ClientError> {
        if job_store::job_delete(&self.pool, id).await? {
            Ok(())
        } else {
            Err(self
                .why_not(id, "delete", "it is executing: cancel it first")
                .await)
        }
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
        if !is_valid_queue_name(name) {
            return Err(ClientError::NotFound(format!("queue `{name}`")));
        }
        let mut tx = self.pool.begin().await?;
        let row = queue_store::queue_set_paused(&mut *tx, name, paused).await?;
        job_store::control_notify(&mut *tx, &json!({ "queue": name })).await?;
        tx.commit().await?;
        Ok(row)
    }

    /// Sets a queue's per-node concurrency on every node (`None`: each node's configured limit).
    pub async fn set_queue_concurrency(
        &self,
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
        let mut tx = self.pool.begin().await?;
        let row = queue_store::queue_set_concurrency(&mut *tx, name, concurrency).await?;
        job_store::control_notify(&mut *tx, &json!({ "queue": name })).await?;
        tx.commit().await?;
        Ok(row)
    }

    /// Job counts per queue and state.
    pub async fn counts(&self) -> Result<Vec<(String, JobState, i64)>, ClientError> {
        Ok(job_store::job_count_by_queue_state(&self.pool).await?)
    }

    /// The error for an operation whose guarded update matched no row: the job is missing, or its
    /// state does not allow the operation.
    async fn why_not(&self, id: JobId, op: &str, rule: &str) -> ClientError {
        match job_store::job_get(&self.pool, id).await {
            Ok(Some(job)) => ClientError::Conflict(format!(
                "cannot {op} job {id} while it is {}: {rule}",
                job.state.as_str()
            )),
            Ok(None) => ClientError::NotFound(format!("job {id}")),
            Err(e) => ClientError::Database(e),
        }
    }
}

fn check_instant(field: &'static str, at: DateTime<Utc>) -> Result<(), ClientError> {
    let now = Utc::now();
    if at > now + ChronoDuration::days(MAX_SCHEDULE_AHEAD_DAYS) {
        return Err(invalid(
            field,
            format!("more than {MAX_SCHEDULE_AHEAD_DAYS} days ahead"),
        ));
    }
    if at < now - ChronoDuration::hours(MAX_SCHEDULE_PAST_HOURS) {
        return Err(invalid(
            field,
            format!("more than {MAX_SCHEDULE_PAST_HOURS} hours in the past"),
        ));
    }
    Ok(())
}

/// Whether a database error is a unique-constraint violation.
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}
