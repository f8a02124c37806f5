//! SQL of the `queues` table: settings shared by every node.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use crate::engine::limits::{QueueLimits, Rate};

/// A queue's shared settings.
#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
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
