//! The attempts' history: outcomes and lateness per step, per queue or per kind, over the ranges
//! the rollups keep (an hour and a day per minute, a week and 30 days per hour).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn HistoryConsole>, ServerFnError> {
    super::port::console()
}

/// The ranges the history page offers: `(name, seconds, step in seconds)`. Steps of whole
/// hours read the hourly rollups (a day of minutes is 1,440 rows a queue and kind: the 24-hour
/// page in 15-minute steps took 51 ms at 20 of them at p95, in hours 3.4 ms).
pub const RANGES: [(&str, i64, i64); 4] = [
    ("1h", 3_600, 60),
    ("24h", 86_400, 3_600),
    ("7d", 604_800, 3_600),
    ("30d", 2_592_000, 14_400),
];

/// The history page's question, from the address bar.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryQuery {
    /// One of [`RANGES`]; absent: `1h`.
    pub range: Option<String>,
    /// `queue` (absent) or `kind`: one line per queue or kind.
    pub by: Option<String>,
    pub queue: Option<String>,
    pub kind: Option<String>,
    /// A schedule's name: only its runs.
    pub schedule: Option<String>,
}

/// One step of a series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryStep {
    pub at_ms: i64,
    pub completed: i64,
    /// Failed (to be retried), discarded and lost attempts.
    pub failed: i64,
    /// Cancelled attempts (skipped by an overlap or late-start policy, or cancelled by their
    /// handler).
    pub cancelled: i64,
    pub snoozed: i64,
    /// Attempts that started a second or more after their due time.
    pub late: i64,
    pub late_p50_ms: Option<f64>,
    pub late_p99_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistorySeries {
    /// The queue or kind (empty: everything).
    pub name: String,
    pub steps: Vec<HistoryStep>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryPage {
    pub now_ms: i64,
    pub range: String,
    pub by: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub step_secs: i64,
    pub series: Vec<HistorySeries>,
}

/// The share of a histogram's attempts that count as late: those in the buckets from a second
/// on (`LATE_FROM_BUCKET`: bucket 10 starts at 1,000 ms).
pub const LATE_FROM_MS: i64 = 1_000;

/// What the server provides to the history page.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait HistoryConsole: Send + Sync + 'static {
    async fn history(&self, query: HistoryQuery) -> Result<HistoryPage, Refusal>;
}

#[server(prefix = "/_console", endpoint = "history")]
pub async fn get_history(
    #[server(default)] query: HistoryQuery,
) -> Result<HistoryPage, ServerFnError> {
    console()?.history(query).await.map_err(fail)
}
