//! The timer: each node knows the next due time and sleeps exactly until it, then stages the due
//! jobs (`scheduled`/`retryable` → `available`) and wakes the producers.
//!
//! Timing invariants:
//! - The database clock is the one clock. The timer measures the offset between it and the local
//!   clock on every refresh and converts due times to local instants with it.
//! - The next due time comes from the table (`min(scheduled_at)` over waiting jobs, an index read).
//!   Notifications of earlier times (inserts, reschedules, retries) shorten the sleep at once; a
//!   refresh on every backstop poll covers anything missed.
//! - A job is never staged before its `scheduled_at` by the database clock. If the timer wakes a
//!   hair early, the stage finds nothing, the refresh returns the same time, and it sleeps again.
//! - Every node's timer may stage at once; `SKIP LOCKED` splits the rows between them, and the
//!   staging statement's trigger notifies every node's producers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::runtime::Shared;
use super::store::jobs as job_store;

/// The most jobs staged by one statement.
const STAGE_BATCH: i64 = 5000;

pub(crate) struct Timer {
    shared: Arc<Shared>,
}

impl Timer {
    pub fn new(shared: Arc<Shared>) -> Self {
        Timer { shared }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let shared = &self.shared;
        let backstop = shared.config.backstop_poll;
        let mut next_due: Option<DateTime<Utc>> = None;
        let mut refresh = true;
        // Stages in a row that found a due job but could stage nothing (its row is locked by
        // another transaction, e.g. another node staging it): back off instead of spinning.
        let mut empty_stages: u32 = 0;
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            if refresh {
                match self.refresh().await {
                    Ok(due) => next_due = due,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the next due time failed; retrying");
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        }
                        continue;
                    }
                }
            }
            let hint = shared.timer_hint_ms.swap(i64::MAX, Ordering::AcqRel);
            if hint != i64::MAX {
                if let Some(h) = DateTime::from_timestamp_millis(hint) {
                    next_due = Some(next_due.map_or(h, |d| d.min(h)));
                }
            }
            let now = shared.db_now();
            if let Some(due) = next_due.filter(|d| *d <= now) {
                match job_store::job_stage_due(&shared.claim_pool, None, STAGE_BATCH).await {
                    Ok(queues) => {
                        empty_stages = if queues.is_empty() {
                            empty_stages + 1
                        } else {
                            0
                        };
                        let mut woken: Vec<&String> = Vec::new();
                        for q in &queues {
                            if !woken.contains(&q) {
                                shared.wake_queue(q);
                                woken.push(q);
                            }
                        }
                        if queues.is_empty() {
                            let pause = if shared.db_now() - due < chrono::Duration::milliseconds(5)
                            {
                                // Woke a hair before the database clock reached the due time.
                                Duration::from_micros(500)
                            } else {
                                // Due but locked elsewhere: 2, 4, 8 ... ms, up to the backstop.
                                Duration::from_millis(1 << empty_stages.min(10)).min(backstop)
                            };
                            tokio::select! {
                                _ = shutdown.cancelled() => return,
                                _ = tokio::time::sleep(pause) => {}
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "staging due jobs failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
                refresh = true;
                continue;
            }
            let wait = next_due
                .and_then(|d| (d - now).to_std().ok())
                .unwrap_or(backstop)
                .min(backstop);
            let deadline = tokio::time::Instant::now() + wait;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => {
                    // Woken by the backstop rather than a due time: look at the table again.
                    refresh = next_due.is_none_or(|d| d > shared.db_now());
                }
                _ = shared.timer_wake.notified() => {
                    // A hint arrived (merged above), or the listener reconnected: refresh only in
                    // the latter case, which leaves no hint behind.
                    refresh = shared.timer_hint_ms.load(Ordering::Acquire) == i64::MAX;
                }
            }
        }
    }

    /// Reads the next due time and measures the clock offset.
    async fn refresh(&self) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        let before = Utc::now();
        let (due, db_clock) = job_store::job_next_due(&self.shared.claim_pool).await?;
        let after = Utc::now();
        // The midpoint of the round trip is off by at most half of it.
        let midpoint = before + (after - before) / 2;
        if let Some(offset) = (db_clock - midpoint).num_microseconds() {
            self.shared.clock_offset_us.store(offset, Ordering::Relaxed);
        }
        Ok(due)
    }
}
