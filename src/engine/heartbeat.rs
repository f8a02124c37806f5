//! The heartbeat: keeps this node's row in `nodes` fresh and renews the leases of its running
//! attempts. An attempt whose lease could not be renewed has lost its job (cancelled, or rescued
//! while this node was cut off) and is stopped.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::job::JobId;
use super::runtime::Shared;
use super::store::{jobs as job_store, nodes as node_store};

pub(crate) struct Heartbeat {
    shared: Arc<Shared>,
    hostname: String,
    queues: Value,
}

impl Heartbeat {
    pub fn new(shared: Arc<Shared>) -> Self {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let queues = json!(shared
            .config
            .queues
            .iter()
            .map(|(q, c)| (q.clone(), json!(c)))
            .collect::<serde_json::Map<_, _>>());
        Heartbeat {
            shared,
            hostname,
            queues,
        }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.shared.config.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.beat().await {
                tracing::warn!(error = %e, "heartbeat failed; leases expire unless the next one succeeds");
            }
        }
    }

    /// One heartbeat: the leases first (they matter most), then the node row.
    pub async fn beat(&self) -> Result<(), sqlx::Error> {
        let shared = &self.shared;
        let leases = self.renew_leases().await;
        node_store::node_heartbeat(
            &shared.pool,
            &shared.node_id,
            &self.hostname,
            std::process::id() as i32,
            &self.queues,
        )
        .await?;
        leases
    }

    async fn renew_leases(&self) -> Result<(), sqlx::Error> {
        let shared = &self.shared;
        let mut held: Vec<(JobId, i32)> = shared
            .running
            .lock()
            .map(|r| {
                r.iter()
                    .filter(|(_, x)| !x.stopped)
                    .map(|(id, x)| (*id, x.attempt))
                    .collect()
            })
            .unwrap_or_default();
        // Finished attempts keep their lease until the completer has written their outcome.
        if let Ok(pending) = shared.pending_outcomes.lock() {
            held.extend(pending.iter().map(|(id, a)| (*id, *a)));
        }
        if held.is_empty() {
            return Ok(());
        }
        held.sort_unstable();
        held.dedup();
        let renewed = job_store::job_renew_leases(&shared.pool, &held, shared.config.lease).await?;
        if renewed.len() < held.len() {
            let lost: Vec<JobId> = held
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| !renewed.contains(id))
                .collect();
            // Claimed or finished between the snapshot and the update are not lost: only stop
            // attempts that are still running with the attempt number we tried to renew.
            let still_running: Vec<JobId> = {
                let running = shared.running.lock().expect("running map poisoned");
                lost.into_iter()
                    .filter(|id| {
                        running
                            .get(id)
                            .zip(held.iter().find(|(h, _)| h == id))
                            .is_some_and(|(r, (_, a))| r.attempt == *a)
                    })
                    .collect()
            };
            if !still_running.is_empty() {
                // A completed attempt whose outcome is still in the completer's queue also shows
                // here; stopping it is harmless since its handler has returned.
                tracing::info!(jobs = ?still_running, "attempts lost their jobs (cancelled or rescued): stopping them");
                shared.stop_attempts(&still_running);
            }
        }
        Ok(())
    }
}
