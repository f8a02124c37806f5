//! The completer writes the outcomes of attempts in batches.
//!
//! Outcomes come from the executor through a channel: the completer takes whatever is waiting (up
//! to [`COMPLETE_BATCH`]) and completes the successes in one statement, so completions cost one
//! commit per batch under load and add no delay when idle. Every write is guarded by the attempt's
//! claim token: an attempt that lost its job (cancelled, rescued, claimed again) changes nothing.
//!
//! An outcome is never dropped for a transient database error (a deadlock, a serialization
//! failure, a server shutting down, a read-only server after a failover, a statement timeout): the
//! completer retries it with backoff for as long as the node runs, and the heartbeat keeps the
//! attempt's lease alive meanwhile (see [`Attempts::outcome_pending`]). Dropping it would let the
//! lease lapse, the rescuer take the job back and run it again, or discard it on its last attempt
//! although its effects happened. Only an error that a retry cannot fix (a constraint, bad data)
//! gives up.

use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::job::{Claim, JobState};
use super::node::{Attempts, TimerSignal};
use super::store::errors::is_transient;
use super::store::jobs::{self as job_store, AttemptEnd, FailAs};
use super::worker::WorkError;

/// The most outcomes written in one statement.
pub const COMPLETE_BATCH: usize = 1000;

/// The outcome of one attempt.
pub struct Completion {
    pub claim: Claim,
    pub result: Result<(), WorkError>,
    /// The handler completed (or snoozed) the job inside its own transaction.
    pub completed_in_tx: bool,
    pub backoff: Duration,
    /// What the attempt's record keeps of it (unused when it completed inside its own
    /// transaction: that wrote its record).
    pub end: AttemptEnd,
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
pub struct Completer {
    /// The bookkeeping pool.
    pool: Db,
    attempts: Arc<Attempts>,
    node_id: String,
    shutdown_grace: Duration,
    rx: mpsc::UnboundedReceiver<Completion>,
    stop: CancellationToken,
    deferred: Vec<Deferred>,
    /// Set on a node that cannot LISTEN (see `db`): the timer is told of the retries and
    /// snoozes written here, which the database's notification would otherwise bring.
    wake_timer: Option<Arc<TimerSignal>>,
}

impl Completer {
    /// A completer writing on `pool` (the node's bookkeeping pool) the outcomes that arrive on
    /// `rx`, as node `node_id`, for the attempts of `attempts`. It runs until `stop`, then writes
    /// what is left (for at most `shutdown_grace`) and ends.
    pub fn new(
        pool: Db,
        attempts: Arc<Attempts>,
        node_id: String,
        shutdown_grace: Duration,
        rx: mpsc::UnboundedReceiver<Completion>,
        stop: CancellationToken,
    ) -> Self {
        Completer {
            pool,
            attempts,
            node_id,
            shutdown_grace,
            rx,
            stop,
            deferred: Vec::new(),
            wake_timer: None,
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
        tokio::time::Instant::now() + self.shutdown_grace
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
        let mut done = Vec::new();
        for ((c, tries), written) in batch.into_iter().zip(results) {
            match written {
                Written::Done => done.push(c.claim),
                Written::Again => again.push((c, tries + 1)),
            }
        }
        self.attempts.outcome_written(done);
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

    /// Tells `timer` of every retry and snooze this completer writes (a node that does not
    /// LISTEN hears of them no other way before its next poll).
    pub fn waking(mut self, timer: Option<Arc<TimerSignal>>) -> Self {
        self.wake_timer = timer;
        self
    }

    /// Writes the batch's outcomes on one bookkeeping connection; says for each whether it is done.
    async fn write_outcomes(&self, batch: &[(Completion, u32)], limit: Duration) -> Vec<Written> {
        let mut results: Vec<Written> = batch.iter().map(|_| Written::Again).collect();
        let acquired = tokio::time::timeout(limit, self.pool.connection()).await;
        let mut conn = match acquired {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, outcomes = batch.len(), "no connection to write outcomes; retrying");
                return results;
            }
            Err(_) => return results,
        };
        let node = self.node_id.as_str();
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
        let ends: Vec<AttemptEnd> = done.iter().map(|(i, _)| batch[*i].0.end.clone()).collect();
        if !claims.is_empty() {
            let written = tokio::time::timeout(
                limit,
                job_store::job_complete_unless_locked(&mut conn, &claims, &ends),
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
                            std::slice::from_ref(&batch[*i].0.end),
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
                // Completed or snoozed by the handler in its own transaction.
                _ if c.completed_in_tx => Some(Written::Done),
                Ok(()) => continue,
                Err(WorkError::Fenced) => Some(Written::Done),
                Err(WorkError::Snooze(d)) => {
                    let snoozed = job_store::job_snooze_with(&mut conn, c.claim, *d, &c.end);
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
                    let failed = job_store::job_fail_with(
                        &mut conn, c.claim, node, &message, fail_as, &c.end,
                    );
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
        if let Some(timer) = &self.wake_timer {
            let comes_back = batch.iter().any(|(c, _)| {
                matches!(&c.result, Err(e) if !matches!(e, WorkError::Fenced | WorkError::Fatal(_) | WorkError::Cancel(_)))
            });
            if comes_back {
                timer.refresh();
            }
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
