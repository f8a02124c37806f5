//! The audit log: who did what (or tried to) from the dashboard and the API.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn AuditConsole>, ServerFnError> {
    super::port::console()
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    pub id: i64,
    pub at_ms: i64,
    pub actor: String,
    pub role: String,
    pub action: String,
    pub target: Option<String>,
    /// A bulk action's filter, as compact JSON.
    pub filter: Option<String>,
    pub count: Option<i64>,
    pub address: Option<String>,
    pub ok: bool,
    pub result: String,
}

/// The audit page's filter, from the address bar.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditQuery {
    pub actor: Option<String>,
    /// Actions starting with this (`job.`, `jobs.bulk`, `queue.`, `session.`).
    pub action: Option<String>,
    /// `ok` or `refused`.
    pub result: Option<String>,
    pub before: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditPage {
    pub now_ms: i64,
    pub rows: Vec<AuditRow>,
    pub next_before: Option<i64>,
}

/// What the server provides to the audit page.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait AuditConsole: Send + Sync + 'static {
    async fn audit(&self, query: AuditQuery) -> Result<AuditPage, Refusal>;
}

#[server(prefix = "/_console", endpoint = "audit")]
pub async fn list_audit(#[server(default)] query: AuditQuery) -> Result<AuditPage, ServerFnError> {
    console()?.audit(query).await.map_err(fail)
}
