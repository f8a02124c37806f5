//! The port between the dashboard and the server: the data the UI shows, the server functions
//! that fetch it, and the `Console` trait the server implements (behind the `ssr` feature).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// Job counts per state, in the order of a job's life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub states: Vec<(String, i64)>,
}

/// One job in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    pub id: i64,
    pub kind: String,
    pub queue: String,
    pub state: String,
    pub attempt: i32,
    pub max_attempts: i32,
    /// RFC 3339.
    pub scheduled_at: String,
    pub last_error: Option<String>,
}

/// One game question in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionRow {
    pub id: i64,
    pub game: String,
    pub prompt: String,
    pub status: String,
    /// RFC 3339.
    pub game_time: String,
    pub lock_job_id: Option<i64>,
}

/// What the server provides to the dashboard.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait Console: Send + Sync + 'static {
    async fn overview(&self) -> Result<Overview, String>;
    /// The newest jobs, optionally of one state.
    async fn jobs(&self, state: Option<String>) -> Result<Vec<JobRow>, String>;
    /// Questions, upcoming first.
    async fn questions(&self) -> Result<Vec<QuestionRow>, String>;
    /// Cancels a job that has not finished (also a running one, on any node).
    async fn cancel_job(&self, id: i64) -> Result<(), String>;
    /// Runs a retryable or finished job again.
    async fn retry_job(&self, id: i64) -> Result<(), String>;
}

#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn Console>, ServerFnError> {
    use_context::<std::sync::Arc<dyn Console>>()
        .ok_or_else(|| ServerFnError::new("the console is not available"))
}

#[server(prefix = "/_console", endpoint = "overview")]
pub async fn get_overview() -> Result<Overview, ServerFnError> {
    console()?.overview().await.map_err(ServerFnError::new)
}

#[server(prefix = "/_console", endpoint = "jobs")]
pub async fn list_jobs(state: Option<String>) -> Result<Vec<JobRow>, ServerFnError> {
    console()?.jobs(state).await.map_err(ServerFnError::new)
}

#[server(prefix = "/_console", endpoint = "questions")]
pub async fn list_questions() -> Result<Vec<QuestionRow>, ServerFnError> {
    console()?.questions().await.map_err(ServerFnError::new)
}

#[server(prefix = "/_console", endpoint = "cancel_job")]
pub async fn cancel_job(id: i64) -> Result<(), ServerFnError> {
    console()?.cancel_job(id).await.map_err(ServerFnError::new)
}

#[server(prefix = "/_console", endpoint = "retry_job")]
pub async fn retry_job(id: i64) -> Result<(), ServerFnError> {
    console()?.retry_job(id).await.map_err(ServerFnError::new)
}
