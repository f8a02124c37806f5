//! `lock_question`: closes a question at game time. The lock and the job's completion commit in one
//! transaction, so a crash never leaves one without the other; running it twice is harmless. If the
//! game time moved later while the job was already running, it snoozes until the new time.

use std::time::Duration;

use serde_json::{json, Value};

use crate::engine::{BoxFuture, JobContext, WorkError, Worker};
use crate::questions::jobs::{self, QuestionArgs};
use crate::questions::{store, QuestionStatus};

pub struct LockQuestionWorker;

impl Worker for LockQuestionWorker {
    fn kind(&self) -> &'static str {
        jobs::LOCK_KIND
    }

    /// Inserted by the questions service alone (a question's lock at its game time, its
    /// settling once its answer is known).
    fn kickoffs_own(&self) -> bool {
        true
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        jobs::validate_args(args)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn backoff(&self, attempt: i32) -> Duration {
        // A lock is due now: retry fast (100 ms, 200 ms, ... up to 5 s).
        Duration::from_millis((100 * 2u64.pow(attempt.clamp(0, 6) as u32)).min(5_000))
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let args: QuestionArgs = ctx.args()?;
            let mut tx = ctx.begin().await?;
            let Some(q) = store::question_get_for_update(&mut *tx, args.question_id).await? else {
                // The question was deleted: nothing to lock.
                return ctx.complete_with(tx).await;
            };
            if q.status == QuestionStatus::Open && !store::question_lock(&mut *tx, q.id).await? {
                // Open, and its game time is still ahead: it was moved after this job started.
                let wait = store::question_time_to_game(&mut *tx, q.id).await?;
                tx.rollback().await?;
                return Err(WorkError::Snooze(Duration::from_secs_f64(wait.max(0.001))));
            }
            // What the lock froze, kept with the attempt's record (its lateness is there too).
            let output = match q.status {
                QuestionStatus::Open => json!({
                    "question_id": q.id,
                    "predictions_frozen": store::prediction_count(&mut *tx, q.id).await?,
                }),
                other => json!({ "question_id": q.id, "already": other.as_str() }),
            };
            let _ = ctx.record(&output);
            ctx.complete_with(tx).await
        })
    }
}
