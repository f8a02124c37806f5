//! SQL of editing waiting jobs and moving them in time: one job under its row lock, or the listed
//! jobs of a bulk walk's batch that still match its filter.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, QueryBuilder};

use super::filters::push_filter_for_batch;
use super::filters::JobFilter;
use super::params::ids_param;
use crate::engine::job::{Job, JobId};

/// The states a job may be edited or moved in: it has not started (or waits to run again).
pub const WAITING: &str = "('scheduled', 'available', 'retryable')";

/// The job, its row locked until the caller's transaction ends (an edit reads, checks, writes).
pub async fn job_get_for_update(
    conn: &mut PgConnection,
    id: JobId,
) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// The listed waiting jobs that still match `filter` and belong to nobody (`meta.owner`), their
/// rows locked: a batch of a bulk edit.
pub async fn job_lock_waiting_matching(
    conn: &mut PgConnection,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<Vec<Job>, sqlx::Error> {
    let mut qb = QueryBuilder::new(format!(
        "SELECT * FROM jobs WHERE state IN {WAITING} AND NOT (meta ? 'owner') AND id = ANY("
    ));
    qb.push_bind(ids_param(ids)).push(")");
    push_filter_for_batch(&mut qb, filter);
    qb.push(" ORDER BY id FOR UPDATE");
    qb.build_query_as().persistent(false).fetch_all(conn).await
}

/// The fields an edit writes.
#[derive(Debug, Clone, PartialEq)]
pub struct EditedFields<'a> {
    pub args: &'a Value,
    pub queue: &'a str,
    pub priority: i16,
    pub max_attempts: i32,
    pub tags: &'a [String],
    pub meta: &'a Value,
    /// The host its call goes to, as its worker reads the new args (a rate per host counts it).
    pub call_host: Option<&'a str>,
    /// Secrets the edit takes out, added to the job's former ones (`engine::sight`).
    pub former_secrets: &'a [String],
}

/// Writes an edit to a job that still waits; `None` when it no longer does.
pub async fn job_apply_edit<'e>(
    db: impl PgExecutor<'e>,
    id: JobId,
    f: &EditedFields<'_>,
) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE jobs SET args = $2, queue = $3, priority = $4, max_attempts = $5, tags = $6,
                meta = $7, call_host = $8, rate_key = kickoff_rate_key($3, kind, $2, $8),
                former_secrets = CASE WHEN cardinality($9::text[]) > 0
                                      THEN coalesce(former_secrets, '{{}}') || $9::text[]
                                      ELSE former_secrets END
         WHERE id = $1 AND state IN {WAITING}
         RETURNING *"
    ))
    .bind(id)
    .bind(f.args)
    .bind(f.queue)
    .bind(f.priority)
    .bind(f.max_attempts)
    .bind(f.tags)
    .bind(f.meta)
    .bind(f.call_host)
    .bind(f.former_secrets)
    .fetch_optional(db)
    .await
}

/// Moves the listed waiting jobs that still match `filter` and belong to nobody (no
/// `meta.owner`, no workflow step: a step's job moves with its run's times) by `by_ms`,
/// those whose new time stays within `[earliest, latest]`; a job moved to or before now is due
/// now (`available`, its due time now: not late by the move, so a late-start policy does not
/// skip it), one moved after now waits (`scheduled`), as a reschedule leaves it. Returns how many
/// moved.
pub async fn job_shift_matching<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
    filter: &JobFilter,
    by_ms: i64,
    earliest: DateTime<Utc>,
    latest: DateTime<Utc>,
) -> Result<u64, sqlx::Error> {
    let mut qb = QueryBuilder::new("UPDATE jobs SET scheduled_at = greatest(scheduled_at + ");
    qb.push_bind(by_ms as f64)
        .push(" * interval '1 millisecond', statement_timestamp()), state = CASE WHEN scheduled_at + ")
        .push_bind(by_ms as f64)
        .push(
            " * interval '1 millisecond' <= statement_timestamp() THEN 'available'::job_state
                 ELSE 'scheduled'::job_state END",
        )
        .push(format!(
            " WHERE state IN {WAITING} AND NOT (meta ? 'owner') AND step_id IS NULL AND id = ANY("
        ))
        .push_bind(ids_param(ids))
        .push(") AND scheduled_at + ")
        .push_bind(by_ms as f64)
        .push(" * interval '1 millisecond' BETWEEN ")
        .push_bind(earliest)
        .push(" AND ")
        .push_bind(latest);
    push_filter_for_batch(&mut qb, filter);
    let r = qb.build().persistent(false).execute(db).await?;
    Ok(r.rows_affected())
}

/// The earliest due time of the waiting jobs matching `filter` (a shift `to` a time moves that
/// one there, the others keeping their distance to it), those with an owner included: a
/// question's lock job moves with its question, by the same amount. A workflow step's job is
/// not counted: a shift leaves it to its run.
pub async fn job_earliest_waiting<'e>(
    db: impl PgExecutor<'e>,
    filter: &JobFilter,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    let mut qb = QueryBuilder::new(format!(
        "SELECT min(scheduled_at) FROM jobs WHERE state IN {WAITING} AND step_id IS NULL"
    ));
    push_filter_for_batch(&mut qb, filter);
    qb.build_query_scalar()
        .persistent(false)
        .fetch_one(db)
        .await
}

/// The questions (`meta.owner` = `question N`) owning waiting jobs that match `filter`: a
/// shift moves them through their question.
pub async fn job_owners_of<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
) -> Result<Vec<String>, sqlx::Error> {
    let ids: Vec<i64> = ids.iter().map(|id| id.0).collect();
    sqlx::query_scalar(&format!(
        "SELECT DISTINCT meta ->> 'owner' FROM jobs
         WHERE id = ANY($1) AND state IN {WAITING} AND meta ? 'owner'"
    ))
    .bind(ids)
    .persistent(false)
    .fetch_all(db)
    .await
}

/// The owners (`meta.owner`) of the waiting jobs `filter` matches, at most 10,000.
pub async fn job_owners_matching<'e>(
    db: impl PgExecutor<'e>,
    filter: &JobFilter,
) -> Result<Vec<String>, sqlx::Error> {
    let mut qb = QueryBuilder::new(format!(
        "SELECT DISTINCT meta ->> 'owner' FROM jobs
         WHERE state IN {WAITING} AND meta ? 'owner'"
    ));
    push_filter_for_batch(&mut qb, filter);
    qb.push(" LIMIT 10000");
    qb.build_query_scalar()
        .persistent(false)
        .fetch_all(db)
        .await
}
