//! SQL of the `jobs` table. Every state transition is guarded by the state (and, for an attempt's
//! writes, by the claim token of that attempt) it expects, so that a late or zombie writer changes
//! nothing.
//!
//! Times that schedule a job count from `statement_timestamp()`, not `now()`: inside a caller's
//! long transaction `now()` is the transaction's start, and "in 5 minutes" would be early.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgExecutor, Postgres, QueryBuilder};

use crate::engine::job::{
    Claim, ClaimToken, Inserted, Job, JobId, JobState, NewJob, OnConflict, Schedule,
};

/// Claims as the two arrays `unnest($1::bigint[], $2::bigint[])` takes.
fn split_claims(claims: &[Claim]) -> (Vec<i64>, Vec<i64>) {
    claims.iter().map(|c| (c.id.0, c.token.0)).unzip()
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The instant a schedule names, as SQL parameters: an absolute time, or seconds after the
/// statement's start.
fn schedule_params(schedule: Schedule) -> (Option<DateTime<Utc>>, f64) {
    match schedule {
        Schedule::Now => (None, 0.0),
        Schedule::At(at) => (Some(at), 0.0),
        Schedule::In(d) => (None, secs(d)),
    }
}

/// Inserts one job, or finds the live job holding its unique key.
pub async fn job_insert(
    conn: &mut sqlx::PgConnection,
    new: &NewJob,
) -> Result<Inserted, sqlx::Error> {
    let (at, in_secs) = schedule_params(new.schedule);
    // A unique key's holder may finish between the conflicting insert and the look-up: try again.
    for _ in 0..5 {
        let inserted: Option<Job> = sqlx::query_as(
            "WITH p AS (SELECT coalesce($7::timestamptz,
                                       statement_timestamp() + make_interval(secs => $8)) AS at)
             INSERT INTO jobs (queue, kind, args, state, priority, max_attempts, scheduled_at,
                               unique_key, tags, meta)
             SELECT $1, $2, $3,
                    CASE WHEN p.at <= statement_timestamp() THEN 'available'::job_state
                         ELSE 'scheduled'::job_state END,
                    $4, $5, p.at, $6, $9, $10
             FROM p
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
                "WITH p AS (SELECT coalesce($2::timestamptz,
                                           statement_timestamp() + make_interval(secs => $3)) AS at)
                 UPDATE jobs SET scheduled_at = p.at,
                        state = CASE WHEN p.at <= statement_timestamp() THEN 'available'::job_state
                                     ELSE 'scheduled'::job_state END
                 FROM p
                 WHERE unique_key = $1 AND finalized_at IS NULL
                   AND state IN ('scheduled', 'available', 'retryable')
                 RETURNING jobs.*",
            )
            .bind(key)
            .bind(at)
            .bind(in_secs)
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

/// Inserts many jobs in one statement (no unique keys: use [`job_insert`] for those). Returns the
/// number of rows inserted.
pub async fn job_insert_many<'e>(
    db: impl PgExecutor<'e>,
    jobs: &[NewJob],
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
    for new in jobs {
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
    }
    let r = sqlx::query(
        "INSERT INTO jobs (queue, kind, args, state, priority, max_attempts, scheduled_at, tags, meta)
         SELECT q, k, a, CASE WHEN t <= statement_timestamp() THEN 'available'::job_state
                              ELSE 'scheduled'::job_state END,
                p, m, t, ARRAY(SELECT jsonb_array_elements_text(tg)), me
         FROM (SELECT q, k, a, p, m,
                      coalesce(at, statement_timestamp() + make_interval(secs => s)) AS t, tg, me
               FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::smallint[], $5::int[],
                           $6::timestamptz[], $7::float8[], $8::jsonb[], $9::jsonb[])
                    AS u(q, k, a, p, m, at, s, tg, me)) rows",
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
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Moves due `scheduled` and `retryable` jobs to `available`. Returns the queues of the moved jobs
/// (one entry per job). `now` pins the clock in tests.
pub async fn job_stage_due<'e>(
    db: impl PgExecutor<'e>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<String>, sqlx::Error> {
    // SKIP LOCKED: every node's timer may stage at the same instant; each takes different rows.
    sqlx::query_scalar(
        "WITH due AS (
             SELECT id FROM jobs
             WHERE state IN ('scheduled', 'retryable') AND scheduled_at <= coalesce($1, now())
             ORDER BY scheduled_at
             LIMIT $2
             FOR UPDATE SKIP LOCKED)
         UPDATE jobs SET state = 'available' FROM due WHERE jobs.id = due.id
         RETURNING jobs.queue",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The earliest `scheduled_at` of the jobs waiting in `scheduled` or `retryable`, and the database's
/// clock at the moment of the query.
pub async fn job_next_due<'e>(
    db: impl PgExecutor<'e>,
) -> Result<(Option<DateTime<Utc>>, DateTime<Utc>), sqlx::Error> {
    sqlx::query_as(
        "SELECT (SELECT min(scheduled_at) FROM jobs WHERE state IN ('scheduled', 'retryable')),
                clock_timestamp()",
    )
    .fetch_one(db)
    .await
}

/// Claims up to `limit` available jobs of `queue` for `node`, in priority order, under a lease.
/// Each claimed row carries a fresh claim token ([`Job::claim`]) that fences the attempt's writes.
pub async fn job_claim<'e>(
    db: impl PgExecutor<'e>,
    queue: &str,
    limit: i64,
    node: &str,
    lease: Duration,
) -> Result<Vec<Job>, sqlx::Error> {
    // The CTE picks and locks the rows first: an UPDATE cannot take LIMIT or SKIP LOCKED itself, and
    // SKIP LOCKED lets every node claim at once without waiting on each other's rows. One token
    // per statement is enough: the job id tells its rows apart, and a job's next claim draws anew.
    sqlx::query_as(
        "WITH picked AS (
             SELECT id FROM jobs
             WHERE state = 'available' AND queue = $1
             ORDER BY priority, scheduled_at, id
             LIMIT $2
             FOR UPDATE SKIP LOCKED)
         UPDATE jobs SET state = 'executing',
                attempt = jobs.attempt + 1,
                attempted_at = now(),
                attempted_by = $3,
                lease_expires_at = now() + make_interval(secs => $4),
                claim_token = $5
         FROM picked WHERE jobs.id = picked.id
         RETURNING jobs.*",
    )
    .bind(queue)
    .bind(limit)
    .bind(node)
    .bind(secs(lease))
    .bind(ClaimToken::random())
    .fetch_all(db)
    .await
}

/// The claims, of those given, that still hold their jobs (read without a lock).
async fn claims_still_held(
    conn: &mut sqlx::PgConnection,
    claims: &[Claim],
) -> Result<Vec<Claim>, sqlx::Error> {
    let (ids, tokens) = split_claims(claims);
    let rows: Vec<(JobId, ClaimToken)> = sqlx::query_as(
        "SELECT jobs.id, jobs.claim_token FROM jobs
         JOIN unnest($1::bigint[], $2::bigint[]) AS h(id, token)
           ON jobs.id = h.id AND jobs.claim_token = h.token
         WHERE jobs.state = 'executing'",
    )
    .bind(&ids)
    .bind(&tokens)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, token)| Claim { id, token })
        .collect())
}

/// What a write to many claims did. A claim in neither list was fenced off: its job was
/// cancelled, rescued or claimed again, and its attempt should change nothing more.
#[derive(Debug, Default, PartialEq)]
pub struct ClaimWrite {
    /// Claims whose rows were written.
    pub written: Vec<Claim>,
    /// Claims that still hold their jobs, but whose rows another transaction has locked (an
    /// operator's, a handler's own): try again later.
    pub locked: Vec<Claim>,
}

impl ClaimWrite {
    /// Whether `claim` still holds its job (written, or locked).
    pub fn holds(&self, claim: &Claim) -> bool {
        self.written.contains(claim) || self.locked.contains(claim)
    }
}

/// Completes the attempts of these claims that still hold their jobs, waiting for rows that other
/// transactions hold (a handler completing inside its own transaction). Returns the ids that were
/// completed; a missing id was fenced off (rescued, cancelled, or claimed again since).
pub async fn job_complete_many<'e>(
    db: impl PgExecutor<'e>,
    claims: &[Claim],
) -> Result<Vec<JobId>, sqlx::Error> {
    let (ids, tokens) = split_claims(claims);
    // The CTE locks the rows in id order: two multi-row writes then never deadlock (an UPDATE
    // joined to unnest locks in whatever order its plan reads).
    sqlx::query_scalar(
        "WITH done AS (
             SELECT jobs.id FROM jobs
             JOIN unnest($1::bigint[], $2::bigint[]) AS h(id, token)
               ON jobs.id = h.id AND jobs.claim_token = h.token
             WHERE jobs.state = 'executing'
             ORDER BY jobs.id
             FOR NO KEY UPDATE OF jobs)
         UPDATE jobs SET state = 'completed', finalized_at = now(), lease_expires_at = NULL,
                claim_token = NULL
         FROM done WHERE jobs.id = done.id
         RETURNING jobs.id",
    )
    .bind(&ids)
    .bind(&tokens)
    .fetch_all(db)
    .await
}

/// Completes the attempts of these claims that still hold their jobs, skipping rows another
/// transaction has locked (they are reported in [`ClaimWrite::locked`], to be tried again): the
/// completer must not stall every outcome of the node behind one row an operator holds.
pub async fn job_complete_unless_locked(
    conn: &mut sqlx::PgConnection,
    claims: &[Claim],
) -> Result<ClaimWrite, sqlx::Error> {
    let (ids, tokens) = split_claims(claims);
    let written: Vec<(JobId, ClaimToken)> = sqlx::query_as(
        "WITH done AS (
             SELECT jobs.id, h.token FROM jobs
             JOIN unnest($1::bigint[], $2::bigint[]) AS h(id, token)
               ON jobs.id = h.id AND jobs.claim_token = h.token
             WHERE jobs.state = 'executing'
             ORDER BY jobs.id
             FOR NO KEY UPDATE OF jobs SKIP LOCKED)
         UPDATE jobs SET state = 'completed', finalized_at = now(), lease_expires_at = NULL,
                claim_token = NULL
         FROM done WHERE jobs.id = done.id
         RETURNING jobs.id, done.token",
    )
    .bind(&ids)
    .bind(&tokens)
    .fetch_all(&mut *conn)
    .await?;
    let written: Vec<Claim> = written
        .into_iter()
        .map(|(id, token)| Claim { id, token })
        .collect();
    let rest: Vec<Claim> = claims
        .iter()
        .filter(|c| !written.contains(c))
        .copied()
        .collect();
    let locked = if rest.is_empty() {
        Vec::new()
    } else {
        claims_still_held(conn, &rest).await?
    };
    Ok(ClaimWrite { written, locked })
}

/// How a failed attempt ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FailAs {
    /// Retry after `backoff`, unless the job is out of attempts (then discard).
    Retry { backoff: Duration },
    /// Discard now.
    Discard,
    /// Cancel now (the handler decided the job should not run again).
    Cancel,
}

/// Records a failed attempt and moves the job on as `fail_as` says. Returns the new state, or `None`
/// when the attempt was fenced off.
pub async fn job_fail<'e>(
    db: impl PgExecutor<'e>,
    claim: Claim,
    node: &str,
    message: &str,
    fail_as: FailAs,
) -> Result<Option<JobState>, sqlx::Error> {
    let (mode, backoff) = match fail_as {
        FailAs::Retry { backoff } => ("retry", secs(backoff)),
        FailAs::Discard => ("discard", 0.0),
        FailAs::Cancel => ("cancel", 0.0),
    };
    // In SET, column names read the row as it was before this UPDATE.
    sqlx::query_scalar(
        "WITH next AS (
             SELECT CASE WHEN $5 = 'cancel' THEN 'cancelled'::job_state
                         WHEN $5 = 'discard' OR attempt >= max_attempts THEN 'discarded'::job_state
                         ELSE 'retryable'::job_state END AS state
             FROM jobs WHERE id = $1)
         UPDATE jobs SET state = next.state,
                scheduled_at = CASE WHEN next.state = 'retryable'
                                    THEN now() + make_interval(secs => $6) ELSE scheduled_at END,
                finalized_at = CASE WHEN next.state = 'retryable' THEN NULL ELSE now() END,
                lease_expires_at = NULL, claim_token = NULL,
                errors = errors || jsonb_build_array(jsonb_build_object(
                    'attempt', attempt, 'started_at', attempted_at, 'at', now(), 'node', $3::text,
                    'message', $4::text))
         FROM next
         WHERE jobs.id = $1 AND jobs.claim_token = $2 AND jobs.state = 'executing'
         RETURNING jobs.state",
    )
    .bind(claim.id)
    .bind(claim.token)
    .bind(node)
    .bind(message)
    .bind(mode)
    .bind(backoff)
    .fetch_optional(db)
    .await
}

/// Puts an executing attempt back to `scheduled` for `delay`, without spending an attempt: the
/// attempt number goes back, so the next run has the number this one had and a job snoozed any
/// number of times keeps every attempt it had (raising `max_attempts` instead, as before, hit its
/// cap of 1000 and then let one failure discard a job that never failed). `meta.snoozes` counts
/// the snoozes, for handlers that limit them. Returns false when fenced off.
pub async fn job_snooze<'e>(
    db: impl PgExecutor<'e>,
    claim: Claim,
    delay: Duration,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query(
        "UPDATE jobs SET state = 'scheduled',
                scheduled_at = statement_timestamp() + make_interval(secs => $3),
                lease_expires_at = NULL, claim_token = NULL, attempt = attempt - 1,
                meta = jsonb_set(meta, '{snoozes}', to_jsonb(
                    CASE WHEN jsonb_typeof(meta->'snoozes') = 'number'
                         THEN (meta->>'snoozes')::numeric + 1 ELSE 1 END))
         WHERE id = $1 AND claim_token = $2 AND state = 'executing'",
    )
    .bind(claim.id)
    .bind(claim.token)
    .bind(secs(delay))
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Hands executing attempts of `node` back to `available` (graceful shutdown): they run again on any
/// node, and the interrupted attempt is not counted against the job (its number goes back).
pub async fn job_hand_back<'e>(
    db: impl PgExecutor<'e>,
    claims: &[Claim],
    node: &str,
) -> Result<u64, sqlx::Error> {
    let (ids, tokens) = split_claims(claims);
    let r = sqlx::query(
        "WITH held AS (
             SELECT jobs.id FROM jobs
             JOIN unnest($1::bigint[], $2::bigint[]) AS h(id, token)
               ON jobs.id = h.id AND jobs.claim_token = h.token
             WHERE jobs.state = 'executing' AND jobs.attempted_by = $3
             ORDER BY jobs.id
             FOR NO KEY UPDATE OF jobs)
         UPDATE jobs SET state = 'available', lease_expires_at = NULL, claim_token = NULL,
                attempt = attempt - 1
         FROM held WHERE jobs.id = held.id",
    )
    .bind(&ids)
    .bind(&tokens)
    .bind(node)
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Extends the leases of these claims. A claim in neither list of the result has lost its job
/// (cancelled, rescued, claimed again) and its attempt should stop.
///
/// Locked rows are skipped at first, not waited for: one row held by a long transaction must not
/// stall the renewal of every other lease of the node. The skipped claims are then looked up
/// without a lock, to tell "still ours, but busy" from "lost"; those whose lease would lapse
/// before the next renewal (under half of it is left) are renewed one by one, waiting for their
/// lock as long as the connection's `lock_timeout` allows: a row locked for longer than the lease
/// must not become rescuable the moment its lock goes.
pub async fn job_renew_leases(
    conn: &mut sqlx::PgConnection,
    claims: &[Claim],
    lease: Duration,
) -> Result<ClaimWrite, sqlx::Error> {
    let (ids, tokens) = split_claims(claims);
    let written: Vec<(JobId, ClaimToken)> = sqlx::query_as(
        "WITH held AS (
             SELECT jobs.id, h.token FROM jobs
             JOIN unnest($1::bigint[], $2::bigint[]) AS h(id, token)
               ON jobs.id = h.id AND jobs.claim_token = h.token
             WHERE jobs.state = 'executing'
             ORDER BY jobs.id
             FOR NO KEY UPDATE OF jobs SKIP LOCKED)
         UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3)
         FROM held WHERE jobs.id = held.id
         RETURNING jobs.id, held.token",
    )
    .bind(&ids)
    .bind(&tokens)
    .bind(secs(lease))
    .fetch_all(&mut *conn)
    .await?;
    let mut renewal = ClaimWrite {
        written: written
            .into_iter()
            .map(|(id, token)| Claim { id, token })
            .collect(),
        locked: Vec::new(),
    };
    let rest: Vec<Claim> = claims
        .iter()
        .filter(|c| !renewal.written.contains(c))
        .copied()
        .collect();
    if rest.is_empty() {
        return Ok(renewal);
    }
    let (ids, tokens) = split_claims(&rest);
    let busy: Vec<(JobId, ClaimToken, bool)> = sqlx::query_as(
        "SELECT jobs.id, jobs.claim_token,
                jobs.lease_expires_at < now() + make_interval(secs => $3 / 2) AS lapsing
         FROM jobs
         JOIN unnest($1::bigint[], $2::bigint[]) AS h(id, token)
           ON jobs.id = h.id AND jobs.claim_token = h.token
         WHERE jobs.state = 'executing'",
    )
    .bind(&ids)
    .bind(&tokens)
    .bind(secs(lease))
    .fetch_all(&mut *conn)
    .await?;
    for (id, token, lapsing) in busy {
        let claim = Claim { id, token };
        if lapsing {
            let renewed = sqlx::query(
                "UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3)
                 WHERE id = $1 AND claim_token = $2 AND state = 'executing'",
            )
            .bind(id)
            .bind(token)
            .bind(secs(lease))
            .execute(&mut *conn)
            .await;
            match renewed {
                Ok(r) if r.rows_affected() == 1 => {
                    renewal.written.push(claim);
                    continue;
                }
                // Lost while we waited for the lock.
                Ok(_) => continue,
                // Still locked after `lock_timeout`: still ours, tried again next time.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => {}
                Err(e) => return Err(e),
            }
        }
        renewal.locked.push(claim);
    }
    Ok(renewal)
}

/// Takes back executing jobs whose lease expired before `now` (their node died or was cut off):
/// retryable at once, or discarded when out of attempts. Returns `(id, new state)` pairs.
pub async fn job_rescue_expired<'e>(
    db: impl PgExecutor<'e>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<(JobId, JobState)>, sqlx::Error> {
    sqlx::query_as(
        "WITH expired AS (
             SELECT id FROM jobs
             WHERE state = 'executing' AND lease_expires_at < coalesce($1, now())
             ORDER BY lease_expires_at
             LIMIT $2
             FOR UPDATE SKIP LOCKED)
         UPDATE jobs SET
                state = CASE WHEN attempt >= max_attempts THEN 'discarded'::job_state
                             ELSE 'retryable'::job_state END,
                finalized_at = CASE WHEN attempt >= max_attempts THEN now() END,
                scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE now() END,
                lease_expires_at = NULL, claim_token = NULL,
                errors = errors || jsonb_build_array(jsonb_build_object(
                    'attempt', attempt, 'started_at', attempted_at, 'at', now(), 'node', attempted_by,
                    'message', 'rescued: the lease of node ' || attempted_by
                               || ' expired (the node crashed, hung or lost its database connection)'))
         FROM expired WHERE jobs.id = expired.id
         RETURNING jobs.id, jobs.state",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(db)
    .await
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

/// A job a cancellation moved: its state before, and the claim of its attempt if it was
/// executing (that attempt is to be stopped on its node, and only that one).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CancelledJob {
    pub id: JobId,
    pub before: JobState,
    pub claim_token: Option<ClaimToken>,
}

impl CancelledJob {
    /// The claim of the attempt that was running when the job was cancelled.
    pub fn claim(&self) -> Option<Claim> {
        self.claim_token.map(|token| Claim { id: self.id, token })
    }
}

/// Cancels jobs that are not final.
pub async fn job_cancel_many<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
) -> Result<Vec<CancelledJob>, sqlx::Error> {
    let ids: Vec<i64> = ids.iter().map(|id| id.0).collect();
    sqlx::query_as(
        "WITH target AS (
             SELECT id, state AS before, claim_token FROM jobs
             WHERE id = ANY($1) AND finalized_at IS NULL
             ORDER BY id
             FOR UPDATE)
         UPDATE jobs SET state = 'cancelled', finalized_at = now(), lease_expires_at = NULL,
                claim_token = NULL
         FROM target WHERE jobs.id = target.id
         RETURNING jobs.id, target.before, target.claim_token",
    )
    .bind(&ids)
    .fetch_all(db)
    .await
}

/// Cancels the scheduled jobs whose unique key starts with one of `prefixes` (`keep` false), or
/// with none of them (`keep` true): the runs a periodic job inserted ahead under a configuration
/// that changed. Returns how many. Jobs already due, running or finished are left alone.
pub async fn job_cancel_scheduled_by_key_prefix<'e>(
    db: impl PgExecutor<'e>,
    family: &str,
    prefixes: &[String],
    keep: bool,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "UPDATE jobs SET state = 'cancelled', finalized_at = now()
         WHERE state = 'scheduled' AND starts_with(unique_key, $1)
           AND EXISTS (SELECT 1 FROM unnest($2::text[]) AS p(prefix)
                       WHERE starts_with(jobs.unique_key, p.prefix)) <> $3",
    )
    .bind(family)
    .bind(prefixes)
    .bind(keep)
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Runs a final or retryable job again, now (retry / rerun). It gets at least one more attempt.
pub async fn job_retry<'e>(db: impl PgExecutor<'e>, id: JobId) -> Result<Option<Job>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE jobs SET state = 'available', scheduled_at = statement_timestamp(),
                finalized_at = NULL,
                max_attempts = least(greatest(max_attempts, attempt + 1), 1000)
         WHERE id = $1 AND state IN ('retryable', 'completed', 'discarded', 'cancelled')
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

/// Deletes a job that is not executing. Returns whether a row was deleted.
pub async fn job_delete<'e>(db: impl PgExecutor<'e>, id: JobId) -> Result<bool, sqlx::Error> {
    let r = sqlx::query("DELETE FROM jobs WHERE id = $1 AND state <> 'executing'")
        .bind(id)
        .execute(db)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// Filters of a job listing (and of bulk actions on everything matching).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFilter {
    /// Any of these states; empty: every state.
    pub states: Vec<JobState>,
    pub queue: Option<String>,
    pub kind: Option<String>,
    /// JSON containment: jobs whose args contain this object (`args @> $x`, GIN-indexed).
    pub args: Option<Value>,
    /// `scheduled_at` at or after this instant.
    pub scheduled_from: Option<DateTime<Utc>>,
    /// `scheduled_at` before this instant.
    pub scheduled_to: Option<DateTime<Utc>>,
    /// Only jobs with an id at most this (a list frozen while read; a bulk action's snapshot).
    pub max_id: Option<JobId>,
}

/// Appends the filter's conditions, each as ` AND ...`, to a WHERE clause already opened.
///
/// Only the conditions the filter sets are written, and every query built with it runs unprepared
/// (`persistent(false)`), so that each run is planned for its own values: a reused generic plan of
/// `($1 IS NULL OR queue = $1) AND ...` cannot use any index and walks the whole table. One state is
/// written as `state = $n`, which `jobs_state_id_idx` reads in id order; `state = ANY($n)` cannot
/// be, so listings give each state a branch of its own (see [`push_listing`]).
fn push_filter(qb: &mut QueryBuilder<'_, Postgres>, filter: &JobFilter, states: &[JobState]) {
    match states {
        [] => {}
        [one] => {
            qb.push(" AND state = ").push_bind(*one);
        }
        many => {
            qb.push(" AND state = ANY(")
                .push_bind(many.to_vec())
                .push(")");
        }
    }
    if let Some(queue) = &filter.queue {
        qb.push(" AND queue = ").push_bind(queue.clone());
    }
    if let Some(kind) = &filter.kind {
        qb.push(" AND kind = ").push_bind(kind.clone());
    }
    if let Some(args) = &filter.args {
        qb.push(" AND args @> ").push_bind(args.clone());
    }
    if let Some(from) = filter.scheduled_from {
        qb.push(" AND scheduled_at >= ").push_bind(from);
    }
    if let Some(to) = filter.scheduled_to {
        qb.push(" AND scheduled_at < ").push_bind(to);
    }
    if let Some(max_id) = filter.max_id {
        qb.push(" AND id <= ").push_bind(max_id);
    }
}

/// The filter's states, each once, in a stable order.
fn distinct_states(filter: &JobFilter) -> Vec<JobState> {
    JobState::ALL
        .into_iter()
        .filter(|s| filter.states.contains(s))
        .collect()
}

/// `SELECT <columns> FROM jobs WHERE <filter> AND id < before ORDER BY id DESC LIMIT limit`.
///
/// With several states, one branch per state, each newest first from `jobs_state_id_idx`, merged
/// by id (a Merge Append): the failures page (retryable and discarded) reads a hundred index
/// entries instead of walking the primary key past every completed job.
fn push_listing(
    qb: &mut QueryBuilder<'_, Postgres>,
    columns: &str,
    filter: &JobFilter,
    before: Option<JobId>,
    limit: i64,
) {
    let states = distinct_states(filter);
    let branch = |qb: &mut QueryBuilder<'_, Postgres>, states: &[JobState]| {
        qb.push("SELECT ")
            .push(columns)
            .push(" FROM jobs WHERE true");
        push_filter(qb, filter, states);
        if let Some(before) = before {
            qb.push(" AND id < ").push_bind(before);
        }
        qb.push(" ORDER BY id DESC LIMIT ").push_bind(limit);
    };
    if states.len() <= 1 {
        branch(qb, &states);
        return;
    }
    qb.push("SELECT ").push(columns).push(" FROM (");
    for (i, state) in states.iter().enumerate() {
        if i > 0 {
            qb.push(" UNION ALL ");
        }
        qb.push("(");
        branch(qb, std::slice::from_ref(state));
        qb.push(")");
    }
    qb.push(") matching ORDER BY id DESC LIMIT ")
        .push_bind(limit);
}

/// Lists jobs newest first, after the keyset cursor `before` (an id).
pub async fn job_list<'e>(
    db: impl PgExecutor<'e>,
    filter: &JobFilter,
    before: Option<JobId>,
    limit: i64,
) -> Result<Vec<Job>, sqlx::Error> {
    let mut qb = QueryBuilder::new("");
    push_listing(&mut qb, "*", filter, before, limit);
    qb.build_query_as().persistent(false).fetch_all(db).await
}

/// The ids of matching jobs, newest first, after the keyset cursor `before`: one batch of a bulk
/// action.
pub async fn job_list_ids<'e>(
    db: impl PgExecutor<'e>,
    filter: &JobFilter,
    before: Option<JobId>,
    limit: i64,
) -> Result<Vec<JobId>, sqlx::Error> {
    let mut qb = QueryBuilder::new("");
    push_listing(&mut qb, "id", filter, before, limit);
    qb.build_query_scalar()
        .persistent(false)
        .fetch_all(db)
        .await
}

/// How many jobs match the filter, counting at most `cap` (the count stops there: a confirmation
/// needs "more than 100,000", not a scan of a million rows).
pub async fn job_count_matching<'e>(
    db: impl PgExecutor<'e>,
    filter: &JobFilter,
    cap: i64,
) -> Result<i64, sqlx::Error> {
    let mut qb = QueryBuilder::new("SELECT count(*) FROM (SELECT 1 FROM jobs WHERE true");
    push_filter(&mut qb, filter, &distinct_states(filter));
    qb.push(" LIMIT ").push_bind(cap).push(") capped");
    qb.build_query_scalar()
        .persistent(false)
        .fetch_one(db)
        .await
}

/// The newest job's id (a bulk action's snapshot: jobs inserted later are left alone).
pub async fn job_max_id<'e>(db: impl PgExecutor<'e>) -> Result<Option<JobId>, sqlx::Error> {
    sqlx::query_scalar("SELECT max(id) FROM jobs")
        .fetch_one(db)
        .await
}

/// Jobs waiting to run (scheduled, available, retryable), oldest `scheduled_at` first: overdue
/// jobs lead. Reads `jobs_waiting_idx` in order.
pub async fn job_list_waiting<'e>(
    db: impl PgExecutor<'e>,
    limit: i64,
) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_as(
        "SELECT * FROM jobs WHERE state IN ('scheduled', 'available', 'retryable')
         ORDER BY scheduled_at, id
         LIMIT $1",
    )
    .bind(limit)
    .fetch_all(db)
    .await
}

// Bulk actions. Each takes one batch of ids that matched `filter` and checks the filter again on
// the row it changes, so a job that moved meanwhile (staged, claimed, finished) is only touched if
// it still matches; the state guard is the one of the single-job operation.

/// Cancels the listed jobs that still match and are not final.
pub async fn job_cancel_matching<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<Vec<CancelledJob>, sqlx::Error> {
    // Rows are locked in id order, as job_cancel_many does, so two cancellations never deadlock.
    let mut qb = QueryBuilder::new(
        "WITH target AS (
             SELECT id, state AS before, claim_token FROM jobs
             WHERE finalized_at IS NULL AND id = ANY(",
    );
    qb.push_bind(ids_param(ids)).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    qb.push(
        " ORDER BY id
             FOR UPDATE)
         UPDATE jobs SET state = 'cancelled', finalized_at = now(), lease_expires_at = NULL,
                claim_token = NULL
         FROM target WHERE jobs.id = target.id
         RETURNING jobs.id, target.before, target.claim_token",
    );
    qb.build_query_as().persistent(false).fetch_all(db).await
}

/// Runs the listed retryable or final jobs that still match again, now (as [`job_retry`]).
/// Returns how many moved.
///
/// A final job whose unique key a live job holds is skipped rather than failing the batch, and of
/// several final jobs in the batch sharing a key only the newest runs. A job inserted with the key
/// between this statement's snapshot and its write still raises a unique violation: the caller
/// then retries the batch one job at a time.
pub async fn job_retry_matching<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<u64, sqlx::Error> {
    let ids = ids_param(ids);
    let mut qb = QueryBuilder::new(
        "WITH newest_per_key AS (
             SELECT DISTINCT ON (unique_key) id FROM jobs
             WHERE id = ANY(",
    );
    qb.push_bind(ids.clone()).push(
        ") AND unique_key IS NOT NULL AND finalized_at IS NOT NULL
             ORDER BY unique_key, id DESC)
         UPDATE jobs SET state = 'available', scheduled_at = statement_timestamp(),
                finalized_at = NULL,
                max_attempts = least(greatest(max_attempts, attempt + 1), 1000)
         WHERE state IN ('retryable', 'completed', 'discarded', 'cancelled')
           AND (unique_key IS NULL OR finalized_at IS NULL
                OR (id IN (SELECT id FROM newest_per_key)
                    AND NOT EXISTS (SELECT 1 FROM jobs live
                                    WHERE live.unique_key = jobs.unique_key
                                      AND live.finalized_at IS NULL)))
           AND id = ANY(",
    );
    qb.push_bind(ids).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    let r = qb.build().persistent(false).execute(db).await?;
    Ok(r.rows_affected())
}

/// Makes the listed waiting jobs that still match due now. Returns how many moved.
pub async fn job_run_now_matching<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<u64, sqlx::Error> {
    let mut qb = QueryBuilder::new(
        "UPDATE jobs SET state = 'available', scheduled_at = statement_timestamp()
         WHERE state IN ('scheduled', 'retryable', 'available') AND id = ANY(",
    );
    qb.push_bind(ids_param(ids)).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    let r = qb.build().persistent(false).execute(db).await?;
    Ok(r.rows_affected())
}

/// Deletes the listed jobs that still match and are not executing. Returns how many.
pub async fn job_delete_matching<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<u64, sqlx::Error> {
    let mut qb = QueryBuilder::new("DELETE FROM jobs WHERE state <> 'executing' AND id = ANY(");
    qb.push_bind(ids_param(ids)).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    let r = qb.build().persistent(false).execute(db).await?;
    Ok(r.rows_affected())
}

fn ids_param(ids: &[JobId]) -> Vec<i64> {
    ids.iter().map(|id| id.0).collect()
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

/// The database clock.
pub async fn db_now<'e>(db: impl PgExecutor<'e>) -> Result<DateTime<Utc>, sqlx::Error> {
    sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(db)
        .await
}
