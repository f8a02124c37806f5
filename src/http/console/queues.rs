//! Queues: their counts and settings (also on the overview), and an operator's pause, resume and
//! concurrency limit.

use std::collections::BTreeMap;

use kickoff_app::console::queues::{KindInfo, LimitsForm, QueueInfo, QueuesConsole};
use kickoff_app::console::Refusal;
use serde_json::Value;

use super::{conn, operator, refused, Act, ServerConsole};
use crate::accounts::Role;
use crate::engine::history::{HistoryFilter, HistoryGroup};
use crate::engine::limits::{QueueLimits, PARTITION_SCAN};
use crate::engine::HistoryQuery;
use crate::engine::JobState;
use crate::engine::LimitUse;
use chrono::DurationRound;

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
        limits: LimitsForm,
    ) -> Result<(), Refusal> {
        let parsed = match action.as_str() {
            "limits" => Some(limits_of(&limits)),
            _ => None,
        };
        let act = Act {
            action: format!("queue.{action}"),
            target: Some(match (concurrency.as_deref(), &parsed) {
                (Some(c), _) if action == "concurrency" => format!(
                    "queue {name} to {}",
                    if c.trim().is_empty() {
                        "the nodes' default"
                    } else {
                        c.trim()
                    }
                ),
                (_, Some(Ok(l))) => format!(
                    "queue {name} to {}",
                    l.describe().unwrap_or_else(|| "no limits".into())
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
                    "limits" => {
                        let limits = match parsed {
                            Some(Ok(l)) => l,
                            Some(Err(e)) => return Err(Refusal::invalid(e)),
                            None => unreachable!("parsed for this action"),
                        };
                        client
                            .set_queue_limits_with(conn(work).await?, &name, &limits)
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

    async fn kinds(&self) -> Result<Vec<KindInfo>, Refusal> {
        operator(Role::Viewer)?;
        let kinds = self.client.kinds_and_pauses().await.map_err(refused)?;
        Ok(kinds
            .into_iter()
            .map(|(kind, pause)| KindInfo {
                kind,
                paused: pause.is_some(),
                paused_note: pause.map(|p| {
                    format!(
                        "since {}{}",
                        p.paused_at.format("%Y-%m-%d %H:%M:%S UTC"),
                        p.paused_by
                            .map(|by| format!(" by {by}"))
                            .unwrap_or_default()
                    )
                }),
            })
            .collect())
    }

    async fn kind_action(&self, kind: String, action: String) -> Result<(), Refusal> {
        let act = Act {
            action: format!("kind.{action}"),
            target: Some(format!("kind {kind}")),
            filter: None,
        };
        self.act(
            act,
            |_| None,
            async |work| {
                let by = operator(Role::Operator)?.user.name;
                let client = &self.client;
                match action.as_str() {
                    "pause" => client
                        .pause_kind_with(conn(work).await?, &kind, Some(&by))
                        .await
                        .map(drop),
                    "resume" => client
                        .resume_kind_with(conn(work).await?, &kind)
                        .await
                        .map(drop),
                    other => {
                        return Err(Refusal::invalid(format!("`{other}` is not a kind action")))
                    }
                }
                .map_err(refused)
            },
        )
        .await
    }
}

/// A wait in the unit an operator reads best: `0.4 s`, `42 s`, `55 min`, `5 h`.
pub(super) fn seconds_in_words(secs: f64) -> String {
    let secs = secs.max(0.0);
    if secs < 10.0 {
        format!("{secs:.1} s")
    } else if secs < 120.0 {
        format!("{} s", secs.round())
    } else if secs < 2.0 * 3600.0 {
        format!("{} min", (secs / 60.0).round())
    } else {
        format!("{} h", (secs / 3600.0).round())
    }
}

/// A limited queue's current window and the jobs its limits hold back, in words.
fn describe_use(info: &QueueInfo, u: &LimitUse) -> (Option<String>, String) {
    let limit = info
        .rate
        .as_deref()
        .and_then(|r| r.split('/').next())
        .unwrap_or("?");
    let window_use = u.window_ends_in.map(|ends| {
        let ends = format!("window ends in {}", seconds_in_words(ends));
        match &info.per {
            None => format!("{} of {limit} started, {ends}", u.used),
            Some(per) => format!(
                "busiest {per} {} of {limit}, {} keys, {} started in all; {ends}",
                u.busiest, u.keys, u.used
            ),
        }
    });
    let more = if u.scanned >= PARTITION_SCAN as i64 && u.held == u.scanned {
        "+"
    } else {
        ""
    };
    let held = match u.held {
        0 => "none held by the limits".to_string(),
        1 => "1 available job held by the limits".to_string(),
        n => format!("{n}{more} available jobs held by the limits"),
    };
    (window_use, held)
}

/// The limits of the dashboard's form (empty fields: none).
fn limits_of(form: &LimitsForm) -> Result<QueueLimits, String> {
    let given = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let limits = QueueLimits {
        rate: given(&form.rate)
            .map(|r| r.parse())
            .transpose()
            .map_err(|e| format!("rate: {e}"))?,
        per: given(&form.per)
            .map(|p| p.parse())
            .transpose()
            .map_err(|e| format!("per: {e}"))?,
        global: given(&form.global)
            .map(|g| {
                g.parse::<u32>()
                    .map_err(|_| format!("global: `{g}` is not a whole number"))
            })
            .transpose()?,
    };
    limits.check()?;
    Ok(limits)
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
            limits: None,
            limits_by: "config".into(),
            rate: None,
            per: None,
            global_concurrency: None,
            window_use: None,
            held: None,
            available: 0,
            scheduled: 0,
            executing: 0,
            retryable: 0,
            discarded: 0,
            completed: 0,
            last_day: Vec::new(),
        };
        for s in settings {
            let info = infos
                .entry(s.name.clone())
                .or_insert_with(|| blank(&s.name));
            info.paused = s.paused;
            info.concurrency = s.concurrency;
            let limits = s.limits();
            info.limits = limits.describe();
            info.limits_by = s.limits_by.clone();
            info.rate = limits.rate.map(|r| r.to_string());
            info.per = limits.per.map(|p| p.to_string());
            info.global_concurrency = s.global_concurrency;
        }
        if infos.values().any(|i| i.limits.is_some()) {
            for u in self.client.queue_limit_use().await.map_err(refused)? {
                let Some(info) = infos.get_mut(&u.queue) else {
                    continue;
                };
                let (window_use, held) = describe_use(info, &u);
                info.window_use = window_use;
                info.held = Some(held);
            }
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
        for (queue, hours) in self.last_day_by_queue().await? {
            if let Some(info) = infos.get_mut(&queue) {
                info.last_day = hours;
            }
        }
        Ok(infos.into_values().collect())
    }

    /// The attempts that ended in each of the last 24 hours, per queue (from the rollups).
    async fn last_day_by_queue(&self) -> Result<Vec<(String, Vec<i64>)>, Refusal> {
        let now = self.client.db_now().await.map_err(refused)?;
        let to = now
            .duration_trunc(chrono::Duration::hours(1))
            .unwrap_or(now)
            + chrono::Duration::hours(1);
        let query = HistoryQuery {
            filter: HistoryFilter::default(),
            group: HistoryGroup::Queue,
            from: to - chrono::Duration::hours(24),
            to,
            step: std::time::Duration::from_secs(3600),
        };
        let points = self.client.history(&query).await.map_err(refused)?;
        let mut by_queue: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for p in points {
            by_queue
                .entry(p.series.clone())
                .or_default()
                .push(p.attempts());
        }
        Ok(by_queue.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::seconds_in_words;

    #[test]
    fn waits_read_in_the_unit_that_suits_them() {
        assert_eq!(seconds_in_words(0.43), "0.4 s");
        assert_eq!(seconds_in_words(-1.0), "0.0 s");
        assert_eq!(seconds_in_words(42.4), "42 s");
        assert_eq!(seconds_in_words(3310.5), "55 min");
        assert_eq!(seconds_in_words(5.0 * 3600.0 + 10.0), "5 h");
    }
}
