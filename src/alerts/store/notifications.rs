//! `alert_notifications`: which jobs are notifications of the alerts. The evaluation marks each
//! notification it inserts, in the same transaction (so a notification job never exists
//! unmarked), and nothing else writes here: an API caller can put anything in a job's `meta`, but
//! cannot make a job of theirs a notification, which every condition leaves out (see
//! `conditions`).
//!
//! A mark is settled once its job finished (completed, discarded, cancelled) or is gone, so the
//! reads that take the notifications' share out of per-queue counts read only the few marks not
//! settled (and, for the failure rate, those settled within its window). A mark is deleted only
//! once its job is gone: a discarded notification stays a notification as long as it exists, even
//! if an operator retries it.

use std::time::Duration;

use sqlx::{PgConnection, PgExecutor};

/// Marks job `job_id`, just inserted in the evaluation's transaction, as a notification.
pub async fn notification_mark(tx: &mut PgConnection, job_id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO alert_notifications (job_id) VALUES ($1)")
        .bind(job_id)
        .execute(tx)
        .await
        .map(drop)
}

/// Settles the marks whose job finished or is gone. Reads the marks not settled (through
/// `alert_notifications_settled_idx`), each job by its primary key. Returns how many.
pub async fn notifications_settle<'e>(db: impl PgExecutor<'e>) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "UPDATE alert_notifications a SET settled_at = now()
         WHERE a.settled_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM jobs j
                           WHERE j.id = a.job_id
                             AND j.state NOT IN ('completed', 'discarded', 'cancelled'))",
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Deletes up to `batch` marks settled more than `retention` ago whose job is gone (the pruner
/// deletes a finished job after the same retention; one it has not reached yet keeps its mark).
/// Returns how many.
pub async fn notifications_prune<'e>(
    db: impl PgExecutor<'e>,
    retention: Duration,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "DELETE FROM alert_notifications a
         WHERE a.job_id IN (SELECT job_id FROM alert_notifications
                            WHERE settled_at < now() - make_interval(secs => $1)
                            ORDER BY settled_at LIMIT $2)
           AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = a.job_id)",
    )
    .bind(retention.as_secs_f64())
    .bind(batch)
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}
