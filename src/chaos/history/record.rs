//! What a history recorded (every request with its answer, every fault, the secrets it planted,
//! the webhook calls received) and what the database held at its end. The promises are checked on
//! these two alone, so that a test can plant a violation by editing them.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::plan::{Fault, Role, Step};
use crate::chaos::receiver::Delivery;

/// The dashboard's sign-in server function, and the one its audit page reads through.
pub const DASHBOARD_SIGN_IN: &str = "/_console/login";
pub const DASHBOARD_AUDIT: &str = "/_console/audit";

/// One request and its answer.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// The step of the plan that sent it (the plan's length: the reads after it).
    pub step: usize,
    pub role: Role,
    pub node: usize,
    pub method: &'static str,
    /// The route as the router and the audit log name it: `/jobs/{id}/cancel`; or a dashboard
    /// server function's path (`/_console/audit`).
    pub route: &'static str,
    /// The path sent, under `/api/v1` (`/jobs/42/cancel`); a server function's at the root.
    pub path: String,
    pub body: Option<Value>,
    /// The answer's status; 0 when none came (the node died, the connection broke).
    pub status: u16,
    pub answer: Value,
    pub sent: DateTime<Utc>,
    pub answered: DateTime<Utc>,
    /// The job or question the request acted on, when it names one.
    pub subject: Option<i64>,
}

impl Event {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// Whether the request asks for a change the API audits: not a read (`GET`), not plain SQL,
    /// not one of the dashboard's server functions a history calls (a sign-in and the audit
    /// page's read: a viewer may do both, and neither is an API call's audit entry).
    pub fn asks_for_change(&self) -> bool {
        !matches!(self.method, "GET" | "SQL")
            && !matches!(self.route, DASHBOARD_SIGN_IN | DASHBOARD_AUDIT)
    }

    /// The job an answer carries (`{"job": {...}}` or the job itself).
    pub fn job_id(&self) -> Option<i64> {
        self.answer
            .get("job")
            .unwrap_or(&self.answer)
            .get("id")
            .and_then(Value::as_i64)
    }
}

/// A fault, from when it began (`at`) to when it was over (`done`: the node it restarted
/// answered again, PostgreSQL accepted connections again).
#[derive(Debug, Clone, Serialize)]
pub struct FaultEvent {
    pub step: usize,
    pub fault: Fault,
    pub at: DateTime<Utc>,
    pub done: DateTime<Utc>,
}

/// Everything a run sent, saw and planted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct History {
    pub seed: u64,
    /// The plan's steps that ran, by their index in the plan.
    pub steps: Vec<(usize, Step)>,
    pub events: Vec<Event>,
    pub faults: Vec<FaultEvent>,
    /// Secret values planted by the admin (headers of webhook jobs and endpoints, endpoints'
    /// signing secrets): no answer to another role may contain one.
    pub secrets: Vec<String>,
    /// Webhook calls received, by job id.
    #[serde(skip)]
    pub deliveries: HashMap<i64, Vec<Delivery>>,
    /// When the partner's result API first answered each game's result final (the games'
    /// `poll` steps ask it), by the game's path name (`w<ms>` of `Game w<ms>`).
    pub finals: std::collections::BTreeMap<String, DateTime<Utc>>,
}

impl History {
    /// The acknowledged events of a route, in the order they were sent.
    pub fn acknowledged<'a>(
        &'a self,
        method: &'a str,
        route: &'a str,
    ) -> impl Iterator<Item = &'a Event> + 'a {
        self.events
            .iter()
            .filter(move |e| e.ok() && e.method == method && e.route == route)
    }
}

/// A job as the database held it at the end.
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    pub id: i64,
    pub queue: String,
    pub kind: String,
    pub state: String,
    pub attempt: i32,
    pub scheduled_at: DateTime<Utc>,
    pub attempted_at: Option<DateTime<Utc>>,
    pub finalized_at: Option<DateTime<Utc>>,
    pub args: Value,
    pub meta: Value,
    pub inserted_at: DateTime<Utc>,
    /// The workflow step it is the job of.
    pub step_id: Option<i64>,
}

impl JobRow {
    pub fn is_final(&self) -> bool {
        matches!(self.state.as_str(), "completed" | "discarded" | "cancelled")
    }

    pub fn schedule_id(&self) -> Option<i64> {
        self.meta
            .get("schedule_id")
            .and_then(Value::as_i64)
            .or_else(|| self.meta.get("schedule_id")?.as_str()?.parse().ok())
    }

    pub fn triggered(&self) -> bool {
        self.meta.get("trigger").and_then(Value::as_bool) == Some(true)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct QuestionRow {
    pub id: i64,
    pub game: String,
    pub status: String,
    pub game_time: DateTime<Utc>,
    pub locked_at: Option<DateTime<Utc>>,
    pub lock_job_id: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PredictionRow {
    pub question_id: i64,
    pub player: String,
    pub choice: String,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditRow {
    pub action: String,
    pub target: String,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct IncidentRow {
    pub id: i64,
    pub rule_id: i64,
    pub subject: String,
}

/// The database at the end of a history.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// The database's clock when it was read.
    pub now: DateTime<Utc>,
    pub jobs: Vec<JobRow>,
    pub tallies: HashMap<String, i64>,
    pub paused_queues: Vec<String>,
    pub paused_kinds: Vec<String>,
    pub questions: Vec<QuestionRow>,
    pub predictions: Vec<PredictionRow>,
    pub audit: Vec<AuditRow>,
    pub incidents: Vec<IncidentRow>,
    /// The jobs marked as alerts' notifications.
    pub alert_notifications: Vec<i64>,
    pub workflow_runs: Vec<RunRow>,
    pub workflow_steps: Vec<StepRow>,
    pub workflow_edges: Vec<EdgeRow>,
    pub workflow_signals: Vec<SignalRow>,
    /// The tasks of the map steps, each with its current job.
    pub workflow_tasks: Vec<TaskRow>,
    /// The application's rows written with what it did from SQL (`history_app_rows`: a job
    /// added, a cancel, a signal), by the step that wrote them.
    pub app_rows: std::collections::HashSet<i64>,
}

/// A workflow run as the database held it at the end: its state and its counters.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub id: i64,
    /// Its workflow's name and its key (`game` and `game:<game>`: the built-in game workflow).
    pub name: String,
    pub key: Option<String>,
    pub state: String,
    pub steps: i32,
    /// Its steps counted by state: blocked, ready, completed, failed, skipped, cancelled.
    pub counts: [i32; 6],
    /// Its named times at the end.
    pub times: Value,
}

/// A signal a workflow run received.
#[derive(Debug, Clone, Serialize)]
pub struct SignalRow {
    pub run_id: i64,
    pub name: String,
    pub received_at: DateTime<Utc>,
    /// Who sent it: `api:<account>`, `endpoint:<id>` (a partner's signed call), `sql:history`
    /// (the application, from SQL).
    pub source: String,
}

/// The steps' states, in the order of [`RunRow::counts`].
pub const STEP_STATES: [&str; 6] = [
    "blocked",
    "ready",
    "completed",
    "failed",
    "skipped",
    "cancelled",
];

/// A workflow step as the database held it at the end.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepRow {
    pub id: i64,
    pub run_id: i64,
    pub name: String,
    pub state: String,
    pub deps_left: i32,
    pub skip_following: bool,
    pub job_id: Option<i64>,
    /// When its job was inserted (absent when it has none, or its job was deleted).
    pub job_inserted_at: Option<DateTime<Utc>>,
    /// In a rerun, the step of the run rerun whose completion it keeps.
    pub kept_from: Option<i64>,
    /// Its timer (a time of its run's and ms after it), its signal, its deadline once it waited.
    pub at_time: Option<String>,
    pub at_ms: Option<i64>,
    pub signal: Option<String>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// A map step's tasks, and those whose current job completed, failed or was cancelled.
    pub tasks: Option<i32>,
    pub tasks_counts: [i32; 3],
}

/// A map step's task as the database held it at the end: its current job and how it settled
/// (`pending`, `completed`, `failed`, `cancelled`).
#[derive(Debug, Clone, Serialize)]
pub struct TaskRow {
    pub step_id: i64,
    pub task: i32,
    pub job_id: i64,
    pub state: String,
}

/// A step waiting for another.
#[derive(Debug, Clone, Serialize)]
pub struct EdgeRow {
    pub dep_id: i64,
    pub step_id: i64,
    pub on_failure: String,
}

impl Snapshot {
    pub fn job(&self, id: i64) -> Option<&JobRow> {
        self.jobs.iter().find(|j| j.id == id)
    }
}
