//! The node's context, in owned parts that each service takes explicitly: the connection pools,
//! the registry of running attempts, the timer's signal, the database clock and the leader flag.
//!
//! No service takes the whole node: the executor, heartbeat and notifier share the attempts
//! registry; the notifier and the timer share the timer signal; the timer measures the database
//! clock that the executor reads. So each service can be built and driven on its own (see their
//! `run_once` entries), and what a service uses is in its constructor.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::attempt_log::AttemptRecorder;
use super::job::{Claim, JobId};
use super::metrics::Metrics;
use super::store::jobs as job_store;
use super::store::jobs::AttemptEnd;
use crate::db::{ping_when_idle, Db, PoolMode};

/// The node's connection pools.
#[derive(Clone)]
pub struct Pools {
    /// The handlers' pool (the one the node was started with; the application's too).
    pub handlers: Db,
    /// Claiming and staging only; see [`Pools::new`].
    pub claims: Db,
    /// The engine's bookkeeping only (heartbeat, completer, rescuer, elector, settings sync).
    pub bookkeeping: Db,
}

/// The bookkeeping pool: the heartbeat, the completer, the rescuer, the leader elector, the queue
/// settings sync, the notifier's settings reads and its catch-up after a reconnect each use one
/// connection at a time, so they never wait on each other here, and handlers cannot take these.
/// Commits stay durable (outcomes must not be lost).
const BOOKKEEPING_CONNECTIONS: u32 = 7;
/// How long a bookkeeping statement waits for a row lock another transaction holds before it
/// gives up (and is tried again later): an operator's open transaction on one job must not stall
/// the node's outcomes or leases. (A heartbeat that waits this long for one row is late by as
/// much: see `Heartbeat::renew_below`.) At most a quarter of the lease: see
/// [`bookkeeping_lock_wait`].
pub const BOOKKEEPING_LOCK_WAIT: Duration = Duration::from_secs(2);

/// The lock wait of the bookkeeping statements of a node whose leases last `lease`:
/// [`BOOKKEEPING_LOCK_WAIT`], or a quarter of the lease if that is shorter. A heartbeat blocked
/// this long on one locked row must still renew the other leases before they lapse: with a 2 s
/// lease and the full 2 s wait, a beat that waited for one row came back as the others' leases
/// ran out (seen: a lease read 18 µs past its end).
pub fn bookkeeping_lock_wait(lease: Duration) -> Duration {
    BOOKKEEPING_LOCK_WAIT.min(lease / 4)
}

impl Pools {
    /// The engine's own pools beside the handlers' `pool`, for a node running `queues` queues.
    ///
    /// The claim pool is tuned for the claim and stage statements:
    ///
    /// - `synchronous_commit = off`: a claim's commit does not wait for the disk. This is safe: a
    ///   claim lost in a database crash puts the job back to `available` with its old attempt
    ///   number, and its next claim issues that number again; but every claim draws a fresh claim
    ///   token, and every write of an attempt is guarded by its token, so the attempt that started
    ///   meanwhile is fenced off (its completion, failure and lease renewals find no row) and the
    ///   job simply runs again. Since the WAL is written in order, the durable commit of an
    ///   outcome also makes the claim before it durable.
    /// - no bitmap or sequential scans: a queue table's statistics are nearly always stale (a bulk
    ///   insert into a small table), and the planner then sorts every available row to take ten.
    ///   The claim and stage indexes already return rows in the order wanted.
    pub fn new(pool: &Db, queues: usize, lease: Duration) -> Self {
        // (Each producer and the timer use one connection at a time; two more for the warm-up's
        // parallel checkouts and a producer retrying.)
        let claims = [
            ("synchronous_commit", "off".to_string()),
            ("enable_bitmapscan", "off".to_string()),
            ("enable_seqscan", "off".to_string()),
        ];
        let bookkeeping = [(
            "lock_timeout",
            format!("{}ms", bookkeeping_lock_wait(lease).as_millis().max(1)),
        )];
        Pools {
            handlers: pool.clone(),
            claims: pool.beside(
                "claims",
                &claims,
                ping_when_idle(PgPoolOptions::new())
                    .max_connections(queues as u32 + 2)
                    .min_connections(queues as u32 + 2)
                    .acquire_timeout(Duration::from_secs(10)),
            ),
            bookkeeping: pool.beside(
                "bookkeeping",
                &bookkeeping,
                ping_when_idle(PgPoolOptions::new())
                    .max_connections(BOOKKEEPING_CONNECTIONS)
                    .min_connections(2)
                    .acquire_timeout(Duration::from_secs(10)),
            ),
        }
    }

    /// Opens every connection of the claim pool now, and runs the claim, stage and next-due
    /// statements once on each (matching nothing, rolled back). A first claim that has to log in
    /// (SCRAM costs milliseconds), load the table's and its triggers' catalog entries into a fresh
    /// backend, and plan its statement fired the first due jobs about 20 ms late.
    pub async fn warm_up(&self, lease: Duration) -> Result<(), sqlx::Error> {
        if self.claims.mode() == PoolMode::Transaction {
            // Behind a pooler this would warm client connections, not the servers.
            return Ok(());
        }
        let n = self.claims.pool().options().get_max_connections() as usize;
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            let mut conn = self.claims.pool().acquire().await?;
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            // Queue names are never empty, and nothing is due before the epoch.
            job_store::job_claim(&mut *tx, "", 1, "warm-up", lease).await?;
            job_store::job_stage_due(&mut *tx, Some(DateTime::<Utc>::UNIX_EPOCH), 1).await?;
            job_store::job_next_due(&mut *tx).await?;
            tx.rollback().await?;
            held.push(conn);
        }
        Ok(())
    }

    /// Closes the engine's own pools (not the handlers').
    pub async fn close(&self) {
        self.bookkeeping.close().await;
        self.claims.close().await;
    }
}

/// An attempt running on this node.
struct Running {
    attempt: i32,
    /// The claim it runs for; a newer claim of the same job has another token.
    claim: Claim,
    cancel: CancellationToken,
    abort: Option<tokio::task::AbortHandle>,
    /// Set when the attempt was stopped because its job is gone (cancelled, rescued).
    stopped: bool,
    /// What it logged and recorded so far, once its handler started.
    recorder: Option<Arc<AttemptRecorder>>,
}

impl Running {
    fn stop(&mut self) {
        self.stopped = true;
        self.cancel.cancel();
        if let Some(abort) = &self.abort {
            abort.abort();
        }
    }
}

/// The most finished attempts a node holds with their outcome not written yet before its
/// producers stop claiming (two of the completer's batches). An attempt's slot frees as its
/// handler returns, before the completer writes its outcome: without this bound a node whose
/// writes stall (a database overloaded, a lock held) would claim on and on, every claim another
/// lease its heartbeat must keep renewing.
pub const MAX_PENDING_OUTCOMES: usize = 2_000;

/// The attempts of this node: those running, those interrupted at shutdown (to hand back), and
/// those finished whose outcome is not written yet (their leases are still renewed).
#[derive(Default)]
pub struct Attempts {
    running: Mutex<HashMap<JobId, Running>>,
    /// With what each had done when it was interrupted (`None`: its handler never started).
    interrupted: Mutex<Vec<(Claim, Option<AttemptEnd>)>>,
    pending_outcomes: Mutex<HashSet<Claim>>,
    /// Told when the outcomes waiting fall back under [`MAX_PENDING_OUTCOMES`].
    drained: Notify,
}

/// An older attempt of the same job that [`Attempts::register`] replaced.
pub struct Replaced {
    pub attempt: i32,
}

impl Attempts {
    fn running(&self) -> MutexGuard<'_, HashMap<JobId, Running>> {
        self.running.lock().expect("running attempts lock poisoned")
    }

    /// Registers a starting attempt (before its task starts, so that a cancel arriving at once
    /// finds it). An older attempt of the same job still registered here is stopped and returned.
    pub fn register(
        &self,
        claim: Claim,
        attempt: i32,
        cancel: CancellationToken,
    ) -> Option<Replaced> {
        let older = self.running().insert(
            claim.id,
            Running {
                attempt,
                claim,
                cancel,
                abort: None,
                stopped: false,
                recorder: None,
            },
        )?;
        older.cancel.cancel();
        if let Some(abort) = older.abort {
            abort.abort();
        }
        Some(Replaced {
            attempt: older.attempt,
        })
    }

    /// Gives the registered attempt of `claim` its task's abort handle (aborting it at once if it
    /// was stopped meanwhile).
    pub fn set_abort(&self, claim: Claim, abort: tokio::task::AbortHandle) {
        let mut running = self.running();
        if let Some(r) = running.get_mut(&claim.id).filter(|r| r.claim == claim) {
            if r.stopped {
                abort.abort();
            }
            r.abort = Some(abort);
        }
    }

    /// Gives the registered attempt of `claim` the recorder of what its handler logs and records.
    pub fn set_recorder(&self, claim: Claim, recorder: Arc<AttemptRecorder>) {
        if let Some(r) = self
            .running()
            .get_mut(&claim.id)
            .filter(|r| r.claim == claim)
        {
            r.recorder = Some(recorder);
        }
    }

    /// The running attempts (not stopped) that ran `min_age` or longer and logged or recorded
    /// something new since they were last asked, with what they have so far; and the jobs of
    /// every running attempt.
    pub fn live(&self, min_age: Duration) -> (Vec<(Claim, i32, AttemptEnd)>, HashSet<JobId>) {
        // The recorders are read after the lock is released: serializing their lines must not
        // hold up claims and removals.
        let (recorders, ids): (Vec<_>, HashSet<JobId>) = {
            let running = self.running();
            let recorders = running
                .values()
                .filter(|r| !r.stopped)
                .filter_map(|r| Some((r.claim, r.attempt, r.recorder.clone()?)))
                .collect();
            (recorders, running.keys().copied().collect())
        };
        let changed = recorders
            .into_iter()
            .filter_map(|(claim, attempt, rec)| Some((claim, attempt, rec.changed(min_age)?)))
            .collect();
        (changed, ids)
    }

    /// Removes the attempt of `claim` (a newer claim of the same job is left alone); records it
    /// for hand-back when it ended `unfinished` and was not stopped because its job is gone.
    pub fn remove(&self, claim: Claim, unfinished: bool) {
        let entry = self.running.lock().ok().and_then(|mut r| {
            if r.get(&claim.id).is_some_and(|e| e.claim == claim) {
                r.remove(&claim.id)
            } else {
                None
            }
        });
        let Some(entry) = entry else { return };
        if unfinished && !entry.stopped {
            // What it logged and recorded until it was stopped: its record keeps it.
            let end = entry.recorder.map(|r| r.end());
            if let Ok(mut v) = self.interrupted.lock() {
                v.push((claim, end));
            }
        }
    }

    /// Stops the attempts of these jobs (cancelled by an operator).
    pub fn stop_jobs(&self, ids: &[JobId]) {
        let mut running = self.running();
        for id in ids {
            if let Some(r) = running.get_mut(id) {
                r.stop();
            }
        }
    }

    /// Stops the attempts of these claims, if they still run here (their claims lost their jobs).
    pub fn stop_claims(&self, claims: &[Claim]) {
        let mut running = self.running();
        for c in claims {
            if let Some(r) = running.get_mut(&c.id).filter(|r| r.claim == *c) {
                r.stop();
            }
        }
    }

    /// Aborts every running attempt's task (the shutdown grace is over).
    pub fn abort_all(&self) {
        let aborts: Vec<_> = self
            .running
            .lock()
            .map(|r| r.values().filter_map(|x| x.abort.clone()).collect())
            .unwrap_or_default();
        for a in aborts {
            a.abort();
        }
    }

    /// How many attempts run here now.
    pub fn running_count(&self) -> usize {
        self.running.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// The claims of the attempts whose handlers run here now (or wait to start), stopped or not.
    pub fn running_claims(&self) -> std::collections::HashSet<Claim> {
        self.running
            .lock()
            .map(|r| r.values().map(|x| x.claim).collect())
            .unwrap_or_default()
    }

    /// The claims whose leases this node holds: attempts still running (and not stopped), and
    /// finished ones whose outcome the completer has not written yet. Sorted, without repeats.
    pub fn held(&self) -> Vec<Claim> {
        let mut held: Vec<Claim> = self
            .running
            .lock()
            .map(|r| r.values().filter(|x| !x.stopped).map(|x| x.claim).collect())
            .unwrap_or_default();
        if let Ok(pending) = self.pending_outcomes.lock() {
            held.extend(pending.iter().copied());
        }
        held.sort_unstable();
        held.dedup();
        held
    }

    /// An attempt finished: its lease is renewed until [`Attempts::outcome_written`].
    pub fn outcome_pending(&self, claim: Claim) {
        if let Ok(mut pending) = self.pending_outcomes.lock() {
            pending.insert(claim);
        }
    }

    /// The completer is done with these outcomes.
    pub fn outcome_written(&self, claims: impl IntoIterator<Item = Claim>) {
        let left = match self.pending_outcomes.lock() {
            Ok(mut pending) => {
                for c in claims {
                    pending.remove(&c);
                }
                pending.len()
            }
            Err(_) => 0,
        };
        if left < MAX_PENDING_OUTCOMES {
            self.drained.notify_waiters();
        }
    }

    /// Whether [`MAX_PENDING_OUTCOMES`] outcomes or more wait to be written: no claim then.
    pub fn outcomes_backlogged(&self) -> bool {
        self.pending_outcomes
            .lock()
            .map(|p| p.len() >= MAX_PENDING_OUTCOMES)
            .unwrap_or(false)
    }

    /// Waits until the completer writes outcomes that bring the backlog under the bound.
    pub async fn outcomes_drained(&self) {
        self.drained.notified().await
    }

    /// The attempts interrupted at shutdown, sorted, with what each had done; taken once.
    pub fn take_interrupted(&self) -> Vec<(Claim, Option<AttemptEnd>)> {
        let mut v = std::mem::take(&mut *self.interrupted.lock().expect("poisoned"));
        v.sort_unstable_by_key(|(claim, _)| *claim);
        v
    }
}

/// How the notifier tells the timer of an earlier due time, or to look at the table again.
pub struct TimerSignal {
    wake: Notify,
    /// An earlier due time learnt from a notification (ms since epoch, `i64::MAX` if none).
    hint_ms: AtomicI64,
}

impl Default for TimerSignal {
    fn default() -> Self {
        TimerSignal {
            wake: Notify::new(),
            hint_ms: AtomicI64::new(i64::MAX),
        }
    }
}

impl TimerSignal {
    /// A job may be due at `at_ms` (earlier than the timer knows).
    pub fn hint(&self, at_ms: i64) {
        self.hint_ms.fetch_min(at_ms, Ordering::AcqRel);
        self.wake.notify_one();
    }

    /// Something may have been missed: the timer reads the next due time again.
    pub fn refresh(&self) {
        self.wake.notify_one();
    }

    /// The earliest hint since the last take.
    pub fn take_hint(&self) -> Option<DateTime<Utc>> {
        match self.hint_ms.swap(i64::MAX, Ordering::AcqRel) {
            i64::MAX => None,
            ms => DateTime::from_timestamp_millis(ms),
        }
    }

    pub fn has_hint(&self) -> bool {
        self.hint_ms.load(Ordering::Acquire) != i64::MAX
    }

    pub async fn notified(&self) {
        self.wake.notified().await
    }
}

/// The database clock, estimated from the local clock and the offset the timer measures.
///
/// A reading of the database clock in a round trip from `before` to `after` places it at the
/// midpoint, give or take half the round trip. A reading made while the database is busy is
/// poor, so the clock keeps the best one: a new reading replaces it when its uncertainty is
/// smaller than the kept one's, grown by the drift two clocks may have had since (see
/// `MAX_DRIFT_PPM`), or when the two disagree beyond both their uncertainties (a clock was set).
#[derive(Default)]
pub struct DbClock {
    /// Database clock minus local clock, in microseconds.
    offset_us: AtomicI64,
    /// When the kept reading was made, and its uncertainty then (µs).
    kept: Mutex<Option<(std::time::Instant, i64)>>,
}

/// The most two clocks are assumed to drift apart: 100 µs per second (NTP keeps servers far
/// closer; an unsynchronised quartz clock stays within it).
const MAX_DRIFT_PPM: i64 = 100;

impl DbClock {
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::microseconds(self.offset_us.load(Ordering::Relaxed))
    }

    /// Records the database's clock `db` read in a round trip from `before` to `after` (local):
    /// the midpoint of the round trip is off by at most half of it.
    pub fn measured(&self, before: DateTime<Utc>, db: DateTime<Utc>, after: DateTime<Utc>) {
        let midpoint = before + (after - before) / 2;
        let (Some(offset), Some(half)) = (
            (db - midpoint).num_microseconds(),
            ((after - before) / 2).num_microseconds(),
        ) else {
            return;
        };
        let half = half.max(0);
        let now = std::time::Instant::now();
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let better = match *kept {
            None => true,
            Some((at, uncertainty)) => {
                let uncertainty = grown(uncertainty, now.duration_since(at));
                let apart = (offset - self.offset_us.load(Ordering::Relaxed)).abs();
                // A reading that disagrees with the kept one beyond both their uncertainties
                // means a clock was set (or the database failed over to another server): the
                // kept one is stale.
                half <= uncertainty || apart > uncertainty + half
            }
        };
        if better {
            *kept = Some((now, half));
            self.offset_us.store(offset, Ordering::Relaxed);
        }
    }

    /// How far [`DbClock::now`] may be off now, in microseconds.
    fn uncertainty_us(&self) -> i64 {
        match self.kept.lock().ok().and_then(|k| *k) {
            Some((at, uncertainty)) => grown(uncertainty, at.elapsed()),
            None => 0,
        }
    }

    /// The earliest the database clock can be now: [`DbClock::now`] less its uncertainty.
    pub fn surely_past(&self) -> DateTime<Utc> {
        self.now() - chrono::Duration::microseconds(self.uncertainty_us())
    }

    /// Waits until the database clock has surely reached `at` (never returns before it), within
    /// a fraction of a millisecond after.
    ///
    /// Two stages: the alarm thread wakes the task [`FINAL_STRETCH`] before the instant, and the
    /// task covers the rest on a runtime worker, yielding between looks at the clock. A wake-up is
    /// late by the thread's and the worker's scheduling (about 60 µs typically, a millisecond or
    /// more at times on a busy host): begun that early, it is absorbed, and the start lands
    /// within microseconds of the instant. The cost is at most [`FINAL_STRETCH`] of one worker's
    /// time per instant that jobs are due at (those due together share it).
    pub async fn wait_until(&self, at: DateTime<Utc>) {
        loop {
            let Ok(left) = (at - self.surely_past()).to_std() else {
                return;
            };
            if left.is_zero() {
                return;
            }
            let deadline = std::time::Instant::now() + left;
            if left > FINAL_STRETCH {
                // On the alarm thread, not the runtime's timer (whole milliseconds, late when its
                // workers are busy); the loop checks again, as the uncertainty grows meanwhile.
                super::alarm::sleep_until(deadline - FINAL_STRETCH).await;
            }
            while std::time::Instant::now() < deadline {
                tokio::task::yield_now().await;
            }
        }
    }
}

/// The last stretch of a wait for a due instant, covered by the waiting task itself (see
/// [`DbClock::wait_until`]): longer than a wake-up's usual lateness on a loaded two-core host.
pub const FINAL_STRETCH: Duration = Duration::from_micros(250);

/// An uncertainty (µs) grown by the drift the clocks may have had over `since`.
fn grown(uncertainty: i64, since: Duration) -> i64 {
    uncertainty.saturating_add(since.as_micros() as i64 * MAX_DRIFT_PPM / 1_000_000)
}

/// Whether this node holds the leader lease (also shown in its metrics).
pub struct LeaderFlag {
    leader: AtomicBool,
    metrics: Arc<Metrics>,
}

impl LeaderFlag {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        LeaderFlag {
            leader: AtomicBool::new(false),
            metrics,
        }
    }

    pub fn set(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
        self.metrics.set_leader(leader);
    }

    pub fn get(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }
}
