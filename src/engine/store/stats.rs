//! SQL of the maintained job statistics: `job_count_deltas` (appended by triggers on `jobs`),
//! `job_counts` (the deltas folded) and `job_stats_minute` (completed and failed attempts per
//! minute). See the migration `20261201000001_dashboard.sql` and
//! [`crate::engine::maintenance::count_folder`] for the design.
//!
//! Every reader sums the folded table and the deltas not folded yet in one statement: one snapshot
//! sees a fold (a single statement) entirely or not at all, so the answer is exact whenever the
//! folder last ran.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use crate::engine::job::{JobId, JobState};

/// How long completed and failed counts per minute are kept (the longest throughput chart).
pub const STATS_RETENTION: Duration = Duration::from_secs(2 * 3600);

/// Job counts per queue and state (states with no job left out), exact, without reading `jobs`.
pub async fn job_counts_list<'e>(
    db: impl PgExecutor<'e>,
) -> Result<Vec<(String, JobState, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT queue, state, sum(n)::bigint FROM (
             SELECT queue, state, n FROM job_counts
             UNION ALL
             SELECT queue, state, n FROM job_count_deltas) c
         GROUP BY queue, state
         HAVING sum(n) <> 0
         ORDER BY queue, state",
    )
    .fetch_all(db)
    .await
}

/// How many jobs are in any of `states` (empty: every state) and in `queue` (`None`: every queue),
/// leaving out those with an id above `max_id`: the maintained counts minus the few newer jobs,
/// read in one statement so both halves see the same snapshot.
pub async fn job_counts_total<'e>(
    db: impl PgExecutor<'e>,
    states: &[JobState],
    queue: Option<&str>,
    max_id: Option<JobId>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT (SELECT coalesce(sum(n), 0) FROM (
                     SELECT queue, state, n FROM job_counts
                     UNION ALL
                     SELECT queue, state, n FROM job_count_deltas) c
                 WHERE (cardinality($1::job_state[]) = 0 OR state = ANY($1))
                   AND ($2::text IS NULL OR queue = $2))::bigint
              - (SELECT count(*) FROM jobs
                 WHERE $3::bigint IS NOT NULL AND id > $3
                   AND (cardinality($1::job_state[]) = 0 OR state = ANY($1))
                   AND ($2::text IS NULL OR queue = $2))",
    )
    .bind(states)
    .bind(queue)
    .bind(max_id)
    .fetch_one(db)
    .await
}

/// What one fold did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct Folded {
    /// Delta rows deleted and added into the counts.
    pub deltas: i64,
    /// `job_counts` rows inserted or changed.
    pub counts: i64,
    /// `job_stats_minute` rows inserted or changed.
    pub minutes: i64,
}

/// Folds every committed delta into `job_counts`, and the moves into completed, retryable and
/// discarded into `job_stats_minute`, in one statement (so readers never see a delta twice or not
/// at all). Two folds at once are safe: the second waits on the rows the first deletes, then
/// skips them.
pub async fn job_count_deltas_fold<'e>(db: impl PgExecutor<'e>) -> Result<Folded, sqlx::Error> {
    sqlx::query_as(
        "WITH folded AS (
             DELETE FROM job_count_deltas RETURNING queue, state, n, at),
         counted AS (
             INSERT INTO job_counts AS c (queue, state, n)
             SELECT queue, state, sum(n)::bigint FROM folded
             GROUP BY queue, state
             HAVING sum(n) <> 0
             ON CONFLICT (queue, state) DO UPDATE SET n = c.n + excluded.n
             RETURNING 1),
         per_minute AS (
             INSERT INTO job_stats_minute AS m (minute, queue, completed, failed)
             SELECT date_trunc('minute', at), queue,
                    coalesce(sum(n) FILTER (WHERE state = 'completed'), 0)::bigint,
                    coalesce(sum(n) FILTER (WHERE state <> 'completed'), 0)::bigint
             FROM folded
             WHERE n > 0 AND state IN ('completed', 'retryable', 'discarded')
             GROUP BY 1, 2
             ON CONFLICT (minute, queue) DO UPDATE
                 SET completed = m.completed + excluded.completed,
                     failed = m.failed + excluded.failed
             RETURNING 1)
         SELECT (SELECT count(*) FROM folded) AS deltas,
                (SELECT count(*) FROM counted) AS counts,
                (SELECT count(*) FROM per_minute) AS minutes",
    )
    .fetch_one(db)
    .await
}

/// Deletes the minutes that started more than `keep` before the current one. Returns how many rows.
pub async fn job_stats_minute_delete_old<'e>(
    db: impl PgExecutor<'e>,
    keep: Duration,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "DELETE FROM job_stats_minute
         WHERE minute < date_trunc('minute', now()) - make_interval(secs => $1)",
    )
    .bind(keep.as_secs_f64())
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Attempts that ended in one minute, summed over the queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ThroughputMinute {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Attempts that completed their job.
    pub completed: i64,
    /// Attempts that failed (the job became retryable or discarded).
    pub failed: i64,
}

/// The last `minutes` minutes including the current one, oldest first, every minute present (zero
/// when nothing ended), counting the deltas not folded yet.
pub async fn job_stats_minute_list<'e>(
    db: impl PgExecutor<'e>,
    minutes: i32,
) -> Result<Vec<ThroughputMinute>, sqlx::Error> {
    sqlx::query_as(
        "WITH bounds AS (
             SELECT date_trunc('minute', now()) - make_interval(mins => $1 - 1) AS first,
                    date_trunc('minute', now()) AS last),
         ended AS (
             SELECT s.minute, s.completed, s.failed
             FROM job_stats_minute s, bounds WHERE s.minute >= bounds.first
             UNION ALL
             SELECT date_trunc('minute', d.at),
                    CASE WHEN d.state = 'completed' THEN d.n ELSE 0 END,
                    CASE WHEN d.state <> 'completed' THEN d.n ELSE 0 END
             FROM job_count_deltas d, bounds
             WHERE d.n > 0 AND d.state IN ('completed', 'retryable', 'discarded')
               AND d.at >= bounds.first)
         SELECT m.minute,
                coalesce(sum(e.completed), 0)::bigint AS completed,
                coalesce(sum(e.failed), 0)::bigint AS failed
         FROM bounds
         CROSS JOIN LATERAL generate_series(bounds.first, bounds.last, interval '1 minute') AS m(minute)
         LEFT JOIN ended e ON e.minute = m.minute
         GROUP BY m.minute
         ORDER BY m.minute",
    )
    .bind(minutes)
    .fetch_all(db)
    .await
}
