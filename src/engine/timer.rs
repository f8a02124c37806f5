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

use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::node::{DbClock, TimerSignal};
use super::queue_state::Queues;
use super::store::jobs as job_store;

/// The most jobs staged by one statement.
const STAGE_BATCH: i64 = 5000;

/// What one pass of the timer did, and what it waits for next.
#[derive(Debug, PartialEq)]
pub enum Tick {
    /// Staged due jobs of these queues (their producers were woken); look again at once.
    Staged(Vec<String>),
    /// A job is due but nothing could be staged (the clock is a hair behind, or its row is locked
    /// elsewhere); look again after this pause.
    Pause(Duration),
    /// Nothing is due: sleep until this due time (or the backstop poll, or a signal).
    Wait(Option<DateTime<Utc>>),
}

pub struct Timer {
    /// The claim pool.
    pool: Db,
    signal: Arc<TimerSignal>,
    clock: Arc<DbClock>,
    queues: Arc<Queues>,
    backstop: Duration,
    next_due: Option<DateTime<Utc>>,
    /// Whether the next pass reads the next due time from the table.
    refresh: bool,
    /// Stages in a row that found the same due time but could stage nothing (its row is locked
    /// by another transaction, e.g. a long one of an operator): back off instead of spinning.
    /// Counted per due time: under load another node's timer or claim takes most due jobs
    /// first, and each such race must cost one short pause, not a longer one each time.
    empty_stages: u32,
    /// The due time `empty_stages` counts for.
    empty_due: Option<DateTime<Utc>>,
    /// How long before a due time the producers may claim the jobs due then (zero: not at all).
    claim_ahead: Duration,
    /// The due time last announced to the producers for an early claim.
    announced: Option<DateTime<Utc>>,
}

impl Timer {
    /// A timer staging on `pool` (the claim pool), woken by `signal`, measuring `clock`, waking
    /// the producers of `queues`, and looking at the table at least every `backstop`.
    pub fn new(
        pool: Db,
        signal: Arc<TimerSignal>,
        clock: Arc<DbClock>,
        queues: Arc<Queues>,
        backstop: Duration,
    ) -> Self {
        Timer {
            pool,
            signal,
            clock,
            queues,
            backstop,
            next_due: None,
            refresh: true,
            empty_stages: 0,
            empty_due: None,
            claim_ahead: Duration::ZERO,
            announced: None,
        }
    }

    /// Lets the producers claim jobs up to `ahead` before their due time: at a due time less
    /// `ahead`, the timer tells every producer to claim what comes due by that due time plus
    /// `ahead` into its free slots, where each attempt waits for its instant. What they do not
    /// claim (no free slot) is staged at its due time as usual.
    pub fn with_claim_ahead(mut self, ahead: Duration) -> Self {
        self.claim_ahead = ahead;
        self
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let pause = match self.run_once().await {
                Ok(Tick::Staged(_)) => continue,
                Ok(Tick::Pause(pause)) => pause,
                Ok(Tick::Wait(next_due)) => {
                    let now = self.clock.now();
                    let wait = next_due
                        .and_then(|d| (d - now).to_std().ok())
                        .unwrap_or(self.backstop)
                        .min(self.backstop);
                    let deadline = tokio::time::Instant::now() + wait;
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep_until(deadline) => {
                            // Woken by the backstop rather than a due time: look at the table
                            // again.
                            self.refresh |= next_due.is_none_or(|d| d > self.clock.now());
                        }
                        _ = self.signal.notified() => {
                            // A hint arrived (merged by the next pass), or the listener
                            // reconnected: refresh only in the latter case, which leaves no hint.
                            self.refresh |= !self.signal.has_hint();
                        }
                    }
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading the next due time failed; retrying");
                    Duration::from_millis(500)
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One pass: reads the next due time if needed (and measures the clock offset), takes the
    /// notifier's hints, and stages the due jobs if one is due by the database clock. A failed
    /// read is an error; a failed stage is logged and paused after.
    pub async fn run_once(&mut self) -> Result<Tick, sqlx::Error> {
        if self.refresh {
            self.next_due = self.read_next_due().await?;
            self.refresh = false;
        }
        if let Some(hint) = self.signal.take_hint() {
            self.next_due = Some(self.next_due.map_or(hint, |d| d.min(hint)));
        }
        let now = self.clock.now();
        if let Some(due) = self.next_due.filter(|d| *d > now) {
            if self.claim_ahead.is_zero() {
                return Ok(Tick::Wait(Some(due)));
            }
            let ahead = chrono::Duration::from_std(self.claim_ahead).unwrap_or_default();
            if self.announced == Some(due) {
                return Ok(Tick::Wait(Some(due)));
            }
            if due - now > ahead {
                return Ok(Tick::Wait(Some(due - ahead)));
            }
            self.announced = Some(due);
            for q in self.queues.iter() {
                q.claim_soon(due + ahead);
            }
            // At the due time, read the table again: what the producers claimed is gone from it.
            self.refresh = true;
            return Ok(Tick::Wait(Some(due)));
        }
        let Some(due) = self.next_due else {
            return Ok(Tick::Wait(None));
        };
        self.refresh = true;
        let queues = match job_store::job_stage_due(&self.pool, None, STAGE_BATCH).await {
            Ok(queues) => queues,
            Err(e) => {
                tracing::warn!(error = %e, "staging due jobs failed; retrying");
                return Ok(Tick::Pause(Duration::from_millis(200)));
            }
        };
        if queues.is_empty() {
            if self.empty_due == Some(due) {
                self.empty_stages += 1;
            } else {
                self.empty_due = Some(due);
                self.empty_stages = 1;
            }
            let pause = if self.clock.now() - due < chrono::Duration::milliseconds(5) {
                // Woke a hair before the database clock reached the due time.
                Duration::from_micros(500)
            } else {
                // Due but locked elsewhere: 2, 4, 8 ... ms while it stays locked, up to the
                // backstop.
                Duration::from_millis(1 << self.empty_stages.min(10)).min(self.backstop)
            };
            return Ok(Tick::Pause(pause));
        }
        self.empty_stages = 0;
        self.empty_due = None;
        let mut woken: Vec<String> = Vec::new();
        for q in queues {
            if !woken.contains(&q) {
                self.queues.wake(&q);
                woken.push(q);
            }
        }
        Ok(Tick::Staged(woken))
    }

    /// Reads the next due time and measures the clock offset.
    async fn read_next_due(&self) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        let before = Utc::now();
        let (due, db_clock) = job_store::job_next_due(&self.pool).await?;
        self.clock.measured(before, db_clock, Utc::now());
        Ok(due)
    }
}
