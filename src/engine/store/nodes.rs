//! SQL of the `nodes` table: which server processes are alive.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgExecutor;

#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct NodeRow {
    pub id: String,
    pub hostname: String,
    pub pid: i32,
    pub queues: Value,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
}

/// Records a node's heartbeat, registering it on the first call. A process that takes over the
/// row of a node id (a restart with a configured id) starts it again: `started_at` tells when
/// the node now alive came up (the schedules' reconciliation relies on it).
pub async fn node_heartbeat<'e>(
    db: impl PgExecutor<'e>,
    id: &str,
    hostname: &str,
    pid: i32,
    queues: &Value,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO nodes (id, hostname, pid, queues) VALUES ($1, $2, $3, $4)
         ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), queues = $4,
             started_at = CASE WHEN (nodes.hostname, nodes.pid) = (EXCLUDED.hostname, EXCLUDED.pid)
                               THEN nodes.started_at ELSE now() END,
             hostname = EXCLUDED.hostname, pid = EXCLUDED.pid",
    )
    .bind(id)
    .bind(hostname)
    .bind(pid)
    .bind(queues)
    .execute(db)
    .await?;
    Ok(())
}

pub async fn node_delete<'e>(db: impl PgExecutor<'e>, id: &str) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM nodes WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// Nodes whose heartbeat is younger than `max_age_secs`.
pub async fn node_list_alive<'e>(
    db: impl PgExecutor<'e>,
    max_age_secs: f64,
) -> Result<Vec<NodeRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT * FROM nodes WHERE heartbeat_at > now() - make_interval(secs => $1) ORDER BY started_at",
    )
    .bind(max_age_secs)
    .fetch_all(db)
    .await
}

/// Removes nodes silent for longer than `max_age_secs`. Returns how many.
pub async fn node_delete_stale<'e>(
    db: impl PgExecutor<'e>,
    max_age_secs: f64,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query("DELETE FROM nodes WHERE heartbeat_at < now() - make_interval(secs => $1)")
        .bind(max_age_secs)
        .execute(db)
        .await?;
    Ok(r.rows_affected())
}
