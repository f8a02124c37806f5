//! The executor runs claimed attempts; the completer (see `completer`) writes their outcomes.
//!
//! Each attempt runs in its own task under the worker's timeout; a panic fails only that attempt.
//! Its outcome goes to the completer through a channel, and until the completer has written it
//! the attempt's lease is renewed (see [`Attempts::outcome_pending`]).
//!
//! **A pause holds every job not yet started.** A job claimed before this node learnt of a pause
//! of its queue or its kind (it waits in the fetch-ahead buffer, or for its due time after a claim
//! ahead) never starts while the pause lasts: [`Executor::fill`] passes over it, and a job claimed
//! ahead whose due time comes goes to the buffer instead of a slot. The producer then hands it
//! back (`job_hand_back`: to `available`, or `scheduled`/`retryable` if not yet due, its attempt
//! not counted), rather than keeping it until the resume: a pause may last hours, and a job kept
//! would show as executing on this node, keep a lease renewed, and after the resume run only here
//! (not on whichever node has a free slot). Back in the table it waits like any other, and the
//! resume wakes every producer to claim it. The check is made at the start itself, the last moment
//! before the handler: a pause this node learns of after that finds the attempt running, and
//! a pause never stops a running attempt.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::attempt_hook::AttemptHooks;
use super::attempt_log::AttemptRecorder;
use super::completer::Completion;
use super::job::{Claim, Job};
use super::late_start::{LateEnd, LatePolicy};
use super::metrics::{Metrics, Outcome};
use super::node::{Attempts, DbClock};
use super::queue_state::{Buffered, QueueState};
use super::worker::{JobContext, WorkError, Worker, Workers};

/// The wait before retrying a job whose kind no worker on this node knows.
const UNKNOWN_KIND_BACKOFF: Duration = Duration::from_secs(30);

/// Runs attempts of claimed jobs. Cheap to clone.
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

struct Inner {
    parts: ExecutorParts,
    /// Cancelled when executing attempts must stop (after the shutdown grace).
    hard_stop: CancellationToken,
    tasks: TaskTracker,
    /// The waits of jobs claimed ahead (see [`Executor::start_timed`]); each starts its attempt
    /// as a task of `tasks`.
    waits: TaskTracker,
    /// Cancelled when the node stops: jobs claimed ahead stop waiting and are handed back.
    closing: CancellationToken,
}

/// What an [`Executor`] uses.
pub struct ExecutorParts {
    pub workers: Arc<Workers>,
    /// The pool handlers get in their [`JobContext`].
    pub pool: Db,
    pub attempts: Arc<Attempts>,
    pub clock: Arc<DbClock>,
    pub metrics: Arc<Metrics>,
    /// Where outcomes go (the completer's channel).
    pub completions: mpsc::UnboundedSender<Completion>,
    pub node_id: String,
    /// What features add to every attempt (a schedule's runs).
    pub hooks: AttemptHooks,
}

impl Executor {
    pub fn new(parts: ExecutorParts) -> Self {
        Executor {
            inner: Arc::new(Inner {
                parts,
                hard_stop: CancellationToken::new(),
                tasks: TaskTracker::new(),
                waits: TaskTracker::new(),
                closing: CancellationToken::new(),
            }),
        }
    }

    /// Starts an attempt of a claimed job in one of `queue`'s slots (taking the slot even when
    /// none is free: the caller counted them).
    /// Whether this node holds so many outcomes unwritten that it must not claim (see
    /// [`crate::engine::node::MAX_PENDING_OUTCOMES`]).
    pub fn outcomes_backlogged(&self) -> bool {
        self.inner.parts.attempts.outcomes_backlogged()
    }

    /// Waits until the backlog of unwritten outcomes falls under the bound.
    pub async fn outcomes_drained(&self) {
        self.inner.parts.attempts.outcomes_drained().await
    }

    pub fn spawn(&self, queue: Arc<QueueState>, job: Job) {
        if let Some(b) = self.register(job) {
            queue.in_flight.fetch_add(1, Ordering::SeqCst);
            self.start(queue, b);
        }
    }

    /// Registers the attempt of a claimed job before it starts, so that a cancel finds it and the
    /// heartbeat renews its lease while it waits in the queue's buffer.
    pub fn register(&self, job: Job) -> Option<Buffered> {
        let me = &self.inner;
        let Some(claim) = job.claim() else {
            tracing::error!(job = %job.id, "a claimed job without a claim token: not run");
            return None;
        };
        let cancel = me.hard_stop.child_token();
        if let Some(older) = me
            .parts
            .attempts
            .register(claim, job.attempt, cancel.clone())
        {
            // An older attempt of this job still ran here (now stopped): its job was rescued (this
            // node lost the database for longer than the lease), or its claim was lost in a
            // database crash, and it was claimed again. Only the newest may run (its claim token
            // tells them apart, even when the lost claim made the attempt number repeat).
            tracing::warn!(job = %job.id, attempt = older.attempt, "stopping an older attempt of a re-claimed job");
        }
        Some(Buffered {
            job,
            claim,
            cancel,
            since: std::time::Instant::now(),
            not_before: None,
        })
    }

    /// Starts buffered jobs of `queue` in its free slots, oldest first, but none that a pause
    /// holds (see the module doc).
    pub fn fill(&self, queue: &Arc<QueueState>) {
        let mut gone = Vec::new();
        while queue.free_slots() > 0 {
            let Some(b) = queue.pop_buffered(&mut gone) else {
                break;
            };
            if !queue.try_take_slot() {
                queue.unpop_buffered(b);
                break;
            }
            self.start(queue.clone(), b);
        }
        // Cancelled, or their claims lost, while they waited: they never ran.
        for b in gone {
            self.inner.parts.attempts.remove(b.claim, false);
        }
    }

    /// Starts a job claimed ahead of its due time (`not_before`): its attempt waits for that
    /// instant of the database clock outside `queue`'s slots (counted in `timed`), then takes a
    /// free slot, or, if none is free then, waits at the front of the buffer for the next one.
    pub fn start_timed(&self, queue: Arc<QueueState>, b: Buffered) {
        let me = &self.inner;
        queue.timed.fetch_add(1, Ordering::SeqCst);
        let claim = b.claim;
        let guard = AttemptGuard {
            attempts: me.parts.attempts.clone(),
            queue,
            claim,
            finished: false,
            slot: false,
            timed: true,
            armed: true,
        };
        let span = attempt_span(&b.job);
        let handle = me
            .waits
            .spawn(wait_for_due(me.clone(), b, guard).instrument(span));
        me.parts.attempts.set_abort(claim, handle.abort_handle());
    }

    /// Stops the waits of jobs claimed ahead (the node is stopping) and waits for them to end:
    /// their attempts are then among [`Attempts::take_interrupted`], to hand back at once (not
    /// after the running attempts drained: they are due within moments).
    pub async fn stop_waiting(&self) {
        self.inner.closing.cancel();
        self.inner.waits.close();
        self.inner.waits.wait().await;
    }

    /// Forgets registered attempts that never ran (handed back while they waited).
    pub fn forget(&self, jobs: &[Buffered]) {
        for b in jobs {
            self.inner.parts.attempts.remove(b.claim, false);
        }
    }

    /// Runs a registered attempt in a slot of `queue` already taken for it.
    fn start(&self, queue: Arc<QueueState>, b: Buffered) {
        let me = &self.inner;
        let Buffered {
            job,
            claim,
            cancel,
            not_before,
            ..
        } = b;
        let guard = AttemptGuard {
            attempts: me.parts.attempts.clone(),
            queue,
            claim,
            finished: false,
            slot: true,
            timed: false,
            armed: true,
        };
        let span = attempt_span(&job);
        let handle = me
            .tasks
            .spawn(run_attempt(me.clone(), job, not_before, cancel, guard).instrument(span));
        me.parts.attempts.set_abort(claim, handle.abort_handle());
    }

    /// Stops taking attempts and waits up to `grace` for the running ones; returns whether they
    /// all ended in time.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.inner.tasks.close();
        tokio::time::timeout(grace, self.inner.tasks.wait())
            .await
            .is_ok()
    }

    /// Interrupts the attempts still running (after [`Executor::drain`] ran out of time) and
    /// waits for their tasks to end.
    pub async fn interrupt(&self) {
        // Abort first: a handler told to stop might still report a failure before the abort
        // lands, which would spend an attempt instead of handing it back.
        self.inner.parts.attempts.abort_all();
        self.inner.hard_stop.cancel();
        self.inner.waits.close();
        self.inner.waits.wait().await;
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

/// The wait of a job claimed ahead (see [`Executor::start_timed`]); a cancel aborts it, and a
/// stopping node ends it unfinished (its guard records it for hand-back).
async fn wait_for_due(me: Arc<Inner>, mut b: Buffered, mut guard: AttemptGuard) {
    if let Some(at) = b.not_before.take() {
        tokio::select! {
            _ = me.parts.clock.wait_until(at) => {}
            _ = me.closing.cancelled() => return,
        }
    }
    if me.closing.is_cancelled() {
        return;
    }
    guard.leave_timed();
    let queue = guard.queue.clone();
    // From here the attempt (or the buffer) owns the job: the guard must undo nothing.
    guard.armed = false;
    drop(guard);
    if queue.holds(&b.job) {
        // Its queue or kind was paused while it waited: it must not start. In the buffer, the
        // producer (woken here) hands it back.
        b.since = std::time::Instant::now();
        queue.unpop_buffered(b);
        queue.wake.notify_one();
        return;
    }
    if queue.try_take_slot() {
        Executor { inner: me }.start(queue, b);
        return;
    }
    // Every slot is busy at its instant: it is due now, and the next slot that frees starts it.
    // The producer is woken to time its hand-back (if it waits too long, other nodes' free slots
    // may run it).
    b.since = std::time::Instant::now();
    queue.unpop_buffered(b);
    queue.wake.notify_one();
    Executor { inner: me }.fill(&queue);
}

/// The span of an attempt: every log line of it (the worker's own included) names its job, and
/// with traces exported it continues the trace the job was inserted under (`meta.traceparent`).
fn attempt_span(job: &Job) -> tracing::Span {
    let span =
        tracing::info_span!("attempt", job = %job.id, kind = %job.kind, attempt = job.attempt);
    crate::telemetry::continue_trace(&span, traceparent(job));
    span
}

/// The trace a job continues, if its insert gave one.
fn traceparent(job: &Job) -> Option<&str> {
    job.meta
        .get(crate::telemetry::META_TRACEPARENT)
        .and_then(serde_json::Value::as_str)
}

/// An attempt, as a pipeline of named steps (the shape of Oban's executor): **wait** for its due
/// instant, **begin** (the start recorded where every reader finds it), **gate** (what may end it
/// before its handler), **perform** (the handler, under its timeout), **finish** (its outcome to
/// the completer, its slot to the next job). What a feature adds to every attempt goes behind an
/// [`AttemptHooks`] (a schedule's runs: `schedules::gate`), not in these steps.
async fn run_attempt(
    me: Arc<Inner>,
    job: Job,
    not_before: Option<DateTime<Utc>>,
    cancel: CancellationToken,
    guard: AttemptGuard,
) {
    if let Some(at) = not_before {
        // Claimed ahead of its due time: it starts at that instant of the database clock, never
        // before (a cancel aborts the task meanwhile).
        me.parts.clock.wait_until(at).await;
    }
    let started = begin(&me, job, &guard);
    let verdict = match gate(&me, &started) {
        Ok(worker) => perform(&me, worker, &started, &cancel).await,
        Err(ended) => ended,
    };
    finish(me, started, verdict, guard);
}

/// An attempt that has begun.
struct Started {
    job: Arc<Job>,
    /// How late it started (after its due time, by the database clock).
    late: Duration,
    /// Its output and log lines, for its record.
    recorder: Arc<AttemptRecorder>,
    /// When it began, by this process's monotonic clock: what it took.
    at: std::time::Instant,
}

/// How an attempt ended, for the completer.
struct Verdict {
    result: Result<(), WorkError>,
    /// Its handler completed the job in its own transaction.
    completed_in_tx: bool,
    /// The wait before the next attempt, if it is retried.
    backoff: Duration,
}

impl Verdict {
    /// Ended before a handler ran.
    fn before_handler(result: Result<(), WorkError>, backoff: Duration) -> Self {
        Verdict {
            result,
            completed_in_tx: false,
            backoff,
        }
    }
}

/// The start, recorded: its page shows what it logs while it runs, its trace the wait before it,
/// the metrics its lateness, and each hook its start.
fn begin(me: &Inner, job: Job, guard: &AttemptGuard) -> Started {
    let job = Arc::new(job);
    let started_at = me.parts.clock.now();
    let recorder = AttemptRecorder::new(started_at);
    // The heartbeat writes what it logs while it runs.
    me.parts
        .attempts
        .set_recorder(guard.claim, recorder.clone());
    // The attempt's log lines: the events inside its span (this task's), when the capture
    // layer is installed.
    recorder.attach(&tracing::Span::current());
    let late = (started_at - job.scheduled_at).to_std().unwrap_or_default();
    // The wait before it, in its trace: from the insert (a first attempt) or its due time.
    let waited_since = if job.attempt <= 1 {
        job.inserted_at
    } else {
        job.scheduled_at
    };
    crate::telemetry::record_wait(
        traceparent(&job),
        waited_since.into(),
        started_at.into(),
        job.id.0,
    );
    me.parts.metrics.started(&job.queue, late);
    me.parts.hooks.started(&job, late);
    Started {
        job,
        late,
        recorder,
        at: std::time::Instant::now(),
    }
}

/// What ends an attempt before its handler, by the job alone: a row that cannot be read as
/// stored, a late-start policy (checked at insert: a malformed one here was written by SQL, and
/// runs), a kind no worker of this node knows. Else the worker that runs it.
fn gate<'a>(me: &'a Inner, started: &Started) -> Result<&'a Arc<dyn Worker>, Verdict> {
    let job = &started.job;
    // A row holding what could not be read as stored (plain SQL's, an older release's): its
    // handler would run on other args than the row holds, so it ends here, naming why.
    if let Some(why) = &job.unreadable {
        tracing::warn!(job = job.id.0, "a row that cannot be read as stored: {why}");
        return Err(Verdict::before_handler(
            Err(WorkError::Fatal(format!("cannot be read as stored: {why}"))),
            Duration::ZERO,
        ));
    }
    let late_end = LatePolicy::from_meta(&job.meta)
        .ok()
        .flatten()
        .and_then(|p| p.decide(started.late));
    if let Some(end) = late_end {
        let refused = match end {
            LateEnd::Skip(why) => WorkError::Cancel(why),
            LateEnd::Discard(why) => WorkError::Fatal(why),
        };
        tracing::info!(
            late_ms = started.late.as_secs_f64() * 1000.0,
            "late start: {refused}"
        );
        return Err(Verdict::before_handler(Err(refused), Duration::ZERO));
    }
    me.parts.workers.get(&job.kind).ok_or_else(|| {
        Verdict::before_handler(
            Err(WorkError::Retryable(format!(
                "no worker for kind `{}` on node {}",
                job.kind, me.parts.node_id
            ))),
            UNKNOWN_KIND_BACKOFF,
        )
    })
}

/// The handler, under its worker's timeout, a panic caught as a failure; each run behind the
/// hooks' gates (a run of a schedule may be skipped, or cancel the runs it overlaps). A handler
/// whose database connection was gone runs again at once, uncounted (see [`CONNECTION_RERUNS`]).
async fn perform(
    me: &Inner,
    worker: &Arc<dyn Worker>,
    started: &Started,
    cancel: &CancellationToken,
) -> Verdict {
    let job = &started.job;
    let ctx = JobContext::new(
        job.clone(),
        me.parts.pool.clone(),
        cancel.clone(),
        started.recorder.clone(),
    );
    let timeout = worker.timeout();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut runs = 0;
    let result = loop {
        runs += 1;
        let work = AssertUnwindSafe(async {
            me.parts.hooks.gate(job).await?;
            worker.work(ctx.clone()).await
        })
        .catch_unwind();
        let result = match tokio::time::timeout_at(deadline, work).await {
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
        // A connection the database had dropped: nothing the handler wrote on it committed. The
        // pool's other dead connections go, and the handler runs again at once (an attempt and a
        // backoff spent on it would make a lock late).
        match result {
            Err(WorkError::ConnectionLost(_))
                if runs <= CONNECTION_RERUNS
                    && !ctx.already_completed()
                    && !cancel.is_cancelled() =>
            {
                drop_dead_connections(&me.parts.pool).await;
            }
            Err(WorkError::ConnectionLost(e)) => {
                break Err(WorkError::Retryable(format!(
                    "database connection lost: {e}"
                )))
            }
            r => break r,
        }
    };
    Verdict {
        result,
        completed_in_tx: ctx.already_completed(),
        backoff: worker.backoff(job.attempt),
    }
}

/// The outcome counted and sent to the completer (the attempt's lease renewed until it is
/// written), and its slot freed: a job waiting in the buffer takes it at once.
fn finish(me: Arc<Inner>, started: Started, verdict: Verdict, mut guard: AttemptGuard) {
    let outcome = match &verdict.result {
        Ok(()) => Outcome::Completed,
        Err(WorkError::Retryable(_)) => Outcome::Failed,
        Err(WorkError::Fatal(_)) => Outcome::Fatal,
        Err(WorkError::Cancel(_)) => Outcome::Cancelled,
        Err(WorkError::Snooze(_)) => Outcome::Snoozed,
        Err(WorkError::Fenced) => Outcome::Fenced,
        Err(WorkError::ConnectionLost(_)) => Outcome::Failed,
    };
    let took = started.at.elapsed();
    me.parts.metrics.finished(&started.job.kind, outcome, took);
    guard.queue.attempt_took(took);
    me.parts.attempts.outcome_pending(guard.claim);
    let _ = me.parts.completions.send(Completion {
        claim: guard.claim,
        result: verdict.result,
        completed_in_tx: verdict.completed_in_tx,
        backoff: verdict.backoff,
        end: started.recorder.end(),
    });
    guard.finished = true;
    let queue = guard.queue.clone();
    drop(guard);
    Executor { inner: me }.fill(&queue);
}

/// How many times a handler whose database connection was gone runs again within its attempt.
const CONNECTION_RERUNS: usize = 2;

/// Takes the pool's idle connections one by one and pings each (within a second): those that do
/// not answer are closed, the others go back. After a database restart or a cut, a pool that
/// does not ping on checkout (a round trip per job) holds dead connections that would each fail
/// one handler; this drops them all at the first failure.
async fn drop_dead_connections(pool: &crate::db::Db) {
    use sqlx::Connection as _;
    let mut alive = Vec::new();
    while let Some(mut conn) = pool.pool().try_acquire() {
        let answered = tokio::time::timeout(std::time::Duration::from_secs(1), conn.ping()).await;
        if matches!(answered, Ok(Ok(()))) {
            alive.push(conn);
        } else {
            conn.close_on_drop();
        }
    }
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
    attempts: Arc<Attempts>,
    queue: Arc<QueueState>,
    claim: Claim,
    finished: bool,
    /// It holds one of the queue's slots.
    slot: bool,
    /// It is counted in the queue's `timed` (waiting for its due time, without a slot).
    timed: bool,
    /// Unset when the attempt goes on waiting elsewhere (the buffer): nothing to undo.
    armed: bool,
}

impl AttemptGuard {
    /// The attempt no longer waits for its due time: its place among the early claims frees,
    /// and the producer may claim the next one ahead.
    fn leave_timed(&mut self) {
        if std::mem::take(&mut self.timed) {
            self.queue.timed.fetch_sub(1, Ordering::SeqCst);
            if self.queue.soon().is_some() {
                self.queue.wake.notify_one();
            }
        }
    }
}

impl Drop for AttemptGuard {
    fn drop(&mut self) {
        self.leave_timed();
        if !self.armed {
            return;
        }
        // A newer claim of the same job may have replaced this one's entry: it is left alone.
        self.attempts.remove(self.claim, !self.finished);
        if self.slot {
            self.queue.release_slot();
        }
    }
}
