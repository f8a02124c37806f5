//! Queues: their counts and settings, and an operator's pause, resume and concurrency limit.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::{console, fail, Refusal};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueInfo {
    pub name: String,
    pub paused: bool,
    /// Per-node limit set by an operator; `None`: each node's configured limit.
    pub concurrency: Option<i32>,
    /// Per-node limits the running nodes were started with (`node: limit`), for reference.
    pub configured: Vec<(String, i64)>,
    pub available: i64,
    pub scheduled: i64,
    pub executing: i64,
    pub retryable: i64,
    pub discarded: i64,
    pub completed: i64,
}

/// What the server provides to the queues page.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait QueuesConsole: Send + Sync + 'static {
    async fn queues(&self) -> Result<Vec<QueueInfo>, Refusal>;
    /// `pause`, `resume`, or `concurrency` (with `concurrency`, empty for the nodes' default).
    async fn queue_action(
        &self,
        name: String,
        action: String,
        concurrency: Option<String>,
    ) -> Result<(), Refusal>;
}

#[server(prefix = "/_console", endpoint = "queues")]
pub async fn list_queues() -> Result<Vec<QueueInfo>, ServerFnError> {
    console()?.queues().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "queue_action")]
pub async fn queue_action(
    csrf: Option<String>,
    name: String,
    action: String,
    concurrency: Option<String>,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?
        .queue_action(name, action, concurrency)
        .await
        .map_err(fail)
}
