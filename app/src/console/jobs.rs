//! Jobs: the listings (`/jobs`, `/failures`), one job's page and its actions, the new-job form,
//! bulk actions and the timers page.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn JobsConsole>, ServerFnError> {
    super::port::console()
}
#[cfg(feature = "ssr")]
use crate::local_time::instant_ms;

/// Every job state, in the order of a job's life.
pub const STATES: [&str; 7] = [
    "scheduled",
    "available",
    "executing",
    "retryable",
    "completed",
    "discarded",
    "cancelled",
];

/// The states that count as failures on the failures page.
pub const FAILED_STATES: &str = "retryable,discarded";

/// A job listing's filter, as the address bar holds it (`/jobs?state=retryable&queue=webhooks`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobQuery {
    /// One state or several separated by commas.
    pub state: Option<String>,
    pub queue: Option<String>,
    pub kind: Option<String>,
    /// `key=value` pairs separated by commas, or a JSON object: jobs whose args contain it.
    pub args: Option<String>,
    /// `scheduled_at` from / to, as `datetime-local` values in the time zone `zone`.
    pub from: Option<String>,
    pub to: Option<String>,
    /// The IANA name of the zone `from` and `to` are in; absent: UTC.
    pub zone: Option<String>,
    /// Which of the two instants `from` / `to` means when it happens twice in `zone`
    /// (`earlier` or `later`, see [`crate::local_time`]).
    pub from_which: Option<String>,
    pub to_which: Option<String>,
    /// Jobs with an attempt that started more than this many ms after it was due.
    pub late: Option<String>,
    /// Tags every listed job carries, separated by commas (or a JSON array).
    pub tags: Option<String>,
    /// Text in the last error, case-insensitive.
    pub error: Option<String>,
    /// Keyset cursor: jobs with a smaller id.
    pub before: Option<i64>,
    /// Jobs with an id at most this: the list as the operator is reading it.
    pub max_id: Option<i64>,
}

impl JobQuery {
    /// The filter part as `key=value` pairs (no cursor), for links and hidden form fields. The
    /// zone goes with the times it is the zone of, and only with them.
    pub fn filter_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        let times = [&self.from, &self.to]
            .iter()
            .any(|t| t.as_ref().is_some_and(|t| !t.is_empty()));
        let fields = [
            ("state", &self.state),
            ("queue", &self.queue),
            ("kind", &self.kind),
            ("args", &self.args),
            ("from", &self.from),
            ("to", &self.to),
            ("late", &self.late),
            ("tags", &self.tags),
            ("error", &self.error),
        ];
        let zone_fields = [
            ("zone", &self.zone),
            ("from_which", &self.from_which),
            ("to_which", &self.to_which),
        ];
        for (k, v) in fields
            .into_iter()
            .chain(zone_fields.into_iter().filter(|_| times))
        {
            if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
                pairs.push((k, v.clone()));
            }
        }
        pairs
    }

    pub fn has_filter(&self) -> bool {
        !self.filter_pairs().is_empty()
    }
}

/// One page of a job listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    /// How far behind the read replica this list is, in ms, when past the bound set for it.
    pub replica_lag_ms: Option<i64>,
    pub now_ms: i64,
    pub rows: Vec<JobRow>,
    /// Cursor of the next (older) page; absent on the last page.
    pub next_before: Option<i64>,
    /// Matching jobs newer than the list's `max_id` (at most 100 are counted).
    pub newer: i64,
}

/// One job in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    pub id: i64,
    pub kind: String,
    pub queue: String,
    pub state: String,
    pub priority: i16,
    pub attempt: i32,
    pub max_attempts: i32,
    pub scheduled_ms: i64,
    pub finalized_ms: Option<i64>,
    pub last_error: Option<String>,
    /// The args as compact JSON, cut to a readable length.
    pub args_preview: String,
}

impl JobRow {
    pub fn is_final(&self) -> bool {
        matches!(self.state.as_str(), "completed" | "discarded" | "cancelled")
    }
    pub fn can_retry(&self) -> bool {
        self.is_final() || self.state == "retryable"
    }
    pub fn is_waiting(&self) -> bool {
        matches!(self.state.as_str(), "scheduled" | "available" | "retryable")
    }
}

/// The ranges of a job's numbers as the server's engine states them: the forms' `min` and `max`
/// (this crate cannot import the engine, and keeps no copy of its rules; the server checks them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLimits {
    pub priority_min: i16,
    pub priority_max: i16,
    pub max_attempts_min: i32,
    pub max_attempts_max: i32,
}

/// The job detail page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    pub now_ms: i64,
    pub job: JobRow,
    pub args_json: String,
    pub meta_json: String,
    pub tags: Vec<String>,
    pub unique_key: Option<String>,
    /// Who inserted it from the dashboard or the API (they and admins see its secrets).
    pub created_by: Option<String>,
    pub inserted_ms: i64,
    pub lease_ms: Option<i64>,
    pub attempts: Vec<AttemptRow>,
    /// The schedule this job is a run of, if any.
    pub schedule: Option<String>,
    /// What holds a waiting job back besides its time, in words: its kind or queue paused, or
    /// its queue's limits across every node.
    pub held: Option<String>,
    /// A webhook job's calls, in the order made (its delivery record); empty for other kinds.
    pub deliveries: Vec<DeliveryRow>,
    /// The edit form's ranges.
    pub limits: JobLimits,
}

/// One webhook call of a job, as the delivery record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryRow {
    pub id: i64,
    pub job_id: i64,
    pub attempt: i32,
    pub started_ms: i64,
    /// How long after the attempt's due time the call started.
    pub late_ms: i64,
    pub duration_ms: i32,
    /// Where it connected (`ip:port`), or the addresses it would have tried.
    pub address: Option<String>,
    /// Absent when no answer came.
    pub status: Option<i16>,
    /// The response's headers (names lower case).
    pub headers: Vec<(String, String)>,
    /// The first characters of the response body.
    pub body: Option<String>,
    pub error: Option<String>,
}

/// One attempt of a job, for the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRow {
    pub attempt: i32,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub node: Option<String>,
    /// `completed`, `failed`, `discarded`, `cancelled`, `snoozed`, `lost` (its node's lease
    /// expired), `running`, or `interrupted` (handed back: it runs again).
    pub outcome: String,
    pub error: Option<String>,
    /// How long after its due time it started, in ms (absent while it runs, and for attempts
    /// that ended before their records were kept).
    pub late_ms: Option<f64>,
    pub duration_ms: Option<f64>,
    /// What its handler recorded, as formatted JSON.
    pub output_json: Option<String>,
    pub logs: Vec<LogLineRow>,
    /// Lines left out past the bound.
    pub logs_dropped: i32,
}

/// One log line of an attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLineRow {
    pub at_ms: Option<i64>,
    pub level: String,
    pub message: String,
}

/// Jobs waiting for their time, soonest (or latest overdue) first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimersPage {
    pub now_ms: i64,
    pub rows: Vec<JobRow>,
}

/// What a bulk action would touch, shown before it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkCount {
    pub count: i64,
    /// The count stopped at the server's cap (100,000: `operations::COUNT_CAP`).
    pub capped: bool,
    /// The newest job the action may touch: jobs inserted after the confirmation are left alone.
    pub max_id: Option<i64>,
}

/// The bulk actions, as (value, verb, label).
pub const BULK_ACTIONS: [(&str, &str, &str); 6] = [
    ("cancel", "Cancel", "cancelled"),
    ("retry", "Retry", "retried"),
    ("run_now", "Run now", "made due now"),
    ("delete", "Delete", "deleted"),
    ("shift", "Move in time", "moved"),
    ("edit", "Edit", "edited"),
];

/// What a bulk "move in time" or "edit" changes, as its confirmation form sends it (blank fields
/// change nothing).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BulkChangeInput {
    /// Move by: `90s`, `-2h`, `1h30m`, `3d`.
    pub by: Option<String>,
    /// The open questions of this game (its name exactly) move too.
    pub game: Option<String>,
    pub priority: Option<String>,
    pub queue: Option<String>,
    pub max_attempts: Option<String>,
    /// All the tags, separated by commas.
    pub tags: Option<String>,
}

/// A waiting job's edit form, as it sends it: each field as the operator left it, and the args
/// as the page showed them (unchanged args are not sent back: the page shows others' secrets
/// hidden).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EditJobInput {
    pub args: String,
    pub args_shown: String,
    pub priority: String,
    pub queue: String,
    pub max_attempts: String,
    pub tags: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkDone {
    pub action: String,
    pub changed: u64,
    pub skipped: u64,
}

impl BulkDone {
    /// The result as the list's address carries it (`done=retry&changed=2&skipped=0`).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("done", self.action.clone()),
            ("changed", self.changed.to_string()),
            ("skipped", self.skipped.to_string()),
        ]
    }

    /// The result from the list's address; none unless it names a known action and two counts.
    pub fn from_params(params: &leptos_router::params::ParamsMap) -> Option<Self> {
        let action = params.get("done")?;
        BULK_ACTIONS.iter().find(|(v, ..)| *v == action)?;
        Some(BulkDone {
            action,
            changed: params.get("changed")?.parse().ok()?,
            skipped: params.get("skipped")?.parse().ok()?,
        })
    }

    /// "2 retried jobs." and what was skipped.
    pub fn summary(&self) -> String {
        let label = BULK_ACTIONS
            .iter()
            .find(|(v, ..)| *v == self.action)
            .map_or("changed", |(.., label)| *label);
        let skipped = if self.skipped > 0 {
            format!("; {} skipped (their state did not allow it)", self.skipped)
        } else {
            String::new()
        };
        format!("{} {label} jobs{skipped}.", self.changed)
    }
}

/// What the new-job form offers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobChoices {
    /// The kinds this server's workers run (the new-job form's choices).
    pub kinds: Vec<String>,
    /// Those and the kinds of recent jobs (a filter's suggestions).
    pub seen_kinds: Vec<String>,
    pub queues: Vec<String>,
    /// Tags of recent jobs.
    pub tags: Vec<String>,
    /// Top-level args keys of recent jobs.
    pub args_keys: Vec<String>,
    /// The forms' ranges (absent until loaded: the server checks them anyway).
    pub limits: Option<JobLimits>,
}

/// A new job as the form submits it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewJobInput {
    pub kind: String,
    pub args: String,
    pub queue: String,
    /// `now`, `in` (minutes) or `at` (a `datetime-local` value in the time zone `zone`).
    pub when: String,
    pub in_minutes: Option<String>,
    pub at: Option<String>,
    /// The IANA name of the zone `at` is in; absent: UTC.
    pub zone: Option<String>,
    /// Which of the two instants `at` means when it happens twice in `zone`.
    pub which: Option<String>,
    pub priority: Option<String>,
    pub max_attempts: Option<String>,
    pub unique_key: Option<String>,
    /// How late (seconds after its due time) it may start; past it `late_then` applies.
    pub late_after_secs: Option<String>,
    /// `run` (anyway), `skip` or `discard`.
    pub late_then: Option<String>,
}

/// What the server provides to the job pages.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait JobsConsole: Send + Sync + 'static {
    async fn jobs(&self, query: JobQuery) -> Result<JobPage, Refusal>;
    async fn job(&self, id: i64) -> Result<JobDetail, Refusal>;
    /// `cancel`, `retry`, `run_now` or `delete` one job.
    async fn job_action(&self, id: i64, action: String) -> Result<(), Refusal>;
    async fn reschedule_job(&self, id: i64, at_ms: i64) -> Result<(), Refusal>;
    /// Inserts a copy of a job, due now. Returns the new job's id.
    async fn clone_job(&self, id: i64) -> Result<i64, Refusal>;
    async fn job_choices(&self) -> Result<JobChoices, Refusal>;
    async fn create_job(&self, input: NewJobInput) -> Result<i64, Refusal>;
    async fn bulk_preview(&self, query: JobQuery) -> Result<BulkCount, Refusal>;
    /// Applies `action` to the listed ids, or (when `ids` is empty) to every job matching `query`.
    async fn bulk(
        &self,
        action: String,
        ids: Vec<i64>,
        query: JobQuery,
        change: BulkChangeInput,
    ) -> Result<BulkDone, Refusal>;
    /// Edits a waiting job: only the fields the form changed.
    async fn edit_job(&self, id: i64, input: EditJobInput) -> Result<(), Refusal>;
    async fn timers(&self) -> Result<TimersPage, Refusal>;
}

#[server(prefix = "/_console", endpoint = "jobs")]
pub async fn list_jobs(#[server(default)] query: JobQuery) -> Result<JobPage, ServerFnError> {
    console()?.jobs(query).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "job")]
pub async fn get_job(id: i64) -> Result<JobDetail, ServerFnError> {
    console()?.job(id).await.map_err(fail)
}

/// One job's action; the form's pressed button names it (`action=cancel`).
#[server(prefix = "/_console", endpoint = "job_action")]
pub async fn job_action(
    csrf: Option<String>,
    id: i64,
    action: String,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.job_action(id, action).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "reschedule_job")]
pub async fn reschedule_job(
    csrf: Option<String>,
    id: i64,
    at: String,
    zone: Option<String>,
    which: Option<String>,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let at_ms = instant_ms(&at, zone.as_deref(), which.as_deref()).map_err(fail)?;
    console()?.reschedule_job(id, at_ms).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "edit_job")]
pub async fn edit_job(
    csrf: Option<String>,
    id: i64,
    input: EditJobInput,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.edit_job(id, input).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "clone_job")]
pub async fn clone_job(csrf: Option<String>, id: i64) -> Result<i64, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.clone_job(id).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "job_choices")]
pub async fn get_job_choices() -> Result<JobChoices, ServerFnError> {
    console()?.job_choices().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "create_job")]
pub async fn create_job(
    csrf: Option<String>,
    #[server(default)] input: NewJobInput,
) -> Result<i64, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.create_job(input).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "bulk_preview")]
pub async fn bulk_preview(#[server(default)] query: JobQuery) -> Result<BulkCount, ServerFnError> {
    console()?.bulk_preview(query).await.map_err(fail)
}

/// A confirmed bulk action: on `ids` (comma-separated) when given, else on everything matching
/// `query` up to `query.max_id`.
#[server(prefix = "/_console", endpoint = "bulk")]
///
/// Done, it sends the browser to `back` (the list, a same-site path) with the result in the
/// address, with or without JavaScript: the question is not asked again by a reload or a second
/// press.
pub async fn bulk_jobs(
    csrf: Option<String>,
    action: String,
    ids: Option<String>,
    #[server(default)] query: JobQuery,
    #[server(default)] change: BulkChangeInput,
    back: Option<String>,
) -> Result<BulkDone, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let ids = parse_ids(ids.as_deref().unwrap_or("")).map_err(fail)?;
    let done = console()?
        .bulk(action, ids, query, change)
        .await
        .map_err(fail)?;
    if let Some(back) = back {
        leptos_axum::redirect(&crate::base::href(&with_pairs(
            &super::accounts::safe_next(Some(&back)),
            &done.pairs(),
        )));
    }
    Ok(done)
}

/// `path` with `pairs` added to its query.
#[cfg(feature = "ssr")]
fn with_pairs(path: &str, pairs: &[(&str, String)]) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}{}", super::port::query_string(pairs))
}

/// Parses `1,2,3` (spaces allowed, empty: none).
pub fn parse_ids(s: &str) -> Result<Vec<i64>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<i64>()
                .map_err(|_| format!("`{p}` is not a job id"))
        })
        .collect()
}

#[server(prefix = "/_console", endpoint = "timers")]
pub async fn list_timers() -> Result<TimersPage, ServerFnError> {
    console()?.timers().await.map_err(fail)
}
