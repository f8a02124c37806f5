//! Leadership: one node at a time runs the maintenance services (pruner, periodic jobs, count
//! folder). The rescuer is not among them: every node runs it (see `runtime`), so that a dead
//! leader's jobs do not wait for a new leader first.
//!
//! The leader holds a lease in the `leader` table (`leader_attempt_elect`): a node takes it when it
//! is free or expired, and the holder renews it every second; its time-to-live (5 s by default)
//! bounds how long the cluster can go without a leader after the leader dies.
//!
//! ```text
//!              elect ok                          renew fails / db error
//!  follower ────────────▶ leader (services on) ─────────────────────────▶ follower (services off)
//!     ▲  │ elect refused       │ shutdown: services off, lease deleted (resign)
//!     └──┘                     ▼
//!                            stopped
//! ```
//!
//! Rules: a node that cannot renew (database unreachable) stops its services at once, before its
//! lease expires, so two leaders never run maintenance at the same time for long; every
//! maintenance statement is safe to run concurrently anyway (`SKIP LOCKED`, guarded updates, unique
//! keys), so an overlap costs work, never correctness.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::client::Client;
use super::maintenance::{
    count_folder::CountFolder, periodic::PeriodicEnqueuer, pruner::JobPruner,
};
use super::runtime::Shared;
use super::store::leader as leader_store;

/// The name of the engine's leader lease.
pub const LEADER_NAME: &str = "maintenance";
/// How often the lease is attempted or renewed.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(1);

pub(crate) struct LeaderElector {
    shared: Arc<Shared>,
}

struct Services {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl LeaderElector {
    pub fn new(shared: Arc<Shared>) -> Self {
        LeaderElector { shared }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let shared = &self.shared;
        let mut services: Option<Services> = None;
        let mut tick = tokio::time::interval(RENEW_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let elected = match leader_store::leader_attempt_elect(
                &shared.bookkeeping_pool,
                LEADER_NAME,
                &shared.node_id,
                shared.config.leader_ttl,
            )
            .await
            {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(error = %e, "leader election failed; acting as follower");
                    false
                }
            };
            match (elected, services.is_some()) {
                (true, false) => {
                    tracing::info!(node = %shared.node_id, "became leader: starting maintenance");
                    shared.set_leader(true);
                    services = Some(self.start_services());
                }
                (false, true) => {
                    tracing::warn!(node = %shared.node_id, "lost leadership: stopping maintenance");
                    shared.set_leader(false);
                    if let Some(s) = services.take() {
                        stop_services(s).await;
                    }
                }
                _ => {}
            }
        }
        if let Some(s) = services.take() {
            stop_services(s).await;
            shared.set_leader(false);
            if let Err(e) =
                leader_store::leader_resign(&shared.bookkeeping_pool, LEADER_NAME, &shared.node_id)
                    .await
            {
                tracing::warn!(error = %e, "resigning leadership failed; the lease will expire");
            }
        }
    }

    fn start_services(&self) -> Services {
        let shared = &self.shared;
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let pool = shared.pool.clone();
        tasks.spawn(JobPruner::new(pool.clone(), shared.config.pruner.clone()).run(stop.clone()));
        tasks.spawn(
            CountFolder::new(pool.clone(), shared.config.count_folder.clone()).run(stop.clone()),
        );
        if !shared.config.periodic.is_empty() {
            let client = Client::new(pool, shared.workers.clone());
            // Runs are inserted this far ahead, so that a failover (the lease's time-to-live, and
            // a renewal) loses none of them.
            let horizon = (shared.config.leader_ttl + RENEW_INTERVAL) * 2;
            tasks.spawn(
                PeriodicEnqueuer::new(client, shared.config.periodic.clone())
                    .with_horizon(horizon)
                    .run(stop.clone()),
            );
        }
        tasks.close();
        Services { stop, tasks }
    }
}

async fn stop_services(s: Services) {
    s.stop.cancel();
    s.tasks.wait().await;
}
