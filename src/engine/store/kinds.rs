//! SQL of the kinds: those paused on every node (`kind_pauses`), and those the nodes run
//! (`kickoff_kinds`, which a SQL caller's insert is checked against).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

/// A kind paused on every node.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct KindPause {
    pub kind: String,
    pub paused_at: DateTime<Utc>,
    /// Who paused it (an operator, a token, the command line), when known.
    pub paused_by: Option<String>,
}

/// Pauses `kind` (a second pause keeps the first one's time and author). Returns the row.
pub async fn kind_pause<'e>(
    db: impl PgExecutor<'e>,
    kind: &str,
    by: Option<&str>,
) -> Result<KindPause, sqlx::Error> {
    sqlx::query_as(
        "INSERT INTO kind_pauses (kind, paused_by) VALUES ($1, $2)
         ON CONFLICT (kind) DO UPDATE SET kind = excluded.kind
         RETURNING *",
    )
    .bind(kind)
    .bind(by)
    .fetch_one(db)
    .await
}

/// Resumes `kind`. Returns whether it was paused.
pub async fn kind_resume<'e>(db: impl PgExecutor<'e>, kind: &str) -> Result<bool, sqlx::Error> {
    let r = sqlx::query("DELETE FROM kind_pauses WHERE kind = $1")
        .bind(kind)
        .execute(db)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// Every paused kind, by name.
pub async fn kind_pause_list<'e>(db: impl PgExecutor<'e>) -> Result<Vec<KindPause>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM kind_pauses ORDER BY kind")
        .fetch_all(db)
        .await
}

/// The paused kinds as one snapshot, with the version of the set (see [`kind_pause_snapshot`]).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct KindPauses {
    /// Raised by every change of `kind_pauses` under one row's lock (migration
    /// `20261214000301`): a snapshot with a larger version holds every change of one with a
    /// smaller one.
    pub version: i64,
    /// The paused kinds, by name.
    pub kinds: Vec<String>,
}

/// The paused kinds and their version, read in one statement (one snapshot: the version says
/// exactly which changes the list holds).
pub async fn kind_pause_snapshot<'e>(db: impl PgExecutor<'e>) -> Result<KindPauses, sqlx::Error> {
    sqlx::query_as(
        "SELECT v.version, ARRAY(SELECT kind FROM kind_pauses ORDER BY kind) AS kinds
         FROM kind_pauses_version v",
    )
    .fetch_one(db)
    .await
}

/// Writes the kinds node `node` runs, with those only Kickoff's own code inserts (`own`), into
/// the kinds a SQL caller's insert may name (`kickoff_kinds`): at each start of a node. A kind no
/// node runs any more stays, as its waiting jobs do.
pub async fn kind_register<'e>(
    db: impl PgExecutor<'e>,
    kinds: &[&str],
    own: &[&str],
    node: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO kickoff_kinds (kind, kickoffs_own, seen_by)
         SELECT k, k = ANY($2), $3 FROM unnest($1::text[]) k
         ON CONFLICT (kind) DO UPDATE
             SET kickoffs_own = excluded.kickoffs_own, seen_at = now(), seen_by = excluded.seen_by",
    )
    .bind(kinds)
    .bind(own)
    .bind(node)
    .execute(db)
    .await
    .map(drop)
}
