//! The executor runs claimed attempts, and the completer writes their outcomes.
//!
//! Each attempt runs in its own task under the worker's timeout; a panic fails only that attempt.
//! Outcomes go to the completer through a channel: it takes whatever is waiting (up to
//! [`COMPLETE_BATCH`]) and completes the successes in one statement, so completions cost one commit
//! per batch under load and add no delay when idle. Every write is guarded by the attempt's claim
//! token: an attempt that lost its job (cancelled, rescued, claimed again) changes nothing.
//!
//! An outcome is never dropped for a transient database error (a deadlock, a serialization
//! failure, a server shutting down, a read-only server after a failover, a statement timeout): the
//! completer retries it with backoff for as long as the node runs, and the heartbeat keeps the
//! attempt's lease alive meanwhile (see `pending_outcomes`). Dropping it would let the lease lapse,
//! the rescuer take the job back and run it again, or discard it on its last attempt although its
//! effects happened. Only an error that a retry cannot fix (a constraint, bad data) gives up.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::job::{Claim, Job};
use super::metrics::Outcome;
use super::producer::QueueState;
use super::runtime::{Running, Shared};
use super::store::errors::is_transient;
use super::store::jobs::{self as job_store, FailAs};
use super::worker::{JobContext, WorkError};

/// The most outcomes written in one statement.
pub const COMPLETE_BATCH: usize = 1000;
/// The wait before retrying a job whose kind no worker on this node knows.
const UNKNOWN_KIND_BACKOFF: Duration = Duration::from_secs(30);

/// The outcome of one attempt.
pub(crate) struct Completion {
    pub claim: Claim,
    pub result: Result<(), WorkError>,
    /// The handler completed the job inside its own transaction.
    pub completed_in_tx: bool,
    pub backoff: Duration,
}

/// Starts an attempt of a claimed job.
pub(crate) fn spawn(shared: &Arc<Shared>, queue: Arc<QueueState>, job: Job) {
    let Some(claim) = job.claim() else {
        tracing::error!(job = %job.id, "a claimed job without a claim token: not run");
        return;
    };
    queue.in_flight.fetch_add(1, Ordering::SeqCst);
    let cancel = shared.hard_stop.child_token();
    let (id, attempt) = (job.id, job.attempt);
    // Registered before the task starts, so that a cancel arriving at once finds it.
    let older = shared.running.lock().expect("running map poisoned").insert(
        id,
        Running {
            attempt,
            claim,
            cancel: cancel.clone(),
            abort: None,
            stopped: false,
        },
    );
    if let Some(older) = older {
        // An older attempt of this job still runs here: its job was rescued (this node lost the
        // database for longer than the lease), or its claim was lost in a database crash, and it
        // was claimed again. Only the newest may run (its claim token tells them apart, even
        // when the lost claim made the attempt number repeat).
        tracing::warn!(job = %id, attempt = older.attempt, "stopping an older attempt of a re-claimed job");
        older.cancel.cancel();
        if let Some(abort) = older.abort {
            abort.abort();
        }
    }
    let guard = AttemptGuard {
        shared: shared.clone(),
        queue,
        claim,
        finished: false,
    };
    // Every log line of the attempt (the worker's own included) names its job.
    let span = tracing::info_span!("attempt", job = %id, kind = %job.kind, attempt);
    let handle = shared
        .tracker
        .spawn(run_attempt(shared.clone(), job, cancel, guard).instrument(span));
    let mut running = shared.running.lock().expect("running map poisoned");
    if let Some(r) = running.get_mut(&id).filter(|r| r.claim == claim) {
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
        pending.insert(job.id, guard.claim);
    }
    let _ = shared.completions.send(Completion {
        claim: guard.claim,
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
    claim: Claim,
    finished: bool,
}

impl Drop for AttemptGuard {
    fn drop(&mut self) {
        // A newer claim of the same job may have replaced this one's entry: leave it alone.
        let entry = self.shared.running.lock().ok().and_then(|mut r| {
            if r.get(&self.claim.id).is_some_and(|e| e.claim == self.claim) {
                r.remove(&self.claim.id)
            } else {
                None
            }
        });
        let stopped = entry.map(|e| e.stopped).unwrap_or(true);
        if !self.finished && !stopped {
            if let Ok(mut v) = self.shared.interrupted.lock() {
                v.push(self.claim);
            }
        }
        self.queue.release_slot();
    }
}

/// The first wait before a failed outcome write is tried again; it doubles up to
/// [`RETRY_MAX_BACKOFF`].
const RETRY_FIRST_BACKOFF: Duration = Duration::from_millis(50);
const RETRY_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Writes attempt outcomes in batches.
pub(crate) struct Completer {
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<Completion>,
    stop: CancellationToken,
    /// Set when the node stops: from then on, a write that keeps failing is given up after the
    /// shutdown grace (the lease then lapses and the rescuer takes the job back).
    give_up_at: std::sync::OnceLock<tokio::time::Instant>,
}

impl Completer {
    /// A completer that runs until `stop`, then writes what is left and ends.
    pub fn new(
        shared: Arc<Shared>,
        rx: mpsc::UnboundedReceiver<Completion>,
        stop: CancellationToken,
    ) -> Self {
        Completer {
            shared,
            rx,
            stop,
            give_up_at: std::sync::OnceLock::new(),
        }
    }

    pub async fn run(mut self) {
        let stop = self.stop.clone();
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
                if pending.get(&c.claim.id) == Some(&c.claim) {
                    pending.remove(&c.claim.id);
                }
            }
        }
    }

    async fn write_outcomes(&self, batch: &[Completion]) {
        let node = self.shared.node_id.as_str();
        let pool = &self.shared.bookkeeping_pool;
        let mut done: Vec<Claim> = batch
            .iter()
            .filter(|c| c.result.is_ok() && !c.completed_in_tx)
            .map(|c| c.claim)
            .collect();
        // One order for every multi-row write, so that two of them never deadlock.
        done.sort_unstable();
        if !done.is_empty()
            && self
                .retrying("complete", || job_store::job_complete_many(pool, &done))
                .await
                .is_none()
            && done.len() > 1
        {
            // Refused for good: one row's trigger or constraint must not cost the whole batch
            // its completions. One at a time, only the refused ones are left to the rescuer.
            for one in &done {
                self.retrying("complete", || {
                    job_store::job_complete_many(pool, std::slice::from_ref(one))
                })
                .await;
            }
        }
        for c in batch {
            match &c.result {
                Ok(()) | Err(WorkError::Fenced) => {}
                Err(WorkError::Snooze(d)) => {
                    self.retrying("snooze", || job_store::job_snooze(pool, c.claim, *d))
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
                        job_store::job_fail(pool, c.claim, node, &message, fail_as)
                    })
                    .await;
                }
            }
        }
    }

    /// Runs a write until it succeeds, retrying transient errors with backoff (see the module
    /// doc). Returns `None` when the database refused it for good, or when the node is stopping
    /// and its grace is over: the job's lease then lapses and the rescuer takes it back, so the
    /// job runs again rather than being lost.
    async fn retrying<T, F, Fut>(&self, what: &str, mut f: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        let mut backoff = RETRY_FIRST_BACKOFF;
        for attempt in 1u32.. {
            match f().await {
                Ok(v) => return Some(v),
                Err(e) if !is_transient(&e) => {
                    tracing::error!(what, error = %e, "an outcome was refused; the rescuer will take the job back");
                    return None;
                }
                Err(e) => {
                    if self.stop.is_cancelled() {
                        let grace = self.shared.config.shutdown_grace;
                        let give_up_at = *self
                            .give_up_at
                            .get_or_init(|| tokio::time::Instant::now() + grace);
                        if tokio::time::Instant::now() + backoff > give_up_at {
                            tracing::error!(what, error = %e, "stopping: gave up writing an outcome; the rescuer will take the job back");
                            return None;
                        }
                    }
                    tracing::warn!(what, attempt, error = %e, "writing an outcome failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        // The node stops: re-check against the grace at once.
                        _ = self.stop.cancelled(), if !self.stop.is_cancelled() => {}
                    }
                    backoff = (backoff * 2).min(RETRY_MAX_BACKOFF);
                }
            }
        }
        None
    }
}
