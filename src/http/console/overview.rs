//! The overview page: jobs by state, the queues, the last hour's throughput and the nodes.

use std::collections::BTreeMap;

use kickoff_app::console::overview::{MinutePoint, NodeInfo, Overview, OverviewConsole};
use kickoff_app::console::Refusal;

use super::{ms, operator, refused, ServerConsole};
use crate::accounts::Role;
use crate::engine::history::{late_quantile, HistoryFilter, HistoryGroup, LATE_BUCKETS};
use crate::engine::HistoryQuery;
use crate::engine::JobState;
use chrono::DurationRound;
use kickoff_app::console::history::HistoryStep;

impl ServerConsole {
    /// The lateness of every attempt that ended in the last hour: per minute, and over the hour.
    async fn lateness(&self) -> Result<(Vec<HistoryStep>, Option<f64>, Option<f64>), Refusal> {
        let reader = &self.reader.client;
        let now = reader.db_now().await.map_err(refused)?;
        let to = now
            .duration_trunc(chrono::Duration::minutes(1))
            .unwrap_or(now)
            + chrono::Duration::minutes(1);
        let query = HistoryQuery {
            filter: HistoryFilter::default(),
            group: HistoryGroup::All,
            from: to - chrono::Duration::hours(1),
            to,
            step: std::time::Duration::from_secs(60),
        };
        let points = reader.history(&query).await.map_err(refused)?;
        let mut hour = vec![0i64; LATE_BUCKETS];
        for p in &points {
            for (sum, n) in hour.iter_mut().zip(&p.late_buckets) {
                *sum += n;
            }
        }
        let steps = super::history::series(points)
            .into_iter()
            .flat_map(|s| s.steps)
            .collect();
        Ok((steps, late_quantile(&hour, 0.5), late_quantile(&hour, 0.99)))
    }
}

#[async_trait::async_trait]
impl OverviewConsole for ServerConsole {
    async fn overview(&self) -> Result<Overview, Refusal> {
        operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let reader = &self.reader.client;
        let counts = reader.counts().await.map_err(refused)?;
        let mut states: BTreeMap<&'static str, i64> =
            JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        for (_, st, n) in &counts {
            *states.entry(st.as_str()).or_default() += n;
        }
        let throughput = reader
            .throughput(60)
            .await
            .map_err(refused)?
            .into_iter()
            .map(|m| MinutePoint {
                minute_ms: ms(m.minute),
                completed: m.completed,
                failed: m.failed,
            })
            .collect();
        let (lateness, late_p50_ms, late_p99_ms) = self.lateness().await?;
        let (nodes, leader) = reader.nodes().await.map_err(refused)?;
        let queues = self.queue_infos(&counts, &nodes).await?;
        let leader = leader.map(|l| l.node_id);
        Ok(Overview {
            replica_lag_ms: self.reader.lag_past_bound().await,
            now_ms,
            states: JobState::ALL
                .iter()
                .map(|s| (s.as_str().to_string(), states[s.as_str()]))
                .collect(),
            queues,
            throughput,
            lateness,
            late_p50_ms,
            late_p99_ms,
            nodes: nodes
                .into_iter()
                .map(|n| NodeInfo {
                    leader: leader.as_deref() == Some(n.id.as_str()),
                    id: n.id,
                    hostname: n.hostname,
                    pid: n.pid,
                    started_ms: ms(n.started_at),
                    heartbeat_ms: ms(n.heartbeat_at),
                })
                .collect(),
        })
    }
}
