//! Alerts (`/alerts`): the incidents firing now and those resolved lately (everyone), their
//! acknowledgement (operators), and the rules (admins make, switch and delete them).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn AlertsConsole>, ServerFnError> {
    super::port::console()
}

/// The conditions a rule may watch, as the form offers them: (value, words).
pub const CONDITIONS: [(&str, &str); 9] = [
    ("late_lock", "a question's lock starts late"),
    ("question_open", "a question is still open after game time"),
    ("job_discarded", "a job is discarded"),
    ("queue_backlog", "a queue's backlog grows"),
    ("failure_rate", "attempts fail too often"),
    ("node_lost", "a node stops beating"),
    ("overdue", "jobs wait past their due time"),
    (
        "late_start",
        "attempts start late (or a late-start policy skips them)",
    ),
    (
        "workflow_deadline",
        "a workflow step's deadline passes without its signal",
    ),
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentInfo {
    pub id: i64,
    pub rule: String,
    pub condition: String,
    pub subject: String,
    pub summary: String,
    pub fired_ms: i64,
    pub resolved_ms: Option<i64>,
    pub acknowledged_ms: Option<i64>,
    pub acknowledged_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleInfo {
    pub id: i64,
    pub name: String,
    pub condition: String,
    /// The rule in words.
    pub words: String,
    /// Where it notifies: the host only (an incoming-webhook URL is a secret).
    pub notifies: Option<String>,
    pub payload: String,
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertsPage {
    pub now_ms: i64,
    pub firing: Vec<IncidentInfo>,
    /// The latest resolved incidents.
    pub resolved: Vec<IncidentInfo>,
    pub rules: Vec<RuleInfo>,
    /// The operator may acknowledge incidents.
    pub may_acknowledge: bool,
    /// The operator is an admin: manages the rules.
    pub may_manage: bool,
}

/// A new rule as the form sends it (blank fields: absent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewRuleInput {
    pub name: String,
    pub condition: String,
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub game: Option<String>,
    #[serde(default)]
    pub workflow: Option<String>,
    #[serde(default)]
    pub threshold_ms: Option<String>,
    #[serde(default)]
    pub threshold_n: Option<String>,
    #[serde(default)]
    pub for_secs: Option<String>,
    #[serde(default)]
    pub percent: Option<String>,
    #[serde(default)]
    pub notify_url: Option<String>,
    #[serde(default)]
    pub payload: Option<String>,
}

/// What the server provides to the alerts page.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait AlertsConsole: Send + Sync + 'static {
    async fn alerts(&self) -> Result<AlertsPage, Refusal>;
    async fn acknowledge_alert(&self, id: i64) -> Result<(), Refusal>;
    async fn create_alert_rule(&self, input: NewRuleInput) -> Result<(), Refusal>;
    async fn set_alert_rule(&self, id: i64, enabled: bool) -> Result<(), Refusal>;
    async fn delete_alert_rule(&self, id: i64) -> Result<(), Refusal>;
}

#[server(prefix = "/_console", endpoint = "alerts")]
pub async fn get_alerts() -> Result<AlertsPage, ServerFnError> {
    console()?.alerts().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "acknowledge_alert")]
pub async fn acknowledge_alert(csrf: Option<String>, id: i64) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.acknowledge_alert(id).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "create_alert_rule")]
pub async fn create_alert_rule(
    csrf: Option<String>,
    rule: NewRuleInput,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    console()?.create_alert_rule(rule).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "set_alert_rule")]
pub async fn set_alert_rule(
    csrf: Option<String>,
    id: i64,
    enabled: bool,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    console()?.set_alert_rule(id, enabled).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "delete_alert_rule")]
pub async fn delete_alert_rule(csrf: Option<String>, id: i64) -> Result<(), ServerFnError> {
    let _ = csrf;
    console()?.delete_alert_rule(id).await.map_err(fail)
}
