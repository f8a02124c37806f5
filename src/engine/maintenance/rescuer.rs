//! The rescuer takes back executing jobs whose lease expired: their node crashed, hung, or lost its
//! database. They become retryable at once (or discarded when out of attempts). A zombie attempt
//! that wakes up later is fenced off by the attempt number.
//!
//! Every node runs it, not only the leader: when the leader itself dies, its jobs would otherwise
//! wait for the leader lease to expire too (5 s more, measured in the chaos suite). Running it on
//! every node at once is safe: `SKIP LOCKED` gives each expired row to one node, and the update is
//! guarded by the state.

use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{run_every, Report};
use crate::engine::job::{JobId, JobState};
use crate::engine::metrics::Metrics;
use crate::engine::store::jobs as job_store;

/// Default interval between rescues.
pub const DEFAULT_RESCUE_INTERVAL: Duration = Duration::from_secs(1);
/// Default most jobs rescued by one statement.
pub const DEFAULT_RESCUE_BATCH: i64 = 1000;

#[derive(Debug, Clone)]
pub struct RescuerConfig {
    /// How often to look for expired leases. Default: 1 s.
    pub interval: Duration,
    /// Most jobs per statement. Default: 1000.
    pub batch: i64,
}

impl Default for RescuerConfig {
    fn default() -> Self {
        RescuerConfig {
            interval: DEFAULT_RESCUE_INTERVAL,
            batch: DEFAULT_RESCUE_BATCH,
        }
    }
}

impl RescuerConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() || self.batch < 1 {
            return Err("rescuer interval and batch must be positive".into());
        }
        Ok(())
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct RescueReport {
    pub retryable: Vec<JobId>,
    pub discarded: Vec<JobId>,
}

impl Report for RescueReport {
    fn did_something(&self) -> bool {
        !self.retryable.is_empty() || !self.discarded.is_empty()
    }
}

pub struct JobRescuer {
    pool: Db,
    config: RescuerConfig,
    metrics: Option<Arc<Metrics>>,
}

impl JobRescuer {
    pub fn new(pool: Db, config: RescuerConfig) -> Self {
        JobRescuer {
            pool,
            config,
            metrics: None,
        }
    }

    /// Counts what it rescues into the node's metrics.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Rescues every job whose lease expired before `now` (the database clock when `None`).
    pub async fn run_once(&self, now: Option<DateTime<Utc>>) -> Result<RescueReport, sqlx::Error> {
        let mut report = RescueReport::default();
        loop {
            let rescued = job_store::job_rescue_expired(&self.pool, now, self.config.batch).await?;
            let n = rescued.len() as i64;
            for (id, state) in rescued {
                if state == JobState::Discarded {
                    report.discarded.push(id);
                } else {
                    report.retryable.push(id);
                }
            }
            if n < self.config.batch {
                return Ok(report);
            }
        }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let interval = self.config.interval;
        run_every("rescuer", interval, shutdown, || async {
            let report = self.run_once(None).await;
            if let (Ok(r), Some(m)) = (&report, &self.metrics) {
                m.rescued(r.retryable.len() + r.discarded.len());
            }
            report
        })
        .await;
    }
}
