//! A schedule's part in its runs' attempts, the executor's hook (`ScheduleRuns`): a run's start is
//! recorded on its schedule, and its overlap policy applied before its handler. The run's meta
//! carries the policy (`overlap`, absent for `allow`), so runs of schedules without one, and jobs
//! of no schedule, cost a map lookup.

use std::time::Duration;

use crate::db::Db;
use serde_json::Value;

use super::spec::Overlap;
use crate::engine::attempt_hook::AttemptHook;
use crate::engine::job::Job;
use crate::engine::job::META_SCHEDULE_ID;
use crate::engine::store::jobs as job_store;
use crate::engine::store::schedules as store;
use crate::engine::worker::{BoxFuture, WorkError};

/// The hook the runtime gives the executor for the runs of schedules.
pub struct ScheduleRuns {
    pool: Db,
}

impl ScheduleRuns {
    pub fn new(pool: Db) -> Self {
        ScheduleRuns { pool }
    }
}

impl AttemptHook for ScheduleRuns {
    fn started(&self, job: &Job, late: Duration) {
        record_start(&self.pool, job, late);
    }

    fn gate<'a>(&'a self, job: &'a Job) -> Option<BoxFuture<'a, Result<(), WorkError>>> {
        let (policy, schedule_id) = overlap_policy(job)?;
        Some(Box::pin(overlap_gate(&self.pool, job, policy, schedule_id)))
    }
}

/// Records the start of a run of a schedule (its first attempt) and how late it started, without
/// holding up its handler: the schedule's page and metrics show it.
fn record_start(pool: &Db, job: &Job, late: Duration) {
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

/// The overlap policy of a run and its schedule, when it has one other than `allow`.
fn overlap_policy(job: &Job) -> Option<(Overlap, i64)> {
    let policy = job
        .meta
        .get("overlap")
        .and_then(Value::as_str)
        .and_then(Overlap::parse)
        .filter(|p| *p != Overlap::Allow)?;
    let schedule_id = job.meta.get(META_SCHEDULE_ID).and_then(Value::as_i64)?;
    Some((policy, schedule_id))
}

/// Whether `job` may start: `Err(Cancel)` when its schedule skips a run that overlaps an earlier
/// one still not final; with `cancel_previous` the earlier runs are cancelled first (their nodes
/// stop them).
async fn overlap_gate(
    pool: &Db,
    job: &Job,
    policy: Overlap,
    schedule_id: i64,
) -> Result<(), WorkError> {
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
