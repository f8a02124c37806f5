//! The leader's schedule service: each second, every active schedule gets its runs due within
//! the horizon inserted ahead, and slots that passed with no run go by its missed-run policy.
//! The invariants (one run per slot, none lost to a leader change) are in `engine::schedules`.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{run_every, Report};
use crate::engine::schedules::Schedules;

/// How often the leader makes sure the coming runs of every schedule exist.
pub const SCHEDULE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Default, PartialEq)]
pub struct ScheduleReport {
    pub inserted: usize,
    pub skipped: u64,
    /// Schedules that failed, with why.
    pub failed: Vec<(String, String)>,
}

impl Report for ScheduleReport {
    fn did_something(&self) -> bool {
        self.skipped > 0 || !self.failed.is_empty()
    }
}

pub struct ScheduleEnqueuer {
    schedules: Schedules,
}

impl ScheduleEnqueuer {
    pub fn new(schedules: Schedules) -> Self {
        ScheduleEnqueuer { schedules }
    }

    pub async fn run_once(&self) -> Result<ScheduleReport, sqlx::Error> {
        let (inserted, skipped, failed) = self.schedules.fill_all().await?;
        for (name, why) in &failed {
            tracing::warn!(schedule = %name, error = %why, "inserting the runs of a schedule failed");
        }
        Ok(ScheduleReport {
            inserted,
            skipped,
            failed,
        })
    }

    pub async fn run(self, shutdown: CancellationToken) {
        run_every("schedules", SCHEDULE_CHECK_INTERVAL, shutdown, || {
            self.run_once()
        })
        .await;
    }
}
