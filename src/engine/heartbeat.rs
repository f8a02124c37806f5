//! The heartbeat: keeps this node's row in `nodes` fresh and renews the leases of its running
//! attempts. An attempt whose claim no longer holds its job (cancelled, rescued while this node was
//! cut off, or claimed again after its claim was lost in a crash) is stopped. A lease whose row
//! another transaction has locked is not waited for (see `job_renew_leases`).

use std::sync::Arc;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::job::Claim;
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

    /// One heartbeat: the leases first (they matter most), then the node row. Both on the
    /// bookkeeping pool, which handlers cannot exhaust.
    pub async fn beat(&self) -> Result<(), sqlx::Error> {
        let shared = &self.shared;
        let leases = self.renew_leases().await;
        node_store::node_heartbeat(
            &shared.bookkeeping_pool,
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
        let mut held: Vec<Claim> = shared
            .running
            .lock()
            .map(|r| r.values().filter(|x| !x.stopped).map(|x| x.claim).collect())
            .unwrap_or_default();
        // Finished attempts keep their lease until the completer has written their outcome.
        if let Ok(pending) = shared.pending_outcomes.lock() {
            held.extend(pending.iter().copied());
        }
        if held.is_empty() {
            return Ok(());
        }
        held.sort_unstable();
        held.dedup();
        let mut conn = shared.bookkeeping_pool.acquire().await?;
        let renewal = job_store::job_renew_leases(&mut conn, &held, shared.config.lease).await?;
        drop(conn);
        if !renewal.locked.is_empty() {
            tracing::debug!(jobs = ?renewal.locked, "leases of locked rows renewed next time");
        }
        let lost: Vec<Claim> = held.into_iter().filter(|c| !renewal.holds(c)).collect();
        if !lost.is_empty() {
            // Claimed or finished between the snapshot and the update are not lost: only attempts
            // still running for the claim we tried to renew are stopped. A completed attempt whose
            // outcome is still in the completer's queue also shows here; stopping it is harmless
            // since its handler has returned.
            tracing::info!(jobs = ?lost.iter().map(|c| c.id).collect::<Vec<_>>(), "attempts lost their jobs (cancelled, rescued or claimed again): stopping them");
            shared.stop_claims(&lost);
        }
        Ok(())
    }
}
