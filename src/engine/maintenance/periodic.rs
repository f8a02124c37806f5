//! Periodic jobs: the leader inserts the runs of each periodic job ahead of time, at the multiples
//! of its interval (aligned to the Unix epoch, so every node computes the same instants).
//!
//! Invariants:
//! - Each run is inserted at most once, whatever the leaders do: the run is recorded in
//!   `periodic_runs` (only if it is later than the last one recorded and not already past by the
//!   database clock, give or take [`RUN_GRACE`]) in the same transaction that inserts its job. A
//!   leader that stalled between reading the clock and inserting, or two leaders overlapping,
//!   insert nothing twice; the unique key `periodic:<name>:<instant>` alone would not do, since it
//!   only covers live jobs.
//! - No run is lost to a leader change: every run due within the *horizon* (by default twice the
//!   time a failover takes) is inserted ahead, so the runs of a short interval are already in the
//!   table when the leader dies. Runs that fall in a time with no leader at all (every node down
//!   for longer than the horizon) are skipped, not run late in a burst.
//! - One entry that fails to insert (a bad job, a database refusal) is reported and the others go
//!   on.
//! - The configuration is the leader's: an entry whose interval or job changed has the runs it
//!   inserted ahead under the old configuration cancelled and starts again; the runs of entries no
//!   longer configured (renamed or removed) are cancelled when a leader starts. Runs already due,
//!   running or done are left alone.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{run_every, Report};
use crate::engine::client::{Client, ClientError};
use crate::engine::job::{NewJob, OnConflict};
use crate::engine::store::{jobs as job_store, periodic as periodic_store};

/// How often the leader makes sure the coming runs of every periodic job exist.
pub const PERIODIC_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// Default horizon: runs due this soon are inserted ahead (the engine sets twice its failover
/// time).
pub const DEFAULT_HORIZON: Duration = Duration::from_secs(12);
/// A run that came due at most this long ago is still inserted (it came due while its leader
/// was computing it); an older one is left out: its leader stalled, and the run belongs to the
/// leader that was there at the time.
const RUN_GRACE: Duration = PERIODIC_CHECK_INTERVAL;
/// The most runs of one entry inserted by one check.
const MAX_RUNS_PER_CHECK: usize = 100;

#[derive(Debug, Clone)]
pub struct PeriodicJob {
    /// A name unique among periodic jobs.
    pub name: String,
    /// The interval; runs fall on its multiples since the Unix epoch.
    pub every: Duration,
    /// The job to insert (its schedule and unique key are set for each run).
    pub job: NewJob,
}

impl PeriodicJob {
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() || self.name.len() > 100 {
            return Err("periodic job name must be 1 to 100 characters".into());
        }
        if self.every < Duration::from_secs(1) {
            return Err(format!("periodic job `{}`: interval under 1 s", self.name));
        }
        Ok(())
    }

    /// What identifies the entry's configuration: its interval and the job it inserts.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let j = &self.job;
        let config = serde_json::json!({
            "every_ms": self.every.as_millis() as u64,
            "kind": j.kind, "args": j.args, "queue": j.queue, "priority": j.priority,
            "max_attempts": j.max_attempts, "tags": j.tags, "meta": j.meta,
        });
        let digest = sha2::Sha256::digest(config.to_string().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The prefix of the unique keys of its runs.
    fn key_prefix(&self) -> String {
        key_prefix(&self.name)
    }

    /// The first run strictly after `now`.
    pub fn next_run(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        let every = self.every.as_millis() as i64;
        let now_ms = now.timestamp_millis();
        let next = (now_ms / every + 1) * every;
        DateTime::from_timestamp_millis(next).unwrap_or(now)
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct PeriodicReport {
    pub inserted: usize,
    /// Runs cancelled because their entry is no longer configured.
    pub cancelled: u64,
    /// Entries that failed, with why.
    pub failed: Vec<(String, String)>,
}

impl Report for PeriodicReport {
    fn did_something(&self) -> bool {
        self.inserted > 0 || self.cancelled > 0 || !self.failed.is_empty()
    }
}

/// The prefix of the unique keys of a periodic job's runs.
fn key_prefix(name: &str) -> String {
    format!("periodic:{name}:")
}

pub struct PeriodicEnqueuer {
    client: Client,
    jobs: Vec<PeriodicJob>,
    horizon: Duration,
    /// Whether the runs of entries no longer configured were cancelled (once per leadership).
    swept: std::sync::atomic::AtomicBool,
}

impl PeriodicEnqueuer {
    pub fn new(client: Client, jobs: Vec<PeriodicJob>) -> Self {
        PeriodicEnqueuer {
            client,
            jobs,
            horizon: DEFAULT_HORIZON,
            swept: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Inserts the runs due within `horizon` ahead (and always the next one).
    pub fn with_horizon(mut self, horizon: Duration) -> Self {
        self.horizon = horizon;
        self
    }

    /// Inserts the coming runs of every periodic job, after `now` (the database clock when
    /// `None`). A run already recorded, or already past by the database clock when its insert
    /// runs, is left out (see the module doc).
    pub async fn run_once(
        &self,
        now: Option<DateTime<Utc>>,
    ) -> Result<PeriodicReport, ClientError> {
        let now = match now {
            Some(now) => now,
            None => crate::engine::store::jobs::db_now(self.client.pool()).await?,
        };
        let mut report = PeriodicReport::default();
        if !self.swept.load(std::sync::atomic::Ordering::Relaxed) {
            match self.sweep_unconfigured().await {
                Ok(n) => {
                    report.cancelled += n;
                    self.swept.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cancelling runs of periodic jobs no longer configured failed")
                }
            }
        }
        for p in &self.jobs {
            match self.insert_runs(p, now).await {
                Ok(n) => report.inserted += n,
                Err(e) => {
                    tracing::warn!(periodic = %p.name, error = %e, "inserting a periodic run failed");
                    report.failed.push((p.name.clone(), e.to_string()));
                }
            }
        }
        Ok(report)
    }

    /// Cancels the runs inserted ahead by entries this leader does not have, and forgets them.
    async fn sweep_unconfigured(&self) -> Result<u64, sqlx::Error> {
        let prefixes: Vec<String> = self.jobs.iter().map(|p| p.key_prefix()).collect();
        let names: Vec<String> = self.jobs.iter().map(|p| p.name.clone()).collect();
        let mut tx = self.client.pool().begin().await?;
        let n =
            job_store::job_cancel_scheduled_by_key_prefix(&mut *tx, "periodic:", &prefixes, true)
                .await?;
        periodic_store::periodic_run_delete_except(&mut *tx, &names).await?;
        tx.commit().await?;
        Ok(n)
    }

    /// Inserts the runs of `p` in (now, now + horizon], at least the next one. Returns how many.
    async fn insert_runs(&self, p: &PeriodicJob, now: DateTime<Utc>) -> Result<usize, ClientError> {
        let pool = self.client.pool();
        let fingerprint = p.fingerprint();
        let last = match periodic_store::periodic_run_last(pool, &p.name).await? {
            Some((last, f)) if f == fingerprint => Some(last),
            Some(_) => {
                // Its interval or job changed: the runs inserted ahead under the old configuration
                // go, and the schedule starts again from now.
                let mut tx = pool.begin().await?;
                let n = job_store::job_cancel_scheduled_by_key_prefix(
                    &mut *tx,
                    &p.key_prefix(),
                    &[p.key_prefix()],
                    false,
                )
                .await?;
                periodic_store::periodic_run_restart(&mut *tx, &p.name, &fingerprint).await?;
                tx.commit().await?;
                tracing::info!(periodic = %p.name, cancelled = n, "periodic job changed: its schedule starts again");
                None
            }
            None => None,
        };
        let until = now + chrono::Duration::from_std(self.horizon).unwrap_or_default();
        let mut at = p.next_run(last.map_or(now, |l| l.max(now)));
        // The next run is always inserted, however far ahead; later ones within the horizon.
        let mut ahead = last.is_some_and(|l| l > now);
        let mut inserted = 0;
        for _ in 0..MAX_RUNS_PER_CHECK {
            if ahead && at > until {
                break;
            }
            ahead = true;
            let mut tx = pool.begin().await?;
            if periodic_store::periodic_run_record(&mut *tx, &p.name, at, RUN_GRACE, &fingerprint)
                .await?
            {
                let new = p.job.clone().at(at).with_unique_key(
                    format!("periodic:{}:{}", p.name, at.timestamp_millis()),
                    OnConflict::Keep,
                );
                if !self.client.insert_with(&mut tx, &new).await?.existing {
                    inserted += 1;
                }
            }
            tx.commit().await?;
            at = p.next_run(at);
        }
        Ok(inserted)
    }

    pub async fn run(self, shutdown: CancellationToken) {
        run_every("periodic", PERIODIC_CHECK_INTERVAL, shutdown, || async {
            self.run_once(None).await.map_err(|e| match e {
                ClientError::Database(e) => e,
                other => sqlx::Error::Protocol(other.to_string()),
            })
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn next_run_is_the_next_multiple_of_the_interval() {
        let p = PeriodicJob {
            name: "tick".into(),
            every: Duration::from_secs(60),
            job: NewJob::new("noop", json!({})),
        };
        let now = DateTime::parse_from_rfc3339("2026-11-30T12:00:30Z")
            .unwrap()
            .to_utc();
        assert_eq!(p.next_run(now).to_rfc3339(), "2026-11-30T12:01:00+00:00");
        // Exactly on a boundary, the next one (that one is due now and already inserted).
        let on = DateTime::parse_from_rfc3339("2026-11-30T12:01:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(p.next_run(on).to_rfc3339(), "2026-11-30T12:02:00+00:00");
    }

    #[test]
    fn rejects_sub_second_intervals() {
        let p = PeriodicJob {
            name: "fast".into(),
            every: Duration::from_millis(10),
            job: NewJob::new("noop", json!({})),
        };
        assert!(p.validate().is_err());
    }
}
