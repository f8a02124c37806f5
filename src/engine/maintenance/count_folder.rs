//! The count folder keeps the dashboard's job counts and throughput cheap to read at any table
//! size.
//!
//! Statement triggers on `jobs` append one row per statement, queue and state to
//! `job_count_deltas`: `+n` for jobs entering the state, `-n` for jobs leaving it. Writers only
//! append, so a thousand completers never wait on one counter row. The folder, a leader-only
//! service, moves the deltas into `job_counts` about every second, and the positive deltas into
//! completed, retryable and discarded into `job_stats_minute` (completions and failures per minute),
//! all in one statement. Minutes older than [`STATS_RETENTION`] are deleted.
//!
//! Invariant: for every queue and state, the number of jobs equals `job_counts.n` plus the sum of
//! the deltas not folded yet. Readers sum both in one statement, so counts are exact even when the
//! folder is late or no leader runs; the folder only keeps the deltas few, and the reads short.
//! `TRUNCATE jobs` empties both tables (a trigger), and the migration backfilled `job_counts` with
//! writers locked out.

use std::time::Duration;

use crate::engine::db::Db;
use tokio_util::sync::CancellationToken;

use super::{run_every, Report};
use crate::engine::store::stats::{self as stats_store, STATS_RETENTION};

/// Default interval between folds.
pub const DEFAULT_FOLD_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct CountFolderConfig {
    /// How often to fold the deltas. Default: 1 s.
    pub interval: Duration,
}

impl Default for CountFolderConfig {
    fn default() -> Self {
        CountFolderConfig {
            interval: DEFAULT_FOLD_INTERVAL,
        }
    }
}

impl CountFolderConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("count folder interval must be positive".into());
        }
        Ok(())
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct FoldReport {
    /// Delta rows folded.
    pub deltas: i64,
    /// `job_counts` rows changed.
    pub counts: i64,
    /// `job_stats_minute` rows changed.
    pub minutes: i64,
    /// `job_stats_minute` rows deleted for their age.
    pub minutes_deleted: u64,
}

/// A fold this large means the folder fell behind (no leader for a while, a bulk action).
const BACKLOG_WORTH_LOGGING: i64 = 10_000;

impl Report for FoldReport {
    /// Folding and deleting old minutes are routine, every second and every minute under load:
    /// logging each would drown the log. A large backlog folded at once is worth a line.
    fn did_something(&self) -> bool {
        self.deltas >= BACKLOG_WORTH_LOGGING
    }
}

pub struct CountFolder {
    pool: Db,
    config: CountFolderConfig,
}

impl CountFolder {
    pub fn new(pool: Db, config: CountFolderConfig) -> Self {
        CountFolder { pool, config }
    }

    /// Folds every committed delta, then deletes minutes past the retention.
    pub async fn run_once(&self) -> Result<FoldReport, sqlx::Error> {
        let folded = stats_store::job_count_deltas_fold(&self.pool).await?;
        let minutes_deleted =
            stats_store::job_stats_minute_delete_old(&self.pool, STATS_RETENTION).await?;
        Ok(FoldReport {
            deltas: folded.deltas,
            counts: folded.counts,
            minutes: folded.minutes,
            minutes_deleted,
        })
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let interval = self.config.interval;
        run_every("count_folder", interval, shutdown, || self.run_once()).await;
    }
}
