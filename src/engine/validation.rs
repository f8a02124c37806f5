//! The checks of a new job before anything is written, every insert path's (the API, the
//! dashboard, the CLI, a library caller, a schedule's run, Kickoff's own jobs, a SQL caller's
//! `kickoff_add_job`).
//!
//! The rules of a job's fields (the args' and meta's shape and bounds, the reserved meta keys,
//! the queue, priority and attempts, the unique key, the time, the kinds only Kickoff inserts)
//! are written once, in SQL: `kickoff_check_job` (migration `20261230000001_sql_inserts.sql`),
//! which every insert statement applies to its rows ([`InsertRules`]) and an edit or a
//! template's check calls alone. A refusal comes back as a database error of class `KO`, which
//! [`ClientError`]'s conversion reads back into a field and its message. What stays here is what
//! SQL cannot do: the kind's worker (`Worker::validate`, and `Worker::validate_in` on the caller's
//! connection) and a NUL character, which jsonb and text cannot hold (the database would refuse
//! the value before any rule ran, without naming the field).

use std::sync::Arc;

use sqlx::PgConnection;

use super::client::{invalid, Client, ClientError};
use super::job::NewJob;
use super::store::jobs::{self as job_store, InsertRules};
use super::worker::ArgsRefused;

/// The unique keys of a schedule's runs (`schedule:{id}:{slot_ms}`): a caller's job holding one
/// would pass for the run of that slot, and the run would never be inserted.
pub const SCHEDULE_KEY_PREFIX: &str = "schedule:";

/// A NUL character (`\u0000`) in JSON a caller stores: jsonb cannot hold one, and PostgreSQL
/// would refuse the value before any rule ran, without naming the field. The rest of the rules
/// of such JSON are SQL's (a job's args and meta `kickoff_check_job`'s, a signal's payload
/// `kickoff_signal`'s).
pub(super) fn refuse_nul_json(
    field: &'static str,
    value: &serde_json::Value,
) -> Result<(), ClientError> {
    if value.to_string().contains("\\u0000") {
        return Err(invalid(field, "must not contain NUL (\\u0000) characters"));
    }
    Ok(())
}

/// What of `new` cannot reach the database to be checked there: a NUL character in its text or
/// JSON (jsonb and text cannot hold one).
fn refuse_nul(new: &NewJob) -> Result<(), ClientError> {
    if new
        .tags
        .iter()
        .chain(new.unique_key.iter())
        .chain(new.created_by.iter())
        .any(|t| t.contains('\0'))
        || new.kind.contains('\0')
        || new.queue.contains('\0')
    {
        return Err(invalid("tags", "text must not contain NUL characters"));
    }
    refuse_nul_json("args", &new.args)?;
    refuse_nul_json("meta", &new.meta)
}

impl Client {
    /// The rules an insert of this client's applies: a caller's job (`as_kickoff` false) or
    /// Kickoff's own, whose meta carries the keys only Kickoff writes.
    pub(crate) fn rules(&self, as_kickoff: bool) -> InsertRules<'_> {
        InsertRules {
            kinds: self.workers.kinds(),
            own_kinds: self.workers.own_kinds(),
            as_kickoff,
        }
    }

    /// Checks a new job before anything is written (on a connection of the pool, if its worker
    /// reads the database to check).
    pub async fn validate(&self, new: &NewJob) -> Result<(), ClientError> {
        let mut conn = self.pool.unit().await?;
        self.validate_with(&mut conn, new).await?;
        Ok(conn.commit().await?)
    }

    /// [`Self::validate`] on the caller's connection (a worker's check that reads the database
    /// reads it there: no second connection while the caller holds one). A refusal of the rules
    /// is an error of the database: inside a transaction, the caller's transaction is over.
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
        self.checked_as(conn, new, false).await
    }

    /// [`Self::checked_with`] for a job Kickoff's own code makes, whose meta carries the keys
    /// Kickoff writes ([`super::job::RESERVED_META`]: a question's lock job its `owner`, an
    /// alert's notification its incident, a triggered run its schedule).
    pub(crate) async fn checked_own_with(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
    ) -> Result<Option<String>, ClientError> {
        self.checked_as(conn, new, true).await
    }

    /// The rules on `new` alone, then its worker's own checks.
    async fn checked_as(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
        as_kickoff: bool,
    ) -> Result<Option<String>, ClientError> {
        self.known_worker(new)?;
        job_store::job_check(conn, new, self.rules(as_kickoff)).await?;
        self.worker_checked(conn, new, as_kickoff).await
    }

    /// What of a new job its kind's worker checks, and what cannot reach the database (see the
    /// module's documentation); the insert statement checks the rest. The host its call goes to.
    /// A caller's job (`as_kickoff` false) of a kind only Kickoff inserts is left to the rules,
    /// which refuse it whatever its args.
    pub(super) async fn worker_checked(
        &self,
        conn: &mut PgConnection,
        new: &NewJob,
        as_kickoff: bool,
    ) -> Result<Option<String>, ClientError> {
        let worker = self.known_worker(new)?;
        if !as_kickoff && worker.kickoffs_own() {
            return Ok(None);
        }
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

    /// The worker of `new`'s kind, when the text and JSON it carries can reach the database: for
    /// the runs of a schedule, whose template was checked when it was saved, the worker's own
    /// check of the args is not run again. A later refusal (a webhook host taken off the
    /// allowlist) then shows as a failed run, not as runs that never appear.
    pub(super) fn known_worker(
        &self,
        new: &NewJob,
    ) -> Result<&Arc<dyn crate::engine::worker::Worker>, ClientError> {
        let worker = self
            .workers
            .get(&new.kind)
            .ok_or_else(|| ClientError::UnknownKind(new.kind.clone()))?;
        refuse_nul(new)?;
        Ok(worker)
    }
}
