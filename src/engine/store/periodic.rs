//! SQL of the `periodic_runs` table: the latest run inserted for each periodic job.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

/// Records `at` as the latest run of `name`, if it is later than the one recorded (under the same
/// `fingerprint`) and not older than `grace` by the database clock. Returns whether it was
/// recorded: only then may the caller insert the run, in the same transaction.
///
/// Two leaders recording the same run at once: the second waits on the first's row lock, then
/// finds the run recorded and gets false. A leader that stalled past `at` (by more than `grace`,
/// the time a run may take to come due while its leader computes it) gets false as well.
pub async fn periodic_run_record<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    at: DateTime<Utc>,
    grace: Duration,
    fingerprint: &str,
) -> Result<bool, sqlx::Error> {
    let recorded: Option<bool> = sqlx::query_scalar(
        "INSERT INTO periodic_runs (name, last_at, fingerprint)
         SELECT $1, $2, $4 WHERE $2 > statement_timestamp() - make_interval(secs => $3)
         ON CONFLICT (name) DO UPDATE SET last_at = excluded.last_at
             WHERE periodic_runs.last_at < excluded.last_at
               AND periodic_runs.fingerprint = excluded.fingerprint
         RETURNING true",
    )
    .bind(name)
    .bind(at)
    .bind(grace.as_secs_f64())
    .bind(fingerprint)
    .fetch_optional(db)
    .await?;
    Ok(recorded.unwrap_or(false))
}

/// The latest run recorded for `name`, and the fingerprint it was recorded under.
pub async fn periodic_run_last<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
) -> Result<Option<(DateTime<Utc>, String)>, sqlx::Error> {
    sqlx::query_as("SELECT last_at, fingerprint FROM periodic_runs WHERE name = $1")
        .bind(name)
        .fetch_optional(db)
        .await
}

/// Starts `name`'s schedule again from now under a new `fingerprint` (its configuration changed).
pub async fn periodic_run_restart<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    fingerprint: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO periodic_runs (name, last_at, fingerprint)
         VALUES ($1, statement_timestamp(), $2)
         ON CONFLICT (name) DO UPDATE SET last_at = excluded.last_at,
             fingerprint = excluded.fingerprint",
    )
    .bind(name)
    .bind(fingerprint)
    .execute(db)
    .await?;
    Ok(())
}

/// Forgets every periodic job but these.
pub async fn periodic_run_delete_except<'e>(
    db: impl PgExecutor<'e>,
    names: &[String],
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query("DELETE FROM periodic_runs WHERE NOT (name = ANY($1))")
        .bind(names)
        .execute(db)
        .await?;
    Ok(r.rows_affected())
}
