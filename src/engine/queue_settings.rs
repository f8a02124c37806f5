//! The queue settings sync: every node applies the shared settings of its queues (paused, an
//! operator's concurrency, limits) from the `queues` table, and the kinds paused on every node
//! from `kind_pauses`.
//!
//! A change normally arrives at once by a `kickoff_control` notification (see the notifier). But a
//! notification can be lost: sent while the node's listener reconnects (every listener drops when
//! PostgreSQL restarts), in the start-up window before the node listens, or followed by a failed
//! read. So the rows are also read again after every listener reconnect and on every backstop poll:
//! a node never stays paused (or running) against the table for longer than one poll.
//!
//! Those reads race (a poll and a notification's read, on different tasks), and a write that began
//! first may commit last: each row, and the set of paused kinds, carries a version the database
//! draws under a row lock, in commit order, and a node applies only what is at least as new as
//! what it has (`QueueState::apply`, `PausedKinds::set`).

use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use tokio_util::sync::CancellationToken;

use super::maintenance::{run_every, Report};
use super::queue_state::Queues;
use super::store::{kinds as kind_store, queues as queue_store};

#[derive(Debug, Default, PartialEq)]
pub struct SettingsReport {
    /// Queues whose settings changed on this node.
    pub changed: Vec<String>,
}

impl Report for SettingsReport {
    fn did_something(&self) -> bool {
        !self.changed.is_empty()
    }
}

/// Applies the `queues` rows to this node's queues. Cheap to clone.
#[derive(Clone)]
pub struct QueueSettingsSync {
    /// The bookkeeping pool.
    pool: Db,
    queues: Arc<Queues>,
    interval: Duration,
}

impl QueueSettingsSync {
    /// Reads on `pool` the settings of `queues`, every `interval` (the backstop poll).
    pub fn new(pool: Db, queues: Arc<Queues>, interval: Duration) -> Self {
        QueueSettingsSync {
            pool,
            queues,
            interval,
        }
    }

    /// Reads this node's queues' rows and applies them; wakes the producers of queues that changed.
    pub async fn run_once(&self) -> Result<SettingsReport, sqlx::Error> {
        let rows = queue_store::queue_list_named(&self.pool, &self.queues.names()).await?;
        let mut report = SettingsReport::default();
        if self.apply_kinds(kind_store::kind_pause_snapshot(&self.pool).await?) {
            report.changed.push("(paused kinds)".into());
        }
        for row in rows {
            if let Some(q) = self.queues.get(&row.name) {
                if q.apply(&row) {
                    q.wake_for_work();
                    report.changed.push(row.name);
                }
            }
        }
        Ok(report)
    }

    /// Reads and applies the row of one queue (a notification said it changed), and wakes its
    /// producer.
    pub async fn reload(&self, name: &str) {
        let Some(q) = self.queues.get(name) else {
            return;
        };
        match queue_store::queue_get(&self.pool, name).await {
            Ok(Some(row)) => {
                q.apply(&row);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(queue = %name, error = %e, "reloading queue settings failed; the backstop poll retries")
            }
        }
        q.wake_for_work();
    }

    /// Reads the paused kinds again (a notification said they changed), and wakes every producer
    /// if they did.
    pub async fn reload_kinds(&self) {
        match kind_store::kind_pause_snapshot(&self.pool).await {
            Ok(snapshot) => {
                self.apply_kinds(snapshot);
            }
            Err(e) => {
                tracing::warn!(error = %e, "reloading paused kinds failed; the backstop poll retries")
            }
        }
    }

    /// Applies the paused kinds (unless newer ones were applied); a change wakes every producer
    /// (a resumed kind's jobs wait; a paused kind's claimed jobs are to be handed back).
    fn apply_kinds(&self, snapshot: kind_store::KindPauses) -> bool {
        let changed = self.queues.kinds().set(snapshot.version, snapshot.kinds);
        if changed {
            self.queues.wake_all();
        }
        changed
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let interval = self.interval;
        run_every("queue_settings", interval, shutdown, || self.run_once()).await;
    }
}
