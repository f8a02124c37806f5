//! Queues: their counts and settings (also on the overview), and an operator's pause, resume and
//! concurrency limit.

use std::collections::BTreeMap;

use kickoff_app::console::queues::{QueueInfo, QueuesConsole};
use kickoff_app::console::Refusal;
use serde_json::Value;

use super::{conn, operator, refused, Act, ServerConsole};
use crate::accounts::Role;
use crate::engine::JobState;

#[async_trait::async_trait]
impl QueuesConsole for ServerConsole {
    async fn queues(&self) -> Result<Vec<QueueInfo>, Refusal> {
        operator(Role::Viewer)?;
        let counts = self.client.counts().await.map_err(refused)?;
        let (nodes, _) = self.client.nodes().await.map_err(refused)?;
        self.queue_infos(&counts, &nodes).await
    }

    async fn queue_action(
        &self,
        name: String,
        action: String,
        concurrency: Option<String>,
    ) -> Result<(), Refusal> {
        let act = Act {
            action: format!("queue.{action}"),
            target: Some(match concurrency.as_deref() {
                Some(c) if action == "concurrency" => format!(
                    "queue {name} to {}",
                    if c.trim().is_empty() {
                        "the nodes' default"
                    } else {
                        c.trim()
                    }
                ),
                _ => format!("queue {name}"),
            }),
            filter: None,
        };
        self.act(
            act,
            |_| None,
            async |work| {
                let client = &self.client;
                let done = match action.as_str() {
                    "pause" => {
                        client
                            .set_queue_paused_with(conn(work).await?, &name, true)
                            .await
                    }
                    "resume" => {
                        client
                            .set_queue_paused_with(conn(work).await?, &name, false)
                            .await
                    }
                    "concurrency" => {
                        let limit = match concurrency.as_deref().map(str::trim) {
                            None | Some("") => None,
                            Some(s) => Some(s.parse::<i32>().map_err(|_| {
                                Refusal::invalid(format!(
                                    "concurrency: `{s}` is not a whole number"
                                ))
                            })?),
                        };
                        client
                            .set_queue_concurrency_with(conn(work).await?, &name, limit)
                            .await
                    }
                    other => {
                        return Err(Refusal::invalid(format!("`{other}` is not a queue action")))
                    }
                };
                done.map(drop).map_err(refused)
            },
        )
        .await
    }
}

impl ServerConsole {
    /// Every queue with a row, a job, or a node serving it, with its counts.
    pub(super) async fn queue_infos(
        &self,
        counts: &[(String, JobState, i64)],
        nodes: &[crate::engine::NodeRow],
    ) -> Result<Vec<QueueInfo>, Refusal> {
        let settings = self.client.queues().await.map_err(refused)?;
        let mut infos: BTreeMap<String, QueueInfo> = BTreeMap::new();
        let blank = |name: &str| QueueInfo {
            name: name.to_string(),
            paused: false,
            concurrency: None,
            configured: Vec::new(),
            available: 0,
            scheduled: 0,
            executing: 0,
            retryable: 0,
            discarded: 0,
            completed: 0,
        };
        for s in settings {
            let info = infos
                .entry(s.name.clone())
                .or_insert_with(|| blank(&s.name));
            info.paused = s.paused;
            info.concurrency = s.concurrency;
        }
        for (queue, state, n) in counts {
            let info = infos.entry(queue.clone()).or_insert_with(|| blank(queue));
            match state {
                JobState::Available => info.available += n,
                JobState::Scheduled => info.scheduled += n,
                JobState::Executing => info.executing += n,
                JobState::Retryable => info.retryable += n,
                JobState::Discarded => info.discarded += n,
                JobState::Completed => info.completed += n,
                JobState::Cancelled => {}
            }
        }
        for node in nodes {
            if let Value::Object(queues) = &node.queues {
                for (queue, limit) in queues {
                    let info = infos.entry(queue.clone()).or_insert_with(|| blank(queue));
                    if let Some(limit) = limit.as_i64() {
                        info.configured.push((node.id.clone(), limit));
                    }
                }
            }
        }
        Ok(infos.into_values().collect())
    }
}
