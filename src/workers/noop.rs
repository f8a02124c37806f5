//! `noop`: a job that does nothing, optionally after a pause (logging "sleeping" before it and
//! "awake" after) and after failing a few attempts. For trying the engine and the dashboard out,
//! and for benchmarks.
//!
//! Args (all optional): `sleep_ms` (0 to 600000), `fail_attempts` (fail while the attempt number is
//! at most this), `message` (the failure's message), `tally` (a counter name, 1 to 100 characters:
//! the job raises `tallies.count` of that name by one in the transaction that completes it, so the
//! count says how many such jobs completed, each exactly once), `tally_by_job` (`true`: the
//! counter is `<tally>#<job id>`, one per job even when several jobs share their args, as a
//! workflow step's retries do). Other keys are kept and ignored, so that a
//! trial job can carry labels to find it by (`{"batch": "b1"}`).

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::engine::{BoxFuture, JobContext, WorkError, Worker};

pub const KIND: &str = "noop";
const MAX_SLEEP_MS: u64 = 600_000;

#[derive(Debug, Default, Deserialize)]
struct NoopArgs {
    #[serde(default)]
    sleep_ms: u64,
    #[serde(default)]
    fail_attempts: i32,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    tally: Option<String>,
    #[serde(default)]
    tally_by_job: bool,
}

pub struct NoopWorker;

impl Worker for NoopWorker {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        let a: NoopArgs = serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
        if a.sleep_ms > MAX_SLEEP_MS {
            return Err(format!("sleep_ms: at most {MAX_SLEEP_MS}"));
        }
        if let Some(t) = &a.tally {
            if t.is_empty() || t.chars().count() > 100 || t.contains('\0') {
                return Err("tally: 1 to 100 characters, no NUL".into());
            }
        }
        Ok(())
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(MAX_SLEEP_MS + 10_000)
    }

    fn backoff(&self, _attempt: i32) -> Duration {
        // Quick retries: this kind exists to watch retries happen.
        Duration::from_secs(1)
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let a: NoopArgs = ctx.args()?;
            if a.sleep_ms > 0 {
                // Its page shows the line while it sleeps (an attempt's log, live).
                tracing::info!(sleep_ms = a.sleep_ms, "sleeping");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(a.sleep_ms)) => {}
                    _ = ctx.cancelled().cancelled() => return Err(WorkError::Cancel("stopped".into())),
                }
                tracing::info!("awake");
            }
            if ctx.job.attempt <= a.fail_attempts {
                return Err(WorkError::Retryable(a.message.unwrap_or_else(|| {
                    format!("failing on purpose (attempt {})", ctx.job.attempt)
                })));
            }
            if let Some(name) = &a.tally {
                let name = if a.tally_by_job {
                    format!("{name}#{}", ctx.job.id.0)
                } else {
                    name.clone()
                };
                let mut tx = ctx.begin().await?;
                super::tally_store::tally_raise(&mut *tx, &name).await?;
                return ctx.complete_with(tx).await;
            }
            Ok(())
        })
    }
}
