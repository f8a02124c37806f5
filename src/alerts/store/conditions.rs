//! Each condition's read: the subjects for which a rule's condition holds now, and which of a
//! rule's open incidents still hold, inside the evaluation's transaction. Read-only but for
//! `job_discarded`, which moves its rule's read cursor (`alert_rules.discarded_seen_at`).
//!
//! The notifications of the alerts are never subjects (issue 30: an undeliverable notification is
//! a discarded `webhook` job, which a `job_discarded` rule fired on, whose notification was
//! discarded in turn, forever). A notification job is one whose id is in `alert_notifications`,
//! which only the evaluation writes (in the transaction that inserts the job): a mark no API
//! caller can put on a job of theirs (a job's `meta` can say anything), read by primary key. The
//! conditions that read jobs leave them out: `job_discarded` and `overdue` skip them row by row;
//! `queue_backlog` and `failure_rate` read per-queue counts the engine keeps for every job, and
//! take the notifications' share back out of them, read from the few notifications not settled
//! yet (see `notifications`); `late_start` skips them row by row in the attempts' records.
//! `late_lock` reads only the lock jobs of questions, `question_open`, `node_lost` and
//! `workflow_deadline` (workflow steps that never had a job) no jobs.

use std::collections::HashSet;
use std::sync::LazyLock;

use sqlx::PgConnection;

use crate::alerts::rules::{Condition, RuleRow, ONCE_WINDOW};

/// How many subjects one rule fires at most per evaluation (the discarded jobs not yet read, oldest
/// first; the questions longest open).
pub const SUBJECTS_PER_RULE: i64 = 100;

/// The start of the window `failure_rate` reads (`job_stats_minute`'s last five minutes, this one
/// included), written out in each read that needs it (a bound of each index scan).
const RATE_WINDOW_START: &str = "(date_trunc('minute', now()) - interval '4 minutes')";

/// `failure_rate`'s read: the attempts of the window less those of notifications (their failed
/// attempts, one entry of `errors` each, stamped `at` when it ended, and their completions). A
/// notification that ended before the window was settled before it too (`settled_at` is at or
/// after `finalized_at`), so the notifications not settled, or settled within the window, are all
/// that can count.
static FAILURE_RATE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH notified AS (
             SELECT j.state, j.finalized_at, j.errors
             FROM alert_notifications a JOIN jobs j ON j.id = a.job_id
             WHERE (a.settled_at IS NULL OR a.settled_at >= {RATE_WINDOW_START})
               AND ($1::text IS NULL OR j.queue = $1)),
         own AS (
             SELECT (SELECT count(*) FROM notified n, jsonb_array_elements(n.errors) e
                     WHERE (e ->> 'at')::timestamptz >= {RATE_WINDOW_START}) AS f,
                    (SELECT count(*) FROM notified
                     WHERE state = 'completed' AND finalized_at >= {RATE_WINDOW_START}) AS c),
         t AS (
             SELECT greatest(s.f - own.f, 0) AS f, greatest(s.c - own.c, 0) AS c
             FROM (SELECT COALESCE(sum(failed), 0) AS f, COALESCE(sum(completed), 0) AS c
                   FROM job_stats_minute
                   WHERE minute >= {RATE_WINDOW_START}
                     AND ($1::text IS NULL OR queue = $1)) s, own)
         SELECT CASE WHEN $1::text IS NULL THEN 'all queues' ELSE 'queue ' || $1 END,
                format('%s of %s attempts failed in the last 5 minutes (%s%%)%s', f, f + c,
                       round(100.0 * f / (f + c), 1),
                       CASE WHEN $1::text IS NULL THEN '' ELSE ' in queue ' || $1 END)
         FROM t
         WHERE f + c >= $2 AND 100.0 * f > $3::numeric * (f + c)"
    )
});

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
             WHERE q.game_time >= greatest($1 - interval '1 hour', now() - make_interval(secs => $5))
               AND q.game_time < now() - make_interval(secs => $2::float8 / 1000)
               AND ($3::text IS NULL OR q.game = $3)
               AND (s.started > q.game_time + make_interval(secs => $2::float8 / 1000)
                    OR (s.started IS NULL AND q.status = 'open'))
             ORDER BY q.game_time LIMIT $4",
        )
        .bind(rule.created_at)
        .bind(ms)
        .bind(&rule.game)
        .bind(SUBJECTS_PER_RULE)
        .bind(ONCE_WINDOW.as_secs_f64()),
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
        // Read on from where the last evaluation stopped (`discarded_seen_at`, less a slack for
        // transactions that committed late and for the rule's `for_secs`), oldest first, leaving
        // out the jobs whose incident is open, and the mark moved on: a burst of any size fires
        // 100 an evaluation until all have fired, and no read walks every job discarded since the
        // rule was made (`jobs_prune_idx`). Resolution is `still_holding`'s.
        Condition::JobDiscarded => sqlx::query_as(
            "WITH found AS (
                 SELECT id, kind, queue, attempt, errors, finalized_at FROM jobs
                 WHERE finalized_at >= greatest($1, (SELECT discarded_seen_at FROM alert_rules
                                                     WHERE id = $5)
                                                    - make_interval(secs => 5 + $6))
                   AND state = 'discarded'
                   AND ($2::text IS NULL OR queue = $2) AND ($3::text IS NULL OR kind = $3)
                   AND NOT EXISTS (SELECT 1 FROM alert_notifications n WHERE n.job_id = jobs.id)
                   AND NOT EXISTS (SELECT 1 FROM alert_incidents i
                                   WHERE i.rule_id = $5 AND i.subject = 'job ' || jobs.id
                                     AND i.resolved_at IS NULL)
                 ORDER BY finalized_at, id LIMIT $4),
             seen AS (
                 UPDATE alert_rules SET discarded_seen_at =
                     CASE WHEN (SELECT count(*) FROM found) < $4 THEN now()
                          ELSE (SELECT max(finalized_at) FROM found) END
                 WHERE id = $5)
             SELECT 'job ' || id,
                    format('job %s (%s in queue %s) was discarded after %s attempt(s)%s', id, kind, queue, attempt,
                           COALESCE(': ' || left(errors -> -1 ->> 'message', 200), ''))
             FROM found ORDER BY finalized_at, id",
        )
        .bind(rule.created_at)
        .bind(&rule.queue)
        .bind(&rule.kind)
        .bind(SUBJECTS_PER_RULE)
        .bind(rule.id)
        .bind(rule.for_secs as f64),
        // The counts less the notifications available (only those not settled can be).
        Condition::QueueBacklog => sqlx::query_as(
            "SELECT 'queue ' || queue, format('%s jobs available in queue %s', sum(n), queue)
             FROM (SELECT queue, n FROM job_counts WHERE state = 'available'
                   UNION ALL
                   SELECT queue, n FROM job_count_deltas WHERE state = 'available'
                   UNION ALL
                   SELECT j.queue, -1::bigint FROM alert_notifications a JOIN jobs j ON j.id = a.job_id
                   WHERE a.settled_at IS NULL AND j.state = 'available') c
             WHERE ($1::text IS NULL OR queue = $1)
             GROUP BY queue HAVING sum(n) > $2
             ORDER BY queue LIMIT $3",
        )
        .bind(&rule.queue)
        .bind(rule.threshold_n.unwrap_or(0))
        .bind(SUBJECTS_PER_RULE),
        // The attempts of the window less those of notifications.
        Condition::FailureRate => sqlx::query_as(&FAILURE_RATE)
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
        // Notifications are stepped over in both reads.
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
                       AND NOT EXISTS (SELECT 1 FROM alert_notifications n WHERE n.job_id = jobs.id)
                     ORDER BY scheduled_at LIMIT 1) f
                 UNION ALL
                 SELECT queue, scheduled_at
                 FROM (SELECT queue, scheduled_at FROM jobs
                       WHERE state IN ('scheduled', 'retryable')
                         AND scheduled_at < now() - make_interval(secs => $1::float8 / 1000)
                         AND ($2::text IS NULL OR queue = $2)
                         AND NOT EXISTS (SELECT 1 FROM alert_notifications n WHERE n.job_id = jobs.id)
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
        // The late attempts of the window (`job_attempts_late_ended_idx`), notifications left
        // out, per queue. A skip or discard by a late-start policy says so in its error
        // (`late_start::LatePolicy::decide`).
        Condition::LateStart => sqlx::query_as(
            "SELECT 'queue ' || queue,
                    format('%s attempt(s) in queue %s started more than %s ms after their due time in the last 5 minutes%s',
                           count(*), queue, $1,
                           CASE WHEN count(*) FILTER (WHERE skipped) > 0
                                THEN format(', %s of them skipped or discarded by their late-start policy',
                                            count(*) FILTER (WHERE skipped))
                                ELSE '' END)
             FROM (SELECT queue, outcome IN ('cancelled', 'discarded')
                                 AND error LIKE '%after its due time, past its limit of%' AS skipped
                   FROM job_attempts a
                   WHERE late_ms >= 1000 AND late_ms > $1
                     AND finished_at >= now() - interval '5 minutes'
                     AND ($2::text IS NULL OR queue = $2) AND ($3::text IS NULL OR kind = $3)
                     AND NOT EXISTS (SELECT 1 FROM alert_notifications n WHERE n.job_id = a.job_id)) l
             GROUP BY queue ORDER BY queue LIMIT $4",
        )
        .bind(ms)
        .bind(&rule.queue)
        .bind(&rule.kind)
        .bind(SUBJECTS_PER_RULE),
        // The steps failed at their deadline (`workflow_steps_deadline_missed_idx`), for
        // deadlines from an hour before the rule was made and within the last day.
        Condition::WorkflowDeadline => sqlx::query_as(
            "SELECT 'step ' || s.id,
                    format('workflow %s run %s%s: step %s had no signal %s by its deadline %s',
                           r.name, r.id, COALESCE(' (' || r.key || ')', ''), s.name,
                           quote_ident(s.signal),
                           to_char(s.deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS \"UTC\"'))
             FROM workflow_steps s JOIN workflow_runs r ON r.id = s.run_id
             WHERE s.state = 'failed' AND s.job_id IS NULL AND s.deadline_at IS NOT NULL
               AND s.finished_at >= greatest($1 - interval '1 hour', now() - make_interval(secs => $4))
               AND ($2::text IS NULL OR r.name = $2)
             ORDER BY s.finished_at, s.id LIMIT $3",
        )
        .bind(rule.created_at)
        .bind(&rule.workflow)
        .bind(SUBJECTS_PER_RULE)
        .bind(ONCE_WINDOW.as_secs_f64()),
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
    let held: Vec<String> = match condition {
        // A late lock's incident lasts until its question is locked.
        Condition::LateLock => {
            sqlx::query_scalar(
                "SELECT 'question ' || id FROM questions WHERE id = ANY($1) AND status = 'open'",
            )
            .bind(ids("question "))
            .fetch_all(tx)
            .await?
        }
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
            // An incident opened on a notification before notifications were marked (issue
            // 30) no longer holds.
            sqlx::query_scalar(
                    "SELECT 'job ' || id FROM jobs
                     WHERE id = ANY($1) AND state = 'discarded'
                       AND NOT EXISTS (SELECT 1 FROM alert_notifications n WHERE n.job_id = jobs.id)",
                )
                .bind(ids("job "))
                .fetch_all(tx)
                .await?
        }
        // Until the step is retried, skipped or its run deleted.
        Condition::WorkflowDeadline => {
            sqlx::query_scalar(
                "SELECT 'step ' || id FROM workflow_steps
                 WHERE id = ANY($1) AND state = 'failed' AND job_id IS NULL
                   AND deadline_at IS NOT NULL",
            )
            .bind(ids("step "))
            .fetch_all(tx)
            .await?
        }
        _ => return Ok(None),
    };
    Ok(Some(held.into_iter().collect()))
}
