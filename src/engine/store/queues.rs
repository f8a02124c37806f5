//! SQL of the `queues` table: settings shared by every node.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

/// A queue's shared settings.
#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct QueueRow {
    pub name: String,
    pub paused: bool,
    pub concurrency: Option<i32>,
    pub updated_at: DateTime<Utc>,
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
