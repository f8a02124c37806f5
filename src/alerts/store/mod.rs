//! SQL of the alerts: the `alert_rules`, `alert_incidents` and `alert_pending` tables here; the
//! read-only queries that evaluate each condition in `conditions` (they read the engine's and the
//! game's tables: `jobs` through its indexes, `job_counts` and its deltas, `job_stats_minute`,
//! `nodes`, `questions`, never counting over `jobs`: each walks an index to a bound); the marks of
//! the notification jobs (`alert_notifications`) in `notifications`.

pub mod conditions;
pub mod notifications;

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};

use super::rules::{CheckedRule, Condition, RuleRow};

/// The advisory lock one evaluation holds: evaluations never overlap, also across leaders.
pub const EVALUATION_LOCK: i64 = 0x6b69_636b_616c;

const RULE_COLUMNS: &str = "id, name, condition, queue, kind, game, workflow, threshold_ms, \
    threshold_n, for_secs, percent, notify_url, payload, enabled, created_at, created_by";

#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct IncidentRow {
    pub id: i64,
    pub rule_id: i64,
    /// The rule's name.
    pub rule: String,
    pub condition: String,
    /// What it is about: `question 7`, `job 42`, `queue default`, `node web-1`, `all queues`.
    pub subject: String,
    pub summary: String,
    pub fired_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
    pub acknowledged_at: Option<DateTime<Utc>>,
    pub acknowledged_by: Option<String>,
}

const INCIDENT_COLUMNS: &str = "i.id, i.rule_id, r.name AS rule, r.condition, i.subject, \
    i.summary, i.fired_at, i.resolved_at, i.acknowledged_at, i.acknowledged_by";

pub async fn rule_insert<'e>(
    db: impl PgExecutor<'e>,
    rule: &CheckedRule,
    by: Option<&str>,
) -> Result<RuleRow, sqlx::Error> {
    let row: RuleRow = sqlx::query_as(&format!(
        "INSERT INTO alert_rules (name, condition, queue, kind, game, threshold_ms, threshold_n,
             for_secs, percent, notify_url, payload, created_by, workflow)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING {RULE_COLUMNS}"
    ))
    .bind(&rule.name)
    .bind(rule.condition.as_str())
    .bind(&rule.queue)
    .bind(&rule.kind)
    .bind(&rule.game)
    .bind(rule.threshold_ms)
    .bind(rule.threshold_n)
    .bind(rule.for_secs)
    .bind(rule.percent)
    .bind(&rule.notify_url)
    .bind(rule.payload.as_str())
    .bind(by)
    .bind(&rule.workflow)
    .fetch_one(db)
    .await?;
    Ok(row.with_words())
}

pub async fn rule_count<'e>(db: impl PgExecutor<'e>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM alert_rules")
        .fetch_one(db)
        .await
}

pub async fn rule_list<'e>(db: impl PgExecutor<'e>) -> Result<Vec<RuleRow>, sqlx::Error> {
    let rows: Vec<RuleRow> = sqlx::query_as(&format!(
        "SELECT {RULE_COLUMNS} FROM alert_rules ORDER BY name"
    ))
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(RuleRow::with_words).collect())
}

/// Switches a rule on or off. Off, its open incidents are resolved (without a notification: the
/// rule no longer watches) and its pending subjects forgotten.
pub async fn rule_set_enabled<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    enabled: bool,
) -> Result<Option<RuleRow>, sqlx::Error> {
    let row: Option<RuleRow> = sqlx::query_as(&format!(
        "WITH rule AS (UPDATE alert_rules SET enabled = $2 WHERE id = $1 RETURNING *),
              resolved AS (UPDATE alert_incidents SET resolved_at = now()
                           WHERE NOT $2 AND rule_id = (SELECT id FROM rule) AND resolved_at IS NULL),
              forgotten AS (DELETE FROM alert_pending WHERE NOT $2 AND rule_id = (SELECT id FROM rule))
         SELECT {RULE_COLUMNS} FROM rule"
    ))
    .bind(id)
    .bind(enabled)
    // All rows, not the first one only: a portal closed after its first row would never run
    // the statements in WITH that the query does not read (the resolution).
    .fetch_all(db)
    .await?
    .into_iter()
    .next();
    Ok(row.map(RuleRow::with_words))
}

/// Deletes a rule and its incidents.
pub async fn rule_delete<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<Option<RuleRow>, sqlx::Error> {
    let row: Option<RuleRow> = sqlx::query_as(&format!(
        "DELETE FROM alert_rules WHERE id = $1 RETURNING {RULE_COLUMNS}"
    ))
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(row.map(RuleRow::with_words))
}

/// Incidents, newest first: the firing ones only (`firing`), the resolved ones only, or all.
pub async fn incident_list<'e>(
    db: impl PgExecutor<'e>,
    firing: Option<bool>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<IncidentRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM alert_incidents i JOIN alert_rules r ON r.id = i.rule_id
         WHERE ($1::boolean IS NULL OR (i.resolved_at IS NULL) = $1)
           AND ($2::bigint IS NULL OR i.id < $2)
         ORDER BY i.id DESC LIMIT $3"
    ))
    .bind(firing)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

pub async fn incident_get<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<Option<IncidentRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM alert_incidents i JOIN alert_rules r ON r.id = i.rule_id
         WHERE i.id = $1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Acknowledges an incident not acknowledged yet; `None` when there is no such incident or it
/// was acknowledged already.
pub async fn incident_acknowledge<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    by: &str,
) -> Result<Option<IncidentRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "WITH a AS (
             UPDATE alert_incidents SET acknowledged_at = now(), acknowledged_by = $2
             WHERE id = $1 AND acknowledged_at IS NULL RETURNING *)
         SELECT {INCIDENT_COLUMNS} FROM a i JOIN alert_rules r ON r.id = i.rule_id"
    ))
    .bind(id)
    .bind(by)
    .fetch_optional(db)
    .await
}

/// Each rule's name, condition, incidents firing now and incidents opened since it was made, for
/// `/metrics`: counters kept on the rule (by a trigger on `alert_incidents`), so a scrape reads at
/// most [`MAX_RULES`](super::rules::MAX_RULES) rows, and pruning resolved incidents does not
/// lower the count of those opened (a counter that went down would read as a reset).
pub async fn incident_counts<'e>(
    db: impl PgExecutor<'e>,
) -> Result<Vec<(String, String, i64, i64)>, sqlx::Error> {
    sqlx::query_as("SELECT name, condition, firing, opened FROM alert_rules ORDER BY name")
        .fetch_all(db)
        .await
}

// --- evaluation (inside the evaluator's transaction) ---

/// Takes the evaluation lock for the rest of the transaction.
pub async fn lock_evaluation(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(EVALUATION_LOCK)
        .execute(tx)
        .await
        .map(drop)
}

/// The enabled rules, each row locked for the rest of the evaluation. Locked first, before any
/// incident: opening or resolving an incident updates its rule's counts (the trigger on
/// `alert_incidents`), and a rule switched off or deleted meanwhile locks its rule row before its
/// incidents; taking the rows in the same order, the two wait for each other instead of
/// deadlocking.
pub async fn rules_enabled(tx: &mut PgConnection) -> Result<Vec<RuleRow>, sqlx::Error> {
    let rows: Vec<RuleRow> = sqlx::query_as(&format!(
        "SELECT {RULE_COLUMNS} FROM alert_rules WHERE enabled ORDER BY id FOR NO KEY UPDATE"
    ))
    .fetch_all(tx)
    .await?;
    Ok(rows.into_iter().map(RuleRow::with_words).collect())
}

/// Records that `subjects` hold now (the first time: since now) and forgets the rule's other
/// subjects; returns those that have held for at least `for_secs`.
pub async fn pending_update(
    tx: &mut PgConnection,
    rule_id: i64,
    subjects: &[String],
    for_secs: i32,
) -> Result<HashSet<String>, sqlx::Error> {
    sqlx::query("DELETE FROM alert_pending WHERE rule_id = $1 AND NOT (subject = ANY($2))")
        .bind(rule_id)
        .bind(subjects)
        .execute(&mut *tx)
        .await?;
    let ripe: Vec<String> = sqlx::query_scalar(
        "WITH up AS (
             INSERT INTO alert_pending (rule_id, subject) SELECT $1, unnest($2::text[])
             ON CONFLICT (rule_id, subject) DO UPDATE SET since = alert_pending.since
             RETURNING subject, since)
         SELECT subject FROM up WHERE since <= now() - make_interval(secs => $3)",
    )
    .bind(rule_id)
    .bind(subjects)
    .bind(for_secs as f64)
    .fetch_all(tx)
    .await?;
    Ok(ripe.into_iter().collect())
}

/// A page of the open incidents of a rule, id and subject, by id after `after` (the index
/// `alert_incidents_open_id_idx` walked from there): an evaluation reads at most `limit` of them,
/// however many are open.
pub async fn open_incidents_page(
    tx: &mut PgConnection,
    rule_id: i64,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, subject FROM alert_incidents
         WHERE rule_id = $1 AND resolved_at IS NULL AND id > $2
         ORDER BY id LIMIT $3",
    )
    .bind(rule_id)
    .bind(after)
    .bind(limit)
    .fetch_all(tx)
    .await
}

/// Opens an incident for each subject (with its summary), unless one is open for the rule and
/// subject (or, `once`, ever was): one statement for all of them, so that an evaluation whose
/// subjects mostly fire already costs one round trip, not one per subject. The incidents opened,
/// in the order given.
pub async fn incidents_fire(
    tx: &mut PgConnection,
    rule_id: i64,
    subjects: &[(String, String)],
    once: bool,
) -> Result<Vec<IncidentRow>, sqlx::Error> {
    if subjects.is_empty() {
        return Ok(Vec::new());
    }
    let (names, summaries): (Vec<&str>, Vec<&str>) = subjects
        .iter()
        .map(|(s, m)| (s.as_str(), m.as_str()))
        .unzip();
    // Every row read (`fetch_all`): the incidents opened are the answer.
    sqlx::query_as(&format!(
        "WITH f AS (
             INSERT INTO alert_incidents (rule_id, subject, summary)
             SELECT $1, t.subject, t.summary
             FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(subject, summary, n)
             WHERE NOT EXISTS (
                 SELECT 1 FROM alert_incidents a
                 WHERE a.rule_id = $1 AND a.subject = t.subject AND ($4 OR a.resolved_at IS NULL))
             ORDER BY t.n
             ON CONFLICT DO NOTHING RETURNING *)
         SELECT {INCIDENT_COLUMNS} FROM f i JOIN alert_rules r ON r.id = i.rule_id ORDER BY i.id"
    ))
    .bind(rule_id)
    .bind(&names)
    .bind(&summaries)
    .bind(once)
    .fetch_all(tx)
    .await
}

/// Resolves the incidents of `ids` still open, in one statement; those it resolved, by id.
pub async fn incidents_resolve(
    tx: &mut PgConnection,
    ids: &[i64],
) -> Result<Vec<IncidentRow>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(&format!(
        "WITH done AS (
             UPDATE alert_incidents SET resolved_at = now()
             WHERE id = ANY($1) AND resolved_at IS NULL RETURNING *)
         SELECT {INCIDENT_COLUMNS} FROM done i JOIN alert_rules r ON r.id = i.rule_id ORDER BY i.id"
    ))
    .bind(ids)
    .fetch_all(tx)
    .await
}

/// Deletes up to `batch` incidents resolved more than `retention` ago (those of the conditions
/// whose subjects fire once: more than the longer of `retention` and their window, since they are
/// the record that the subject fired). Returns how many. Reads `alert_incidents_resolved_idx`
/// from the oldest resolution.
pub async fn incidents_prune<'e>(
    db: impl PgExecutor<'e>,
    retention: Duration,
    once: &[Condition],
    once_window: Duration,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let once: Vec<&str> = once.iter().map(|c| c.as_str()).collect();
    let r = sqlx::query(
        "DELETE FROM alert_incidents WHERE id IN (
             SELECT i.id FROM alert_incidents i JOIN alert_rules r ON r.id = i.rule_id
             WHERE i.resolved_at < now() - make_interval(secs => $1)
               AND (r.condition <> ALL($2) OR i.resolved_at < now() - make_interval(secs => $3))
             ORDER BY i.resolved_at LIMIT $4)",
    )
    .bind(retention.as_secs_f64())
    .bind(&once)
    .bind(once_window.as_secs_f64())
    .bind(batch)
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Tells the live dashboards (and the API's event streams) that incidents fired or resolved, on
/// `kickoff_events`, when the evaluation commits.
pub async fn announce(
    tx: &mut PgConnection,
    fired: usize,
    resolved: usize,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT pg_notify('kickoff_events',
             json_build_object('alerts', json_build_object('fired', $1::int, 'resolved', $2::int))::text)",
    )
    .bind(fired as i32)
    .bind(resolved as i32)
    .execute(tx)
    .await
    .map(drop)
}
