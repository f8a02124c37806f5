//! Workflows: the runs (counts from each run's counters, never a count over the jobs), one run
//! with its graph, each step's state and what it waits for, its signals; an operator's actions on
//! it (cancel, retry, skip a step, send a signal).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn WorkflowsConsole>, ServerFnError> {
    super::port::console()
}

/// One run in the list: its steps counted by state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRow {
    pub id: i64,
    pub name: String,
    pub key: Option<String>,
    pub state: String,
    pub created_ms: i64,
    pub finished_ms: Option<i64>,
    pub steps: i32,
    pub blocked: i32,
    pub ready: i32,
    pub completed: i32,
    pub failed: i32,
    pub skipped: i32,
    pub cancelled: i32,
    pub rerun_of: Option<i64>,
    /// When one of its steps last changed state.
    #[serde(default)]
    pub progressed_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowsPage {
    pub now_ms: i64,
    pub rows: Vec<WorkflowRow>,
    /// The filter the rows answer: running runs waiting longer than this (`1h`), if any.
    #[serde(default)]
    pub waiting: Option<String>,
}

/// What a step waits for, as a sentence around a time (shown in the reader's zone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitView {
    pub before: String,
    pub at_ms: Option<i64>,
    pub after: String,
}

/// A step of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepView {
    pub name: String,
    pub state: String,
    pub kind: String,
    pub queue: String,
    pub job_id: Option<i64>,
    /// The steps it waits for, by name, with what one that failed does to it.
    pub after: Vec<(String, String)>,
    pub waits: Option<WaitView>,
    pub signal: Option<String>,
    pub finished_ms: Option<i64>,
    /// In a rerun, the step whose completion it keeps.
    pub kept_from: Option<i64>,
    /// Skipped by an operator.
    pub skipped_by_hand: bool,
    /// What its completing attempt recorded, as JSON, as the reader may see it (secrets
    /// hidden from those who do not see its job's).
    #[serde(default)]
    pub output: Option<String>,
    /// A map step's tasks: how many, and those completed and failed (or cancelled), and the
    /// items they did.
    #[serde(default)]
    pub tasks: Option<TasksView>,
}

/// A map step's progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TasksView {
    pub total: i32,
    pub done: i32,
    pub failed: i32,
    pub items: i64,
}

/// A signal the run received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalView {
    pub name: String,
    pub source: String,
    pub received_ms: i64,
    /// Its payload as JSON, as the reader may see it (whole for admins and its sender).
    #[serde(default)]
    pub payload: String,
}

/// An attempt of a step's job, for the run's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepAttemptView {
    pub step: String,
    pub job_id: i64,
    pub attempt: i32,
    pub started_ms: i64,
    pub ended_ms: i64,
    pub outcome: String,
    /// As the reader may see it.
    pub error: Option<String>,
}

/// One run: its counters, times, steps (in the order declared), signals and attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowDetail {
    pub now_ms: i64,
    pub row: WorkflowRow,
    pub created_by: Option<String>,
    /// Its named times (name, ms).
    pub times: Vec<(String, i64)>,
    pub steps: Vec<StepView>,
    pub signals: Vec<SignalView>,
    /// Its steps' attempts that ended, in the order they started.
    #[serde(default)]
    pub attempts: Vec<StepAttemptView>,
}

/// What the server provides to the workflow pages.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait WorkflowsConsole: Send + Sync + 'static {
    /// The runs, newest first; `waiting` (`5m`, `1h`): only running runs none of whose steps
    /// changed state for longer.
    async fn workflows(&self, waiting: Option<String>) -> Result<WorkflowsPage, Refusal>;
    async fn workflow(&self, id: i64) -> Result<WorkflowDetail, Refusal>;
    /// `cancel`, `retry` (with `mode`), `skip` (with `step`), `signal` (with `name`), `rerun`
    /// (with `step`: the new run's id) or `move` (with `time=duration`).
    async fn workflow_action(
        &self,
        id: i64,
        action: String,
        detail: Option<String>,
    ) -> Result<Option<i64>, Refusal>;
}

#[server(prefix = "/_console", endpoint = "workflows")]
pub async fn list_workflows(
    #[server(default)] waiting: Option<String>,
) -> Result<WorkflowsPage, ServerFnError> {
    console()?
        .workflows(super::port::nonempty(waiting))
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "workflow")]
pub async fn get_workflow(id: i64) -> Result<WorkflowDetail, ServerFnError> {
    console()?.workflow(id).await.map_err(fail)
}

/// An operator's action on run `id`: `cancel`; `retry` (`detail`: the mode, `failed` when
/// absent); `skip` (`detail`: the step); `signal` (`detail`: its name, no payload); `rerun`
/// (`detail`: the step to run again from; answers the new run's id); `move` (`detail`: a time
/// of the run and by how much, `kickoff_at=30m`, `kickoff_at=-1h`).
#[server(prefix = "/_console", endpoint = "workflow_action")]
pub async fn workflow_action(
    csrf: Option<String>,
    id: i64,
    action: String,
    detail: Option<String>,
    #[server(default)] by: Option<String>,
) -> Result<Option<i64>, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    // A move's form sends the time and by how much apart.
    let detail = match (super::port::nonempty(detail), super::port::nonempty(by)) {
        (Some(time), Some(by)) => Some(format!("{time}={by}")),
        (detail, _) => detail,
    };
    console()?
        .workflow_action(id, action, detail)
        .await
        .map_err(fail)
}

/// Where each step of a run is drawn: its layer (1 + the deepest of its dependencies; steps
/// depend only on steps declared before them) and its row within the layer.
pub fn layout(steps: &[StepView]) -> Vec<(usize, usize)> {
    let mut placed: Vec<(usize, usize)> = Vec::with_capacity(steps.len());
    let mut rows_in_layer: Vec<usize> = Vec::new();
    for step in steps {
        let layer = step
            .after
            .iter()
            .filter_map(|(dep, _)| steps.iter().position(|s| &s.name == dep))
            .filter_map(|i| placed.get(i).map(|p| p.0 + 1))
            .max()
            .unwrap_or(0);
        if rows_in_layer.len() <= layer {
            rows_in_layer.resize(layer + 1, 0);
        }
        placed.push((layer, rows_in_layer[layer]));
        rows_in_layer[layer] += 1;
    }
    placed
}
