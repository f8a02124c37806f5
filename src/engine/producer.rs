//! The producer: one per queue per node. It claims available jobs into the queue's free slots and
//! hands them to the executor.
//!
//! It claims when woken (a `kickoff_due` notification for its queue, the local timer staging jobs,
//! a slot freeing while the queue was saturated, a queue setting changing) and on the backstop poll.
//! A claim that fills every slot it asked for means more may be waiting: the queue is *saturated*,
//! and every slot that frees wakes it to claim again.
//!
//! The rule: a due job never waits while a slot is free for longer than one claim round trip. So
//! a saturated queue claims as soon as one slot frees; batching comes from the claim loop itself:
//! there is never more than one claim in flight per queue, and each claim takes every slot that
//! freed while the previous one was on its way. (Waiting for several slots to free up first would
//! batch more, but leaves a due job waiting behind long-running ones with a slot free.)
//!
//! A claim may also take a few jobs ahead of the free slots, into the queue's buffer (the
//! fetch-ahead, sized and bounded in `queue_state`); a slot that frees starts the next buffered
//! job itself, and wakes the producer to refill the buffer when it is half empty.
//!
//! Slot accounting (and why it is `SeqCst`) is in `queue_state`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use tokio_util::sync::CancellationToken;

use super::executor::Executor;
use super::metrics::Metrics;
use super::queue_state::{Buffered, QueueState};
use super::store::jobs as job_store;

/// Added to a limit's wait: the database said when its window ends by its clock, and the claim
/// made after it must land in the next window.
const LIMIT_MARGIN: Duration = Duration::from_micros(500);

/// How a producer claims.
#[derive(Clone)]
pub struct ClaimSettings {
    /// The node the claims are made for.
    pub node_id: String,
    /// The lease a claim takes.
    pub lease: Duration,
    /// The largest claim in one statement.
    pub batch: usize,
    /// The claim made when nothing woke the producer.
    pub backstop_poll: Duration,
}

/// Claims available jobs of one queue into its free slots, and starts them on the executor.
pub struct Producer {
    queue: Arc<QueueState>,
    /// The claim pool.
    pool: Db,
    settings: ClaimSettings,
    executor: Executor,
    metrics: Arc<Metrics>,
}

impl Producer {
    pub fn new(
        queue: Arc<QueueState>,
        pool: Db,
        settings: ClaimSettings,
        executor: Executor,
        metrics: Arc<Metrics>,
    ) -> Self {
        Producer {
            queue,
            pool,
            settings,
            executor,
            metrics,
        }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let backstop = self.settings.backstop_poll;
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            match self.run_once().await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(queue = %self.queue.name, error = %e, "claim failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                    continue;
                }
            }
            let hand_back = self.next_hand_back();
            let limit_retry = self.queue.limit_retry().map(tokio::time::Instant::from_std);
            let backlogged = self.executor.outcomes_backlogged();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.queue.wake.notified() => {}
                _ = self.executor.outcomes_drained(), if backlogged => {}
                // The backstop: whatever a lost notification did not say, the table does.
                _ = tokio::time::sleep(backstop) => self.queue.wake_for_work(),
                _ = sleep_until_some(hand_back) => {}
                _ = sleep_until_some(limit_retry) => {}
            }
        }
    }

    /// Claims into the free slots (and the fetch-ahead buffer) once and starts what it can.
    /// Returns true when it should claim again at once (it got every job it asked for, and more
    /// slots are free already).
    #[tracing::instrument(level = "trace", skip_all, fields(queue = %self.queue.name))]
    pub async fn run_once(&self) -> Result<bool, sqlx::Error> {
        let q = &self.queue;
        self.hand_back_aged().await?;
        self.hand_back_held().await?;
        if q.paused.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let limited = q.limited.load(Ordering::SeqCst);
        if limited {
            match q.limit_retry() {
                Some(at) if std::time::Instant::now() < at => {
                    self.executor.fill(q);
                    return Ok(false);
                }
                Some(_) => q.set_limit_retry(None),
                None => {}
            }
        }
        self.executor.fill(q);
        // Outcomes pile up unwritten (the database stalls the completer's writes): claim nothing
        // more until they drain, or every claim is one more lease to keep alive.
        if self.executor.outcomes_backlogged() {
            return Ok(false);
        }
        // Mark the queue saturated before looking at the slots: a release after this line wakes
        // us, and one before it shows in `free_slots`.
        q.saturated.store(true, Ordering::SeqCst);
        let free = q.free_slots();
        // Under a global concurrency a buffered job holds room (it is executing, for the count):
        // the database lets the buffer take at most half of what the free slots leave.
        let lead = q.lead();
        let buffered = q.buffered();
        // Free slots always claim; a buffer alone refills once it is down to half its lead.
        let want = (free + lead).saturating_sub(buffered);
        if free == 0 && (want == 0 || want < lead.div_ceil(2)) {
            return Ok(false);
        }
        // Woken only to claim ahead (a timed attempt started, a slot freed) while nothing can
        // have made a job available since the last claim found none: straight to the claim ahead.
        if !limited && q.drained() {
            self.claim_soon().await?;
            return Ok(false);
        }
        let seen = q.work_seen();
        let want = want.min(self.settings.batch);
        let asked = std::time::Instant::now();
        let (pool, name, node, lease) = (
            &self.pool,
            &q.name,
            &self.settings.node_id,
            self.settings.lease,
        );
        let paused = q.kinds.get();
        let jobs = if limited {
            let free = free.min(want) as i64;
            job_store::job_claim_limited(pool, name, want as i64, free, node, lease, &paused)
                .await?
        } else {
            job_store::job_claim_except(pool, name, want as i64, node, lease, &paused).await?
        };
        let took = asked.elapsed();
        q.claim_took(took);
        tracing::debug!(queue = %q.name, free, lead, buffered, want, got = jobs.len(), took_us = took.as_micros() as u64, "claimed");
        self.metrics.claimed(jobs.len());
        // Fewer than asked: the queue is drained, and only new due jobs (their notification, the
        // timer, the backstop) need a claim. All of them: more may wait, so releases wake us.
        let got = jobs.len();
        let full = got == want;
        q.saturated.store(full, Ordering::SeqCst);
        q.claimed(seen, full);
        let registered: Vec<_> = jobs
            .into_iter()
            .filter_map(|job| self.executor.register(job))
            .collect();
        q.push_buffered(registered);
        self.executor.fill(q);
        if limited {
            // A limited queue claims nothing ahead of its due time (a run counts in the window
            // it starts in). Fewer than asked: a limit may hold jobs back until a later window
            // (or, under a global concurrency, until attempts end on other nodes).
            // Only the free slots left empty say a limit holds jobs back: a buffer cut short
            // (half the global room) refills at the next release.
            if got < free.min(want) {
                let wait = job_store::limit_wait(&self.pool, &q.name, &paused).await?;
                if let Some(wait) = wait.filter(|w| !w.is_zero()) {
                    self.metrics.limited(&q.name);
                    q.set_limit_retry(Some(std::time::Instant::now() + wait + LIMIT_MARGIN));
                }
            }
        } else if !full {
            self.claim_soon().await?;
        }
        Ok(full && q.free_slots() > 0)
    }

    /// Claims the jobs that come due before the horizon the timer set (see `timer`), if it set
    /// one: each attempt waits for its due time outside the slots and starts at that instant,
    /// instead of a stage and a claim after it. At most [`QueueState::timed_room`] at a time: a
    /// queue whose slots are all held by long jobs leaves its due jobs to be staged, for any
    /// node's free slot.
    async fn claim_soon(&self) -> Result<(), sqlx::Error> {
        let q = &self.queue;
        let Some(horizon) = q.soon() else {
            return Ok(());
        };
        let room = q.timed_room().min(self.settings.batch);
        if room == 0 {
            // A waiting attempt that starts, or a slot that frees, wakes us to claim on (or the
            // job is staged at its due time and claimed like any other).
            q.saturated.store(true, Ordering::SeqCst);
            return Ok(());
        }
        let jobs = job_store::job_claim_soon(
            &self.pool,
            &q.name,
            room as i64,
            &self.settings.node_id,
            self.settings.lease,
            horizon,
            &q.kinds.get(),
        )
        .await?;
        tracing::debug!(queue = %q.name, room, %horizon, got = jobs.len(), "claimed ahead");
        self.metrics.claimed(jobs.len());
        if jobs.len() < room {
            q.soon_done(horizon);
        } else {
            q.saturated.store(true, Ordering::SeqCst);
        }
        for job in jobs {
            let due = job.scheduled_at;
            if let Some(mut b) = self.executor.register(job) {
                b.not_before = Some(due);
                self.executor.start_timed(q.clone(), b);
            }
        }
        Ok(())
    }

    /// When the next buffered job would have waited too long (see [`Producer::hand_back_aged`]).
    pub fn next_hand_back(&self) -> Option<tokio::time::Instant> {
        let oldest = self.queue.oldest_buffered()?;
        Some(tokio::time::Instant::from_std(
            oldest + self.queue.max_wait(),
        ))
    }

    /// Hands back to `available` the buffered jobs that waited longer than the queue's
    /// [`QueueState::max_wait`] for a slot (every slot is held by longer jobs than the lead
    /// was sized for): other nodes' free slots may run them. Like a hand-back at shutdown, their
    /// attempt does not count.
    pub async fn hand_back_aged(&self) -> Result<(), sqlx::Error> {
        let q = &self.queue;
        let aged = q.take_buffered(Some(q.max_wait()));
        if aged.is_empty() {
            return Ok(());
        }
        q.waited_too_long(aged[0].since.elapsed());
        let n = self.hand_back(aged).await?;
        tracing::debug!(queue = %q.name, handed_back = n, "buffered jobs waited too long: handed back");
        Ok(())
    }

    /// Hands back the buffered jobs a pause holds (their queue or kind was paused after their
    /// claim, or while they waited for their due time): they must not start, and go back to wait
    /// in the table like any other (see `executor` on why not kept until the resume).
    pub async fn hand_back_held(&self) -> Result<(), sqlx::Error> {
        let held = self.queue.take_held();
        if held.is_empty() {
            return Ok(());
        }
        let n = self.hand_back(held).await?;
        tracing::debug!(queue = %self.queue.name, handed_back = n, "buffered jobs held by a pause: handed back");
        Ok(())
    }

    /// Hands back claimed jobs taken from the buffer; on an error they go back to its front.
    async fn hand_back(&self, jobs: Vec<Buffered>) -> Result<u64, sqlx::Error> {
        let claims: Vec<_> = jobs.iter().map(|b| b.claim).collect();
        let handed =
            job_store::job_hand_back(&self.pool, &claims, &[], &self.settings.node_id).await;
        match handed {
            Ok(n) => {
                self.executor.forget(&jobs);
                // Available again: this node's free slots may take them back.
                self.queue.wake_for_work();
                Ok(n)
            }
            Err(e) => {
                // Still ours: they wait in the buffer again (and are tried again later).
                self.queue.unpop_all(jobs);
                Err(e)
            }
        }
    }
}

async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
