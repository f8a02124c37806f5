//! SQL of the `queues` table: settings shared by every node.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use crate::engine::job::Job;
use crate::engine::limits::{QueueLimits, Rate};

/// A queue's shared settings.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct QueueRow {
    pub name: String,
    pub paused: bool,
    /// Per-node concurrency set by an operator (null: each node's configured one).
    pub concurrency: Option<i32>,
    pub updated_at: DateTime<Utc>,
    /// Attempts started per `rate_period_ms`, across every node (null: no rate).
    pub rate_limit: Option<i32>,
    pub rate_period_ms: Option<i32>,
    /// What the rate is counted by, each key getting the whole rate: `kind`, `host` (of a
    /// webhook's url) or `args.<field>` (null: one count for the queue).
    pub rate_per: Option<String>,
    /// Attempts executing on all nodes together (null: only each node's concurrency).
    pub global_concurrency: Option<i32>,
    /// Who set the limits: `config` (a node's KICKOFF_QUEUES, at its start) or `operator`.
    pub limits_by: String,
    /// Drawn by every write of the row while it holds the row's lock (migration
    /// `20261214000301`), so a later commit always has a larger one: what a node compares to
    /// apply only settings at least as new as those it has (`updated_at`, the writing
    /// transaction's start, can be older for a later commit). Internal: not in the API.
    #[serde(skip)]
    pub version: i64,
}

impl QueueRow {
    /// The limits of this row (a value the table's checks refused reads as no limit).
    pub fn limits(&self) -> QueueLimits {
        let rate = match (self.rate_limit, self.rate_period_ms) {
            (Some(n), Some(ms)) if n > 0 && ms > 0 => Some(Rate::new(
                n as u32,
                std::time::Duration::from_millis(ms as u64),
            )),
            _ => None,
        };
        QueueLimits {
            rate,
            per: self.rate_per.as_deref().and_then(|p| p.parse().ok()),
            global: self.global_concurrency.map(|g| g.max(1) as u32),
        }
    }
}

/// Makes sure the queues exist (a node registers the queues it runs).
pub async fn queue_ensure<'e>(
    db: impl PgExecutor<'e>,
    names: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO queues (name) SELECT unnest($1::text[]) ON CONFLICT (name) DO NOTHING",
    )
    .bind(names)
    .execute(db)
    .await?;
    Ok(())
}

pub async fn queue_list<'e>(db: impl PgExecutor<'e>) -> Result<Vec<QueueRow>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM queues ORDER BY name")
        .fetch_all(db)
        .await
}

/// The rows of these queues (queues without a row have none).
pub async fn queue_list_named<'e>(
    db: impl PgExecutor<'e>,
    names: &[String],
) -> Result<Vec<QueueRow>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM queues WHERE name = ANY($1) ORDER BY name")
        .bind(names)
        .fetch_all(db)
        .await
}

pub async fn queue_get<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
) -> Result<Option<QueueRow>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM queues WHERE name = $1")
        .bind(name)
        .fetch_optional(db)
        .await
}

/// Pauses or resumes a queue, creating its row if needed. Returns the row.
pub async fn queue_set_paused<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    paused: bool,
) -> Result<QueueRow, sqlx::Error> {
    sqlx::query_as(
        "INSERT INTO queues (name, paused) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET paused = $2, updated_at = now()
         RETURNING *",
    )
    .bind(name)
    .bind(paused)
    .fetch_one(db)
    .await
}

/// Sets (or clears, with `None`) a queue's per-node concurrency. Returns the row.
pub async fn queue_set_concurrency<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    concurrency: Option<i32>,
) -> Result<QueueRow, sqlx::Error> {
    sqlx::query_as(
        "INSERT INTO queues (name, concurrency) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET concurrency = $2, updated_at = now()
         RETURNING *",
    )
    .bind(name)
    .bind(concurrency)
    .fetch_one(db)
    .await
}

/// Sets a queue's limits, creating its row if needed, unless `by` is `config` and an operator set
/// them (a node's configuration does not overwrite an operator's choice). Returns the row.
pub async fn queue_set_limits<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    limits: &QueueLimits,
    by: &str,
) -> Result<QueueRow, sqlx::Error> {
    sqlx::query_as(
        "INSERT INTO queues AS q (name, rate_limit, rate_period_ms, rate_per, global_concurrency,
                                 limits_by)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (name) DO UPDATE
            SET rate_limit = $2, rate_period_ms = $3, rate_per = $4, global_concurrency = $5,
                limits_by = $6, updated_at = now()
            WHERE $6 = 'operator' OR q.limits_by = 'config'
         RETURNING *",
    )
    .bind(name)
    .bind(limits.rate.map(|r| r.n as i32))
    .bind(limits.rate.map(|r| r.period_ms()))
    .bind(limits.per.as_ref().map(|p| p.to_string()))
    .bind(limits.global.map(|g| g as i32))
    .bind(by)
    .fetch_optional(db)
    .await?
    .map_or_else(|| Err(sqlx::Error::RowNotFound), Ok)
}

/// Deletes the rate windows that ended a minute ago or more (a window's row is read only while it
/// lasts: an older one counts as empty), so that keys seen once (a game, a host) do not stay.
pub async fn queue_windows_delete_ended<'e>(db: impl PgExecutor<'e>) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "DELETE FROM queue_rate_windows w USING queues q
         WHERE q.name = w.queue
           AND w.window_start + make_interval(secs => coalesce(q.rate_period_ms, 0) / 1000.0)
               < now() - interval '1 minute'",
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Attempts started in the current window of each rate-limited queue (all keys together), with
/// the queue's rate: `(queue, used, limit)`.
pub async fn queue_window_use<'e>(
    db: impl PgExecutor<'e>,
) -> Result<Vec<(String, i64, i32)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT q.name, coalesce(sum(w.used) FILTER (
                    WHERE w.window_start = kickoff_window_start(now(), q.rate_period_ms)), 0)::bigint,
                q.rate_limit
         FROM queues q LEFT JOIN queue_rate_windows w ON w.queue = q.name
         WHERE q.rate_limit IS NOT NULL
         GROUP BY q.name, q.rate_limit ORDER BY q.name",
    )
    .fetch_all(db)
    .await
}

/// Where a queue with limits across every node stands now (see [`queue_limit_use`]).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct LimitUse {
    pub queue: String,
    /// Attempts started in the current rate window, all keys together (0 without a rate).
    pub used: i64,
    /// The most any one key started in it (the queue's count when not partitioned).
    pub busiest: i64,
    /// Keys that started an attempt in it.
    pub keys: i64,
    /// Seconds until the current rate window ends (null without a rate).
    pub window_ends_in: Option<f64>,
    /// Attempts executing on all nodes.
    pub executing: i64,
    /// Of the first `scanned` available jobs (claim order, paused kinds left out), those a claim
    /// now would leave behind because of a limit: their key's window is full, or the global
    /// concurrency is reached.
    pub held: i64,
    pub scanned: i64,
}

/// Where each queue with a rate or a global concurrency stands: its current window's use and
/// the available jobs its limits hold back, looking at no more than `scan` available jobs of
/// each (as the partitioned claim does), so that a long backlog costs no more than a claim.
pub async fn queue_limit_use<'e>(
    db: impl PgExecutor<'e>,
    scan: i32,
) -> Result<Vec<LimitUse>, sqlx::Error> {
    sqlx::query_as(
        "SELECT q.name AS queue,
                coalesce(w.used, 0)::bigint AS used, coalesce(w.busiest, 0)::bigint AS busiest,
                coalesce(w.keys, 0)::bigint AS keys,
                CASE WHEN q.rate_limit IS NOT NULL THEN extract(epoch FROM
                    kickoff_window_start(now(), q.rate_period_ms)
                    + make_interval(secs => q.rate_period_ms / 1000.0) - now())::float8 END
                    AS window_ends_in,
                e.executing, h.held, h.scanned
         FROM queues q
         LEFT JOIN LATERAL (
             SELECT sum(w.used) AS used, max(w.used) AS busiest, count(*) AS keys
             FROM queue_rate_windows w
             WHERE w.queue = q.name
               AND w.window_start = kickoff_window_start(now(), q.rate_period_ms)) w
             ON q.rate_limit IS NOT NULL
         CROSS JOIN LATERAL (
             SELECT count(*) AS executing FROM jobs
             WHERE state = 'executing' AND queue = q.name) e
         CROSS JOIN LATERAL (
             SELECT count(*) FILTER (WHERE
                        (q.global_concurrency IS NOT NULL AND e.executing >= q.global_concurrency)
                     OR (q.rate_limit IS NOT NULL AND r.nth > q.rate_limit - coalesce(rw.used, 0))
                    ) AS held,
                    count(*) AS scanned
             FROM (SELECT c.k, row_number() OVER (PARTITION BY c.k
                                                  ORDER BY c.priority, c.scheduled_at, c.id) AS nth
                   FROM (SELECT j.id, j.priority, j.scheduled_at,
                                CASE WHEN q.rate_per IS NULL THEN ''
                                     ELSE coalesce(j.rate_key, kickoff_partition_key(
                                              q.rate_per, j.kind, j.args, j.call_host)) END AS k
                         FROM jobs j
                         WHERE j.state = 'available' AND j.queue = q.name
                           AND NOT EXISTS (SELECT 1 FROM kind_pauses p WHERE p.kind = j.kind)
                         ORDER BY j.priority, j.scheduled_at, j.id
                         LIMIT $1) c) r
             LEFT JOIN queue_rate_windows rw
                    ON q.rate_limit IS NOT NULL AND rw.queue = q.name AND rw.key = r.k
                   AND rw.window_start = kickoff_window_start(now(), q.rate_period_ms)) h
         WHERE q.rate_limit IS NOT NULL OR q.global_concurrency IS NOT NULL
         ORDER BY q.name",
    )
    .bind(scan)
    .fetch_all(db)
    .await
}

/// What a queue's limits leave for one job now (see [`queue_limit_room`]).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct LimitRoom {
    /// The job's partition key ('' when the rate is not partitioned or there is none).
    pub key: String,
    /// Attempts of that key started in the current rate window (0 without a rate).
    pub used: i64,
    /// Seconds until the current rate window ends (null without a rate).
    pub window_ends_in: Option<f64>,
    /// Attempts of the queue executing on all nodes.
    pub executing: i64,
}

/// The room a queue's limits leave now for `job`: its key's use of the current window (the key
/// the claim counts it under: the one kept with it, else the one its row gives) and the queue's
/// attempts executing on all nodes. `None` for a queue without a row.
pub async fn queue_limit_room<'e>(
    db: impl PgExecutor<'e>,
    queue: &str,
    job: &Job,
) -> Result<Option<LimitRoom>, sqlx::Error> {
    sqlx::query_as(
        "SELECT k.key, coalesce(w.used, 0)::bigint AS used,
                CASE WHEN q.rate_limit IS NOT NULL THEN extract(epoch FROM
                    kickoff_window_start(now(), q.rate_period_ms)
                    + make_interval(secs => q.rate_period_ms / 1000.0) - now())::float8 END
                    AS window_ends_in,
                (SELECT count(*) FROM jobs WHERE state = 'executing' AND queue = q.name) AS executing
         FROM queues q
         CROSS JOIN LATERAL (SELECT CASE WHEN q.rate_per IS NULL THEN ''
                                    ELSE coalesce($5, kickoff_partition_key(q.rate_per, $2, $3, $4))
                                    END AS key) k
         LEFT JOIN queue_rate_windows w
                ON q.rate_limit IS NOT NULL AND w.queue = q.name AND w.key = k.key
               AND w.window_start = kickoff_window_start(now(), q.rate_period_ms)
         WHERE q.name = $1",
    )
    .bind(queue)
    .bind(&job.kind)
    .bind(&job.args)
    .bind(&job.call_host)
    .bind(&job.rate_key)
    .fetch_optional(db)
    .await
}
