//! Drops the previous secret of a rotated endpoint once its overlap ended: from then on only the
//! new one signs, and a dump of the database no longer holds the old one even sealed. Runs on the
//! leading node (started by `server.rs`, gated like the alerts' evaluation); reading the
//! endpoints already ignores a previous secret past its overlap, so the sweep's delay changes no
//! signature.

use std::time::Duration;

use crate::db::Db;
use tokio_util::sync::CancellationToken;

use super::store;
use crate::engine::leadership::{while_leading, LeaderCheck};

/// How often the leader looks for ended overlaps.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Clone)]
pub struct SecretSweeper {
    pool: Db,
}

impl SecretSweeper {
    pub fn new(pool: Db) -> Self {
        SecretSweeper { pool }
    }

    /// Drops every previous secret whose overlap ended; how many.
    pub async fn run_once(&self) -> Result<u64, sqlx::Error> {
        store::endpoint_drop_ended_previous(&self.pool).await
    }

    /// Sweeps every `interval` while `is_leader()` says this node leads, until `stop`.
    pub async fn run(self, interval: Duration, is_leader: LeaderCheck, stop: CancellationToken) {
        while_leading(interval, is_leader, stop, || async {
            match self.run_once().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(endpoints = n, "dropped previous webhook secrets whose overlap ended"),
                Err(e) => tracing::warn!(error = %e, "dropping ended webhook secrets failed; trying again next time"),
            }
        })
        .await
    }
}
