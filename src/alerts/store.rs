//! SQL of the alerts: the `alert_rules`, `alert_incidents` and `alert_pending` tables, and the
//! read-only queries that evaluate each condition. Those read the engine's and the game's tables
//! (`jobs` through its indexes, `job_counts` and its deltas, `job_stats_minute`, `nodes`,
//! `questions`), never counting over `jobs`: each walks an index to a bound.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};

use super::rules::{CheckedRule, Condition};

/// How many subjects one rule fires at most per evaluation (the newest discarded jobs, the
/// questions longest open).
pub const SUBJECTS_PER_RULE: i64 = 100;
/// The advisory lock one evaluation holds: evaluations never overlap, also across leaders.
pub const EVALUATION_LOCK: i64 = 0x6b69_636b_616c;

#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct RuleRow {
    pub id: i64,
    pub name: String,
    /// `late_lock`, `question_open`, `job_discarded`, `queue_backlog`, `failure_rate`,
    /// `node_lost` or `overdue`.
    pub condition: String,
    pub queue: Option<String>,
    pub kind: Option<String>,
    pub game: Option<String>,
    pub threshold_ms: Option<i64>,
    pub threshold_n: Option<i64>,
    pub for_secs: i32,
    pub percent: Option<f64>,
    pub notify_url: Option<String>,
    /// `standard` or `slack`.
    pub payload: String,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub created_by: Option<String>,
    /// The rule in words.
    #[sqlx(skip)]
    pub words: String,
}

impl RuleRow {
    pub fn condition(&self) -> Option<Condition> {
        Condition::parse(&self.condition)
    }

    fn with_words(mut self) -> Self {
        self.words = super::rules::describe(&self);
        self
    }
}

const RULE_COLUMNS: &str = "id, name, condition, queue, kind, game, threshold_ms, threshold_n, \
    for_secs, percent, notify_url, payload, enabled, created_at, created_by";

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
             for_secs, percent, notify_url, payload, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING {RULE_COLUMNS}"
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

/// Firing incidents by rule and condition, and every incident ever by condition, for
/// `/metrics`.
pub async fn incident_counts<'e>(
    db: impl PgExecutor<'e>,
) -> Result<Vec<(String, String, i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT r.name, r.condition,
                count(i.id) FILTER (WHERE i.resolved_at IS NULL),
                count(i.id)
         FROM alert_rules r LEFT JOIN alert_incidents i ON i.rule_id = r.id
         GROUP BY r.name, r.condition ORDER BY r.name",
    )
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

pub async fn rules_enabled(tx: &mut PgConnection) -> Result<Vec<RuleRow>, sqlx::Error> {
    let rows: Vec<RuleRow> = sqlx::query_as(&format!(
        "SELECT {RULE_COLUMNS} FROM alert_rules WHERE enabled ORDER BY id"
    ))
    .fetch_all(tx)
    .await?;
    Ok(rows.into_iter().map(RuleRow::with_words).collect())
}

/// The subjects for which `rule`'s condition holds now, each with a sentence.
pub async fn holding_now(
    tx: &mut PgConnection,
    rule: &RuleRow,
    condition: Condition,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    let ms = rule.threshold_ms.unwrap_or(0);
    let q = match condition {
        Condition::LateLock => sqlx::query_as(
            "SELECT 'question ' || q.id,
                    CASE WHEN s.started IS NOT NULL THEN
                        format('question %s (%s): its lock started %s ms after game time', q.id, q.game,
                               floor(extract(epoch FROM s.started - q.game_time) * 1000)::bigint)
                    ELSE
                        format('question %s (%s): its lock has not started %s ms after game time', q.id, q.game,
                               floor(extract(epoch FROM now() - q.game_time) * 1000)::bigint)
                    END
             FROM questions q
             LEFT JOIN jobs j ON j.id = q.lock_job_id
             CROSS JOIN LATERAL (SELECT COALESCE((j.errors -> 0 ->> 'started_at')::timestamptz,
                                                 j.attempted_at) AS started) s
             WHERE q.game_time >= greatest($1 - interval '1 hour', now() - interval '1 day')
               AND q.game_time < now() - make_interval(secs => $2::float8 / 1000)
               AND ($3::text IS NULL OR q.game = $3)
               AND (s.started > q.game_time + make_interval(secs => $2::float8 / 1000)
                    OR (s.started IS NULL AND q.status = 'open'))
             ORDER BY q.game_time LIMIT $4",
        )
        .bind(rule.created_at)
        .bind(ms)
        .bind(&rule.game)
        .bind(SUBJECTS_PER_RULE),
        Condition::QuestionOpen => sqlx::query_as(
            "SELECT 'question ' || id,
                    format('question %s (%s) is still open %s ms after game time', id, game,
                           floor(extract(epoch FROM now() - game_time) * 1000)::bigint)
             FROM questions
             WHERE status = 'open' AND game_time < now() - make_interval(secs => $1::float8 / 1000)
               AND ($2::text IS NULL OR game = $2)
             ORDER BY game_time LIMIT $3",
        )
        .bind(ms)
        .bind(&rule.game)
        .bind(SUBJECTS_PER_RULE),
        Condition::JobDiscarded => sqlx::query_as(
            "SELECT 'job ' || id,
                    format('job %s (%s in queue %s) was discarded after %s attempt(s)%s', id, kind, queue, attempt,
                           COALESCE(': ' || left(errors -> -1 ->> 'message', 200), ''))
             FROM jobs
             WHERE state = 'discarded' AND finalized_at >= $1
               AND ($2::text IS NULL OR queue = $2) AND ($3::text IS NULL OR kind = $3)
             ORDER BY id DESC LIMIT $4",
        )
        .bind(rule.created_at)
        .bind(&rule.queue)
        .bind(&rule.kind)
        .bind(SUBJECTS_PER_RULE),
        Condition::QueueBacklog => sqlx::query_as(
            "SELECT 'queue ' || queue, format('%s jobs available in queue %s', sum(n), queue)
             FROM (SELECT queue, n FROM job_counts WHERE state = 'available'
                   UNION ALL
                   SELECT queue, n FROM job_count_deltas WHERE state = 'available') c
             WHERE ($1::text IS NULL OR queue = $1)
             GROUP BY queue HAVING sum(n) > $2
             ORDER BY queue LIMIT $3",
        )
        .bind(&rule.queue)
        .bind(rule.threshold_n.unwrap_or(0))
        .bind(SUBJECTS_PER_RULE),
        Condition::FailureRate => sqlx::query_as(
            "SELECT CASE WHEN $1::text IS NULL THEN 'all queues' ELSE 'queue ' || $1 END,
                    format('%s of %s attempts failed in the last 5 minutes (%s%%)%s', f, f + c,
                           round(100.0 * f / (f + c), 1),
                           CASE WHEN $1::text IS NULL THEN '' ELSE ' in queue ' || $1 END)
             FROM (SELECT COALESCE(sum(failed), 0) AS f, COALESCE(sum(completed), 0) AS c
                   FROM job_stats_minute
                   WHERE minute >= date_trunc('minute', now()) - interval '4 minutes'
                     AND ($1::text IS NULL OR queue = $1)) t
             WHERE f + c >= $2 AND 100.0 * f > $3::numeric * (f + c)",
        )
        .bind(&rule.queue)
        .bind(rule.threshold_n.unwrap_or(1))
        .bind(rule.percent.unwrap_or(100.0)),
        Condition::NodeLost => sqlx::query_as(
            "SELECT 'node ' || id,
                    format('node %s (%s, pid %s) has not beaten for %s s', id, hostname, pid,
                           floor(extract(epoch FROM now() - heartbeat_at))::bigint)
             FROM nodes
             WHERE heartbeat_at < now() - make_interval(secs => $1::float8 / 1000)
             ORDER BY id LIMIT $2",
        )
        .bind(ms)
        .bind(SUBJECTS_PER_RULE),
        // Available jobs: every queue the maintained counts say has some (not paused; the first
        // 100 by name, as many as the rule reports), its oldest due time by one probe of the
        // claim index per priority (0 to 9), so that one queue's backlog never hides another's.
        // Jobs not yet staged (the stager behind, or stopped): the oldest 1,000 overdue,
        // whatever their queue (so there, one queue's may still hide another's while it lasts).
        Condition::Overdue => sqlx::query_as(
            // The cutoff written out in each read, not joined from a CTE: joined, it is a filter
            // over every waiting row instead of the index scan's bound.
            "WITH waiting AS (
                 SELECT queue FROM (SELECT queue, n FROM job_counts WHERE state = 'available'
                                    UNION ALL
                                    SELECT queue, n FROM job_count_deltas
                                    WHERE state = 'available') c
                 WHERE ($2::text IS NULL OR queue = $2)
                   AND queue NOT IN (SELECT name FROM queues WHERE paused)
                 GROUP BY queue HAVING sum(n) > 0
                 ORDER BY queue LIMIT $3),
             oldest AS (
                 SELECT w.queue, f.scheduled_at
                 FROM waiting w CROSS JOIN generate_series(0, 9) AS p(priority)
                 CROSS JOIN LATERAL (
                     SELECT scheduled_at FROM jobs
                     WHERE state = 'available' AND queue = w.queue AND priority = p.priority
                       AND scheduled_at < now() - make_interval(secs => $1::float8 / 1000)
                     ORDER BY scheduled_at LIMIT 1) f
                 UNION ALL
                 SELECT queue, scheduled_at
                 FROM (SELECT queue, scheduled_at FROM jobs
                       WHERE state IN ('scheduled', 'retryable')
                         AND scheduled_at < now() - make_interval(secs => $1::float8 / 1000)
                         AND ($2::text IS NULL OR queue = $2)
                       ORDER BY scheduled_at LIMIT 1000) s)
             SELECT 'queue ' || queue,
                    format('jobs in queue %s wait up to %s s past their due time', queue,
                           floor(extract(epoch FROM now() - min(scheduled_at)))::bigint)
             FROM oldest
             WHERE queue NOT IN (SELECT name FROM queues WHERE paused)
             GROUP BY queue ORDER BY queue LIMIT $3",
        )
        .bind(ms)
        .bind(&rule.queue)
        .bind(SUBJECTS_PER_RULE),
    };
    q.fetch_all(tx).await
}

/// Of `subjects` (open incidents of `rule`), those whose condition still holds, for the
/// conditions whose [`holding_now`] answer is bounded (and so may leave a holding subject out)
/// or whose incident resolves otherwise than it fires. `None`: `holding_now` is the whole answer.
pub async fn still_holding(
    tx: &mut PgConnection,
    rule: &RuleRow,
    condition: Condition,
    subjects: &[String],
) -> Result<Option<HashSet<String>>, sqlx::Error> {
    let ids = |prefix: &str| -> Vec<i64> {
        subjects
            .iter()
            .filter_map(|s| s.strip_prefix(prefix)?.parse().ok())
            .collect()
    };
    let held: Vec<String> =
        match condition {
            // A late lock's incident lasts until its question is locked.
            Condition::LateLock => sqlx::query_scalar(
                "SELECT 'question ' || id FROM questions WHERE id = ANY($1) AND status = 'open'",
            )
            .bind(ids("question "))
            .fetch_all(tx)
            .await?,
            Condition::QuestionOpen => {
                sqlx::query_scalar(
                    "SELECT 'question ' || id FROM questions
                 WHERE id = ANY($1) AND status = 'open'
                   AND game_time < now() - make_interval(secs => $2::float8 / 1000)",
                )
                .bind(ids("question "))
                .bind(rule.threshold_ms.unwrap_or(0))
                .fetch_all(tx)
                .await?
            }
            Condition::JobDiscarded => {
                sqlx::query_scalar(
                    "SELECT 'job ' || id FROM jobs WHERE id = ANY($1) AND state = 'discarded'",
                )
                .bind(ids("job "))
                .fetch_all(tx)
                .await?
            }
            _ => return Ok(None),
        };
    Ok(Some(held.into_iter().collect()))
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

/// The open incidents of a rule: id and subject.
pub async fn open_incidents(
    tx: &mut PgConnection,
    rule_id: i64,
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, subject FROM alert_incidents WHERE rule_id = $1 AND resolved_at IS NULL
         ORDER BY id",
    )
    .bind(rule_id)
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

/// Resolves an open incident; `None` when it was not open.
pub async fn incident_resolve(
    tx: &mut PgConnection,
    id: i64,
) -> Result<Option<IncidentRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "WITH done AS (
             UPDATE alert_incidents SET resolved_at = now()
             WHERE id = $1 AND resolved_at IS NULL RETURNING *)
         SELECT {INCIDENT_COLUMNS} FROM done i JOIN alert_rules r ON r.id = i.rule_id"
    ))
    .bind(id)
    .fetch_optional(tx)
    .await
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
