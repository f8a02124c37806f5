//! SQL of the `schedules` table, and of the runs of schedules among the jobs (the rows whose
//! `meta` holds a `schedule_id`, indexed by `jobs_schedule_idx` and `jobs_schedule_live_idx`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};

use crate::engine::job::{Job, JobId};

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ScheduleRow {
    pub id: i64,
    pub name: String,
    pub cron: Option<String>,
    pub every_ms: Option<i64>,
    pub time_zone: String,
    pub kind: String,
    pub args: Value,
    pub queue: String,
    pub priority: i16,
    pub max_attempts: i32,
    pub tags: Vec<String>,
    pub meta: Value,
    pub paused: bool,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub overlap: String,
    pub missed: String,
    pub missed_limit: i32,
    pub source: String,
    pub version: i32,
    pub last_slot: Option<DateTime<Utc>>,
    pub runs_enqueued: i64,
    pub last_run_id: Option<JobId>,
    pub last_run_late_ms: Option<f64>,
    pub runs_skipped: i64,
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The columns a caller sets (everything but the bookkeeping).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleFields<'a> {
    pub name: &'a str,
    pub cron: Option<&'a str>,
    pub every_ms: Option<i64>,
    pub time_zone: &'a str,
    pub kind: &'a str,
    pub args: &'a Value,
    pub queue: &'a str,
    pub priority: i16,
    pub max_attempts: i32,
    pub tags: &'a [String],
    pub meta: &'a Value,
    pub paused: bool,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub overlap: &'a str,
    pub missed: &'a str,
    pub missed_limit: i32,
    pub source: &'a str,
}

/// Inserts a schedule; `None` when the name is taken.
pub async fn schedule_insert(
    conn: &mut PgConnection,
    f: &ScheduleFields<'_>,
    created_by: Option<&str>,
) -> Result<Option<ScheduleRow>, sqlx::Error> {
    sqlx::query_as(
        "INSERT INTO schedules (name, cron, every_ms, time_zone, kind, args, queue, priority,
                                max_attempts, tags, meta, paused, starts_at, ends_at, overlap,
                                missed, missed_limit, source, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
         ON CONFLICT (name) DO NOTHING
         RETURNING *",
    )
    .bind(f.name)
    .bind(f.cron)
    .bind(f.every_ms)
    .bind(f.time_zone)
    .bind(f.kind)
    .bind(f.args)
    .bind(f.queue)
    .bind(f.priority)
    .bind(f.max_attempts)
    .bind(f.tags)
    .bind(f.meta)
    .bind(f.paused)
    .bind(f.starts_at)
    .bind(f.ends_at)
    .bind(f.overlap)
    .bind(f.missed)
    .bind(f.missed_limit)
    .bind(f.source)
    .bind(created_by)
    .fetch_optional(conn)
    .await
}

/// Rewrites a schedule's fields (not its name). `restart` bumps its version and makes the slots
/// start again after `now` (its rule, zone or template changed). Returns the row.
pub async fn schedule_update(
    conn: &mut PgConnection,
    id: i64,
    f: &ScheduleFields<'_>,
    restart_at: Option<DateTime<Utc>>,
) -> Result<ScheduleRow, sqlx::Error> {
    sqlx::query_as(
        "UPDATE schedules SET cron = $2, every_ms = $3, time_zone = $4, kind = $5, args = $6,
                queue = $7, priority = $8, max_attempts = $9, tags = $10, meta = $11, paused = $12,
                starts_at = $13, ends_at = $14, overlap = $15, missed = $16, missed_limit = $17,
                source = $18, updated_at = now(),
                version = version + CASE WHEN $19::timestamptz IS NULL THEN 0 ELSE 1 END,
                last_slot = coalesce($19, last_slot)
         WHERE id = $1
         RETURNING *",
    )
    .bind(id)
    .bind(f.cron)
    .bind(f.every_ms)
    .bind(f.time_zone)
    .bind(f.kind)
    .bind(f.args)
    .bind(f.queue)
    .bind(f.priority)
    .bind(f.max_attempts)
    .bind(f.tags)
    .bind(f.meta)
    .bind(f.paused)
    .bind(f.starts_at)
    .bind(f.ends_at)
    .bind(f.overlap)
    .bind(f.missed)
    .bind(f.missed_limit)
    .bind(f.source)
    .bind(restart_at)
    .fetch_one(conn)
    .await
}

/// One schedule by name.
pub async fn schedule_get<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
) -> Result<Option<ScheduleRow>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM schedules WHERE name = $1")
        .bind(name)
        .fetch_optional(db)
        .await
}

/// One schedule by name, locked until the transaction ends: every change of a schedule and every
/// insert of its runs holds this lock, so two leaders (or a leader and an operator) never give a
/// slot two runs.
pub async fn schedule_lock(
    conn: &mut PgConnection,
    name: &str,
) -> Result<Option<ScheduleRow>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM schedules WHERE name = $1 FOR UPDATE")
        .bind(name)
        .fetch_optional(conn)
        .await
}

/// Every schedule, by name.
pub async fn schedule_list<'e>(db: impl PgExecutor<'e>) -> Result<Vec<ScheduleRow>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM schedules ORDER BY name")
        .fetch_all(db)
        .await
}

/// The names of the schedules that are not paused and not ended (by the database clock).
pub async fn schedule_names_active<'e>(
    db: impl PgExecutor<'e>,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT name FROM schedules WHERE NOT paused AND (ends_at IS NULL OR ends_at > now())
         ORDER BY name",
    )
    .fetch_all(db)
    .await
}

/// Records the slots given runs or passed over: `last_slot` and the counters.
pub async fn schedule_record_slots(
    conn: &mut PgConnection,
    id: i64,
    last_slot: Option<DateTime<Utc>>,
    enqueued: i64,
    skipped: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE schedules SET last_slot = coalesce($2, last_slot),
                runs_enqueued = runs_enqueued + $3, runs_skipped = runs_skipped + $4
         WHERE id = $1",
    )
    .bind(id)
    .bind(last_slot)
    .bind(enqueued)
    .bind(skipped)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records that run `job` of schedule `id` started `late_ms` after its due time (unless a later
/// run was recorded already).
pub async fn schedule_record_start<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    job: JobId,
    late_ms: f64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE schedules SET last_run_id = $2, last_run_late_ms = $3
         WHERE id = $1 AND (last_run_id IS NULL OR last_run_id < $2)",
    )
    .bind(id)
    .bind(job)
    .bind(late_ms)
    .execute(db)
    .await?;
    Ok(())
}

/// Counts a run of schedule `id` skipped by its overlap policy.
pub async fn schedule_count_skipped<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE schedules SET runs_skipped = runs_skipped + 1 WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// Pauses or resumes a schedule; `last_slot` moves to `restart_at` (the slots of a pause are
/// neither run nor missed).
pub async fn schedule_set_paused(
    conn: &mut PgConnection,
    id: i64,
    paused: bool,
    restart_at: DateTime<Utc>,
) -> Result<ScheduleRow, sqlx::Error> {
    sqlx::query_as(
        "UPDATE schedules SET paused = $2, last_slot = $3, updated_at = now()
         WHERE id = $1 RETURNING *",
    )
    .bind(id)
    .bind(paused)
    .bind(restart_at)
    .fetch_one(conn)
    .await
}

pub async fn schedule_delete(conn: &mut PgConnection, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM schedules WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Cancels the runs of schedule `id` inserted ahead that have not come due (state `scheduled`).
/// Returns how many.
pub async fn schedule_runs_cancel_ahead(
    conn: &mut PgConnection,
    id: i64,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "UPDATE jobs SET state = 'cancelled', finalized_at = now()
         WHERE meta ? 'schedule_id' AND finalized_at IS NULL
           AND (meta ->> 'schedule_id') = $1::text AND state = 'scheduled'",
    )
    .bind(id.to_string())
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

/// The runs of schedule `id` that missed their slot: not started, not triggered by hand, and due
/// for longer than `grace_secs` by the database clock; oldest slot first.
pub async fn schedule_runs_overdue(
    conn: &mut PgConnection,
    id: i64,
    grace_secs: f64,
) -> Result<Vec<(JobId, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, (meta ->> 'slot_ms')::bigint FROM jobs
         WHERE meta ? 'schedule_id' AND finalized_at IS NULL
           AND (meta ->> 'schedule_id') = $1::text AND meta ? 'slot_ms'
           AND state IN ('scheduled', 'available') AND attempt = 0
           AND scheduled_at < now() - make_interval(secs => $2)
         ORDER BY (meta ->> 'slot_ms')::bigint",
    )
    .bind(id.to_string())
    .bind(grace_secs)
    .fetch_all(conn)
    .await
}

/// The runs of schedule `id` inserted before run `before` that are not final and have come due
/// (available, executing or retryable): the runs a new run overlaps.
pub async fn schedule_runs_unfinished_before<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    before: JobId,
) -> Result<Vec<JobId>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM jobs
         WHERE meta ? 'schedule_id' AND finalized_at IS NULL
           AND (meta ->> 'schedule_id') = $1::text AND id < $2
           AND state IN ('available', 'executing', 'retryable')
         ORDER BY id",
    )
    .bind(id.to_string())
    .bind(before)
    .fetch_all(db)
    .await
}

/// The runs of schedule `id`, newest first, before job `before` (a page of its history).
pub async fn schedule_runs<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    before: Option<JobId>,
    limit: i64,
) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_as(
        "SELECT * FROM jobs
         WHERE meta ? 'schedule_id' AND (meta ->> 'schedule_id') = $1::text
           AND ($2::bigint IS NULL OR id < $2)
         ORDER BY id DESC LIMIT $3",
    )
    .bind(id.to_string())
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// A schedule's latest run that came due, and its next run ahead.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ScheduleRuns {
    pub schedule_id: i64,
    pub last_id: Option<JobId>,
    pub last_state: Option<String>,
    pub last_scheduled_at: Option<DateTime<Utc>>,
    pub last_attempted_at: Option<DateTime<Utc>>,
    pub next_id: Option<JobId>,
    pub next_at: Option<DateTime<Utc>>,
}

/// The latest and the next run of each of `ids`.
pub async fn schedule_runs_summary<'e>(
    db: impl PgExecutor<'e>,
    ids: &[i64],
) -> Result<Vec<ScheduleRuns>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.id AS schedule_id, l.id AS last_id, l.state::text AS last_state,
                l.scheduled_at AS last_scheduled_at, l.attempted_at AS last_attempted_at,
                n.id AS next_id, n.scheduled_at AS next_at
         FROM unnest($1::bigint[]) AS s(id)
         LEFT JOIN LATERAL (
             SELECT id, state, scheduled_at, attempted_at FROM jobs
             WHERE meta ? 'schedule_id' AND (meta ->> 'schedule_id') = s.id::text
               AND state <> 'scheduled'
             ORDER BY id DESC LIMIT 1) l ON true
         LEFT JOIN LATERAL (
             SELECT id, scheduled_at FROM jobs
             WHERE meta ? 'schedule_id' AND finalized_at IS NULL
               AND (meta ->> 'schedule_id') = s.id::text AND state = 'scheduled'
             ORDER BY scheduled_at LIMIT 1) n ON true",
    )
    .bind(ids)
    .fetch_all(db)
    .await
}
