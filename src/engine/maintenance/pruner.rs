//! The pruner deletes finished jobs after a retention period, in batches, and sweeps node rows whose
//! heartbeat stopped long ago.

use std::time::Duration;

use crate::db::Db;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{run_every, Report};
use crate::engine::store::{jobs as job_store, nodes as node_store, queues as queue_store};

/// Default interval between prunes.
pub const DEFAULT_PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// Default time a finished job is kept.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// Default most jobs deleted by one statement.
pub const DEFAULT_PRUNE_BATCH: i64 = 10_000;
/// Node rows silent this long are removed.
pub const NODE_STALE_AFTER: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct PrunerConfig {
    /// How often to prune. Default: 60 s.
    pub interval: Duration,
    /// How long finished jobs are kept. Default: 24 h (`KICKOFF_RETENTION_HOURS`).
    pub retention: Duration,
    /// Most jobs per statement. Default: 10,000.
    pub batch: i64,
}

impl Default for PrunerConfig {
    fn default() -> Self {
        PrunerConfig {
            interval: DEFAULT_PRUNE_INTERVAL,
            retention: DEFAULT_RETENTION,
            batch: DEFAULT_PRUNE_BATCH,
        }
    }
}

impl PrunerConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() || self.batch < 1 {
            return Err("pruner interval and batch must be positive".into());
        }
        Ok(())
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct PruneReport {
    pub jobs_deleted: u64,
    pub nodes_deleted: u64,
    /// Rate windows of partition keys that ended (see `limits`).
    pub windows_deleted: u64,
}

impl Report for PruneReport {
    fn did_something(&self) -> bool {
        self.jobs_deleted > 0 || self.nodes_deleted > 0 || self.windows_deleted > 0
    }
}

pub struct JobPruner {
    pool: Db,
    config: PrunerConfig,
}

impl JobPruner {
    pub fn new(pool: Db, config: PrunerConfig) -> Self {
        JobPruner { pool, config }
    }

    /// Deletes jobs finished more than the retention before `now` (the database clock when
    /// `None`: a node whose clock runs ahead must not prune early).
    pub async fn run_once(&self, now: Option<DateTime<Utc>>) -> Result<PruneReport, sqlx::Error> {
        let mut report = PruneReport::default();
        loop {
            let n = job_store::job_prune_finalized(
                &self.pool,
                now,
                self.config.retention,
                self.config.batch,
            )
            .await?;
            report.jobs_deleted += n;
            if (n as i64) < self.config.batch {
                break;
            }
        }
        report.nodes_deleted =
            node_store::node_delete_stale(&self.pool, NODE_STALE_AFTER.as_secs_f64()).await?;
        report.windows_deleted = queue_store::queue_windows_delete_ended(&self.pool).await?;
        Ok(report)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let interval = self.config.interval;
        run_every("pruner", interval, shutdown, || self.run_once(None)).await;
    }
}
