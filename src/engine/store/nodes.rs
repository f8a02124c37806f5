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

/// Records a node's heartbeat. `starting`: the process's first beat, which registers the node and
/// says it started now, also over a row an earlier process with the same node id left (a restart
/// with a configured id, a container's pid 1): the schedules' reconciliation reads `started_at`.
pub async fn node_heartbeat<'e>(
    db: impl PgExecutor<'e>,
    id: &str,
    hostname: &str,
    pid: i32,
    queues: &Value,
    starting: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO nodes (id, hostname, pid, queues) VALUES ($1, $2, $3, $4)
         ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), queues = $4,
             hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
             started_at = CASE WHEN $5 THEN now() ELSE nodes.started_at END",
    )
    .bind(id)
    .bind(hostname)
    .bind(pid)
    .bind(queues)
    .bind(starting)
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
