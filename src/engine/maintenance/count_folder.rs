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
//! It also folds the attempts' rollup deltas (`job_history_deltas`, appended by a trigger on
//! `job_attempts`) into `job_history_minute` and `job_history_hour`, deletes the minutes of every
//! whole hour older than a day, and the hours past the history's retention (see
//! `store::history`).
//!
//! Invariant: for every queue and state, the number of jobs equals `job_counts.n` plus the sum of
//! the deltas not folded yet. Readers sum both in one statement, so counts are exact even when the
//! folder is late or no leader runs; the folder only keeps the deltas few, and the reads short.
//! `TRUNCATE jobs` empties both tables (a trigger), and the migration backfilled `job_counts` with
//! writers locked out.

use std::time::Duration;

use crate::db::Db;
use tokio_util::sync::CancellationToken;

use super::{run_every, Report};
use crate::engine::store::history::{self as history_store, MINUTES_KEPT};
use crate::engine::store::stats::{self as stats_store, STATS_RETENTION};

/// Default interval between folds.
pub const DEFAULT_FOLD_INTERVAL: Duration = Duration::from_secs(1);
/// How long the attempts' rollups are kept by default: 30 days.
pub const DEFAULT_HISTORY_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// The bounds of the history's retention: a day (the minutes are kept that long anyway) to
/// about 13 months (a year beside the last one).
pub const HISTORY_RETENTION_DAYS: std::ops::RangeInclusive<u64> = 1..=400;

#[derive(Debug, Clone)]
pub struct CountFolderConfig {
    /// How often to fold the deltas. Default: 1 s.
    pub interval: Duration,
    /// How long the attempts' rollups are kept. Default: 30 days.
    pub history_retention: Duration,
}

impl Default for CountFolderConfig {
    fn default() -> Self {
        CountFolderConfig {
            interval: DEFAULT_FOLD_INTERVAL,
            history_retention: DEFAULT_HISTORY_RETENTION,
        }
    }
}

impl CountFolderConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("count folder interval must be positive".into());
        }
        let days = HISTORY_RETENTION_DAYS;
        let day = 24 * 3600;
        if self.history_retention < Duration::from_secs(days.start() * day)
            || self.history_retention > Duration::from_secs(days.end() * day)
        {
            return Err(format!(
                "the history's retention must be {} to {} days",
                days.start(),
                days.end()
            ));
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
    /// Rollup delta rows folded.
    pub history_deltas: i64,
    /// Rollup minutes deleted for their age (their hours hold them).
    pub history_minutes_deleted: u64,
    /// Rollup hours deleted for their age.
    pub history_deleted: u64,
    /// Running attempts' lines deleted because their attempt no longer runs.
    pub live_deleted: u64,
}

/// A fold this large means the folder fell behind (no leader for a while, a bulk action).
const BACKLOG_WORTH_LOGGING: i64 = 10_000;

impl Report for FoldReport {
    /// Folding and deleting old minutes are routine, every second and every minute under load:
    /// logging each would drown the log. A large backlog folded at once is worth a line.
    fn did_something(&self) -> bool {
        self.deltas >= BACKLOG_WORTH_LOGGING || self.history_deltas >= BACKLOG_WORTH_LOGGING
    }
}

pub struct CountFolder {
    pool: Db,
    config: CountFolderConfig,
    /// When the rollups were last pruned: once a minute is enough (a whole hour becomes a day
    /// old once an hour).
    last_pruned: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How often the rollups are pruned.
const PRUNE_HISTORY_EVERY: Duration = Duration::from_secs(60);

impl CountFolder {
    pub fn new(pool: Db, config: CountFolderConfig) -> Self {
        CountFolder {
            pool,
            config,
            last_pruned: std::sync::Mutex::new(None),
        }
    }

    /// Folds every committed delta, then deletes minutes past the retention; prunes the
    /// attempts' rollups when a minute passed since it last did.
    pub async fn run_once(&self) -> Result<FoldReport, sqlx::Error> {
        self.fold(false).await
    }

    /// [`CountFolder::run_once`], pruning the rollups now.
    pub async fn run_once_pruning_history(&self) -> Result<FoldReport, sqlx::Error> {
        self.fold(true).await
    }

    async fn fold(&self, prune_now: bool) -> Result<FoldReport, sqlx::Error> {
        let folded = stats_store::job_count_deltas_fold(&self.pool).await?;
        let minutes_deleted =
            stats_store::job_stats_minute_delete_old(&self.pool, STATS_RETENTION).await?;
        let history = history_store::job_history_deltas_fold(&self.pool).await?;
        let mut report = FoldReport {
            deltas: folded.deltas,
            counts: folded.counts,
            minutes: folded.minutes,
            minutes_deleted,
            history_deltas: history.deltas,
            ..FoldReport::default()
        };
        let due = {
            let mut last = self.last_pruned.lock().unwrap_or_else(|e| e.into_inner());
            let due = prune_now || last.is_none_or(|at| at.elapsed() >= PRUNE_HISTORY_EVERY);
            if due {
                *last = Some(std::time::Instant::now());
            }
            due
        };
        if due {
            report.history_minutes_deleted =
                history_store::job_history_minutes_delete_old(&self.pool, MINUTES_KEPT).await?;
            report.history_deleted =
                history_store::job_history_delete_old(&self.pool, self.config.history_retention)
                    .await?;
            // A running attempt's lines left by a node that died with it.
            report.live_deleted =
                crate::engine::store::jobs::attempt_live_prune(&self.pool).await?;
        }
        Ok(report)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let interval = self.config.interval;
        run_every("count_folder", interval, shutdown, || self.run_once()).await;
    }
}
