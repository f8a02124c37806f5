//! Schedules: the list with each rule in words, next and last run; one schedule with its runs;
//! the form (create and edit) with a live preview of the next slots; pause, resume, trigger and
//! delete.

// The client's stub of `save_schedule` that `#[server]` writes for the hydrated build takes the
// form's twelve fields as arguments, and does not carry the function's own `allow`.
#![cfg_attr(feature = "hydrate", allow(clippy::too_many_arguments))]

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn SchedulesConsole>, ServerFnError> {
    super::port::console()
}

use super::jobs::JobRow;

/// The latest run of a schedule that came due.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastRunInfo {
    pub job_id: i64,
    pub state: String,
    /// How late its first attempt started (ms), when it has started.
    pub late_ms: Option<f64>,
}

/// One schedule in the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRow {
    pub name: String,
    /// The cron expression, or `every N ms`.
    pub rule: String,
    /// The rule in words, with its zone.
    pub rule_text: String,
    pub time_zone: String,
    pub kind: String,
    pub queue: String,
    pub paused: bool,
    pub overlap: String,
    pub missed: String,
    /// `api` or `code`.
    pub source: String,
    pub next_ms: Option<i64>,
    pub next_job: Option<i64>,
    pub last: Option<LastRunInfo>,
    pub runs_enqueued: i64,
    pub runs_skipped: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulesPage {
    pub now_ms: i64,
    pub rows: Vec<ScheduleRow>,
}

/// What the edit form starts from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ScheduleForm {
    pub name: String,
    /// `cron` or `every`.
    pub rule_type: String,
    pub cron: String,
    /// The interval in seconds.
    pub every_secs: String,
    pub time_zone: String,
    pub kind: String,
    pub queue: String,
    /// Pretty JSON (secrets hidden unless the viewer may see them).
    pub args: String,
    pub overlap: String,
    pub missed: String,
    /// The runs' late-start policy: seconds after the slot, empty for none.
    #[serde(default)]
    pub late_after_secs: String,
    /// `run`, `skip` or `discard`.
    #[serde(default)]
    pub late_then: String,
}

/// One schedule with its latest runs and its next slots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleDetail {
    pub now_ms: i64,
    pub row: ScheduleRow,
    pub form: ScheduleForm,
    pub priority: i16,
    pub max_attempts: i32,
    pub created_by: Option<String>,
    pub version: i32,
    pub runs: Vec<JobRow>,
    pub next: Vec<Slot>,
}

/// A slot: the instant, and the wall-clock time in the schedule's zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slot {
    pub at_ms: i64,
    /// `2026-12-03 06:00 GMT` (the zone's abbreviation at that instant).
    pub in_zone: String,
}

/// The preview of a rule being typed: its words and next slots, or why it is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulePreview {
    pub rule_text: String,
    pub slots: Vec<Slot>,
}

/// What the server provides to the schedule pages.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait SchedulesConsole: Send + Sync + 'static {
    async fn schedules(&self) -> Result<SchedulesPage, Refusal>;
    async fn schedule(&self, name: String) -> Result<ScheduleDetail, Refusal>;
    /// The kinds a schedule's job may have (those some worker runs).
    async fn schedule_kinds(&self) -> Result<Vec<String>, Refusal>;
    async fn preview_rule(
        &self,
        rule_type: String,
        cron: String,
        every_secs: String,
        time_zone: String,
    ) -> Result<RulePreview, Refusal>;
    /// Creates (`original` absent) or changes the schedule; returns its name.
    async fn save_schedule(
        &self,
        original: Option<String>,
        form: ScheduleForm,
    ) -> Result<String, Refusal>;
    /// `pause`, `resume`, `trigger` or `delete`.
    async fn schedule_action(&self, name: String, action: String) -> Result<(), Refusal>;
}

#[server(prefix = "/_console", endpoint = "schedules")]
pub async fn list_schedules() -> Result<SchedulesPage, ServerFnError> {
    console()?.schedules().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "schedule")]
pub async fn get_schedule(name: String) -> Result<ScheduleDetail, ServerFnError> {
    console()?.schedule(name).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "schedule_kinds")]
pub async fn schedule_kinds() -> Result<Vec<String>, ServerFnError> {
    console()?.schedule_kinds().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "preview_rule")]
pub async fn preview_rule(
    rule_type: String,
    cron: String,
    every_secs: String,
    time_zone: String,
) -> Result<RulePreview, ServerFnError> {
    console()?
        .preview_rule(rule_type, cron, every_secs, time_zone)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "save_schedule")]
#[allow(clippy::too_many_arguments)]
pub async fn save_schedule(
    csrf: Option<String>,
    original: Option<String>,
    name: String,
    rule_type: String,
    cron: Option<String>,
    every_secs: Option<String>,
    time_zone: String,
    kind: String,
    queue: String,
    args: String,
    overlap: String,
    missed: String,
    late_after_secs: Option<String>,
    late_then: Option<String>,
) -> Result<String, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let form = ScheduleForm {
        name,
        rule_type,
        cron: cron.unwrap_or_default(),
        every_secs: every_secs.unwrap_or_default(),
        time_zone,
        kind,
        queue,
        args,
        overlap,
        missed,
        late_after_secs: late_after_secs.unwrap_or_default(),
        late_then: late_then.unwrap_or_default(),
    };
    let original = super::port::nonempty(original);
    console()?.save_schedule(original, form).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "schedule_action")]
pub async fn schedule_action(
    csrf: Option<String>,
    name: String,
    action: String,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.schedule_action(name, action).await.map_err(fail)
}
