//! The producer: one per queue per node. It claims available jobs into the queue's free slots and
//! hands them to the executor.
//!
//! It claims when woken (a `kickoff_due` notification for its queue, the local timer staging jobs,
//! a slot freeing while the queue was saturated, a queue setting changing) and on the backstop poll.
//! A claim that fills every slot it asked for means more may be waiting: it claims again as soon as
//! slots free up.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
        }
    }

    /// Applies the shared settings of the `queues` table.
    pub fn apply(&self, row: &QueueRow) {
        self.paused.store(row.paused, Ordering::Relaxed);
        let limit = row
            .concurrency
            .map(|c| c.max(1) as usize)
            .unwrap_or(self.configured);
        self.limit.store(limit, Ordering::Relaxed);
    }

    fn free_slots(&self) -> usize {
        self.limit
            .load(Ordering::Relaxed)
            .saturating_sub(self.in_flight.load(Ordering::Relaxed))
    }

    /// Called when an attempt of this queue ends.
    pub fn release_slot(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if self.saturated.load(Ordering::Relaxed) {
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
        if q.paused.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let free = q.free_slots().min(self.shared.config.claim_batch);
        let limit = q.limit.load(Ordering::Relaxed);
        let busy = q.in_flight.load(Ordering::Relaxed) > 0;
        // While attempts run, wait until half the slots are free: claiming one job per round trip
        // as each slot frees would cap throughput at one job per claim. Every release wakes us.
        if free == 0 || (busy && q.saturated.load(Ordering::Relaxed) && free * 2 < limit) {
            q.saturated.store(true, Ordering::Relaxed);
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
        let full = jobs.len() == free;
        q.saturated.store(full, Ordering::Relaxed);
        for job in jobs {
            executor::spawn(&self.shared, q.clone(), job);
        }
        Ok(full && q.free_slots() > 0)
    }
}
