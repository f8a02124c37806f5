//! Where the dashboard reads its lists, charts and counts: the primary, or a standby
//! (`KICKOFF_READ_DATABASE_URL`) that spares the primary those reads. Only reads that tolerate
//! staleness go there: the overview (counts per state, throughput, queues, nodes) and the jobs
//! lists. A job's own page, every action and its guard, and whatever the REST API answers read
//! the primary, so that what an operator just did shows as done. When the standby is behind by
//! more than `KICKOFF_READ_MAX_LAG_MS`, the pages that read it say by how much.

use std::time::Duration;

use crate::engine::Client;

#[derive(Clone)]
pub struct Reader {
    /// A client on the standby's pool (or the primary's): for reads only.
    pub client: Client,
    /// Behind by more than this, the pages say so; `None` on the primary.
    bound: Option<Duration>,
}

impl Reader {
    /// Reads on the primary, as `client` does.
    pub fn primary(client: Client) -> Reader {
        Reader {
            client,
            bound: None,
        }
    }

    /// Reads on a standby through `client`, saying so past `bound`.
    pub fn replica(client: Client, bound: Duration) -> Reader {
        Reader {
            client,
            bound: Some(bound),
        }
    }

    /// How far behind the standby is, in milliseconds, when past the bound: what a page shows.
    /// `None` on the primary, within the bound, or when the standby cannot be asked (the read
    /// itself then fails and says so).
    pub async fn lag_past_bound(&self) -> Option<i64> {
        let bound = self.bound?;
        match self.client.replica_lag_ms().await {
            Ok(Some(ms)) if ms > bound.as_millis() as f64 => Some(ms.round() as i64),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "could not ask the read replica how far behind it is");
                None
            }
        }
    }
}
