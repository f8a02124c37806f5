//! The leader's schedule service: each second, every active schedule gets its runs due within
//! the horizon inserted ahead, and slots that passed with no run go by its missed-run policy.
//! The invariants (one run per slot, none lost to a leader change) are in `engine::schedules`.

use std::collections::HashMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::service::Schedules;
use crate::engine::maintenance::{run_every, Report};

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
    /// The failure of each schedule that failed at the last check: a failure is logged when it
    /// starts or changes, not every second.
    failing: std::sync::Mutex<HashMap<String, String>>,
}

impl ScheduleEnqueuer {
    pub fn new(schedules: Schedules) -> Self {
        ScheduleEnqueuer {
            schedules,
            failing: Default::default(),
        }
    }

    /// Inserts the coming runs; `failed` in the report lists the failures new since the last check.
    pub async fn run_once(&self) -> Result<ScheduleReport, sqlx::Error> {
        let (inserted, skipped, all_failed) = self.schedules.fill_all().await?;
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        let failed: Vec<(String, String)> = all_failed
            .iter()
            .filter(|(name, why)| failing.get(name) != Some(why))
            .cloned()
            .collect();
        *failing = all_failed.into_iter().collect();
        drop(failing);
        for (name, why) in &failed {
            tracing::warn!(schedule = %name, error = %why, "inserting the runs of a schedule failed (logged again only if the failure changes)");
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
