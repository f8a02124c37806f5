//! The audit log: every operator and API action (who, role, action, target, bulk filter and
//! count, from which address, when, result), stored append-only (the database refuses updates and
//! deletes of its rows) and listed for the dashboard.

pub mod store;

use std::net::IpAddr;

use serde_json::Value;
use sqlx::PgPool;

pub use store::{AuditFilter, AuditRow};

/// One action to record.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub actor: String,
    pub role: String,
    pub action: String,
    pub target: Option<String>,
    pub filter: Option<Value>,
    pub count: Option<i64>,
    pub address: Option<IpAddr>,
    /// `Ok(())`, or why the action was refused.
    pub result: Result<(), String>,
}

/// The longest target or result kept (longer ones are cut).
const MAX_TEXT: usize = 2000;

fn cut(s: &str) -> String {
    s.chars().take(MAX_TEXT).collect()
}

/// Records and lists audit entries. Cheap to clone.
#[derive(Clone)]
pub struct Auditor {
    pool: PgPool,
}

impl Auditor {
    pub fn new(pool: PgPool) -> Self {
        Auditor { pool }
    }

    /// Records an entry. A failure to record is logged, not returned: the action itself has
    /// already happened, and refusing to answer would hide its result from the operator.
    pub async fn record(&self, entry: AuditEntry) {
        let (ok, result) = match &entry.result {
            Ok(()) => (true, "ok".to_string()),
            Err(why) => (false, cut(why)),
        };
        let target = entry.target.as_deref().map(cut);
        if let Err(e) = store::audit_insert(
            &self.pool,
            &entry.actor,
            &entry.role,
            &entry.action,
            target.as_deref(),
            entry.filter.as_ref(),
            entry.count,
            entry.address,
            ok,
            &result,
        )
        .await
        {
            tracing::error!(error = %e, action = %entry.action, actor = %entry.actor,
                            "could not record an audit entry");
        }
    }

    pub async fn list(
        &self,
        filter: &AuditFilter,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AuditRow>, sqlx::Error> {
        store::audit_list(&self.pool, filter, before, limit.clamp(1, 500)).await
    }
}
