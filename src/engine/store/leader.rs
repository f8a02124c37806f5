//! SQL of the `leader` table: a lease that one node holds at a time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

/// The name of the engine's leader lease.
pub const LEADER_NAME: &str = "maintenance";

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct LeaderRow {
    pub name: String,
    pub node_id: String,
    pub elected_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Takes the lease if it is free or expired, or renews it if `node` holds it. Returns whether `node`
/// holds it afterwards.
pub async fn leader_attempt_elect<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    node: &str,
    ttl: Duration,
) -> Result<bool, sqlx::Error> {
    let holder: Option<String> = sqlx::query_scalar(
        "INSERT INTO leader (name, node_id, expires_at)
         VALUES ($1, $2, now() + make_interval(secs => $3))
         ON CONFLICT (name) DO UPDATE SET
             node_id = excluded.node_id,
             expires_at = excluded.expires_at,
             elected_at = CASE WHEN leader.node_id = excluded.node_id THEN leader.elected_at
                               ELSE now() END
         WHERE leader.node_id = excluded.node_id OR leader.expires_at < now()
         RETURNING node_id",
    )
    .bind(name)
    .bind(node)
    .bind(ttl.as_secs_f64())
    .fetch_optional(db)
    .await?;
    Ok(holder.as_deref() == Some(node))
}

/// Gives the lease up so another node can take it at once.
pub async fn leader_resign<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    node: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM leader WHERE name = $1 AND node_id = $2")
        .bind(name)
        .bind(node)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn leader_get<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
) -> Result<Option<LeaderRow>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM leader WHERE name = $1 AND expires_at > now()")
        .bind(name)
        .fetch_optional(db)
        .await
}
