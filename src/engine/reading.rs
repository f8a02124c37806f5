//! The client's reads behind the pages: a filter's suggestions, the job counts and the
//! throughput, a job's attempts, the attempts' history (`HistoryQuery`, from the rollups), the
//! nodes and the leader, the timers.

use std::time::Duration;

use chrono::{DateTime, Duration as ChronoDuration, Utc};

use super::client::{check_limit, inconsistent, invalid, Client, ClientError};
use super::job::{Job, JobId, JobState};
use super::store::history::{
    self as history_store, AttemptRecord, HistoryFilter, HistoryGroup, HistoryPoint, MINUTES_KEPT,
};
use super::store::jobs as job_store;
use super::store::leader::{self as leader_store, LeaderRow, LEADER_NAME};
use super::store::nodes::{self as node_store, NodeRow};
use super::store::queues as queue_store;
use super::store::schedules as schedule_store;
use super::store::stats::{self as stats_store, ThroughputMinute, STATS_RETENTION};

/// How many of the newest jobs a filter's suggestions read.
pub const SUGGEST_RECENT_JOBS: i64 = 1_000;
/// How many suggestions of each sort (kinds, queues, tags, args keys) at most.
pub const SUGGEST_EACH: i64 = 100;
/// Nodes whose heartbeat is younger than this count as alive: several missed heartbeats at any
/// sane lease (the heartbeat runs at a fifth of the lease, 1 s by default).
pub const NODE_ALIVE_WITHIN: Duration = Duration::from_secs(30);

/// A question to the attempts' history: which attempts, split how, over which range, in which
/// steps.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryQuery {
    pub filter: HistoryFilter,
    pub group: HistoryGroup,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub step: Duration,
}

impl HistoryQuery {
    /// The shortest and longest step, in seconds.
    pub const STEPS: std::ops::RangeInclusive<u64> = 60..=86_400;
    /// The most steps one answer holds.
    pub const MAX_POINTS: i64 = 1_500;
    /// The longest range: the longest retention the history can be given.
    pub const MAX_RANGE_DAYS: i64 = 400;

    /// Why the rollups cannot answer this query at `now`, if they cannot.
    pub fn check(&self, now: DateTime<Utc>) -> Result<(), ClientError> {
        let step = self.step.as_secs();
        if !Self::STEPS.contains(&step) || !step.is_multiple_of(60) || self.step.subsec_nanos() != 0
        {
            return Err(invalid(
                "step",
                "must be a whole number of minutes, from 60 to 86400 seconds",
            ));
        }
        if self.from >= self.to {
            return Err(inconsistent("from", "must be before `to`"));
        }
        if self.to - self.from > ChronoDuration::days(Self::MAX_RANGE_DAYS) {
            return Err(inconsistent(
                "from",
                format!("the range may span at most {} days", Self::MAX_RANGE_DAYS),
            ));
        }
        let points = (self.to - self.from).num_seconds() / step as i64;
        if points > Self::MAX_POINTS {
            return Err(inconsistent(
                "step",
                format!(
                    "{points} steps over this range; at most {} (take a longer step)",
                    Self::MAX_POINTS
                ),
            ));
        }
        // Steps of whole hours read the hours; finer ones the minutes, kept for a day.
        let minutes_from = now - ChronoDuration::from_std(MINUTES_KEPT).unwrap_or_default();
        if !step.is_multiple_of(3600) && self.from < minutes_from {
            return Err(ClientError::OutOfWindow {
                field: "step",
                message:
                    "the history is kept per minute for the last 24 hours and per hour before: \
                 take a step of whole hours (3600, 7200, ...), or a range within the last day"
                        .into(),
            });
        }
        Ok(())
    }
}

impl Client {
    /// What a job filter may suggest: the kinds the workers run and the queues that exist,
    /// with the kinds, queues, tags and top-level args keys of the newest
    /// [`SUGGEST_RECENT_JOBS`] jobs; each list sorted, at most [`SUGGEST_EACH`].
    pub async fn job_suggestions(&self) -> Result<job_store::JobSuggestions, ClientError> {
        let mut s =
            job_store::job_suggestions(&self.pool, SUGGEST_RECENT_JOBS, SUGGEST_EACH).await?;
        let queues = queue_store::queue_list(&self.pool).await?;
        let merge = |list: &mut Vec<String>, more: Vec<String>| {
            list.extend(more);
            list.sort();
            list.dedup();
            list.truncate(SUGGEST_EACH as usize);
        };
        merge(
            &mut s.kinds,
            self.workers.kinds().iter().map(|k| k.to_string()).collect(),
        );
        merge(&mut s.queues, queues.into_iter().map(|q| q.name).collect());
        Ok(s)
    }

    /// Job counts per queue and state (states without jobs left out), from the maintained counts:
    /// exact, and as fast at a million jobs as at ten.
    pub async fn counts(&self) -> Result<Vec<(String, JobState, i64)>, ClientError> {
        Ok(stats_store::job_counts_list(&self.pool).await?)
    }

    /// Completed and failed attempts per minute over the last `minutes` minutes (1 to 120),
    /// including the current one, oldest first, one entry per minute.
    pub async fn throughput(&self, minutes: i32) -> Result<Vec<ThroughputMinute>, ClientError> {
        let most = (STATS_RETENTION.as_secs() / 60) as i32;
        if !(1..=most).contains(&minutes) {
            return Err(invalid("minutes", format!("must be between 1 and {most}")));
        }
        Ok(stats_store::job_stats_minute_list(&self.pool, minutes).await?)
    }

    /// The records of a job's attempts that ended, oldest first (empty for an unknown job).
    pub async fn attempts(&self, id: JobId) -> Result<Vec<AttemptRecord>, ClientError> {
        Ok(history_store::job_attempts_of(&self.pool, id).await?)
    }

    /// What `job`'s running attempt (its current claim) has logged and recorded so far, as a record
    /// whose outcome is `running`, when its node wrote any (it does once a second for an attempt
    /// that ran a second or longer and logged since); `None` for a job not running.
    pub async fn attempt_so_far(&self, job: &Job) -> Result<Option<AttemptRecord>, ClientError> {
        let Some(claim) = job.claim().filter(|_| job.state == JobState::Executing) else {
            return Ok(None);
        };
        let live = job_store::attempt_live_of(&self.pool, claim).await?;
        let started_at = job.attempted_at.unwrap_or(job.scheduled_at);
        Ok(live.map(|(output, logs, logs_dropped)| AttemptRecord {
            job_id: job.id,
            attempt: job.attempt,
            node: job.attempted_by.clone().unwrap_or_default(),
            due_at: job.scheduled_at,
            started_at,
            finished_at: started_at,
            late_ms: (started_at - job.scheduled_at)
                .num_microseconds()
                .map_or(0.0, |us| us as f64 / 1000.0),
            duration_ms: 0.0,
            outcome: "running".into(),
            error: None,
            output,
            logs,
            logs_dropped,
        }))
    }

    /// The latest completed attempt of each of these jobs.
    pub async fn completed_attempts(
        &self,
        ids: &[JobId],
    ) -> Result<Vec<AttemptRecord>, ClientError> {
        Ok(history_store::job_attempts_last(&self.pool, ids, "completed").await?)
    }

    /// The id of the schedule named `name`, if there is one.
    pub async fn schedule_id(&self, name: &str) -> Result<Option<i64>, ClientError> {
        Ok(schedule_store::schedule_get(&self.pool, name)
            .await?
            .map(|s| s.id))
    }

    /// The history's filter, its schedule named (`NotFound` for a name no schedule has): what
    /// the API's and the dashboard's history ask for.
    pub async fn history_filter(
        &self,
        queue: Option<String>,
        kind: Option<String>,
        schedule: Option<&str>,
    ) -> Result<HistoryFilter, ClientError> {
        // PostgreSQL's text cannot hold NUL: refused here, for every surface, in its words.
        for (field, value) in [
            ("queue", queue.as_deref()),
            ("kind", kind.as_deref()),
            ("schedule", schedule),
        ] {
            if value.is_some_and(|v| v.contains('\0')) {
                return Err(invalid(field, "must not contain NUL characters"));
            }
        }
        let schedule_id = match schedule {
            None => None,
            Some(name) => Some(
                self.schedule_id(name)
                    .await?
                    .ok_or_else(|| ClientError::NotFound(format!("schedule {name}")))?,
            ),
        };
        Ok(HistoryFilter {
            queue,
            kind,
            schedule_id,
        })
    }

    /// The history of the attempts `q` selects (see [`HistoryQuery`]), refused when its range
    /// or step is not one the rollups can answer.
    pub async fn history(&self, q: &HistoryQuery) -> Result<Vec<HistoryPoint>, ClientError> {
        let now = self.db_now().await?;
        q.check(now)?;
        Ok(self
            .history
            .series(&self.pool, &q.filter, q.group, q.from, q.to, q.step, now)
            .await?)
    }

    /// The nodes alive (heartbeat within [`NODE_ALIVE_WITHIN`]), oldest first, and the current
    /// leader, if its lease has not expired.
    pub async fn nodes(&self) -> Result<(Vec<NodeRow>, Option<LeaderRow>), ClientError> {
        let nodes =
            node_store::node_list_alive(&self.pool, NODE_ALIVE_WITHIN.as_secs_f64()).await?;
        let leader = leader_store::leader_get(&self.pool, LEADER_NAME).await?;
        Ok((nodes, leader))
    }

    /// Up to `limit` jobs waiting to run (scheduled, retryable, available), oldest `scheduled_at`
    /// first, so overdue jobs lead; and the database clock, read in the same transaction, to
    /// measure countdowns and lateness against.
    pub async fn timers(&self, limit: i64) -> Result<(Vec<Job>, DateTime<Utc>), ClientError> {
        check_limit(limit)?;
        let mut tx = self.pool.begin().await?;
        let jobs = job_store::job_list_waiting(&mut *tx, limit).await?;
        let now = job_store::db_now(&mut *tx).await?;
        tx.commit().await?;
        Ok((jobs, now))
    }
}
