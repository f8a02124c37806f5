//! SQL of the `schedules` table, and of the runs of schedules among the jobs (the rows whose
//! `meta` holds a `schedule_id`, indexed by `jobs_schedule_idx` and `jobs_schedule_live_idx`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};

use crate::engine::job::{Job, JobId};

/// The advisory lock a node holds (for one transaction) while it reconciles the slots missed
/// during a downtime: nodes that start together take turns.
pub const RECONCILE_LOCK: i64 = 0x6b69_636b_7265_636e;

/// Takes [`RECONCILE_LOCK`] until the transaction ends (waiting for a node that holds it).
pub async fn schedule_reconcile_lock(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(RECONCILE_LOCK)
        .execute(tx)
        .await
        .map(drop)
}

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
    /// The first slot not yet given a run (NULL until the first fill): the leader's tick reads
    /// the schedule again when it enters the horizon.
    pub next_slot_at: Option<DateTime<Utc>>,
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

/// The names of the active schedules whose next slot comes due within `horizon_secs` (or passed,
/// or is not known yet): the only ones the leader's tick needs to fill. Reads
/// `schedules_next_slot_idx`; a schedule whose next run is hours away costs nothing until then.
pub async fn schedule_names_due<'e>(
    db: impl PgExecutor<'e>,
    horizon_secs: f64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT name FROM schedules
         WHERE NOT paused AND (ends_at IS NULL OR ends_at > now())
           AND (next_slot_at IS NULL OR next_slot_at <= now() + make_interval(secs => $1))
         ORDER BY name",
    )
    .bind(horizon_secs)
    .fetch_all(db)
    .await
}

/// Records the slots given runs or passed over (`last_slot` and the counters) and the next slot
/// to give a run (`next_slot`, kept as it is when `None`).
pub async fn schedule_record_slots(
    conn: &mut PgConnection,
    id: i64,
    last_slot: Option<DateTime<Utc>>,
    enqueued: i64,
    skipped: i64,
    next_slot: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE schedules SET last_slot = coalesce($2, last_slot),
                runs_enqueued = runs_enqueued + $3, runs_skipped = runs_skipped + $4,
                next_slot_at = coalesce($5, next_slot_at)
         WHERE id = $1",
    )
    .bind(id)
    .bind(last_slot)
    .bind(enqueued)
    .bind(skipped)
    .bind(next_slot)
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

/// Cancels the runs of schedule `id` inserted ahead that have not come due (state `scheduled`)
/// and never started: a snoozed run (back in `scheduled`, with `meta.snoozes`) is in progress,
/// not ahead, and is left alone; so is a run triggered by hand (`meta.trigger`), an operator's
/// run outside the slots, even moved to a later time (the history checker's hour saw a delete
/// cancel one). Returns how many.
pub async fn schedule_runs_cancel_ahead(
    conn: &mut PgConnection,
    id: i64,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "UPDATE jobs SET state = 'cancelled', finalized_at = now()
         WHERE meta ? 'schedule_id' AND finalized_at IS NULL
           AND (meta ->> 'schedule_id') = $1::text AND state = 'scheduled'
           AND attempt = 0 AND NOT meta ? 'snoozes' AND NOT meta ? 'trigger'",
    )
    .bind(id.to_string())
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

/// The runs of schedule `id` inserted ahead whose slot passed while no node was there to start
/// them; oldest slot first. Such a run is still `scheduled`: a live node's timer stages every due
/// row to `available` within its grace, whatever holds it afterwards (a paused queue or kind, a
/// limit, a backlog), so a run that is `available` waited for something and was not missed. Left
/// out too: a run triggered by hand (never "missed"), a run that started (a snoozed run is back in
/// `scheduled` with `meta.snoozes`: in progress, not ahead), a run due within `grace_secs`, and,
/// when `alive_since` is given (the earliest start of the nodes alive now), a run due after it:
/// a node was up to stage it, so it is late behind a backlog, not missed.
pub async fn schedule_runs_overdue(
    conn: &mut PgConnection,
    id: i64,
    grace_secs: f64,
    alive_since: Option<DateTime<Utc>>,
) -> Result<Vec<(JobId, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, (meta ->> 'slot_ms')::bigint FROM jobs
         WHERE meta ? 'schedule_id' AND finalized_at IS NULL
           AND (meta ->> 'schedule_id') = $1::text AND meta ? 'slot_ms'
           AND state = 'scheduled' AND attempt = 0
           AND NOT meta ? 'trigger' AND NOT meta ? 'snoozes'
           AND scheduled_at < now() - make_interval(secs => $2)
           AND ($3::timestamptz IS NULL OR scheduled_at < $3)
         ORDER BY (meta ->> 'slot_ms')::bigint",
    )
    .bind(id.to_string())
    .bind(grace_secs)
    .bind(alive_since)
    .fetch_all(conn)
    .await
}

/// The names of the active schedules a node starting after a downtime must reconcile: those
/// with a run inserted ahead still `scheduled` past its slot by more than `grace_secs`, or whose
/// `last_slot` is older than that (slots never given a run). One statement, so that a start
/// with thousands of schedules does not open a transaction for each.
pub async fn schedule_names_to_reconcile<'e>(
    db: impl PgExecutor<'e>,
    grace_secs: f64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT s.name FROM schedules s
         WHERE NOT s.paused AND (s.ends_at IS NULL OR s.ends_at > now())
           AND (s.last_slot IS NULL OR s.last_slot < now() - make_interval(secs => $1)
                OR EXISTS (
                    SELECT 1 FROM jobs
                    WHERE meta ? 'schedule_id' AND finalized_at IS NULL
                      AND (meta ->> 'schedule_id') = s.id::text AND state = 'scheduled'
                      AND scheduled_at < now() - make_interval(secs => $1)))
         ORDER BY s.name",
    )
    .bind(grace_secs)
    .fetch_all(db)
    .await
}

/// The runs of schedule `id` that came before run `before` (whose slot is `slot_ms`) and are not
/// final and have come due (available, executing or retryable): the runs a new run overlaps.
///
/// "Before" is by slot, then id, not by id alone: a run triggered by hand is inserted after the
/// next slot's run (inserted ahead), yet comes before it; ordered by id, the slot's run would not
/// see it and the overlap policy would let them run side by side.
pub async fn schedule_runs_unfinished_before<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    before: JobId,
    slot_ms: i64,
) -> Result<Vec<JobId>, sqlx::Error> {
    // `jobs_schedule_live_idx` finds the schedule's live runs (a handful); the order is checked
    // on those rows.
    sqlx::query_scalar(
        "SELECT id FROM jobs
         WHERE meta ? 'schedule_id' AND finalized_at IS NULL
           AND (meta ->> 'schedule_id') = $1::text AND id <> $2
           AND (coalesce((meta ->> 'slot_ms')::bigint, 0), id) < ($3, $2)
           AND state IN ('available', 'executing', 'retryable')
         ORDER BY coalesce((meta ->> 'slot_ms')::bigint, 0), id",
    )
    .bind(id.to_string())
    .bind(before)
    .bind(slot_ms)
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
