//! The overview page: jobs by state, the queues, the last hour's throughput and the nodes.

use std::collections::BTreeMap;

use kickoff_app::console::overview::{MinutePoint, NodeInfo, Overview, OverviewConsole};
use kickoff_app::console::Refusal;

use super::{ms, operator, refused, ServerConsole};
use crate::accounts::Role;
use crate::engine::JobState;

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
