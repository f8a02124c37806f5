//! The overview page's data: jobs by state, the queues, the throughput of the last hour and the
//! nodes. It reads across the areas (jobs, queues, the cluster), so it has a module of its own.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn OverviewConsole>, ServerFnError> {
    super::port::console()
}

use super::queues::QueueInfo;

/// The overview page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    /// How far behind the read replica these counts are, in ms, when past the bound set for it.
    pub replica_lag_ms: Option<i64>,
    pub now_ms: i64,
    /// Counts per state, in [`STATES`](super::jobs::STATES) order.
    pub states: Vec<(String, i64)>,
    pub queues: Vec<QueueInfo>,
    /// Completed and failed attempts per minute, oldest first.
    pub throughput: Vec<MinutePoint>,
    /// Every attempt's lateness per minute over the last hour (p50 and p99), oldest first.
    pub lateness: Vec<super::history::HistoryStep>,
    /// The lateness p50 and p99 over the whole hour.
    pub late_p50_ms: Option<f64>,
    pub late_p99_ms: Option<f64>,
    pub nodes: Vec<NodeInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinutePoint {
    pub minute_ms: i64,
    pub completed: i64,
    pub failed: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: String,
    pub hostname: String,
    pub pid: i32,
    pub started_ms: i64,
    pub heartbeat_ms: i64,
    pub leader: bool,
}

/// What the server provides to the overview page.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait OverviewConsole: Send + Sync + 'static {
    async fn overview(&self) -> Result<Overview, Refusal>;
}

#[server(prefix = "/_console", endpoint = "overview")]
pub async fn get_overview() -> Result<Overview, ServerFnError> {
    console()?.overview().await.map_err(fail)
}
