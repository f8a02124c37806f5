//! The checks of a new job before anything is written, every insert path's (the API, the
//! dashboard, the CLI, a library caller, a schedule's run, Kickoff's own jobs): its kind's worker
//! (`Worker::validate`, and `Worker::validate_in` on the caller's connection), the args' and
//! meta's shape and bounds, the reserved meta keys, the queue, priority and attempts, the unique
//! key, the time.

use std::sync::Arc;

use sqlx::PgConnection;

use super::client::{check_instant, invalid, Client, ClientError};
use super::job::{
    is_valid_queue_name, NewJob, Schedule, MAX_ARGS_BYTES, MAX_JSON_NUMBER, MAX_META_BYTES,
    MAX_SCHEDULE_AHEAD_DAYS, MAX_TAGS, MAX_TAG_CHARS, MAX_UNIQUE_KEY_CHARS,
};
use super::worker::ArgsRefused;

/// The unique keys of a schedule's runs (`schedule:{id}:{slot_ms}`): a caller's job holding one
/// would pass for the run of that slot, and the run would never be inserted.
pub const SCHEDULE_KEY_PREFIX: &str = "schedule:";

/// The rules of data a caller stores as JSON (a job's args and meta, a workflow signal's
/// payload): no NUL character (PostgreSQL's jsonb cannot hold one), numbers that read back, at
/// most `max_bytes`. The one place they are written.
pub(super) fn check_json_data(
    field: &'static str,
    value: &serde_json::Value,
    max_bytes: usize,
) -> Result<(), ClientError> {
    let text = value.to_string();
    if text.contains("\\u0000") {
        return Err(invalid(field, "must not contain NUL (\\u0000) characters"));
    }
    if !numbers_read_back(value) {
        return Err(invalid(
            field,
            format!("numbers are at most {MAX_JSON_NUMBER:e} in magnitude"),
        ));
    }
    if text.len() > max_bytes {
        return Err(invalid(field, format!("larger than {max_bytes} bytes")));
    }
    Ok(())
}

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

impl Client {
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
    pub(super) fn validate_shape(
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
        check_json_data("args", &new.args, MAX_ARGS_BYTES)?;
        if new
            .tags
            .iter()
            .chain(new.unique_key.iter())
            .any(|t| t.contains('\0'))
            || new.kind.contains('\0')
        {
            return Err(invalid("tags", "text must not contain NUL characters"));
        }
        if !new.meta.is_object() {
            return Err(invalid("meta", "must be a JSON object"));
        }
        check_json_data("meta", &new.meta, MAX_META_BYTES)?;
        super::late_start::LatePolicy::from_meta(&new.meta).map_err(|m| invalid("meta", m))?;
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
    pub(super) fn refuse_kickoffs_own(&self, new: &NewJob) -> Result<(), ClientError> {
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
}
