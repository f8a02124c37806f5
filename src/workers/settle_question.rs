//! `settle_question`: scores every prediction of a question against its correct choice, in batches,
//! then marks the question settled in the transaction that completes the job. Each prediction is
//! scored once (only unscored rows are touched), so a rerun or a retry after a crash scores nothing
//! twice.

use std::time::Duration;

use serde_json::Value;

use crate::engine::{BoxFuture, JobContext, WorkError, Worker};
use crate::questions::jobs::{self, QuestionArgs};
use crate::questions::store;

/// Predictions scored per statement.
pub const BATCH: i64 = 1000;

pub struct SettleQuestionWorker;

impl Worker for SettleQuestionWorker {
    fn kind(&self) -> &'static str {
        jobs::SETTLE_KIND
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
        Duration::from_secs(300)
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let args: QuestionArgs = ctx.args()?;
            let Some(q) = store::question_get(ctx.pool(), args.question_id).await? else {
                return Ok(());
            };
            let Some(correct) = q.correct_choice.as_deref() else {
                return Err(WorkError::Fatal(format!(
                    "question {} has no correct choice",
                    q.id
                )));
            };
            let mut scored = 0u64;
            loop {
                if ctx.cancelled().is_cancelled() {
                    return Err(WorkError::Retryable("stopped".into()));
                }
                let n = store::prediction_score_batch(ctx.pool(), q.id, correct, BATCH).await?;
                scored += n;
                if n < BATCH as u64 {
                    break;
                }
            }
            // Kept with the attempt's record: a rerun scores only what an earlier one left.
            let _ = ctx.record(&serde_json::json!({
                "question_id": q.id,
                "correct_choice": correct,
                "predictions_scored": scored,
            }));
            let mut tx = ctx.begin().await?;
            if !store::question_mark_settled(&mut *tx, q.id).await? {
                let now = store::question_get(&mut *tx, q.id).await?;
                if now.is_some_and(|n| n.status != store::QuestionStatus::Settled) {
                    return Err(WorkError::Retryable("unscored predictions remain".into()));
                }
            }
            ctx.complete_with(tx).await
        })
    }
}
