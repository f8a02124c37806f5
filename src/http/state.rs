//! What every handler can reach.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::broadcast;

use crate::accounts::Accounts;
use crate::audit::Auditor;
use crate::engine::metrics::Metrics;
use crate::engine::Client;
use crate::questions::QuestionService;

#[derive(Clone)]
pub struct AppState {
    pub client: Client,
    pub questions: QuestionService,
    /// Operator accounts of the dashboard.
    pub accounts: Accounts,
    /// Where every operator and API action is recorded.
    pub auditor: Auditor,
    /// Session cookies only over HTTPS (`KICKOFF_SECURE_COOKIES`).
    pub secure_cookies: bool,
    pub pool: PgPool,
    /// State changes of jobs on every node (see `engine::notifier`).
    pub events: broadcast::Sender<String>,
    /// The bearer token of the REST API.
    pub api_token: Arc<str>,
    pub node_id: Arc<str>,
    /// What the engine of this node measures (`/metrics`).
    pub metrics: Arc<Metrics>,
    /// Live-update streams open now (dashboard and API).
    pub sse_clients: Arc<AtomicUsize>,
    pub leptos_options: leptos::config::LeptosOptions,
    /// Cancelled when the server stops: long-lived responses (event streams) end with it.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl axum::extract::FromRef<AppState> for leptos::config::LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}
