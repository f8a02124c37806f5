//! The audit page: the log of what operators did or tried, filtered.

use kickoff_app::console::audit::{AuditConsole, AuditPage, AuditQuery, AuditRow};
use kickoff_app::console::Refusal;

use super::{ms, operator, refused, ServerConsole, LIST_ROWS};
use crate::accounts::Role;
use crate::audit::AuditFilter;

#[async_trait::async_trait]
impl AuditConsole for ServerConsole {
    async fn audit(&self, query: AuditQuery) -> Result<AuditPage, Refusal> {
        let op = operator(Role::Viewer)?;
        let sight = op.sight(self.client.workers());
        let now_ms = self.now_ms().await?;
        let ok = match query.result.as_deref() {
            None | Some("") => None,
            Some("ok") => Some(true),
            Some("refused") => Some(false),
            Some(other) => {
                return Err(Refusal::invalid(format!(
                    "result: `{other}` is not ok or refused"
                )))
            }
        };
        let filter = AuditFilter {
            actor: query.actor.filter(|a| !a.trim().is_empty()),
            action: query.action.filter(|a| !a.trim().is_empty()),
            ok,
        };
        let rows = self
            .auditor
            .list(&filter, query.before, LIST_ROWS)
            .await
            .map_err(refused)?;
        let next_before = (rows.len() as i64 == LIST_ROWS)
            .then(|| rows.last().map(|r| r.id))
            .flatten();
        Ok(AuditPage {
            now_ms,
            next_before,
            rows: rows
                .into_iter()
                .map(|r| AuditRow {
                    id: r.id,
                    at_ms: ms(r.at),
                    actor: r.actor,
                    role: r.role,
                    action: r.action,
                    target: r.target,
                    filter: r.filter.map(|f| sight.audit_filter(f).to_string()),
                    count: r.count,
                    address: r.address,
                    ok: r.ok,
                    result: r.result,
                })
                .collect(),
        })
    }
}
