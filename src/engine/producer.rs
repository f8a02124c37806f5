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
//! `saturated` and `in_flight` are read and written with `SeqCst`: a slot released while a claim
//! decides that the queue is saturated must be seen by one side or the other (the producer sees
//! the free slot, or the release sees the flag and wakes it).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::executor;
use super::runtime::Shared;
use super::store::jobs as job_store;
use super::store::queues::QueueRow;

/// A queue's live settings and slot accounting on this node.
pub(crate) struct QueueState {
    pub name: String,
    /// The node's configured concurrency.
    pub configured: usize,
    /// The concurrency in force (an operator's override, or `configured`).
    pub limit: AtomicUsize,
    pub paused: AtomicBool,
    pub in_flight: AtomicUsize,
    /// The last claim took every slot it asked for: jobs may be waiting.
    pub saturated: AtomicBool,
    pub wake: Notify,
    /// `updated_at` of the settings row applied last: a slower read of an older row (the backstop
    /// poll racing a notification's read) must not undo a newer one.
    applied: Mutex<Option<DateTime<Utc>>>,
}

impl QueueState {
    pub fn new(name: String, configured: usize) -> Self {
        QueueState {
            name,
            configured,
            limit: AtomicUsize::new(configured),
            paused: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            saturated: AtomicBool::new(true),
            wake: Notify::new(),
            applied: Mutex::new(None),
        }
    }

    /// Applies the shared settings of the `queues` table, unless a newer row was applied already.
    /// Returns whether anything changed.
    pub fn apply(&self, row: &QueueRow) -> bool {
        {
            let mut applied = self.applied.lock().expect("queue settings lock poisoned");
            if applied.is_some_and(|at| at > row.updated_at) {
                return false;
            }
            *applied = Some(row.updated_at);
        }
        let was_paused = self.paused.swap(row.paused, Ordering::SeqCst);
        let limit = row
            .concurrency
            .map(|c| c.max(1) as usize)
            .unwrap_or(self.configured);
        let old_limit = self.limit.swap(limit, Ordering::SeqCst);
        was_paused != row.paused || old_limit != limit
    }

    fn free_slots(&self) -> usize {
        self.limit
            .load(Ordering::SeqCst)
            .saturating_sub(self.in_flight.load(Ordering::SeqCst))
    }

    /// Called when an attempt of this queue ends.
    pub fn release_slot(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.saturated.load(Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }
}

pub(crate) struct Producer {
    shared: Arc<Shared>,
    queue: Arc<QueueState>,
}

impl Producer {
    pub fn new(shared: Arc<Shared>, queue: Arc<QueueState>) -> Self {
        Producer { shared, queue }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let backstop = self.shared.config.backstop_poll;
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            match self.claim_once().await {
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
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.queue.wake.notified() => {}
                _ = tokio::time::sleep(backstop) => {}
            }
        }
    }

    /// Claims into the free slots. Returns true when it should claim again at once.
    #[tracing::instrument(level = "trace", skip_all, fields(queue = %self.queue.name))]
    async fn claim_once(&self) -> Result<bool, sqlx::Error> {
        let q = &self.queue;
        if q.paused.load(Ordering::SeqCst) {
            return Ok(false);
        }
        // Mark the queue saturated before looking at the slots: a release after this line wakes
        // us, and one before it shows in `free_slots`.
        q.saturated.store(true, Ordering::SeqCst);
        let free = q.free_slots().min(self.shared.config.claim_batch);
        if free == 0 {
            return Ok(false);
        }
        let jobs = job_store::job_claim(
            &self.shared.claim_pool,
            &q.name,
            free as i64,
            &self.shared.node_id,
            self.shared.config.lease,
        )
        .await?;
        self.shared.metrics.claimed(jobs.len());
        // Fewer than asked: the queue is drained, and only new due jobs (their notification, the
        // timer, the backstop) need a claim. All of them: more may wait, so releases wake us.
        let full = jobs.len() == free;
        q.saturated.store(full, Ordering::SeqCst);
        for job in jobs {
            executor::spawn(&self.shared, q.clone(), job);
        }
        Ok(full && q.free_slots() > 0)
    }
}
