//! SQL of the `jobs` table: inserts, reads and one job's actions here; an attempt's life (staging,
//! claiming, leases, outcomes, rescue) in `attempts`; filtered lists and bulk actions in `filters`.
//! Every state transition is guarded by the state (and, for an attempt's
//! writes, by the claim token of that attempt) it expects, so that a late or zombie writer changes
//! nothing.
//!
//! Times that schedule a job count from `statement_timestamp()`, not `now()`: inside a caller's
//! long transaction `now()` is the transaction's start, and "in 5 minutes" would be early.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgExecutor, Postgres, QueryBuilder};

#[macro_use]
mod attempts;
mod cancelled;
mod edits;
mod filters;
mod params;

pub use attempts::*;
pub use cancelled::CancelledJob;
pub use edits::*;
pub use filters::*;

use self::params::secs;
use crate::engine::job::{Inserted, Job, JobId, JobState, NewJob, OnConflict, Schedule};

/// The instant a schedule names, as SQL parameters: an absolute time, or seconds after the
/// statement's start.
fn schedule_params(schedule: Schedule) -> (Option<DateTime<Utc>>, f64) {
    match schedule {
        Schedule::Now => (None, 0.0),
        Schedule::At(at) => (Some(at), 0.0),
        // Past the rules' bound (`kickoff_check_job` refuses it, naming `schedule_in_ms`), but
        // an instant PostgreSQL can still compute: a larger delay would fail as an overflow
        // before the rules say why.
        Schedule::In(d) => (None, secs(d).min(UNDER_OVERFLOW_SECS)),
    }
}

/// A delay larger than any the rules accept (3650 days) that `make_interval` still adds.
const UNDER_OVERFLOW_SECS: f64 = 4000.0 * 86_400.0;

/// What an insert's statement checks its job against, by the rules every insert applies
/// (`kickoff_check_job`, migration `20261230000001_sql_inserts.sql`: the one place they are
/// written, which a SQL caller's `kickoff_add_job` applies too).
#[derive(Debug, Clone, Copy)]
pub struct InsertRules<'a> {
    /// The kinds the inserting node runs (the unique keys' namespaces too).
    pub kinds: &'a [&'a str],
    /// Of them, the kinds only Kickoff's own code inserts.
    pub own_kinds: &'a [&'a str],
    /// Kickoff's own job: its meta carries the keys only Kickoff writes, its kind may be one of
    /// `own_kinds`.
    pub as_kickoff: bool,
}

impl<'a> InsertRules<'a> {
    /// The rules of rows a test or a benchmark writes as Kickoff would: of `kinds`, with any
    /// meta key.
    pub fn trusted(kinds: &'a [&'a str]) -> Self {
        InsertRules {
            kinds,
            own_kinds: &[],
            as_kickoff: true,
        }
    }
}

/// Pushes `p AS (...)`: `new`'s fields as one row, each bound once (its args, up to 256 KiB,
/// travel once), with its instant `at`, for the statement's insert and its rules to read.
fn push_job_row(qb: &mut QueryBuilder<'_, Postgres>, new: &NewJob, call_host: Option<&str>) {
    let (at, in_secs) = schedule_params(new.schedule);
    qb.push(
        "p AS (SELECT v.*, coalesce(v.given_at, statement_timestamp()
                                    + make_interval(secs => v.in_secs)) AS at
               FROM (SELECT ",
    );
    let mut row = qb.separated(", ");
    row.push_bind(at)
        .push_unseparated("::timestamptz AS given_at");
    row.push_bind(in_secs)
        .push_unseparated("::float8 AS in_secs");
    row.push_bind(new.queue.clone())
        .push_unseparated("::text AS queue");
    row.push_bind(new.kind.clone())
        .push_unseparated("::text AS kind");
    row.push_bind(new.args.clone())
        .push_unseparated("::jsonb AS args");
    row.push_bind(i32::from(new.priority))
        .push_unseparated("::int AS priority");
    row.push_bind(new.max_attempts)
        .push_unseparated("::int AS max_attempts");
    row.push_bind(new.unique_key.clone())
        .push_unseparated("::text AS unique_key");
    row.push_bind(new.tags.clone())
        .push_unseparated("::text[] AS tags");
    row.push_bind(new.meta.clone())
        .push_unseparated("::jsonb AS meta");
    row.push_bind(new.created_by.clone())
        .push_unseparated("::text AS created_by");
    row.push_bind(call_host.map(str::to_string))
        .push_unseparated("::text AS call_host");
    qb.push(") v)");
}

/// Pushes the call of the rules (`kickoff_check_job(...)`, true or a refusal raised) on the row
/// `p` of [`push_job_row`], with `rules`.
fn push_rules<'a>(qb: &mut QueryBuilder<'a, Postgres>, rules: InsertRules<'a>) {
    qb.push(
        "kickoff_check_job(p.kind, p.args, p.queue, p.priority, p.max_attempts, p.given_at,
                           p.in_secs, p.unique_key, p.tags, p.meta, p.created_by, ",
    );
    let mut given = qb.separated(", ");
    given.push_bind(rules.kinds);
    given.push_bind(rules.own_kinds);
    given.push_bind(rules.as_kickoff);
    qb.push(")");
}

/// Checks `new` against the rules every insert applies, alone (an edit of a waiting job, a
/// schedule's template, a workflow's step before its job exists): a refusal is a database error
/// of class `KO` (see `ClientError`'s conversion). Inside a savepoint: a refusal leaves the
/// caller's transaction as it was (a bulk edit counts a refused job and goes on).
pub async fn job_check(
    conn: &mut sqlx::PgConnection,
    new: &NewJob,
    rules: InsertRules<'_>,
) -> Result<(), sqlx::Error> {
    use sqlx::Connection;
    let mut qb = QueryBuilder::new("WITH ");
    push_job_row(&mut qb, new, None);
    qb.push(" SELECT ");
    push_rules(&mut qb, rules);
    qb.push(" FROM p");
    let mut savepoint = conn.begin().await?;
    qb.build().execute(&mut *savepoint).await?;
    savepoint.commit().await
}

/// What is written with an insert in its one statement (an audit entry): given the name of the
/// common table expression that returns the inserted row, it pushes `, name AS (...)` common
/// table expressions that read from it, so they are written exactly when the job is. The
/// engine knows nothing of what they write.
pub type Companion<'c> = &'c (dyn Fn(&mut QueryBuilder<'_, Postgres>, &str) + Sync);

/// Inserts one job and its [`Companion`] in a single statement, on a connection outside any
/// transaction: the statement is its own transaction, one round trip and one commit (a
/// transaction of its own would take four: `BEGIN`, the job, the companion, `COMMIT`). Sends no
/// notifications from it (see [`job_insert_notifying`]). `None` when nothing was inserted (a live
/// job holds its unique key): the caller takes the ordinary path, which finds or moves that job.
pub async fn job_insert_alone(
    conn: &mut sqlx::PgConnection,
    new: &NewJob,
    call_host: Option<&str>,
    rules: InsertRules<'_>,
    companion: Companion<'_>,
) -> Result<Option<Job>, sqlx::Error> {
    let mut qb = QueryBuilder::new(
        "WITH quiet AS MATERIALIZED (SELECT set_config('kickoff.notify', 'after_commit', true)), ",
    );
    push_job_row(&mut qb, new, call_host);
    qb.push(
        ", inserted AS (
             INSERT INTO jobs (queue, kind, args, state, priority, max_attempts, scheduled_at,
                               unique_key, tags, meta, created_by, call_host, rate_key)
             SELECT p.queue, p.kind, p.args,
                    CASE WHEN p.at <= statement_timestamp() THEN 'available'::job_state
                         ELSE 'scheduled'::job_state END,
                    p.priority, p.max_attempts, p.at, p.unique_key, p.tags, p.meta,
                    p.created_by, p.call_host, kickoff_rate_key(p.queue, p.kind, p.args, p.call_host)
             FROM p, quiet
             WHERE ",
    );
    push_rules(&mut qb, rules);
    qb.push(
        "
             ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND finalized_at IS NULL
             DO NOTHING
             RETURNING *)",
    );
    companion(&mut qb, "inserted");
    qb.push(" SELECT * FROM inserted");
    qb.build_query_as().fetch_optional(conn).await
}

/// Inserts one job, or finds the live job holding its unique key.
pub async fn job_insert(
    conn: &mut sqlx::PgConnection,
    new: &NewJob,
    call_host: Option<&str>,
    rules: InsertRules<'_>,
) -> Result<Inserted, sqlx::Error> {
    job_insert_notifying(conn, new, call_host, rules, true).await
}

/// [`job_insert`], whose insert statement sends no notifications from its transaction when
/// `notify` is false: it sets `kickoff.notify` to `after_commit` for that statement's triggers
/// (the last of them clears it again; see `migrations/20261207000001_notify_after_commit.sql`),
/// and the caller announces the job once its transaction committed (`engine::announcer`).
pub async fn job_insert_notifying(
    conn: &mut sqlx::PgConnection,
    new: &NewJob,
    call_host: Option<&str>,
    rules: InsertRules<'_>,
    notify: bool,
) -> Result<Inserted, sqlx::Error> {
    let (at, in_secs) = schedule_params(new.schedule);
    // A unique key's holder may finish between the conflicting insert and the look-up: try again.
    for _ in 0..5 {
        let inserted: Option<Job> = sqlx::query_as(
            "WITH quiet AS MATERIALIZED (
                     SELECT CASE WHEN NOT $12 THEN set_config('kickoff.notify', 'after_commit', true)
                            END AS set),
                  p AS (SELECT coalesce($7::timestamptz,
                                       statement_timestamp() + make_interval(secs => $8)) AS at)
             INSERT INTO jobs (queue, kind, args, state, priority, max_attempts, scheduled_at,
                               unique_key, tags, meta, created_by, call_host, rate_key)
             SELECT $1, $2, $3,
                    CASE WHEN p.at <= statement_timestamp() THEN 'available'::job_state
                         ELSE 'scheduled'::job_state END,
                    $4, $5, p.at, $6, $9, $10, $11, $13, kickoff_rate_key($1, $2, $3, $13)
             FROM p, quiet
             WHERE kickoff_check_job($2, $3, $1, $4, $5, $7, $8, $6, $9, $10, $11, $14, $15, $16)
             ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND finalized_at IS NULL DO NOTHING
             RETURNING *",
        )
        .bind(&new.queue)
        .bind(&new.kind)
        .bind(&new.args)
        .bind(new.priority)
        .bind(new.max_attempts)
        .bind(&new.unique_key)
        .bind(at)
        .bind(in_secs)
        .bind(&new.tags)
        .bind(&new.meta)
        .bind(&new.created_by)
        .bind(notify)
        .bind(call_host)
        .bind(rules.kinds)
        .bind(rules.own_kinds)
        .bind(rules.as_kickoff)
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(job) = inserted {
            return Ok(Inserted {
                job,
                existing: false,
            });
        }
        let Some(key) = &new.unique_key else {
            // Only a unique-key conflict can swallow the insert.
            return Err(sqlx::Error::RowNotFound);
        };
        if new.on_conflict == OnConflict::Reschedule {
            let moved: Option<Job> = sqlx::query_as(
                "WITH quiet AS MATERIALIZED (
                         SELECT CASE WHEN NOT $4 THEN set_config('kickoff.notify', 'after_commit', true)
                                END AS set),
                      p AS (SELECT coalesce($2::timestamptz,
                                           statement_timestamp() + make_interval(secs => $3)) AS at)
                 UPDATE jobs SET scheduled_at = p.at,
                        state = CASE WHEN p.at <= statement_timestamp() THEN 'available'::job_state
                                     ELSE 'scheduled'::job_state END
                 FROM p, quiet
                 WHERE unique_key = $1 AND finalized_at IS NULL
                   AND state IN ('scheduled', 'available', 'retryable')
                   -- A job another domain owns (a question's lock job) moves only with it.
                   AND meta ->> 'owner' IS NOT DISTINCT FROM $5
                 RETURNING jobs.*",
            )
            .bind(key)
            .bind(at)
            .bind(in_secs)
            .bind(notify)
            .bind(new.meta.get("owner").and_then(|o| o.as_str()))
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(job) = moved {
                return Ok(Inserted {
                    job,
                    existing: true,
                });
            }
        }
        let existing: Option<Job> =
            sqlx::query_as("SELECT * FROM jobs WHERE unique_key = $1 AND finalized_at IS NULL")
                .bind(key)
                .fetch_optional(&mut *conn)
                .await?;
        if let Some(job) = existing {
            return Ok(Inserted {
                job,
                existing: true,
            });
        }
    }
    Err(sqlx::Error::Protocol(
        "unique key kept changing hands during insert".into(),
    ))
}

/// Inserts many jobs in one statement (no unique keys: use [`job_insert`] for those), the `i`th
/// with `call_hosts[i]` (none past its end). Returns the number of rows inserted.
pub async fn job_insert_many<'e>(
    db: impl PgExecutor<'e>,
    jobs: &[NewJob],
    call_hosts: &[Option<String>],
    rules: InsertRules<'_>,
) -> Result<u64, sqlx::Error> {
    if jobs.is_empty() {
        return Ok(0);
    }
    let mut queue = Vec::with_capacity(jobs.len());
    let mut kind = Vec::with_capacity(jobs.len());
    let mut args = Vec::with_capacity(jobs.len());
    let mut priority = Vec::with_capacity(jobs.len());
    let mut max_attempts = Vec::with_capacity(jobs.len());
    let mut at = Vec::with_capacity(jobs.len());
    let mut in_secs = Vec::with_capacity(jobs.len());
    let mut tags = Vec::with_capacity(jobs.len());
    let mut meta = Vec::with_capacity(jobs.len());
    let mut created_by = Vec::with_capacity(jobs.len());
    let mut hosts: Vec<Option<&str>> = Vec::with_capacity(jobs.len());
    for (i, new) in jobs.iter().enumerate() {
        hosts.push(call_hosts.get(i).and_then(Option::as_deref));
        let (a, s) = schedule_params(new.schedule);
        queue.push(new.queue.as_str());
        kind.push(new.kind.as_str());
        args.push(&new.args);
        priority.push(new.priority);
        max_attempts.push(new.max_attempts);
        at.push(a);
        in_secs.push(s);
        // Arrays of arrays must be rectangular in Postgres: tags travel as JSON.
        tags.push(Value::from(new.tags.clone()));
        meta.push(&new.meta);
        created_by.push(new.created_by.as_deref());
    }
    // The queues' partitions are joined once, not looked up row by row (`kickoff_rate_key`). The
    // rows keep the order given (ids, and so first come first served among equals, follow it):
    // the join alone may reorder them. The rows' subquery stays one (`OFFSET 0`): its tags are a
    // column there, and PostgreSQL inlines `kickoff_check_job` into the statement only when no
    // argument it reads twice is an expression to compute again (the tags' sub-select).
    let r = sqlx::query(
        "INSERT INTO jobs (queue, kind, args, state, priority, max_attempts, scheduled_at, tags, meta,
                           created_by, call_host, rate_key)
         SELECT q, k, a, CASE WHEN t <= statement_timestamp() THEN 'available'::job_state
                              ELSE 'scheduled'::job_state END,
                p, m, t, tgs, me, cb, h,
                CASE WHEN per.rate_per IS NOT NULL
                     THEN kickoff_partition_key(per.rate_per, k, a, h) END
         FROM (SELECT q, k, a, p, m, at, s,
                      coalesce(at, statement_timestamp() + make_interval(secs => s)) AS t,
                      ARRAY(SELECT jsonb_array_elements_text(tg)) AS tgs, me, cb, h, ord
               FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::smallint[], $5::int[],
                           $6::timestamptz[], $7::float8[], $8::jsonb[], $9::jsonb[], $10::text[],
                           $11::text[])
                    WITH ORDINALITY AS u(q, k, a, p, m, at, s, tg, me, cb, h, ord)
               OFFSET 0) rows
         LEFT JOIN queues per ON per.name = rows.q AND per.rate_per IS NOT NULL
         WHERE kickoff_check_job(k, a, q, p, m, at, s, NULL, tgs, me, cb, $12, $13, $14)
         ORDER BY rows.ord",
    )
    .bind(&queue)
    .bind(&kind)
    .bind(&args)
    .bind(&priority)
    .bind(&max_attempts)
    .bind(&at)
    .bind(&in_secs)
    .bind(&tags)
    .bind(&meta)
    .bind(&created_by)
    .bind(&hosts)
    .bind(rules.kinds)
    .bind(rules.own_kinds)
    .bind(rules.as_kickoff)
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Deletes up to `limit` final jobs finalized more than `retention` before `now` (the database
/// clock when `None`). Returns how many were deleted.
pub async fn job_prune_finalized<'e>(
    db: impl PgExecutor<'e>,
    now: Option<DateTime<Utc>>,
    retention: Duration,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        // The outer condition is checked again on the row as it is when deleted: a job rerun
        // meanwhile is no longer final and stays.
        "WITH cutoff AS (SELECT coalesce($1, now()) - make_interval(secs => $2) AS at)
         DELETE FROM jobs USING cutoff WHERE finalized_at < cutoff.at AND id IN (
             SELECT id FROM jobs, cutoff WHERE finalized_at < cutoff.at
             ORDER BY finalized_at LIMIT $3)",
    )
    .bind(now)
    .bind(secs(retention))
    .bind(limit)
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

pub async fn job_get<'e>(db: impl PgExecutor<'e>, id: JobId) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Cancels jobs that are not final (`kickoff_cancel_jobs`, migration
/// `20261231000001_sql_actions.sql`: the one place a cancellation is written, which a SQL
/// caller's `kickoff_cancel_job` runs too); the nodes running their attempts are told at commit.
pub async fn job_cancel_many<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
) -> Result<Vec<CancelledJob>, sqlx::Error> {
    let ids: Vec<i64> = ids.iter().map(|id| id.0).collect();
    sqlx::query_as("SELECT * FROM kickoff_cancel_jobs($1)")
        .bind(&ids)
        .fetch_all(db)
        .await
}

/// Cancels job `id` as an operator does (`kickoff_cancel_job`): refused when it belongs to
/// something else while it lives, has finished (both SQLSTATE `KO003`) or is not there
/// (`KO005`). The job as it is now.
pub async fn job_cancel_one<'e>(db: impl PgExecutor<'e>, id: JobId) -> Result<Job, sqlx::Error> {
    sqlx::query_as("SELECT * FROM kickoff_cancel_job($1)")
        .bind(id)
        .fetch_one(db)
        .await
}

/// Runs a final or retryable job again, now (retry / rerun). It gets at least one more attempt.
pub async fn job_retry<'e>(db: impl PgExecutor<'e>, id: JobId) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_as(
        // A final job's key was left as it was when its queue's partition changed: keyed anew.
        "UPDATE jobs SET state = 'available', scheduled_at = statement_timestamp(),
                finalized_at = NULL,
                max_attempts = least(greatest(max_attempts, attempt + 1), 1000),
                rate_key = kickoff_rate_key(queue, kind, args, call_host)
         WHERE id = $1 AND state IN ('retryable', 'completed', 'discarded', 'cancelled')
           -- A settled workflow step's job runs again with its step, through its run.
           AND (step_id IS NULL OR finalized_at IS NULL)
         RETURNING *",
    )
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Makes a waiting job due now.
pub async fn job_run_now<'e>(
    db: impl PgExecutor<'e>,
    id: JobId,
) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE jobs SET state = 'available', scheduled_at = statement_timestamp()
         WHERE id = $1 AND state IN ('scheduled', 'retryable', 'available')
         RETURNING *",
    )
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Moves a waiting job to a new time.
pub async fn job_reschedule<'e>(
    db: impl PgExecutor<'e>,
    id: JobId,
    at: DateTime<Utc>,
) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE jobs SET scheduled_at = $2,
                state = CASE WHEN $2 <= statement_timestamp() THEN 'available'::job_state
                             ELSE 'scheduled'::job_state END
         WHERE id = $1 AND state IN ('scheduled', 'retryable', 'available')
         RETURNING *",
    )
    .bind(id)
    .bind(at)
    .fetch_optional(db)
    .await
}

/// The workflow step job `id` is the job of, while it waits for its first start.
pub async fn job_step_before_start<'e>(
    db: impl PgExecutor<'e>,
    id: JobId,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT step_id FROM jobs
         WHERE id = $1 AND step_id IS NOT NULL AND attempt = 0 AND finalized_at IS NULL",
    )
    .bind(id)
    .fetch_optional(db)
    .await
    .map(Option::flatten)
}

/// What job `id` belongs to (`meta.owner`, set by the domain that inserted it, e.g. `question
/// 34`): an operator changes it through that owner. `live`: only while it has not finished.
pub async fn job_owner<'e>(
    db: impl PgExecutor<'e>,
    id: JobId,
    live: bool,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT meta ->> 'owner' FROM jobs
         WHERE id = $1 AND meta ? 'owner' AND (finalized_at IS NULL OR NOT $2)",
    )
    .bind(id)
    .bind(live)
    .fetch_optional(db)
    .await
}

/// Deletes a job that is not executing. Returns whether a row was deleted.
pub async fn job_delete<'e>(db: impl PgExecutor<'e>, id: JobId) -> Result<bool, sqlx::Error> {
    let r = sqlx::query("DELETE FROM jobs WHERE id = $1 AND state <> 'executing'")
        .bind(id)
        .execute(db)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// Job counts per queue and state, counted over the whole table: exact, but a scan of every row.
/// Tools and tests use it; the dashboard reads the maintained counts
/// ([`super::stats::job_counts_list`]).
pub async fn job_count_by_queue_state<'e>(
    db: impl PgExecutor<'e>,
) -> Result<Vec<(String, JobState, i64)>, sqlx::Error> {
    sqlx::query_as("SELECT queue, state, count(*) FROM jobs GROUP BY queue, state ORDER BY queue")
        .fetch_all(db)
        .await
}

/// Sends a notification on `channel` (delivered at the commit of `db`'s transaction).
pub async fn notify<'e>(
    db: impl PgExecutor<'e>,
    channel: &str,
    payload: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(db)
        .await?;
    Ok(())
}

/// Sends notifications `(channel, payload)` in one statement (the announcer's, after a commit).
pub async fn notify_many<'e>(
    db: impl PgExecutor<'e>,
    channels: &[String],
    payloads: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS t(c, p)")
        .bind(channels)
        .bind(payloads)
        .execute(db)
        .await?;
    Ok(())
}

/// The database clock.
pub async fn db_now<'e>(db: impl PgExecutor<'e>) -> Result<DateTime<Utc>, sqlx::Error> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(db)
        .await
}
