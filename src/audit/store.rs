//! SQL of the `audit_log` table (append-only: the database refuses updates and deletes).

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgExecutor, Postgres, QueryBuilder};

/// One recorded action.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct AuditRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub role: String,
    pub action: String,
    pub target: Option<String>,
    pub filter: Option<Value>,
    pub count: Option<i64>,
    /// The client's address as text.
    pub address: Option<String>,
    pub ok: bool,
    pub result: String,
}

/// Filters of the audit listing.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    /// Actions starting with this (`job.` for every single-job action).
    pub action: Option<String>,
    /// Only refused (`Some(false)`) or only successful (`Some(true)`) actions.
    pub ok: Option<bool>,
}

#[allow(clippy::too_many_arguments)]
pub async fn audit_insert<'e>(
    db: impl PgExecutor<'e>,
    actor: &str,
    role: &str,
    action: &str,
    target: Option<&str>,
    filter: Option<&Value>,
    count: Option<i64>,
    address: Option<IpAddr>,
    ok: bool,
    result: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO audit_log (actor, role, action, target, filter, count, address, ok, result)
         VALUES ($1, $2, $3, $4, $5, $6, $7::text::inet, $8, $9)",
    )
    .bind(actor)
    .bind(role)
    .bind(action)
    .bind(target)
    .bind(filter)
    .bind(count)
    .bind(address.map(|a| a.to_string()))
    .bind(ok)
    .bind(result)
    .execute(db)
    .await?;
    Ok(())
}

/// Pushes `, recorded AS (INSERT INTO audit_log ... SELECT ... FROM <from>)`: a common table
/// expression that writes the entry once for each row of `from` (the change it records), in the
/// statement being built, so the two commit together or not at all.
#[allow(clippy::too_many_arguments)]
pub fn audit_insert_with_row_of(
    qb: &mut QueryBuilder<'_, Postgres>,
    from: &str,
    actor: &str,
    role: &str,
    action: &str,
    target: Option<&str>,
    address: Option<IpAddr>,
    result: &str,
) {
    qb.push(
        ", recorded AS (
             INSERT INTO audit_log (actor, role, action, target, address, ok, result)
             SELECT ",
    )
    .push_bind(actor.to_string())
    .push(", ")
    .push_bind(role.to_string())
    .push(", ")
    .push_bind(action.to_string())
    .push(", ")
    .push_bind(target.map(str::to_string))
    .push(", ")
    .push_bind(address.map(|a| a.to_string()))
    .push("::text::inet, true, ")
    .push_bind(result.to_string())
    .push(" FROM ")
    .push(from)
    .push(")");
}

/// A LIKE pattern matching what starts with `prefix` (its own `%`, `_` and `\` taken literally).
fn like_prefix(prefix: &str) -> String {
    let mut p = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// The newest entries first, after the keyset cursor `before` (an id).
pub async fn audit_list<'e>(
    db: impl PgExecutor<'e>,
    filter: &AuditFilter,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditRow>, sqlx::Error> {
    // The audit log grows slowly (people's actions): one generic statement is fine here.
    sqlx::query_as(
        "SELECT id, at, actor, role, action, target, filter, count, host(address) AS address, ok,
                result
         FROM audit_log
         WHERE ($1::text IS NULL OR actor = $1)
           AND ($2::text IS NULL OR action LIKE $2 ESCAPE '\\')
           AND ($3::boolean IS NULL OR ok = $3)
           AND ($4::bigint IS NULL OR id < $4)
         ORDER BY id DESC
         LIMIT $5",
    )
    .bind(&filter.actor)
    .bind(filter.action.as_deref().map(like_prefix))
    .bind(filter.ok)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}
