//! What a schedule is made of: its rule, its zone, its policies for an overlap and for missed
//! slots, and the template of the job each run inserts.

use std::time::Duration;

use chrono::{DateTime, Datelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ScheduleError;
use super::rule::{self, Rule};
use crate::engine::client::ClientError;
use crate::engine::job::{DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, RESERVED_META};

/// What happens when a run comes due while an earlier run of the schedule is not final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Run it anyway (runs may overlap).
    #[default]
    Allow,
    /// Skip it: the new run is cancelled, with the reason, and the earlier one goes on.
    Skip,
    /// Cancel the earlier runs that are not final, then run.
    CancelPrevious,
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
            Overlap::CancelPrevious => "cancel_previous",
        }
    }
    pub fn parse(s: &str) -> Option<Overlap> {
        match s {
            "allow" => Some(Overlap::Allow),
            "skip" => Some(Overlap::Skip),
            "cancel_previous" => Some(Overlap::CancelPrevious),
            _ => None,
        }
    }
}

/// What runs for the slots that passed while no node was running (downtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// None of them: the schedule goes on with its next slot.
    Skip,
    /// One run, for the latest missed slot, at once.
    #[default]
    RunOnce,
    /// One run for each missed slot, at once, up to `missed_limit` (the latest ones).
    RunAll,
}

impl Missed {
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::RunOnce => "run_once",
            Missed::RunAll => "run_all",
        }
    }
    pub fn parse(s: &str) -> Option<Missed> {
        match s {
            "skip" => Some(Missed::Skip),
            "run_once" => Some(Missed::RunOnce),
            "run_all" => Some(Missed::RunAll),
            _ => None,
        }
    }
}

/// The job each run of a schedule inserts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobTemplate {
    /// A kind some worker runs.
    pub kind: String,
    /// A JSON object (at most 64 KiB), checked by the kind's worker.
    #[serde(default = "empty_object")]
    pub args: Value,
    /// 1 to 64 of a-z, 0-9, `_` and `-`.
    #[serde(default = "default_queue")]
    pub queue: String,
    /// Lower is claimed first (0 is the highest).
    #[serde(default)]
    pub priority: i16,
    /// Attempts before a run is discarded.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: i32,
    #[serde(default)]
    pub tags: Vec<String>,
    /// A JSON object; each run's meta adds `schedule`, `schedule_id`, `slot` and `slot_ms` (and
    /// `overlap`, `trigger`, `triggered_by`), which it may not hold itself, nor `snoozes`.
    #[serde(default = "empty_object")]
    pub meta: Value,
}

pub(crate) fn empty_object() -> Value {
    Value::Object(Default::default())
}
pub(crate) fn default_queue() -> String {
    DEFAULT_QUEUE.to_string()
}
pub(crate) fn default_max_attempts() -> i32 {
    DEFAULT_MAX_ATTEMPTS
}

impl JobTemplate {
    pub fn new(kind: impl Into<String>, args: Value) -> Self {
        JobTemplate {
            kind: kind.into(),
            args,
            queue: default_queue(),
            priority: DEFAULT_PRIORITY,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            tags: Vec::new(),
            meta: empty_object(),
        }
    }
}

/// A schedule as its author gives it (the API's body, a service's code, the CLI).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// 1 to 100 characters of `A-Z a-z 0-9 _ . : -`; unique.
    pub name: String,
    /// A cron expression (5 fields, or 6 with seconds first; `L`, `W`, `#`, `@hourly` ...).
    /// Exactly one of `cron` and `every_ms`. Not blank.
    #[serde(default)]
    pub cron: Option<String>,
    /// An interval in ms (1,000 to 34,560,000,000), aligned to `starts_at` or the Unix epoch.
    #[serde(default)]
    pub every_ms: Option<i64>,
    /// An IANA zone (`Europe/London`); `UTC` when absent. Cron rules read the zone's wall clock.
    #[serde(default = "default_zone")]
    pub time_zone: String,
    pub job: JobTemplate,
    #[serde(default)]
    pub paused: bool,
    /// No slot before this instant (within the years 1970 to 9999).
    #[serde(default)]
    pub starts_at: Option<DateTime<Utc>>,
    /// No slot at or after this instant (within the years 1970 to 9999): after `starts_at`, not
    /// passed.
    #[serde(default)]
    pub ends_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub overlap: Overlap,
    #[serde(default)]
    pub missed: Missed,
    /// 1 to 1000: the most missed slots `run_all` runs.
    #[serde(default = "default_missed_limit")]
    pub missed_limit: i32,
}

/// A schedule's name ([`valid_name`]).
pub const NAME_PATTERN: &str = r"^[A-Za-z0-9_.:-]{1,100}$";

pub(crate) fn default_zone() -> String {
    "UTC".to_string()
}
pub(crate) fn default_missed_limit() -> i32 {
    10
}

impl ScheduleSpec {
    /// A cron schedule in UTC with the default policies.
    pub fn cron(name: impl Into<String>, expr: impl Into<String>, job: JobTemplate) -> Self {
        ScheduleSpec {
            name: name.into(),
            cron: Some(expr.into()),
            every_ms: None,
            time_zone: default_zone(),
            job,
            paused: false,
            starts_at: None,
            ends_at: None,
            overlap: Overlap::default(),
            missed: Missed::default(),
            missed_limit: default_missed_limit(),
        }
    }

    /// An interval schedule with the default policies.
    pub fn every(name: impl Into<String>, every: Duration, job: JobTemplate) -> Self {
        ScheduleSpec {
            cron: None,
            every_ms: Some(every.as_millis() as i64),
            ..ScheduleSpec::cron(name, "", job)
        }
    }

    pub fn in_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = zone.into();
        self
    }

    /// Checks everything but the template's kind and args (the engine's client checks those):
    /// the rule and zone it gives, or the field at fault and why.
    pub fn check(&self) -> Result<(Rule, Tz), ScheduleError> {
        if !valid_name(&self.name) {
            return Err(ScheduleError::invalid(
                "name",
                "must be 1 to 100 characters of A-Z, a-z, 0-9, `_`, `.`, `:` and `-`",
            ));
        }
        let zone =
            rule::zone(&self.time_zone).map_err(|m| ScheduleError::invalid("time_zone", m))?;
        let rule = match (&self.cron, self.every_ms) {
            (Some(expr), None) => Rule::cron(expr).map_err(ScheduleError::Cron)?,
            (None, Some(ms)) if ms > 0 => Rule::every(Duration::from_millis(ms as u64))
                .map_err(|m| ScheduleError::invalid("every_ms", m))?,
            (None, Some(_)) => return Err(ScheduleError::invalid("every_ms", "must be positive")),
            _ => {
                return Err(ScheduleError::invalid(
                    "cron",
                    "give exactly one of `cron` and `every_ms`",
                ))
            }
        };
        for (field, at) in [("starts_at", self.starts_at), ("ends_at", self.ends_at)] {
            if at.is_some_and(|t| !(1970..=9999).contains(&t.year())) {
                return Err(ScheduleError::invalid(
                    field,
                    "must be within the years 1970 to 9999",
                ));
            }
        }
        if let (Some(s), Some(e)) = (self.starts_at, self.ends_at) {
            if e <= s {
                return Err(ScheduleError::Client(ClientError::Inconsistent {
                    field: "ends_at",
                    message: "must be after starts_at".into(),
                }));
            }
        }
        if !(1..=1000).contains(&self.missed_limit) {
            return Err(ScheduleError::invalid(
                "missed_limit",
                "must be between 1 and 1000",
            ));
        }
        if let Some(key) = crate::engine::job::reserved_meta_key(&self.job.meta) {
            return Err(ScheduleError::invalid(
                "job.meta",
                format!(
                    "`{key}` is set by Kickoff on each run (reserved: {})",
                    RESERVED_META.join(", ")
                ),
            ));
        }
        Ok((rule, zone))
    }
}

/// 1 to 100 characters of `A-Z a-z 0-9 _ . : -` (the table's check).
pub fn valid_name(name: &str) -> bool {
    (1..=100).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}
