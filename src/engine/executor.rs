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

use super::job::{Claim, Job, JobState};
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
        pending.insert(guard.claim);
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

/// The first wait before an outcome that could not be written is tried again; it doubles up to
/// [`RETRY_MAX_BACKOFF`].
const RETRY_FIRST_BACKOFF: Duration = Duration::from_millis(50);
const RETRY_MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The longest one write may take before it counts as failed (a stalled connection).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// An outcome that could not be written yet (its row was locked, or the write failed with a
/// transient error), and when to try it again.
struct Deferred {
    completion: Completion,
    tries: u32,
    not_before: tokio::time::Instant,
}

/// What became of one outcome in a write.
enum Written {
    /// Written, or fenced off (its claim had lost the job): done with it.
    Done,
    /// Try again later.
    Again,
}

/// Writes attempt outcomes in batches.
///
/// An outcome that cannot be written now is deferred, not waited for: the completer goes on with
/// the others and tries it again after a backoff. So one locked row, or one statement that keeps
/// failing, never holds up the outcomes of the rest of the node.
pub(crate) struct Completer {
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<Completion>,
    stop: CancellationToken,
    deferred: Vec<Deferred>,
}

impl Completer {
    /// A completer that runs until `stop`, then writes what is left (for at most the shutdown
    /// grace) and ends.
    pub fn new(
        shared: Arc<Shared>,
        rx: mpsc::UnboundedReceiver<Completion>,
        stop: CancellationToken,
    ) -> Self {
        Completer {
            shared,
            rx,
            stop,
            deferred: Vec::new(),
        }
    }

    pub async fn run(mut self) {
        let stop = self.stop.clone();
        let mut give_up_at: Option<tokio::time::Instant> = None;
        loop {
            let next_retry = self.deferred.iter().map(|d| d.not_before).min();
            let mut batch: Vec<(Completion, u32)> = Vec::new();
            match give_up_at {
                None => {
                    tokio::select! {
                        biased;
                        m = self.rx.recv() => match m {
                            Some(m) => batch.push((m, 0)),
                            None => give_up_at = Some(self.deadline()),
                        },
                        _ = stop.cancelled() => give_up_at = Some(self.deadline()),
                        _ = sleep_until_some(next_retry) => {}
                    }
                }
                Some(deadline) => {
                    // Stopping: every sender has finished; write what is left until the deadline.
                    if self.deferred.is_empty() && self.rx.is_empty() {
                        return;
                    }
                    if tokio::time::Instant::now() >= deadline {
                        tracing::error!(
                            outcomes = self.deferred.len(),
                            "stopping: gave up writing outcomes; the rescuer will take their jobs back"
                        );
                        return;
                    }
                    if self.rx.is_empty() {
                        tokio::time::sleep_until(next_retry.unwrap_or(deadline).min(deadline))
                            .await;
                    }
                }
            }
            while batch.len() < COMPLETE_BATCH {
                match self.rx.try_recv() {
                    Ok(m) => batch.push((m, 0)),
                    Err(_) => break,
                }
            }
            let now = tokio::time::Instant::now();
            let (due, later): (Vec<Deferred>, Vec<Deferred>) = std::mem::take(&mut self.deferred)
                .into_iter()
                .partition(|d| d.not_before <= now);
            self.deferred = later;
            batch.extend(due.into_iter().map(|d| (d.completion, d.tries)));
            if !batch.is_empty() {
                self.write(batch, give_up_at).await;
            }
        }
    }

    fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.shared.config.shutdown_grace
    }

    async fn write(
        &mut self,
        batch: Vec<(Completion, u32)>,
        give_up_at: Option<tokio::time::Instant>,
    ) {
        let limit = match give_up_at {
            Some(at) => at
                .saturating_duration_since(tokio::time::Instant::now())
                .min(WRITE_TIMEOUT),
            None => WRITE_TIMEOUT,
        };
        let results = self.write_outcomes(&batch, limit).await;
        let mut again = Vec::new();
        if let Ok(mut pending) = self.shared.pending_outcomes.lock() {
            for ((c, tries), written) in batch.into_iter().zip(results) {
                match written {
                    Written::Done => {
                        pending.remove(&c.claim);
                    }
                    Written::Again => again.push((c, tries + 1)),
                }
            }
        }
        for (completion, tries) in again {
            let backoff = RETRY_FIRST_BACKOFF
                .saturating_mul(1 << tries.min(10))
                .min(RETRY_MAX_BACKOFF);
            self.deferred.push(Deferred {
                completion,
                tries,
                not_before: tokio::time::Instant::now() + backoff,
            });
        }
    }

    /// Writes the batch's outcomes on one bookkeeping connection; says for each whether it is done.
    async fn write_outcomes(&self, batch: &[(Completion, u32)], limit: Duration) -> Vec<Written> {
        let mut results: Vec<Written> = batch.iter().map(|_| Written::Again).collect();
        let acquired = tokio::time::timeout(limit, self.shared.bookkeeping_pool.acquire()).await;
        let mut conn = match acquired {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, outcomes = batch.len(), "no connection to write outcomes; retrying");
                return results;
            }
            Err(_) => return results,
        };
        let node = self.shared.node_id.as_str();
        // The successes in one statement; the rows it could not write are tried again.
        let mut done: Vec<(usize, Claim)> = batch
            .iter()
            .enumerate()
            .filter(|(_, (c, _))| c.result.is_ok() && !c.completed_in_tx)
            .map(|(i, (c, _))| (i, c.claim))
            .collect();
        // One order for every multi-row write (the statement also locks in id order).
        done.sort_unstable_by_key(|(_, c)| *c);
        let claims: Vec<Claim> = done.iter().map(|(_, c)| *c).collect();
        if !claims.is_empty() {
            let written = tokio::time::timeout(
                limit,
                job_store::job_complete_unless_locked(&mut conn, &claims),
            )
            .await;
            match written {
                Ok(Ok(w)) => {
                    for (i, c) in &done {
                        if !w.locked.contains(c) {
                            results[*i] = Written::Done;
                        }
                    }
                }
                Ok(Err(e)) if is_transient(&e) => {
                    tracing::warn!(error = %e, outcomes = claims.len(), "writing completions failed; retrying");
                }
                Ok(Err(e)) => {
                    // Refused for good: one row's trigger or constraint must not cost the whole
                    // batch its completions. One at a time, only the refused ones are left to
                    // the rescuer.
                    tracing::warn!(error = %e, "a batch of completions was refused; writing them one by one");
                    for (i, c) in &done {
                        let one = job_store::job_complete_unless_locked(
                            &mut conn,
                            std::slice::from_ref(c),
                        );
                        let Some(written) =
                            settle("complete", tokio::time::timeout(limit, one).await)
                        else {
                            conn.close_on_drop();
                            return results;
                        };
                        results[*i] = written;
                    }
                }
                Err(_) => {
                    // The statement may still run on the server: this connection is not reused.
                    conn.close_on_drop();
                    return results;
                }
            }
        }
        for (i, (c, _)) in batch.iter().enumerate() {
            let result = match &c.result {
                Ok(()) if c.completed_in_tx => Some(Written::Done),
                Ok(()) => continue,
                Err(WorkError::Fenced) => Some(Written::Done),
                Err(WorkError::Snooze(d)) => {
                    let snoozed = job_store::job_snooze(&mut *conn, c.claim, *d);
                    settle("snooze", tokio::time::timeout(limit, snoozed).await)
                }
                Err(e) => {
                    let fail_as = match e {
                        WorkError::Fatal(_) => FailAs::Discard,
                        WorkError::Cancel(_) => FailAs::Cancel,
                        _ => FailAs::Retry { backoff: c.backoff },
                    };
                    // Postgres text cannot hold NUL bytes (a webhook's body may).
                    let message = e.to_string().replace('\0', "\u{FFFD}");
                    let failed = job_store::job_fail(&mut *conn, c.claim, node, &message, fail_as);
                    settle("fail", tokio::time::timeout(limit, failed).await)
                }
            };
            let Some(result) = result else {
                // Timed out: the statement may still run on the server; the rest of the batch
                // is tried again on another connection.
                conn.close_on_drop();
                return results;
            };
            results[i] = result;
        }
        results
    }
}

/// What one outcome write's result means: done (written, fenced off, or refused for good: the
/// rescuer then answers), or again (a transient error, or a row still locked). `None` when it
/// timed out.
fn settle<T: Settled>(
    what: &str,
    result: Result<Result<T, sqlx::Error>, tokio::time::error::Elapsed>,
) -> Option<Written> {
    Some(match result {
        Ok(Ok(v)) if v.settled() => Written::Done,
        Ok(Ok(_)) => Written::Again,
        Ok(Err(e)) if is_transient(&e) => {
            tracing::warn!(what, error = %e, "writing an outcome failed; retrying");
            Written::Again
        }
        Ok(Err(e)) => {
            tracing::error!(what, error = %e, "an outcome was refused; the rescuer will take the job back");
            Written::Done
        }
        Err(_) => {
            tracing::warn!(what, "writing an outcome timed out; retrying");
            return None;
        }
    })
}

/// Whether a write's answer settles the outcome.
trait Settled {
    fn settled(&self) -> bool;
}

impl Settled for job_store::ClaimWrite {
    /// A row still locked is tried again.
    fn settled(&self) -> bool {
        self.locked.is_empty()
    }
}

impl Settled for bool {
    /// Snoozed, or fenced off.
    fn settled(&self) -> bool {
        true
    }
}

impl Settled for Option<JobState> {
    /// Failed as asked, or fenced off.
    fn settled(&self) -> bool {
        true
    }
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
