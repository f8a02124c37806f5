//! What a standby says about itself.

use sqlx::PgExecutor;

/// How far behind its primary the server `db` reaches is, in milliseconds: `None` on a primary,
/// 0 on a standby that has replayed all the WAL it received, otherwise the time since the last
/// transaction it replayed committed (a standby whose replay stalls falls behind by the clock).
pub async fn replica_lag_ms<'e>(db: impl PgExecutor<'e>) -> Result<Option<f64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT CASE
                  WHEN NOT pg_is_in_recovery() THEN NULL
                  WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
                  ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000, 0)
                END::float8",
    )
    .fetch_one(db)
    .await
}
