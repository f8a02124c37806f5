//! The deadline keeper fails the workflow steps whose deadline passed while they waited for their
//! signal (docs/workflows.md): within [`DEADLINE_INTERVAL`] of it. Their dependents then follow
//! their edges, as after any failed step, in the same transaction.
//!
//! Every node runs it, as the rescuer: a stalled leader holds no run's deadline. Two nodes at
//! once are safe: `kickoff_step_deadline` takes the run's lock and checks the step still waits
//! and no signal came, so a step fails once, and never after its signal started it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{run_every, Report};
use crate::db::Db;
use crate::engine::store::workflows as store;

/// How often to look for passed deadlines.
pub const DEADLINE_INTERVAL: Duration = Duration::from_secs(1);
/// Most steps failed by one statement.
const BATCH: i64 = 100;

/// How many steps a pass failed.
#[derive(Debug, Default, PartialEq)]
pub struct DeadlineReport {
    pub failed: i64,
}

impl Report for DeadlineReport {
    fn did_something(&self) -> bool {
        self.failed > 0
    }
}

pub struct DeadlineKeeper {
    pool: Db,
}

impl DeadlineKeeper {
    pub fn new(pool: Db) -> Self {
        DeadlineKeeper { pool }
    }

    /// Fails every step whose deadline passed while it waited.
    pub async fn run_once(&self) -> Result<DeadlineReport, sqlx::Error> {
        let mut report = DeadlineReport::default();
        loop {
            let failed = store::deadlines_pass(&self.pool, BATCH).await?;
            report.failed += failed;
            if failed < BATCH {
                return Ok(report);
            }
        }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        run_every("deadlines", DEADLINE_INTERVAL, shutdown, || self.run_once()).await
    }
}
