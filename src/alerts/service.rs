//! Managing rules (admins) and incidents (acknowledging: operators), inside the caller's
//! transaction so that each change commits with its audit entry.

use crate::db::Db;
use sqlx::PgConnection;

use super::rules::{RuleRow, RuleSpec, MAX_RULES};
use super::store::{self, IncidentRow};
use crate::engine::{Client, NewJob};

#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("{0}")]
    Invalid(String),
    /// The webhook worker refused the notification's URL (the allowlist, say).
    #[error("notify_url: {0}")]
    NotifyRefused(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// The most incidents one list returns.
pub const MAX_PAGE: i64 = 500;

#[derive(Clone)]
pub struct Alerts {
    pool: Db,
    client: Client,
}

impl Alerts {
    pub fn new(pool: Db, client: Client) -> Self {
        Alerts { pool, client }
    }

    pub async fn rules(&self) -> Result<Vec<RuleRow>, AlertError> {
        Ok(store::rule_list(&self.pool).await?)
    }

    /// Makes a rule. Its `notify_url` must be one a webhook job may call (the same allowlist).
    pub async fn create_rule_with(
        &self,
        conn: &mut PgConnection,
        spec: RuleSpec,
        by: Option<&str>,
    ) -> Result<RuleRow, AlertError> {
        let rule = spec.check().map_err(AlertError::Invalid)?;
        if let Some(url) = &rule.notify_url {
            let probe = NewJob::new(
                crate::webhooks::WEBHOOK_KIND,
                serde_json::json!({ "url": url, "body": {} }),
            );
            self.client
                .validate_with(&mut *conn, &probe)
                .await
                .map_err(|e| match e {
                    crate::engine::ClientError::Database(e) => AlertError::Database(e),
                    e => AlertError::NotifyRefused(e.to_string()),
                })?;
        }
        if store::rule_count(&mut *conn).await? >= super::rules::MAX_RULES {
            return Err(AlertError::Conflict(format!(
                "at most {MAX_RULES} alert rules: delete one first"
            )));
        }
        match store::rule_insert(&mut *conn, &rule, by).await {
            Ok(row) => Ok(row),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(AlertError::Conflict(
                format!("an alert rule named {} exists already", rule.name),
            )),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn set_enabled_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        enabled: bool,
    ) -> Result<RuleRow, AlertError> {
        store::rule_set_enabled(conn, id, enabled)
            .await?
            .ok_or_else(|| AlertError::NotFound(format!("alert rule {id}")))
    }

    pub async fn delete_rule_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
    ) -> Result<RuleRow, AlertError> {
        store::rule_delete(conn, id)
            .await?
            .ok_or_else(|| AlertError::NotFound(format!("alert rule {id}")))
    }

    /// Incidents, newest first (`firing`: only the open ones, or only the resolved ones).
    pub async fn incidents(
        &self,
        firing: Option<bool>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<IncidentRow>, AlertError> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(AlertError::Invalid(format!("limit: 1 to {MAX_PAGE}")));
        }
        Ok(store::incident_list(&self.pool, firing, before, limit).await?)
    }

    /// Acknowledges an incident (once: a second acknowledgement is refused with who did it).
    pub async fn acknowledge_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        by: &str,
    ) -> Result<IncidentRow, AlertError> {
        if let Some(done) = store::incident_acknowledge(&mut *conn, id, by).await? {
            return Ok(done);
        }
        match store::incident_get(&mut *conn, id).await? {
            None => Err(AlertError::NotFound(format!("incident {id}"))),
            Some(i) => Err(AlertError::Conflict(format!(
                "incident {id} was acknowledged already by {}",
                i.acknowledged_by.unwrap_or_default()
            ))),
        }
    }

    /// Each rule's name, condition, incidents firing now and incidents opened since the rule was
    /// made (a counter: pruning resolved incidents does not lower it), for `/metrics`.
    pub async fn counts(&self) -> Result<Vec<(String, String, i64, i64)>, AlertError> {
        Ok(store::incident_counts(&self.pool).await?)
    }
}
