//! A queue's live settings, slot accounting and fetch-ahead buffer on this node, and the node's
//! set of queues.
//!
//! `saturated` and `in_flight` are read and written with `SeqCst`: a slot released while a claim
//! decides that the queue is saturated must be seen by one side or the other (the producer sees
//! the free slot, or the release sees the flag and wakes it).
//!
//! **Fetch-ahead.** A claim may take a few more jobs than there are free slots: they wait in the
//! queue's buffer, claimed like any other (state `executing`, this node, a lease the heartbeat
//! renews), and a slot that frees starts the next one at once, without a round trip to the
//! database. How many ([`QueueState::lead`]) follows the queue's pace: enough to cover two claim
//! round trips at the rate the slots finish jobs, so short jobs never leave a slot idle while a
//! claim is on its way, and none for jobs that take longer than a round trip (whose slots a
//! claim refills in time anyway). A buffered job that waits longer than [`QueueState::max_wait`]
//! is handed back, so that a node never hoards jobs another node's free slots could run.
//!
//! **Pauses.** A claimed job that has not started is held by a pause of its queue or of its kind
//! that this node learnt of after the claim ([`QueueState::holds`]): no slot takes it
//! ([`QueueState::pop_buffered`] passes over it), and the producer hands it back
//! ([`QueueState::take_held`]; see `executor` on why back, not kept until the resume).
//!
//! **Settings versions.** Settings are applied only when at least as new as those applied last,
//! by the version the database draws under the row's lock (see [`QueueState::apply`],
//! [`PausedKinds::set`]): reads race (the backstop poll, a notification), and a write that began
//! first may commit last, so neither the order of reads nor a timestamp says which is newer.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::job::{Claim, Job};
use super::limits::QueueLimits;
use super::store::queues::QueueRow;

/// The shortest a buffered job may wait for a slot before it is handed back.
const MIN_MAX_WAIT: Duration = Duration::from_millis(20);

/// A claimed job waiting in the buffer for a slot of this node. Its attempt is registered already
/// (so a cancel finds it, and the heartbeat renews its lease).
pub struct Buffered {
    pub job: Job,
    pub claim: Claim,
    /// Cancelled when the job is gone (cancelled by an operator, its claim lost).
    pub cancel: CancellationToken,
    /// When it was claimed.
    pub since: Instant,
    /// Claimed ahead of its due time: its attempt starts at this instant of the database clock.
    pub not_before: Option<DateTime<Utc>>,
}

/// Kinds paused on every node (the `kind_pauses` table), shared by the node's queues: no claim
/// takes their jobs, and no claimed job of theirs starts.
#[derive(Default)]
pub struct PausedKinds(Mutex<AppliedKinds>);

#[derive(Default)]
struct AppliedKinds {
    /// The version of the set applied last (none yet).
    version: Option<i64>,
    kinds: Arc<Vec<String>>,
}

impl PausedKinds {
    fn lock(&self) -> MutexGuard<'_, AppliedKinds> {
        self.0.lock().expect("paused kinds lock poisoned")
    }

    /// The paused kinds now (usually none).
    pub fn get(&self) -> Arc<Vec<String>> {
        self.lock().kinds.clone()
    }

    /// Whether `kind` is paused.
    pub fn holds(&self, kind: &str) -> bool {
        self.lock().kinds.iter().any(|k| k == kind)
    }

    /// Replaces the paused kinds with the set of `version` (see `store::kinds::KindPauses`),
    /// unless a newer set was applied already: a slower read of an older set (the backstop poll
    /// racing a notification's read) must not undo a newer one. Returns whether they changed.
    pub fn set(&self, version: i64, mut kinds: Vec<String>) -> bool {
        kinds.sort();
        let mut applied = self.lock();
        if applied.version.is_some_and(|v| v > version) {
            return false;
        }
        applied.version = Some(version);
        if *applied.kinds == kinds {
            return false;
        }
        applied.kinds = Arc::new(kinds);
        true
    }
}

/// A queue's live settings and slot accounting on this node.
pub struct QueueState {
    pub name: String,
    /// The node's configured concurrency.
    pub configured: usize,
    /// The concurrency in force (an operator's override, or `configured`).
    pub limit: AtomicUsize,
    pub paused: AtomicBool,
    /// Kinds paused on every node (shared by the node's queues).
    pub kinds: Arc<PausedKinds>,
    /// The queue has limits across every node (a rate, a global concurrency): its claims go
    /// through the database's limited claim, and nothing is claimed ahead of its due time.
    pub limited: AtomicBool,
    /// Among those limits, a global concurrency.
    pub global_limited: AtomicBool,
    /// The limits applied last (a change of any of them, a raised rate say, lifts a hold
    /// computed under the old ones).
    limits: Mutex<QueueLimits>,
    /// A limit held jobs back: the next claim waits until this instant (the next rate window,
    /// or a short poll for room under a global concurrency).
    limit_retry: Mutex<Option<Instant>>,
    pub in_flight: AtomicUsize,
    /// Attempts claimed ahead of their due time that wait for it, outside the slots (see
    /// [`QueueState::timed_room`]).
    pub timed: AtomicUsize,
    /// The last claim took every slot it asked for: jobs may be waiting.
    pub saturated: AtomicBool,
    /// Wakes the producer. A signal that may bring available jobs goes through
    /// [`QueueState::wake_for_work`]; a bare `notify_one` asks only for a claim ahead of due
    /// times, a refill of the buffer or a hand-back.
    pub wake: Notify,
    /// Counts the signals that may bring available jobs (see [`QueueState::drained`]).
    work: AtomicU64,
    /// `work` as it was when a claim last found fewer available jobs than it asked for
    /// (`u64::MAX`: the last claim was full, or none ran yet).
    drained_at: AtomicU64,
    /// `version` of the settings row applied last: a slower read of an older row (the backstop
    /// poll racing a notification's read) must not undo a newer one. Held while a row is applied,
    /// so that two applies never interleave.
    applied: Mutex<Option<i64>>,
    /// Claimed jobs waiting for a slot, oldest first.
    buffer: Mutex<VecDeque<Buffered>>,
    /// The most jobs claimed ahead of the free slots (0: no fetch-ahead).
    fetch_ahead: usize,
    /// Moving averages, in microseconds, of an attempt's run and of a claim's round trip.
    job_us: AtomicU64,
    claim_us: AtomicU64,
    /// Jobs due up to this instant (of the database clock) may be claimed ahead of their due time
    /// (set by the timer shortly before a due time; see `timer`).
    soon: Mutex<Option<DateTime<Utc>>>,
}

impl QueueState {
    pub fn new(name: String, configured: usize) -> Self {
        QueueState {
            name,
            configured,
            limit: AtomicUsize::new(configured),
            paused: AtomicBool::new(false),
            kinds: Arc::default(),
            limited: AtomicBool::new(false),
            global_limited: AtomicBool::new(false),
            limits: Mutex::new(QueueLimits::default()),
            limit_retry: Mutex::new(None),
            in_flight: AtomicUsize::new(0),
            timed: AtomicUsize::new(0),
            saturated: AtomicBool::new(true),
            wake: Notify::new(),
            work: AtomicU64::new(0),
            drained_at: AtomicU64::new(u64::MAX),
            applied: Mutex::new(None),
            buffer: Mutex::new(VecDeque::new()),
            fetch_ahead: 0,
            job_us: AtomicU64::new(0),
            claim_us: AtomicU64::new(0),
            soon: Mutex::new(None),
        }
    }

    /// The same queue, claiming up to `fetch_ahead` jobs ahead of its free slots.
    pub fn with_fetch_ahead(mut self, fetch_ahead: usize) -> Self {
        self.fetch_ahead = fetch_ahead;
        self
    }

    /// The same queue, sharing the node's paused kinds.
    pub fn with_kinds(mut self, kinds: Arc<PausedKinds>) -> Self {
        self.kinds = kinds;
        self
    }

    /// Applies the shared settings of the `queues` table, unless a newer row was applied already.
    /// Returns whether anything changed.
    ///
    /// Newer is a larger `version`, never a later `updated_at`: that is the start of the writing
    /// transaction, so a transaction that began first and committed last (a pause, say, after a
    /// change of concurrency that began later) carries the older stamp, and was skipped until the
    /// next change. The version is drawn while the row is locked, in the order writes commit.
    pub fn apply(&self, row: &QueueRow) -> bool {
        // Held to the end: an older row's apply must not interleave with a newer one's.
        let mut applied = self.applied.lock().expect("queue settings lock poisoned");
        if applied.is_some_and(|v| v > row.version) {
            return false;
        }
        *applied = Some(row.version);
        let was_paused = self.paused.swap(row.paused, Ordering::SeqCst);
        let limits = row.limits();
        let limits_changed = {
            let mut applied = self.limits.lock().expect("queue limits lock poisoned");
            let changed = *applied != limits;
            *applied = limits.clone();
            changed
        };
        let limited = limits.is_limited();
        let was_limited = self.limited.swap(limited, Ordering::SeqCst);
        let global = limits.global.is_some();
        let was_global = self.global_limited.swap(global, Ordering::SeqCst);
        let limit = row
            .concurrency
            .map(|c| c.max(1) as usize)
            .unwrap_or(self.configured);
        let old_limit = self.limit.swap(limit, Ordering::SeqCst);
        let changed = was_paused != row.paused
            || old_limit != limit
            || limits_changed
            || was_limited != limited
            || was_global != global;
        if changed {
            // A limit's hold was computed under the old settings.
            self.set_limit_retry(None);
        }
        drop(applied);
        changed
    }

    /// Whether a pause holds this claimed job back: its queue or its kind is paused. A held job
    /// must not start (see the module doc).
    pub fn holds(&self, job: &Job) -> bool {
        self.pauses().is_some_and(|held| held(job))
    }

    /// [`QueueState::holds`] for many jobs: the pauses read once. `None` when nothing is paused.
    fn pauses(&self) -> Option<impl Fn(&Job) -> bool> {
        let paused = self.paused.load(Ordering::SeqCst);
        let kinds = self.kinds.get();
        (paused || !kinds.is_empty())
            .then_some(move |job: &Job| paused || kinds.contains(&job.kind))
    }

    /// When the next claim of a limited queue may be made (none: at once).
    pub fn limit_retry(&self) -> Option<Instant> {
        *self.limit_retry.lock().expect("queue limit lock poisoned")
    }

    /// Holds the next claim until `at` (a limit held jobs back), or clears the hold.
    pub fn set_limit_retry(&self, at: Option<Instant>) {
        *self.limit_retry.lock().expect("queue limit lock poisoned") = at;
    }

    /// Available jobs may wait in the table (a notification, a stage, a settings change, the
    /// backstop poll): wakes the producer to claim.
    pub fn wake_for_work(&self) {
        self.work.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_one();
    }

    /// The count of [`QueueState::wake_for_work`] signals, read before a claim.
    pub fn work_seen(&self) -> u64 {
        self.work.load(Ordering::SeqCst)
    }

    /// A claim begun after `seen` signals took every job it asked for (`full`), or fewer: the
    /// queue had no more available jobs then.
    pub fn claimed(&self, seen: u64, full: bool) {
        let at = if full { u64::MAX } else { seen };
        self.drained_at.store(at, Ordering::SeqCst);
    }

    /// The last claim found no more available jobs, and no signal that may bring some came since:
    /// a producer woken only to claim ahead of due times (a timed attempt started, a slot freed)
    /// need not ask the table for available jobs. Each such claim is a round trip and a
    /// statement's triggers, once per job of a stream of scheduled jobs.
    pub fn drained(&self) -> bool {
        self.drained_at.load(Ordering::SeqCst) == self.work.load(Ordering::SeqCst)
    }

    pub fn free_slots(&self) -> usize {
        self.limit
            .load(Ordering::SeqCst)
            .saturating_sub(self.in_flight.load(Ordering::SeqCst))
    }

    /// How many more jobs may be claimed ahead of their due time now. Such an attempt waits for
    /// its instant without a slot (it takes one then, or waits in the buffer for the next), so
    /// that a due job is never held back by one that is not due yet; but no more wait than there
    /// are free slots, so a node never holds early claims it could not start at once.
    pub fn timed_room(&self) -> usize {
        self.free_slots()
            .saturating_sub(self.timed.load(Ordering::SeqCst))
    }

    /// Takes a free slot, if there is one.
    pub fn try_take_slot(&self) -> bool {
        let limit = self.limit.load(Ordering::SeqCst);
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Called when an attempt of this queue ends.
    pub fn release_slot(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.saturated.load(Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }

    /// Jobs due by `horizon` may be claimed now, ahead of their due time: wakes the producer.
    pub fn claim_soon(&self, horizon: DateTime<Utc>) {
        {
            let mut soon = self.soon.lock().expect("queue soon lock poisoned");
            *soon = Some(soon.map_or(horizon, |h| h.max(horizon)));
        }
        self.wake.notify_one();
    }

    /// The horizon of [`QueueState::claim_soon`], if one is set.
    pub fn soon(&self) -> Option<DateTime<Utc>> {
        *self.soon.lock().expect("queue soon lock poisoned")
    }

    /// Nothing more is due by `horizon`: clears it (unless a later one was set meanwhile).
    pub fn soon_done(&self, horizon: DateTime<Utc>) {
        let mut soon = self.soon.lock().expect("queue soon lock poisoned");
        if *soon == Some(horizon) {
            *soon = None;
        }
    }

    fn buffer(&self) -> MutexGuard<'_, VecDeque<Buffered>> {
        self.buffer.lock().expect("queue buffer lock poisoned")
    }

    /// Jobs in the buffer.
    pub fn buffered(&self) -> usize {
        self.buffer().len()
    }

    /// Adds claimed jobs at the end of the buffer.
    pub fn push_buffered(&self, jobs: impl IntoIterator<Item = Buffered>) {
        self.buffer().extend(jobs);
    }

    /// The oldest buffered job that may start: those a pause holds ([`QueueState::holds`]) stay
    /// where they are, for the producer to hand back; those whose job is gone are dropped and
    /// returned in `gone`. When the buffer runs low while jobs may be waiting in the table, the
    /// producer is woken to refill it.
    pub fn pop_buffered(&self, gone: &mut Vec<Buffered>) -> Option<Buffered> {
        let held = self.pauses();
        let held = |job: &Job| held.as_ref().is_some_and(|h| h(job));
        let mut buffer = self.buffer();
        let mut next = None;
        let mut i = 0;
        while i < buffer.len() {
            if buffer[i].cancel.is_cancelled() {
                gone.extend(buffer.remove(i));
            } else if held(&buffer[i].job) {
                i += 1;
            } else {
                next = buffer.remove(i);
                break;
            }
        }
        let low = buffer.len() <= self.lead() / 2;
        drop(buffer);
        if next.is_some() && low && self.saturated.load(Ordering::SeqCst) {
            self.wake.notify_one();
        }
        next
    }

    /// Puts a job taken from the buffer back at its front (no slot was free after all).
    pub fn unpop_buffered(&self, b: Buffered) {
        self.buffer().push_front(b);
    }

    /// Puts jobs taken from the buffer back at its front, in their order.
    pub fn unpop_all(&self, jobs: Vec<Buffered>) {
        let mut buffer = self.buffer();
        for b in jobs.into_iter().rev() {
            buffer.push_front(b);
        }
    }

    /// Takes the buffered jobs that waited longer than `max_wait` (all of them with `None`).
    pub fn take_buffered(&self, max_wait: Option<Duration>) -> Vec<Buffered> {
        let mut buffer = self.buffer();
        match max_wait {
            None => buffer.drain(..).collect(),
            Some(max) => {
                let now = Instant::now();
                let aged = buffer
                    .iter()
                    .take_while(|b| now.duration_since(b.since) > max)
                    .count();
                buffer.drain(..aged).collect()
            }
        }
    }

    /// Takes the buffered jobs a pause holds (every one, when the queue is paused), to hand back.
    pub fn take_held(&self) -> Vec<Buffered> {
        let Some(held) = self.pauses() else {
            return Vec::new();
        };
        let mut buffer = self.buffer();
        if !buffer.iter().any(|b| held(&b.job)) {
            return Vec::new();
        }
        let (held, kept): (VecDeque<_>, VecDeque<_>) = buffer.drain(..).partition(|b| held(&b.job));
        *buffer = kept;
        held.into()
    }

    /// When the oldest buffered job was claimed.
    pub fn oldest_buffered(&self) -> Option<Instant> {
        self.buffer().front().map(|b| b.since)
    }

    /// Records how long an attempt ran.
    pub fn attempt_took(&self, took: Duration) {
        ewma(&self.job_us, took);
    }

    /// Buffered jobs waited `waited` for a slot and were handed back: the slots are busier than
    /// the pace said. The pace is slowed at once (the lead halves at least), so a queue whose
    /// slots are held by long jobs does not claim and hand back over and over.
    pub fn waited_too_long(&self, waited: Duration) {
        let waited = (waited.as_micros() as u64).max(1);
        let old = self.job_us.load(Ordering::Relaxed);
        self.job_us
            .store(old.saturating_mul(2).max(waited), Ordering::Relaxed);
    }

    /// Records how long a claim took.
    pub fn claim_took(&self, took: Duration) {
        ewma(&self.claim_us, took);
    }

    /// How many jobs to hold ahead of the free slots now: what the slots finish in two claim
    /// round trips (rounded down: none for jobs longer than that), at most `fetch_ahead`. None
    /// until both paces were measured.
    pub fn lead(&self) -> usize {
        if self.fetch_ahead == 0 {
            return 0;
        }
        let job_us = self.job_us.load(Ordering::Relaxed);
        let claim_us = self.claim_us.load(Ordering::Relaxed);
        if job_us == 0 || claim_us == 0 {
            return 0;
        }
        let slots = self.limit.load(Ordering::SeqCst) as u64;
        let lead = slots.saturating_mul(2 * claim_us) / job_us;
        (lead as usize).min(self.fetch_ahead)
    }

    /// How long a buffered job may wait for a slot before it is handed back: four claim round
    /// trips, and at least 20 ms.
    pub fn max_wait(&self) -> Duration {
        let claim = Duration::from_micros(self.claim_us.load(Ordering::Relaxed));
        (claim * 4).max(MIN_MAX_WAIT)
    }
}

/// A moving average (weight 1/8 for the newest) of durations in microseconds; the first sample
/// sets it. Concurrent updates may lose a sample, which does not matter for a pace.
fn ewma(avg: &AtomicU64, sample: Duration) {
    let x = (sample.as_micros() as u64).max(1);
    let old = avg.load(Ordering::Relaxed);
    let new = if old == 0 { x } else { old - old / 8 + x / 8 };
    avg.store(new.max(1), Ordering::Relaxed);
}

/// The queues this node runs, by name.
#[derive(Default)]
pub struct Queues {
    by_name: HashMap<String, Arc<QueueState>>,
    kinds: Arc<PausedKinds>,
}

impl Queues {
    /// The queues `(name, per-node concurrency)`, without fetch-ahead.
    pub fn new(queues: &[(String, usize)]) -> Self {
        Self::with_fetch_ahead(queues, 0)
    }

    /// The queues `(name, per-node concurrency)`, each claiming up to `fetch_ahead` jobs ahead
    /// of its free slots.
    pub fn with_fetch_ahead(queues: &[(String, usize)], fetch_ahead: usize) -> Self {
        let kinds = Arc::new(PausedKinds::default());
        Queues {
            by_name: queues
                .iter()
                .map(|(name, c)| {
                    let q = QueueState::new(name.clone(), *c)
                        .with_fetch_ahead(fetch_ahead)
                        .with_kinds(kinds.clone());
                    (name.clone(), Arc::new(q))
                })
                .collect(),
            kinds,
        }
    }

    /// The kinds paused on every node, as this node knows them.
    pub fn kinds(&self) -> &PausedKinds {
        &self.kinds
    }

    pub fn get(&self, name: &str) -> Option<&Arc<QueueState>> {
        self.by_name.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<QueueState>> {
        self.by_name.values()
    }

    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Wakes the producer of `queue`, if this node runs it.
    pub fn wake(&self, queue: &str) {
        if let Some(q) = self.by_name.get(queue) {
            q.wake_for_work();
        }
    }

    pub fn wake_all(&self) {
        for q in self.by_name.values() {
            q.wake_for_work();
        }
    }
}
