//! The job: its state machine, its row, and what an insert asks for.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How far ahead a job may be scheduled.
pub const MAX_SCHEDULE_AHEAD_DAYS: i64 = 3650;
/// How far in the past an absolute `scheduled_at` may lie (it then runs at once); older instants
/// are almost surely a client's mistake (a wrong year, seconds taken for milliseconds).
pub const MAX_SCHEDULE_PAST_HOURS: i64 = 24;
/// `schedule_in_ms` at most: [`MAX_SCHEDULE_AHEAD_DAYS`] in ms.
pub const MAX_SCHEDULE_IN_MS: i64 = MAX_SCHEDULE_AHEAD_DAYS * 86_400_000;
/// Limits on what a job may carry.
pub const MAX_ARGS_BYTES: usize = 256 * 1024;
/// The largest magnitude of a number in args or meta (`engine::validation::numbers_read_back`).
pub const MAX_JSON_NUMBER: f64 = 1e300;
pub const MAX_META_BYTES: usize = 16 * 1024;
pub const MAX_TAGS: usize = 20;
pub const MAX_TAG_CHARS: usize = 100;
pub const MAX_UNIQUE_KEY_CHARS: usize = 255;
/// A queue's name, as [`is_valid_queue_name`] reads it.
pub const QUEUE_PATTERN: &str = r"^[a-z0-9_-]{1,64}$";
/// A W3C `traceparent` (`crate::telemetry::is_traceparent`): version 00, ids not all zeros.
pub const TRACEPARENT_PATTERN: &str =
    r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$";

/// The meta key that marks a job as a run of a schedule (its id).
pub const META_SCHEDULE_ID: &str = "schedule_id";

/// The meta keys Kickoff writes itself, which no insert, edit or schedule template may set: the
/// missed-run and overlap policies, a pause and the runs' own cancel read a schedule's run's keys
/// (a forged `{"schedule_id": N, "slot_ms": 0}` would pass for a run of schedule N and hold its
/// overlap gate; a template's `{"trigger": true}` would exempt every run from the missed-run
/// policy, `{"snoozes": 0}` would keep runs ahead through a pause); a question's lock job is
/// marked by `owner`; an alert's notifications by their `alert_*` keys (counted against the
/// rule's notifications). Checked by [`reserved_meta_key`] on every path that takes a caller's
/// meta, and stated by the API's schemas from this list.
pub const RESERVED_META: [&str; 13] = [
    META_SCHEDULE_ID,
    "schedule",
    "slot",
    "slot_ms",
    "overlap",
    "trigger",
    "triggered_by",
    "snoozes",
    // A job another domain owns (a question's lock job: `engine::client::refuse_owned`).
    "owner",
    // An alert's notification (`alerts::notifier`).
    "alert_incident",
    "alert_rule",
    "alert_event",
    "alert_digest",
];

/// The first of [`RESERVED_META`] that `meta` (an object, or a merge patch of one) sets.
pub fn reserved_meta_key(meta: &Value) -> Option<&'static str> {
    let map = meta.as_object()?;
    RESERVED_META.into_iter().find(|k| map.contains_key(*k))
}

/// A job's id (the `jobs.id` bigserial).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type,
)]
#[sqlx(transparent)]
#[serde(transparent)]
pub struct JobId(pub i64);

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The random token one claim of a job draws. Every write of that attempt is guarded by it, so a
/// stale attempt can change nothing even when a claim lost in a database crash made the next claim
/// issue the same attempt number again. Never 0 (the token of attempts older than the column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, sqlx::Type)]
#[sqlx(transparent)]
pub struct ClaimToken(pub i64);

impl ClaimToken {
    /// A fresh token for one claim statement (the job id tells the rows of one claim apart).
    pub fn random() -> Self {
        loop {
            let t = fastrand::i64(..);
            if t != 0 {
                return ClaimToken(t);
            }
        }
    }
}

/// One claim of a job: what an attempt's writes name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Claim {
    pub id: JobId,
    pub token: ClaimToken,
}

/// Where a job is in its life. Mapped to the Postgres enum `job_state`; the database's CHECK
/// constraints tie `finalized_at` and the lease columns to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, sqlx::Type)]
#[sqlx(type_name = "job_state", rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for `scheduled_at`. The timer of any node moves it to `available` when due; an
    /// operator may run it now, reschedule or cancel it.
    Scheduled,
    /// Due. A node's producer claims it into `executing` when its queue has a free slot.
    Available,
    /// Claimed by `attempted_by` under a lease. The executor moves it to a final state, to
    /// `retryable`, or back to `scheduled` (snooze); the rescuer takes it back when the lease expires;
    /// an operator may cancel it.
    Executing,
    /// Failed an attempt and waits for its backoff. The timer makes it `available` again when due.
    Retryable,
    /// Final: the handler succeeded. Only an operator's retry (rerun) moves it again.
    Completed,
    /// Final: out of attempts, or failed fatally. An operator's retry moves it again.
    Discarded,
    /// Final: cancelled by an operator or by its handler. An operator's retry moves it again.
    Cancelled,
}

impl JobState {
    /// Every state, in the order of the job's life.
    pub const ALL: [JobState; 7] = [
        JobState::Scheduled,
        JobState::Available,
        JobState::Executing,
        JobState::Retryable,
        JobState::Completed,
        JobState::Discarded,
        JobState::Cancelled,
    ];

    /// The name used in the database, the API and the UI.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Available => "available",
            JobState::Executing => "executing",
            JobState::Retryable => "retryable",
            JobState::Completed => "completed",
            JobState::Discarded => "discarded",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether the job is finished (`finalized_at` is set).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Discarded | JobState::Cancelled
        )
    }
}

impl std::str::FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown state `{s}`"))
    }
}

/// One failed attempt, as kept in `jobs.errors`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptError {
    pub attempt: i32,
    /// When the attempt ended.
    pub at: DateTime<Utc>,
    /// When the attempt started (its `attempted_at`), for its duration. Absent in errors recorded
    /// before it was kept.
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    pub node: Option<String>,
    pub message: String,
}

/// A job row. Read leniently ([`sqlx::FromRow`] below): one row never fails the batch it is read
/// in (a claim, a list, a page, the export).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub queue: String,
    pub kind: String,
    pub args: Value,
    pub state: JobState,
    pub priority: i16,
    pub attempt: i32,
    pub max_attempts: i32,
    pub scheduled_at: DateTime<Utc>,
    pub attempted_at: Option<DateTime<Utc>>,
    pub attempted_by: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub finalized_at: Option<DateTime<Utc>>,
    pub errors: Vec<AttemptError>,
    pub unique_key: Option<String>,
    pub tags: Vec<String>,
    pub meta: Value,
    pub inserted_at: DateTime<Utc>,
    /// Who inserted it through the dashboard or the REST API (a user's name; `api-token` for the
    /// bootstrap token); absent for jobs the engine or a library caller inserted. A clone keeps
    /// its original's.
    pub created_by: Option<String>,
    /// The token of the job's latest claim (engine-internal: not shown by the API).
    #[serde(skip)]
    pub claim_token: Option<ClaimToken>,
    /// The host its call goes to, as its worker read it at insert (`Worker::call_host`); absent
    /// for kinds that name none, and rows written by SQL (engine-internal).
    #[serde(skip)]
    pub call_host: Option<String>,
    /// Its key under its queue's partitioned rate (see `limits`); absent when the queue has
    /// none (engine-internal).
    #[serde(skip)]
    pub rate_key: Option<String>,
    /// What of the row could not be read as it is stored, by field (`args.n: a number out of
    /// range ...`): a row written by plain SQL or an older release. Those values are shown as
    /// their text, and a claim of the row ends it with this as its error (engine-internal).
    #[serde(skip)]
    pub unreadable: Option<String>,
    /// Secrets the job held before an edit took them out (`jobs.former_secrets`): its earlier
    /// attempts' errors, records and answers may quote them, and they stay hidden there
    /// (`engine::sight`; engine-internal, never shown).
    #[serde(skip)]
    pub former_secrets: Vec<String>,
    /// The workflow step it is the job of (see `workflow`); absent for every other job.
    pub step_id: Option<i64>,
}

impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for Job {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use super::row_reading::{json_column, json_list_column, optional_column};
        use sqlx::Row;
        let mut unreadable = Vec::new();
        Ok(Job {
            id: row.try_get("id")?,
            queue: row.try_get("queue")?,
            kind: row.try_get("kind")?,
            args: json_column(row, "args", &mut unreadable)?,
            state: row.try_get("state")?,
            priority: row.try_get("priority")?,
            attempt: row.try_get("attempt")?,
            max_attempts: row.try_get("max_attempts")?,
            scheduled_at: row.try_get("scheduled_at")?,
            attempted_at: row.try_get("attempted_at")?,
            attempted_by: row.try_get("attempted_by")?,
            lease_expires_at: row.try_get("lease_expires_at")?,
            finalized_at: row.try_get("finalized_at")?,
            // An error entry that cannot be read is left out of the list: the job's own fields
            // are whole, and it runs.
            errors: json_list_column(row, "errors", &mut Vec::new())?,
            unique_key: row.try_get("unique_key")?,
            tags: row.try_get("tags")?,
            meta: json_column(row, "meta", &mut unreadable)?,
            inserted_at: row.try_get("inserted_at")?,
            created_by: optional_column(row, "created_by")?,
            claim_token: row.try_get("claim_token")?,
            call_host: optional_column(row, "call_host")?,
            rate_key: optional_column(row, "rate_key")?,
            unreadable: (!unreadable.is_empty()).then(|| unreadable.join("; ")),
            former_secrets: optional_column(row, "former_secrets")?.unwrap_or_default(),
            step_id: optional_column(row, "step_id")?,
        })
    }
}

impl Job {
    /// The claim of the attempt this row was claimed for, if it was claimed.
    pub fn claim(&self) -> Option<Claim> {
        self.claim_token.map(|token| Claim { id: self.id, token })
    }
}

/// When a new job should run.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Schedule {
    /// As soon as possible.
    #[default]
    Now,
    /// At this instant (of the database clock); a past instant runs at once.
    At(DateTime<Utc>),
    /// This long after the insert statement (measured by the database clock; inside a long
    /// transaction it counts from the statement, not from the transaction's start).
    In(std::time::Duration),
}

/// What to do when a live job with the same unique key exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnConflict {
    /// Keep the existing job untouched and return it.
    #[default]
    Keep,
    /// Move the existing job to the new schedule (unless it is executing) and return it.
    Reschedule,
}

/// A job to insert. Build with [`NewJob::new`] and the `with_*` methods.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub kind: String,
    pub args: Value,
    pub queue: String,
    pub priority: i16,
    pub max_attempts: i32,
    pub schedule: Schedule,
    pub unique_key: Option<String>,
    pub on_conflict: OnConflict,
    pub tags: Vec<String>,
    pub meta: Value,
    /// Who inserts it (see [`Job::created_by`]).
    pub created_by: Option<String>,
}

/// A job's priority: `PRIORITY_MIN` (the highest: claimed first) to `PRIORITY_MAX`. The one
/// statement of the range: the insert's and the edit's checks and the API's schema use these
/// (the table's CHECK `priority_range` is held to them by a test).
pub const PRIORITY_MIN: i16 = 0;
pub const PRIORITY_MAX: i16 = 9;
/// A job's `max_attempts`: `MAX_ATTEMPTS_MIN` to `MAX_ATTEMPTS_MAX` (as the priority's range).
pub const MAX_ATTEMPTS_MIN: i32 = 1;
pub const MAX_ATTEMPTS_MAX: i32 = 1000;

/// Refuses a priority out of its range.
pub fn check_priority(priority: i64) -> Result<(), String> {
    if (i64::from(PRIORITY_MIN)..=i64::from(PRIORITY_MAX)).contains(&priority) {
        Ok(())
    } else {
        Err(format!(
            "must be a whole number from {PRIORITY_MIN} (highest) to {PRIORITY_MAX}"
        ))
    }
}

/// Refuses a `max_attempts` out of its range.
pub fn check_max_attempts(max_attempts: i64) -> Result<(), String> {
    if (i64::from(MAX_ATTEMPTS_MIN)..=i64::from(MAX_ATTEMPTS_MAX)).contains(&max_attempts) {
        Ok(())
    } else {
        Err(format!(
            "must be a whole number from {MAX_ATTEMPTS_MIN} to {MAX_ATTEMPTS_MAX}"
        ))
    }
}

/// The defaults of a new job.
pub const DEFAULT_QUEUE: &str = "default";
pub const DEFAULT_PRIORITY: i16 = 0;
pub const DEFAULT_MAX_ATTEMPTS: i32 = 20;

impl NewJob {
    pub fn new(kind: impl Into<String>, args: Value) -> Self {
        NewJob {
            kind: kind.into(),
            args,
            queue: DEFAULT_QUEUE.to_string(),
            priority: DEFAULT_PRIORITY,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            schedule: Schedule::Now,
            unique_key: None,
            on_conflict: OnConflict::Keep,
            tags: Vec::new(),
            meta: Value::Object(Default::default()),
            created_by: None,
        }
    }

    /// Names who inserts the job (see [`Job::created_by`]).
    pub fn created_by(mut self, who: impl Into<String>) -> Self {
        self.created_by = Some(who.into());
        self
    }
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }
    pub fn with_priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }
    pub fn with_max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }
    pub fn at(mut self, at: DateTime<Utc>) -> Self {
        self.schedule = Schedule::At(at);
        self
    }
    pub fn after(mut self, delay: std::time::Duration) -> Self {
        self.schedule = Schedule::In(delay);
        self
    }
    pub fn with_unique_key(mut self, key: impl Into<String>, on_conflict: OnConflict) -> Self {
        self.unique_key = Some(key.into());
        self.on_conflict = on_conflict;
        self
    }
    pub fn with_tags(mut self, tags: Vec<String>) -> Self {
        self.tags = tags;
        self
    }
    pub fn with_meta(mut self, meta: Value) -> Self {
        self.meta = meta;
        self
    }

    /// What to do with an attempt that would start more than `policy.after_ms` late (kept in
    /// `meta`, see [`crate::engine::late_start`]).
    pub fn with_late_policy(mut self, policy: super::late_start::LatePolicy) -> Self {
        super::late_start::LatePolicy::put_in_meta(Some(policy), &mut self.meta);
        self
    }
}

/// The result of an insert: the job, and whether it already existed under its unique key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inserted {
    pub job: Job,
    /// True when a live job with the same unique key was found (and returned instead).
    pub existing: bool,
}

/// Whether a name fits a queue (`[a-z0-9_-]{1,64}`).
pub fn is_valid_queue_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::JobState;

    #[test]
    fn states_round_trip_through_their_names() {
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>(), Ok(s));
        }
        assert!("done".parse::<JobState>().is_err());
        let finals: Vec<_> = JobState::ALL.into_iter().filter(|s| s.is_final()).collect();
        assert_eq!(
            finals,
            [
                JobState::Completed,
                JobState::Discarded,
                JobState::Cancelled
            ]
        );
    }
}
