//! A queue's live settings and slot accounting on this node, and the node's set of queues.
//!
//! `saturated` and `in_flight` are read and written with `SeqCst`: a slot released while a claim
//! decides that the queue is saturated must be seen by one side or the other (the producer sees
//! the free slot, or the release sees the flag and wakes it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use super::store::queues::QueueRow;

/// A queue's live settings and slot accounting on this node.
pub struct QueueState {
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

    pub fn free_slots(&self) -> usize {
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

/// The queues this node runs, by name.
#[derive(Default)]
pub struct Queues {
    by_name: HashMap<String, Arc<QueueState>>,
}

impl Queues {
    /// The queues `(name, per-node concurrency)`.
    pub fn new(queues: &[(String, usize)]) -> Self {
        Queues {
            by_name: queues
                .iter()
                .map(|(name, c)| (name.clone(), Arc::new(QueueState::new(name.clone(), *c))))
                .collect(),
        }
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
            q.wake.notify_one();
        }
    }

    pub fn wake_all(&self) {
        for q in self.by_name.values() {
            q.wake.notify_one();
        }
    }
}
