//! Periodic jobs: the leader inserts the next run of each periodic job ahead of time, at the next
//! multiple of its interval (aligned to the Unix epoch, so every node computes the same instants).
//! The unique key `periodic:<name>:<instant>` makes a second insert of the same run, by this node or
//! a leader that took over, return the existing job.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{run_every, Report};
use crate::engine::client::{Client, ClientError};
use crate::engine::job::{NewJob, OnConflict};

/// How often the leader makes sure the next run of every periodic job exists.
pub const PERIODIC_CHECK_INTERVAL: Duration = Duration::from_secs(1);

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
}

impl Report for PeriodicReport {
    fn did_something(&self) -> bool {
        self.inserted > 0
    }
}

pub struct PeriodicEnqueuer {
    client: Client,
    jobs: Vec<PeriodicJob>,
}

impl PeriodicEnqueuer {
    pub fn new(client: Client, jobs: Vec<PeriodicJob>) -> Self {
        PeriodicEnqueuer { client, jobs }
    }

    /// Inserts the next run of every periodic job, after `now` (the database clock when `None`:
    /// a leader whose clock lags must not insert a run that already happened).
    pub async fn run_once(
        &self,
        now: Option<DateTime<Utc>>,
    ) -> Result<PeriodicReport, ClientError> {
        let now = match now {
            Some(now) => now,
            None => crate::engine::store::jobs::db_now(self.client.pool()).await?,
        };
        let mut report = PeriodicReport::default();
        for p in &self.jobs {
            let at = p.next_run(now);
            let new = p.job.clone().at(at).with_unique_key(
                format!("periodic:{}:{}", p.name, at.timestamp_millis()),
                OnConflict::Keep,
            );
            if !self.client.insert(&new).await?.existing {
                report.inserted += 1;
            }
        }
        Ok(report)
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
