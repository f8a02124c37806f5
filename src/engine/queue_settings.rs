//! The queue settings sync: every node applies the shared settings of its queues (paused, an
//! operator's concurrency) from the `queues` table.
//!
//! A change normally arrives at once by a `kickoff_control` notification (see the notifier). But a
//! notification can be lost: sent while the node's listener reconnects (every listener drops when
//! PostgreSQL restarts), in the start-up window before the node listens, or followed by a failed
//! read. So the rows are also read again after every listener reconnect and on every backstop poll:
//! a node never stays paused (or running) against the table for longer than one poll.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::maintenance::{run_every, Report};
use super::runtime::Shared;
use super::store::queues as queue_store;

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

pub(crate) struct QueueSettingsSync {
    shared: Arc<Shared>,
}

impl QueueSettingsSync {
    pub fn new(shared: Arc<Shared>) -> Self {
        QueueSettingsSync { shared }
    }

    /// Reads this node's queues' rows and applies them; wakes the producers of queues that changed.
    pub async fn run_once(&self) -> Result<SettingsReport, sqlx::Error> {
        let shared = &self.shared;
        let names: Vec<String> = shared.queues.keys().cloned().collect();
        let rows = queue_store::queue_list_named(&shared.bookkeeping_pool, &names).await?;
        let mut report = SettingsReport::default();
        for row in rows {
            if let Some(q) = shared.queues.get(&row.name) {
                if q.apply(&row) {
                    q.wake.notify_one();
                    report.changed.push(row.name);
                }
            }
        }
        Ok(report)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let interval = self.shared.config.backstop_poll;
        run_every("queue_settings", interval, shutdown, || self.run_once()).await;
    }
}
