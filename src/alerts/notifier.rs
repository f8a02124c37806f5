//! The notifications of an evaluation. For each rule and event (fired, resolved), the first
//! [`NOTIFICATIONS_PER_RULE`] incidents notify one by one and the rest in one digest ("and N
//! more"), so a burst (a thousand jobs discarded at once) makes eleven calls, not a thousand. Each
//! notification is a `webhook` job inserted in the evaluation's transaction and marked there as a
//! notification (`store::notifications`), so that no rule ever takes it for a subject: an
//! undeliverable notification is a discarded job, and a rule that fired on it would notify again,
//! forever (issue 30).

use serde_json::{json, Value};
use sqlx::PgConnection;

use super::payload::{self, Event};
use super::rules::RuleRow;
use super::store::{notifications as notification_store, IncidentRow};
use crate::engine::{Client, ClientError, NewJob};

/// How many incidents of one rule and event notify one by one in an evaluation; the rest make one
/// digest.
pub const NOTIFICATIONS_PER_RULE: usize = 10;

#[derive(Clone)]
pub struct Notifier {
    client: Client,
    /// The queue notifications are inserted in.
    queue: String,
}

impl Notifier {
    pub fn new(client: Client, queue: impl Into<String>) -> Self {
        Notifier {
            client,
            queue: queue.into(),
        }
    }

    /// Inserts the notifications of `incidents` (those one evaluation fired, or resolved, for
    /// `rule`) in the evaluation's transaction; returns how many jobs. A URL the webhook allowlist
    /// no longer takes is logged and skipped: the incidents still show on the dashboard.
    pub async fn notify(
        &self,
        tx: &mut PgConnection,
        rule: &RuleRow,
        incidents: &[IncidentRow],
        event: Event,
    ) -> Result<usize, ClientError> {
        let Some(url) = &rule.notify_url else {
            return Ok(0);
        };
        let (each, rest) = incidents.split_at(incidents.len().min(NOTIFICATIONS_PER_RULE));
        let mut inserted = 0;
        for incident in each {
            let meta = json!({ "alert_incident": incident.id, "alert_event": event.as_str() });
            let body = payload::body(rule, incident, event);
            if !self.insert(tx, rule, url, body, meta).await? {
                return Ok(inserted);
            }
            inserted += 1;
        }
        if !rest.is_empty() {
            let meta = json!({ "alert_rule": rule.id, "alert_event": event.as_str(),
                               "alert_digest": rest.len() });
            let body = payload::digest(rule, rest, event);
            if self.insert(tx, rule, url, body, meta).await? {
                inserted += 1;
            }
        }
        Ok(inserted)
    }

    /// Inserts and marks one notification; false when its URL is refused.
    async fn insert(
        &self,
        tx: &mut PgConnection,
        rule: &RuleRow,
        url: &str,
        body: Value,
        meta: Value,
    ) -> Result<bool, ClientError> {
        let job = NewJob::new(
            crate::webhooks::WEBHOOK_KIND,
            json!({ "url": url, "body": body }),
        )
        .with_queue(self.queue.clone())
        .with_meta(meta);
        // In a savepoint: the insert's rules refuse a job by an error of the database, and the
        // evaluation goes on in this transaction without it.
        let mut savepoint = sqlx::Connection::begin(&mut *tx).await?;
        let inserted = self.client.insert_own_with(&mut savepoint, &job).await;
        if inserted.is_ok() {
            savepoint.commit().await?;
        } else {
            savepoint.rollback().await?;
        }
        match inserted {
            Ok(inserted) => {
                notification_store::notification_mark(tx, inserted.job.id.0).await?;
                Ok(true)
            }
            Err(e) if e.is_refusal() => {
                tracing::warn!(rule = %rule.name, error = %e, "the alert's notification cannot be sent");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}
