//! Leadership: one node at a time runs the maintenance services (pruner, the schedules' runs
//! ahead, count folder). The rescuer is not among them: every node runs it (see `runtime`), so that a dead
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

use crate::db::Db;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::client::Client;
use super::maintenance::{
    count_folder::{CountFolder, CountFolderConfig},
    pruner::{JobPruner, PrunerConfig},
};
use super::node::LeaderFlag;
use super::schedules::enqueuer::ScheduleEnqueuer;
use super::schedules::Schedules;
use super::store::leader::{self as leader_store, LEADER_NAME};
use super::worker::Workers;

/// How often the lease is attempted or renewed.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(1);

/// The services the leader runs, and what they use.
#[derive(Clone)]
pub struct Maintenance {
    /// The pool the services work on (the handlers' pool: their statements are long and few).
    pub pool: Db,
    /// For the schedules' runs (their kinds must be known).
    pub workers: Arc<Workers>,
    pub pruner: PrunerConfig,
    pub count_folder: CountFolderConfig,
}

pub struct LeaderElector {
    /// The bookkeeping pool.
    pool: Db,
    node_id: String,
    ttl: Duration,
    leader: Arc<LeaderFlag>,
    maintenance: Maintenance,
}

struct Services {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl LeaderElector {
    /// Elects node `node_id` on `pool` (the bookkeeping pool) for leases of `ttl`, showing the
    /// outcome in `leader`, and runs `maintenance` while it leads.
    pub fn new(
        pool: Db,
        node_id: String,
        ttl: Duration,
        leader: Arc<LeaderFlag>,
        maintenance: Maintenance,
    ) -> Self {
        LeaderElector {
            pool,
            node_id,
            ttl,
            leader,
            maintenance,
        }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut services: Option<Services> = None;
        let mut tick = tokio::time::interval(RENEW_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let elected = match self.run_once().await {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(error = %e, "leader election failed; acting as follower");
                    false
                }
            };
            match (elected, services.is_some()) {
                (true, false) => {
                    tracing::info!(node = %self.node_id, "became leader: starting maintenance");
                    self.leader.set(true);
                    services = Some(self.start_services());
                }
                (false, true) => {
                    tracing::warn!(node = %self.node_id, "lost leadership: stopping maintenance");
                    self.leader.set(false);
                    if let Some(s) = services.take() {
                        stop_services(s).await;
                    }
                }
                _ => {}
            }
        }
        if let Some(s) = services.take() {
            stop_services(s).await;
            self.leader.set(false);
            if let Err(e) =
                leader_store::leader_resign(&self.pool, LEADER_NAME, &self.node_id).await
            {
                tracing::warn!(error = %e, "resigning leadership failed; the lease will expire");
            }
        }
    }

    /// Takes or renews the lease once; returns whether this node holds it.
    pub async fn run_once(&self) -> Result<bool, sqlx::Error> {
        leader_store::leader_attempt_elect(&self.pool, LEADER_NAME, &self.node_id, self.ttl).await
    }

    fn start_services(&self) -> Services {
        let m = &self.maintenance;
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(JobPruner::new(m.pool.clone(), m.pruner.clone()).run(stop.clone()));
        tasks.spawn(CountFolder::new(m.pool.clone(), m.count_folder.clone()).run(stop.clone()));
        {
            let client = Client::new(m.pool.clone(), m.workers.clone());
            let schedules = Schedules::new(client).with_horizon(failover_horizon(self.ttl));
            tasks.spawn(ScheduleEnqueuer::new(schedules).run(stop.clone()));
        }
        tasks.close();
        Services { stop, tasks }
    }
}

/// The runs of schedules are inserted this far ahead, so that a failover (the
/// lease's time-to-live, and a renewal) loses none of them.
pub fn failover_horizon(ttl: Duration) -> Duration {
    (ttl + RENEW_INTERVAL) * 2
}

async fn stop_services(s: Services) {
    s.stop.cancel();
    s.tasks.wait().await;
}

/// Whether this node leads now, asked each time (see `Engine::leader_check`).
pub type LeaderCheck = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

/// Runs `tick` every `interval` while `is_leader()` says this node leads, until `stop`: the shape
/// of a service outside the engine that only the leader runs (the alerts' evaluation, the sweep
/// of rotated webhook secrets). A tick handles its own errors.
pub async fn while_leading<F, Fut>(
    interval: std::time::Duration,
    is_leader: LeaderCheck,
    stop: tokio_util::sync::CancellationToken,
    mut tick: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        if (*is_leader)() {
            tick().await;
        }
    }
}
