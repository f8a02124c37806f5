//! The executor runs claimed attempts, and the completer writes their outcomes.
//!
//! Each attempt runs in its own task under the worker's timeout; a panic fails only that attempt.
//! Outcomes go to the completer through a channel: it takes whatever is waiting (up to
//! [`COMPLETE_BATCH`]) and completes the successes in one statement, so completions cost one commit
//! per batch under load and add no delay when idle. Every write is guarded by the attempt number:
//! an attempt that lost its job (cancelled, rescued) changes nothing.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::job::{Job, JobId};
use super::metrics::Outcome;
use super::producer::QueueState;
use super::runtime::{Running, Shared};
use super::store::jobs::{self as job_store, FailAs};
use super::worker::{JobContext, WorkError};

/// The most outcomes written in one statement.
pub const COMPLETE_BATCH: usize = 1000;
/// The wait before retrying a job whose kind no worker on this node knows.
const UNKNOWN_KIND_BACKOFF: Duration = Duration::from_secs(30);

/// The outcome of one attempt.
pub(crate) struct Completion {
    pub id: JobId,
    pub attempt: i32,
    pub result: Result<(), WorkError>,
    /// The handler completed the job inside its own transaction.
    pub completed_in_tx: bool,
    pub backoff: Duration,
}

/// Starts an attempt of a claimed job.
pub(crate) fn spawn(shared: &Arc<Shared>, queue: Arc<QueueState>, job: Job) {
    queue.in_flight.fetch_add(1, Ordering::AcqRel);
    let cancel = shared.hard_stop.child_token();
    let (id, attempt) = (job.id, job.attempt);
    // Registered before the task starts, so that a cancel arriving at once finds it.
    let older = shared.running.lock().expect("running map poisoned").insert(
        id,
        Running {
            attempt,
            cancel: cancel.clone(),
            abort: None,
            stopped: false,
        },
    );
    if let Some(older) = older {
        // An older attempt of this job still runs here: its job was rescued (this node lost the
        // database for longer than the lease) and claimed again. Only the newest may run.
        tracing::warn!(job = %id, attempt = older.attempt, "stopping an older attempt of a re-claimed job");
        older.cancel.cancel();
        if let Some(abort) = older.abort {
            abort.abort();
        }
    }
    let guard = AttemptGuard {
        shared: shared.clone(),
        queue,
        id,
        attempt,
        finished: false,
    };
    // Every log line of the attempt (the worker's own included) names its job.
    let span = tracing::info_span!("attempt", job = %id, kind = %job.kind, attempt);
    let handle = shared
        .tracker
        .spawn(run_attempt(shared.clone(), job, cancel, guard).instrument(span));
    let mut running = shared.running.lock().expect("running map poisoned");
    if let Some(r) = running.get_mut(&id) {
        if r.stopped {
            handle.abort();
        }
        r.abort = Some(handle.abort_handle());
    }
}

async fn run_attempt(
    shared: Arc<Shared>,
    job: Job,
    cancel: CancellationToken,
    mut guard: AttemptGuard,
) {
    let job = Arc::new(job);
    let late = (shared.db_now() - job.scheduled_at)
        .to_std()
        .unwrap_or_default();
    shared.metrics.started(&job.queue, late);
    let started = std::time::Instant::now();
    let (result, completed_in_tx, backoff) = match shared.workers.get(&job.kind) {
        None => (
            Err(WorkError::Retryable(format!(
                "no worker for kind `{}` on node {}",
                job.kind, shared.node_id
            ))),
            false,
            UNKNOWN_KIND_BACKOFF,
        ),
        Some(worker) => {
            let ctx = JobContext::new(job.clone(), shared.pool.clone(), cancel);
            let timeout = worker.timeout();
            let work = AssertUnwindSafe(worker.work(ctx.clone())).catch_unwind();
            let result = match tokio::time::timeout(timeout, work).await {
                Err(_) => Err(WorkError::Retryable(format!(
                    "timed out after {} ms",
                    timeout.as_millis()
                ))),
                Ok(Err(panic)) => Err(WorkError::Retryable(format!(
                    "panicked: {}",
                    panic_message(panic.as_ref())
                ))),
                Ok(Ok(r)) => r,
            };
            (result, ctx.already_completed(), worker.backoff(job.attempt))
        }
    };
    let outcome = match &result {
        Ok(()) => Outcome::Completed,
        Err(WorkError::Retryable(_)) => Outcome::Failed,
        Err(WorkError::Fatal(_)) => Outcome::Fatal,
        Err(WorkError::Cancel(_)) => Outcome::Cancelled,
        Err(WorkError::Snooze(_)) => Outcome::Snoozed,
        Err(WorkError::Fenced) => Outcome::Fenced,
    };
    shared
        .metrics
        .finished(&job.kind, outcome, started.elapsed());
    // Its lease is renewed until the outcome is written (see the heartbeat).
    if let Ok(mut pending) = shared.pending_outcomes.lock() {
        pending.insert(job.id, job.attempt);
    }
    let _ = shared.completions.send(Completion {
        id: job.id,
        attempt: job.attempt,
        result,
        completed_in_tx,
        backoff,
    });
    guard.finished = true;
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".into())
}

/// Frees the attempt's slot however its task ends; an attempt dropped unfinished (interrupted at
/// shutdown) is recorded for hand-back unless it was stopped because its job is gone.
struct AttemptGuard {
    shared: Arc<Shared>,
    queue: Arc<QueueState>,
    id: JobId,
    attempt: i32,
    finished: bool,
}

impl Drop for AttemptGuard {
    fn drop(&mut self) {
        // A newer attempt of the same job may have replaced this one's entry: leave it alone.
        let entry = self.shared.running.lock().ok().and_then(|mut r| {
            if r.get(&self.id).is_some_and(|e| e.attempt == self.attempt) {
                r.remove(&self.id)
            } else {
                None
            }
        });
        let stopped = entry.map(|e| e.stopped).unwrap_or(true);
        if !self.finished && !stopped {
            if let Ok(mut v) = self.shared.interrupted.lock() {
                v.push((self.id, self.attempt));
            }
        }
        self.queue.release_slot();
    }
}

/// Writes attempt outcomes in batches.
pub(crate) struct Completer {
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<Completion>,
}

impl Completer {
    pub fn new(shared: Arc<Shared>, rx: mpsc::UnboundedReceiver<Completion>) -> Self {
        Completer { shared, rx }
    }

    /// Runs until `stop`, then writes what is left and ends.
    pub async fn run(mut self, stop: CancellationToken) {
        loop {
            let first = tokio::select! {
                biased;
                m = self.rx.recv() => match m {
                    Some(m) => m,
                    None => return,
                },
                _ = stop.cancelled() => {
                    let mut rest = Vec::new();
                    while let Ok(m) = self.rx.try_recv() {
                        rest.push(m);
                    }
                    self.write(rest).await;
                    return;
                }
            };
            let mut batch = vec![first];
            while batch.len() < COMPLETE_BATCH {
                match self.rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            self.write(batch).await;
        }
    }

    async fn write(&self, batch: Vec<Completion>) {
        if batch.is_empty() {
            return;
        }
        self.write_outcomes(&batch).await;
        if let Ok(mut pending) = self.shared.pending_outcomes.lock() {
            for c in &batch {
                if pending.get(&c.id) == Some(&c.attempt) {
                    pending.remove(&c.id);
                }
            }
        }
    }

    async fn write_outcomes(&self, batch: &[Completion]) {
        let node = self.shared.node_id.as_str();
        let mut done: Vec<(JobId, i32)> = batch
            .iter()
            .filter(|c| c.result.is_ok() && !c.completed_in_tx)
            .map(|c| (c.id, c.attempt))
            .collect();
        // One order for every multi-row write, so that two of them never deadlock.
        done.sort_unstable();
        if !done.is_empty() {
            self.retrying("complete", || {
                job_store::job_complete_many(&self.shared.pool, &done)
            })
            .await;
        }
        for c in batch {
            let pool = &self.shared.pool;
            match &c.result {
                Ok(()) | Err(WorkError::Fenced) => {}
                Err(WorkError::Snooze(d)) => {
                    self.retrying("snooze", || {
                        job_store::job_snooze(pool, c.id, c.attempt, *d)
                    })
                    .await;
                }
                Err(e) => {
                    let fail_as = match e {
                        WorkError::Fatal(_) => FailAs::Discard,
                        WorkError::Cancel(_) => FailAs::Cancel,
                        _ => FailAs::Retry { backoff: c.backoff },
                    };
                    // Postgres text cannot hold NUL bytes (a webhook's body may).
                    let message = e.to_string().replace('\0', "\u{FFFD}");
                    self.retrying("fail", || {
                        job_store::job_fail(pool, c.id, c.attempt, node, &message, fail_as)
                    })
                    .await;
                }
            }
        }
    }

    /// Retries a write through short database outages. If it never succeeds, the job's lease
    /// expires and the rescuer takes it back: the job runs again rather than being lost.
    async fn retrying<T, F, Fut>(&self, what: &str, mut f: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        for attempt in 0..20 {
            match f().await {
                Ok(v) => return Some(v),
                Err(e @ sqlx::Error::Database(_)) => {
                    // The database refused this write: trying again will not help.
                    tracing::error!(what, error = %e, "an outcome was refused; the rescuer will take the job back");
                    return None;
                }
                Err(e) => {
                    tracing::warn!(what, attempt, error = %e, "writing an outcome failed; retrying");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
        tracing::error!(
            what,
            "gave up writing an outcome; the rescuer will take the job back"
        );
        None
    }
}
