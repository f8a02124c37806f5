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
//! Slot accounting (and why it is `SeqCst`) is in `queue_state`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::executor::Executor;
use super::metrics::Metrics;
use super::queue_state::QueueState;
use super::store::jobs as job_store;

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
    pool: PgPool,
    settings: ClaimSettings,
    executor: Executor,
    metrics: Arc<Metrics>,
}

impl Producer {
    pub fn new(
        queue: Arc<QueueState>,
        pool: PgPool,
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
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.queue.wake.notified() => {}
                _ = tokio::time::sleep(backstop) => {}
            }
        }
    }

    /// Claims into the free slots once and starts what it claimed. Returns true when it should
    /// claim again at once (it filled every slot it asked for, and more slots are free already).
    #[tracing::instrument(level = "trace", skip_all, fields(queue = %self.queue.name))]
    pub async fn run_once(&self) -> Result<bool, sqlx::Error> {
        let q = &self.queue;
        if q.paused.load(Ordering::SeqCst) {
            return Ok(false);
        }
        // Mark the queue saturated before looking at the slots: a release after this line wakes
        // us, and one before it shows in `free_slots`.
        q.saturated.store(true, Ordering::SeqCst);
        let free = q.free_slots().min(self.settings.batch);
        if free == 0 {
            return Ok(false);
        }
        let jobs = job_store::job_claim(
            &self.pool,
            &q.name,
            free as i64,
            &self.settings.node_id,
            self.settings.lease,
        )
        .await?;
        self.metrics.claimed(jobs.len());
        // Fewer than asked: the queue is drained, and only new due jobs (their notification, the
        // timer, the backstop) need a claim. All of them: more may wait, so releases wake us.
        let full = jobs.len() == free;
        q.saturated.store(full, Ordering::SeqCst);
        for job in jobs {
            self.executor.spawn(q.clone(), job);
        }
        Ok(full && q.free_slots() > 0)
    }
}
