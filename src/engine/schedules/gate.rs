//! The overlap policy of a schedule, applied when one of its runs starts: the run's meta carries
//! the policy (`overlap`, absent for `allow`), so runs of schedules without one cost a map lookup.

use crate::db::Db;
use serde_json::Value;

use super::spec::Overlap;
use crate::engine::client::notify_cancelled;
use crate::engine::job::Job;
use crate::engine::job::META_SCHEDULE_ID;
use crate::engine::store::jobs as job_store;
use crate::engine::store::schedules as store;
use crate::engine::worker::WorkError;

/// Records the start of a run of a schedule (its first attempt) and how late it started, without
/// holding up its handler: the schedule's page and metrics show it.
pub fn record_start(pool: &Db, job: &Job, late: std::time::Duration) {
    if job.attempt != 1 {
        return;
    }
    let Some(schedule_id) = job.meta.get(META_SCHEDULE_ID).and_then(Value::as_i64) else {
        return;
    };
    let (pool, id, late_ms) = (pool.clone(), job.id, late.as_secs_f64() * 1000.0);
    tokio::spawn(async move {
        if let Err(e) = store::schedule_record_start(&pool, schedule_id, id, late_ms).await {
            tracing::debug!(error = %e, job = %id, "recording the start of a schedule's run failed");
        }
    });
}

/// Whether `job` may start: `Err(Cancel)` when its schedule skips a run that overlaps an earlier
/// one still not final; with `cancel_previous` the earlier runs are cancelled first (their nodes
/// stop them).
pub async fn overlap_gate(pool: &Db, job: &Job) -> Result<(), WorkError> {
    let Some(policy) = job
        .meta
        .get("overlap")
        .and_then(Value::as_str)
        .and_then(Overlap::parse)
    else {
        return Ok(());
    };
    let Some(schedule_id) = job.meta.get(META_SCHEDULE_ID).and_then(Value::as_i64) else {
        return Ok(());
    };
    match policy {
        Overlap::Allow => Ok(()),
        Overlap::Skip => {
            let earlier =
                store::schedule_runs_unfinished_before(pool, schedule_id, job.id, slot_ms(job))
                    .await?;
            match earlier.last() {
                None => Ok(()),
                Some(previous) => {
                    store::schedule_count_skipped(pool, schedule_id).await?;
                    Err(WorkError::Cancel(format!(
                        "skipped: the previous run (job {previous}) is not final (overlap policy `skip`)"
                    )))
                }
            }
        }
        Overlap::CancelPrevious => {
            let mut tx = pool.begin().await?;
            let earlier =
                store::schedule_runs_unfinished_before(&mut *tx, schedule_id, job.id, slot_ms(job))
                    .await?;
            if !earlier.is_empty() {
                let cancelled = job_store::job_cancel_many(&mut *tx, &earlier).await?;
                notify_cancelled(&mut tx, &cancelled).await?;
                tracing::info!(job = %job.id, cancelled = cancelled.len(), "a run of a schedule cancelled the runs it overlaps");
            }
            tx.commit().await?;
            Ok(())
        }
    }
}

/// The slot of a run (in ms): every run carries it in its meta; its due time otherwise.
fn slot_ms(job: &Job) -> i64 {
    job.meta
        .get("slot_ms")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| job.scheduled_at.timestamp_millis())
}
