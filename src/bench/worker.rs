//! The bench's one job kind: a handler that only reports when each attempt started.

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use crate::engine::{BoxFuture, JobContext, JobId, WorkError, Worker, Workers};

pub(super) const KIND: &str = "bench";

/// A worker that only reports when each attempt started.
struct BenchWorker {
    started: mpsc::UnboundedSender<(JobId, DateTime<Utc>, DateTime<Utc>)>,
}

impl Worker for BenchWorker {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        let now = Utc::now();
        let _ = self.started.send((ctx.job.id, now, ctx.job.scheduled_at));
        Box::pin(async { Ok(()) })
    }
}

/// The channel each bench handler reports its start to: (job, started, scheduled_at).
pub(super) type Starts = mpsc::UnboundedReceiver<(JobId, DateTime<Utc>, DateTime<Utc>)>;

pub(super) fn workers() -> (Workers, Starts) {
    let (tx, rx) = mpsc::unbounded_channel();
    (workers_reporting_to(tx), rx)
}

/// Bench workers that report to `started` (several engines may share one channel).
pub(super) fn workers_reporting_to(
    started: mpsc::UnboundedSender<(JobId, DateTime<Utc>, DateTime<Utc>)>,
) -> Workers {
    let mut w = Workers::new();
    w.register(BenchWorker { started });
    w
}
