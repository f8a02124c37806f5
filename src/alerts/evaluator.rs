//! The leader's alert evaluation: every few seconds, one transaction under an advisory lock
//! (evaluations never overlap, also when two nodes believe they lead for a moment) reads each
//! enabled rule's condition, opens an incident for each subject that started to hold (after
//! `for_secs`, when set), resolves each open incident whose subject stopped holding, and inserts
//! the notification of each as a `webhook` job in the same transaction. An incident and its
//! notification commit together or not at all, and the open incident is the record that it
//! fired: a new leader finds it and neither fires it again nor forgets to resolve it.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use sqlx::{PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

use super::payload::{self, Event};
use super::store::{self, IncidentRow, RuleRow};
use crate::engine::leadership::{while_leading, LeaderCheck};
use crate::engine::{Client, ClientError, NewJob};

/// How often the leader evaluates the rules unless configured (`KICKOFF_ALERT_INTERVAL_MS`, whose
/// default is this).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);

/// What one evaluation did.
#[derive(Debug, Default)]
pub struct Report {
    pub fired: Vec<IncidentRow>,
    pub resolved: Vec<IncidentRow>,
}

#[derive(Clone)]
pub struct Evaluator {
    pool: PgPool,
    client: Client,
    /// The queue notifications are inserted in.
    notify_queue: String,
}

impl Evaluator {
    pub fn new(pool: PgPool, client: Client, notify_queue: impl Into<String>) -> Self {
        Evaluator {
            pool,
            client,
            notify_queue: notify_queue.into(),
        }
    }

    /// Evaluates every enabled rule once.
    pub async fn run_once(&self) -> Result<Report, ClientError> {
        let mut report = Report::default();
        let mut tx = self.pool.begin().await?;
        store::lock_evaluation(&mut tx).await?;
        for rule in store::rules_enabled(&mut tx).await? {
            self.evaluate(&mut tx, &rule, &mut report).await?;
        }
        if !report.fired.is_empty() || !report.resolved.is_empty() {
            store::announce(&mut tx, report.fired.len(), report.resolved.len()).await?;
        }
        tx.commit().await?;
        for i in &report.fired {
            tracing::warn!(incident = i.id, rule = %i.rule, subject = %i.subject, "alert fired: {}", i.summary);
        }
        for i in &report.resolved {
            tracing::info!(incident = i.id, rule = %i.rule, subject = %i.subject, "alert resolved");
        }
        Ok(report)
    }

    async fn evaluate(
        &self,
        tx: &mut PgConnection,
        rule: &RuleRow,
        report: &mut Report,
    ) -> Result<(), ClientError> {
        let Some(condition) = rule.condition() else {
            return Ok(());
        };
        let holding = store::holding_now(tx, rule, condition).await?;
        let holding_now: HashSet<String> = holding.iter().map(|(s, _)| s.clone()).collect();
        let ripe = if rule.for_secs > 0 {
            let subjects: Vec<String> = holding_now.iter().cloned().collect();
            store::pending_update(tx, rule.id, &subjects, rule.for_secs).await?
        } else {
            holding_now.clone()
        };
        let ripe: Vec<(String, String)> = holding
            .iter()
            .filter(|(s, _)| ripe.contains(s))
            .cloned()
            .collect();
        let fired = store::incidents_fire(tx, rule.id, &ripe, condition.once_per_subject()).await?;
        for incident in fired {
            self.notify(tx, rule, &incident, Event::Fired).await?;
            report.fired.push(incident);
        }
        let open = store::open_incidents(tx, rule.id).await?;
        let subjects: Vec<String> = open.iter().map(|(_, s)| s.clone()).collect();
        let still = store::still_holding(tx, rule, condition, &subjects).await?;
        for (id, subject) in open {
            let holds = match &still {
                Some(still) => still.contains(&subject),
                None => holding_now.contains(&subject),
            };
            if holds {
                continue;
            }
            if let Some(incident) = store::incident_resolve(tx, id).await? {
                self.notify(tx, rule, &incident, Event::Resolved).await?;
                report.resolved.push(incident);
            }
        }
        Ok(())
    }

    /// Inserts the notification of `incident` (a webhook job) in the evaluation's transaction. A
    /// URL the webhook allowlist no longer takes is logged and skipped: the incident still shows
    /// on the dashboard.
    async fn notify(
        &self,
        tx: &mut PgConnection,
        rule: &RuleRow,
        incident: &IncidentRow,
        event: Event,
    ) -> Result<(), ClientError> {
        let Some(url) = &rule.notify_url else {
            return Ok(());
        };
        let job = NewJob::new(
            crate::webhooks::WEBHOOK_KIND,
            json!({ "url": url, "body": payload::body(rule, incident, event) }),
        )
        .with_queue(self.notify_queue.clone())
        .with_meta(json!({ "alert_incident": incident.id, "alert_event": event.as_str() }));
        match self.client.insert_with(tx, &job).await {
            Ok(_) => Ok(()),
            Err(e @ (ClientError::Invalid { .. } | ClientError::UnknownKind(_))) => {
                tracing::warn!(rule = %rule.name, error = %e, "the alert's notification cannot be sent");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Evaluates every `interval` while `is_leader()` says this node leads, until `stop`.
    pub async fn run(self, interval: Duration, is_leader: LeaderCheck, stop: CancellationToken) {
        while_leading(interval, is_leader, stop, || async {
            if let Err(e) = self.run_once().await {
                tracing::warn!(error = %e, "alert evaluation failed; trying again next time");
            }
        })
        .await
    }
}
