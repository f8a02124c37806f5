//! The leader's alert evaluation: every few seconds, one transaction under an advisory lock
//! (evaluations never overlap, also when two nodes believe they lead for a moment) reads each
//! enabled rule's condition, opens an incident for each subject that started to hold (after
//! `for_secs`, when set), resolves each open incident whose subject stopped holding, and inserts
//! their notifications (`notifier`) in the same transaction. An incident and its notification
//! commit together or not at all, and the open incident is the record that it fired: a new leader
//! finds it and neither fires it again nor forgets to resolve it.
//!
//! Bounded work per rule, however long the system ran (issue 30): at most
//! [`SUBJECTS_PER_RULE`](super::store::conditions::SUBJECTS_PER_RULE) subjects fire, a page of at most
//! [`OPEN_INCIDENTS_PER_EVALUATION`] open incidents is checked (the next page the next time,
//! round and round, so an incident resolves within a few evaluations of its subject going), and
//! at most eleven notifications go out per event. After the evaluation commits, the upkeep:
//! notification marks settled, and incidents resolved longer ago than the retention (the
//! pruner's `KICKOFF_RETENTION_HOURS`) deleted.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::db::Db;
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;

use super::notifier::Notifier;
use super::payload::Event;
use super::rules::{Condition, RuleRow, ONCE_WINDOW};
use super::store::{self, conditions, notifications as notification_store, IncidentRow};
use crate::engine::leadership::{while_leading, LeaderCheck};
use crate::engine::maintenance::pruner::DEFAULT_RETENTION;
use crate::engine::{Client, ClientError};

/// How often the leader evaluates the rules unless configured (`KICKOFF_ALERT_INTERVAL_MS`, whose
/// default is this).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
/// How many open incidents of a rule one evaluation checks.
pub const OPEN_INCIDENTS_PER_EVALUATION: i64 = 500;
/// Most rows one pruning statement deletes, and most statements per evaluation (so an upkeep that
/// fell behind catches up over a few evaluations, none of them long).
const PRUNE_BATCH: i64 = 1_000;
const PRUNE_BATCHES: usize = 10;

/// What one evaluation did.
#[derive(Debug, Default)]
pub struct Report {
    pub fired: Vec<IncidentRow>,
    pub resolved: Vec<IncidentRow>,
    /// Notification jobs inserted.
    pub notifications: usize,
    /// Resolved incidents deleted for their age.
    pub pruned: u64,
}

#[derive(Clone)]
pub struct Evaluator {
    pool: Db,
    /// Reads the jobs an incident quotes (their secrets are hidden from it).
    client: Client,
    notifier: Notifier,
    /// How long a resolved incident is kept. Default: the pruner's (24 h).
    retention: Duration,
    /// Per rule, the id of the last open incident checked: where the next page starts (absent:
    /// from the first). In memory: a new leader starts from the first, which changes only the
    /// order incidents are checked in.
    pages: Arc<Mutex<HashMap<i64, i64>>>,
}

impl Evaluator {
    /// Notifications go in `notify_queue`.
    pub fn new(pool: Db, client: Client, notify_queue: impl Into<String>) -> Self {
        Evaluator {
            pool,
            client: client.clone(),
            notifier: Notifier::new(client, notify_queue),
            retention: DEFAULT_RETENTION,
            pages: Arc::default(),
        }
    }

    /// Keeps resolved incidents for `retention` (the pruner's, `KICKOFF_RETENTION_HOURS`).
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Evaluates every enabled rule once, then does the upkeep.
    pub async fn run_once(&self) -> Result<Report, ClientError> {
        let mut report = Report::default();
        let mut tx = self.pool.begin().await?;
        store::lock_evaluation(&mut tx).await?;
        let rules = store::rules_enabled(&mut tx).await?;
        self.pages
            .lock()
            .expect("pages")
            .retain(|id, _| rules.iter().any(|r| r.id == *id));
        for rule in &rules {
            self.evaluate(&mut tx, rule, &mut report).await?;
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
        report.pruned = self.upkeep().await?;
        Ok(report)
    }

    /// A discarded job's incident quotes its last error, and every role reads incidents (and a
    /// notification takes it to a URL outside): the job's secrets are hidden in it as from a
    /// reader (`engine::sight`), whoever made the job.
    async fn hide_job_secrets(
        &self,
        tx: &mut PgConnection,
        holding: &mut [(String, String)],
    ) -> Result<(), ClientError> {
        for (subject, summary) in holding.iter_mut() {
            let Some(id) = subject.strip_prefix("job ").and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some(job) = Client::find_with(tx, crate::engine::JobId(id)).await? {
                *summary =
                    crate::engine::sight::secrets(self.client.workers(), &job).scrub(summary);
            }
        }
        Ok(())
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
        let mut holding = conditions::holding_now(tx, rule, condition).await?;
        if matches!(condition, Condition::JobDiscarded) {
            self.hide_job_secrets(tx, &mut holding).await?;
        }
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
        report.notifications += self.notifier.notify(tx, rule, &fired, Event::Fired).await?;
        report.fired.extend(fired);

        let after = self.pages.lock().expect("pages").get(&rule.id).copied();
        let open = store::open_incidents_page(
            tx,
            rule.id,
            after.unwrap_or(0),
            OPEN_INCIDENTS_PER_EVALUATION,
        )
        .await?;
        // A short page was the last: the next one starts from the first again.
        let next = match open.last() {
            Some((id, _)) if open.len() as i64 == OPEN_INCIDENTS_PER_EVALUATION => *id,
            _ => 0,
        };
        self.pages.lock().expect("pages").insert(rule.id, next);
        let subjects: Vec<String> = open.iter().map(|(_, s)| s.clone()).collect();
        let still = conditions::still_holding(tx, rule, condition, &subjects).await?;
        let stopped: Vec<i64> = open
            .iter()
            .filter(|(_, subject)| match &still {
                Some(still) => !still.contains(subject),
                None => !holding_now.contains(subject),
            })
            .map(|(id, _)| *id)
            .collect();
        let resolved = store::incidents_resolve(tx, &stopped).await?;
        report.notifications += self
            .notifier
            .notify(tx, rule, &resolved, Event::Resolved)
            .await?;
        report.resolved.extend(resolved);
        Ok(())
    }

    /// Settles the marks of finished notifications, deletes incidents resolved longer ago than
    /// the retention, and the marks of notifications the pruner deleted; returns how many
    /// incidents it deleted. Each statement on its own: none needs the evaluation's lock.
    async fn upkeep(&self) -> Result<u64, ClientError> {
        notification_store::notifications_settle(&self.pool).await?;
        let once: Vec<Condition> = Condition::ALL
            .into_iter()
            .filter(|c| c.once_per_subject())
            .collect();
        let mut pruned = 0;
        for _ in 0..PRUNE_BATCHES {
            let n =
                store::incidents_prune(&self.pool, self.retention, &once, ONCE_WINDOW, PRUNE_BATCH)
                    .await?;
            pruned += n;
            if (n as i64) < PRUNE_BATCH {
                break;
            }
        }
        notification_store::notifications_prune(&self.pool, self.retention, PRUNE_BATCH).await?;
        if pruned > 0 {
            tracing::info!(incidents = pruned, "pruned resolved alert incidents");
        }
        Ok(pruned)
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
