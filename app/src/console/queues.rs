//! Queues: their counts and settings, and an operator's pause, resume, concurrency and limits
//! across every node; job kinds paused on every node.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn QueuesConsole>, ServerFnError> {
    super::port::console()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueInfo {
    pub name: String,
    pub paused: bool,
    /// Per-node limit set by an operator; `None`: each node's configured limit.
    pub concurrency: Option<i32>,
    /// Per-node limits the running nodes were started with (`node: limit`), for reference.
    pub configured: Vec<(String, i64)>,
    /// The limits shared by every node, in words (`100/s per host, 20 on all nodes`); `None`:
    /// none.
    pub limits: Option<String>,
    /// Who set them: `config` (the nodes' KICKOFF_QUEUES) or `operator`.
    pub limits_by: String,
    /// The limits one by one, for the form: `100/s`, `host`, 20.
    pub rate: Option<String>,
    pub per: Option<String>,
    pub global_concurrency: Option<i32>,
    /// The current rate window's use, in words (`37 of 50 started, window ends in 0.4 s`).
    pub window_use: Option<String>,
    /// The available jobs the limits hold back now, in words (`950 held by the limits`).
    pub held: Option<String>,
    pub available: i64,
    pub scheduled: i64,
    pub executing: i64,
    pub retryable: i64,
    pub discarded: i64,
    pub completed: i64,
    /// Attempts that ended in each of the last 24 hours, oldest first (the current hour last).
    pub last_day: Vec<i64>,
}

/// A job kind the server runs (or one paused), and whether it is paused on every node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KindInfo {
    pub kind: String,
    pub paused: bool,
    /// When and by whom, in words (`since 10:02:11 UTC by ops`).
    pub paused_note: Option<String>,
}

/// The limits an operator sets on a queue (empty fields remove one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsForm {
    pub rate: Option<String>,
    pub per: Option<String>,
    pub global: Option<String>,
}

/// What the server provides to the queues page.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait QueuesConsole: Send + Sync + 'static {
    async fn queues(&self) -> Result<Vec<QueueInfo>, Refusal>;
    /// `pause`, `resume`, `concurrency` (with `concurrency`, empty for the nodes' default), or
    /// `limits` (with `limits`).
    async fn queue_action(
        &self,
        name: String,
        action: String,
        concurrency: Option<String>,
        limits: LimitsForm,
    ) -> Result<(), Refusal>;
    async fn kinds(&self) -> Result<Vec<KindInfo>, Refusal>;
    /// `pause` or `resume` a kind on every node.
    async fn kind_action(&self, kind: String, action: String) -> Result<(), Refusal>;
}

#[server(prefix = "/_console", endpoint = "queues")]
pub async fn list_queues() -> Result<Vec<QueueInfo>, ServerFnError> {
    console()?.queues().await.map_err(fail)
}

#[allow(clippy::too_many_arguments)]
#[server(prefix = "/_console", endpoint = "queue_action")]
pub async fn queue_action(
    csrf: Option<String>,
    name: String,
    action: String,
    concurrency: Option<String>,
    rate: Option<String>,
    per: Option<String>,
    global: Option<String>,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?
        .queue_action(name, action, concurrency, LimitsForm { rate, per, global })
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "kinds")]
pub async fn list_kinds() -> Result<Vec<KindInfo>, ServerFnError> {
    console()?.kinds().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "kind_action")]
pub async fn kind_action(
    csrf: Option<String>,
    kind: String,
    action: String,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    console()?.kind_action(kind, action).await.map_err(fail)
}
