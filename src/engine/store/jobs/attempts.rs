//! SQL of an attempt's life in the `jobs` table: staging due jobs, claiming them (with a fresh claim
//! token), renewing leases, writing outcomes (complete, fail, snooze, hand back) guarded by the
//! claim token, and rescuing attempts whose lease lapsed.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::params::{secs, split_claims};
use crate::engine::job::{Claim, ClaimToken, Job, JobId, JobState};
use crate::engine::limits::PARTITION_KEYS;

/// What the node knows of an attempt that ended, for its record in `job_attempts`. A field left
/// out is read from the job's row: the start from its claim (`attempted_at`), the duration as
/// the time since then.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptEnd {
    /// When the handler started, by the database's clock.
    pub started_at: Option<DateTime<Utc>>,
    pub duration: Option<Duration>,
    /// What the handler recorded, as JSON text.
    pub output: Option<String>,
    /// The attempt's log lines, a JSON array as text.
    pub logs: Option<String>,
    /// Lines left out past the bounds.
    pub logs_dropped: i32,
}

/// The fields of many [`AttemptEnd`]s as the arrays of `unnest` (`$3` to `$7` of the statements
/// below); empty arrays leave every field to the job's row.
struct EndArrays {
    started_at: Vec<Option<DateTime<Utc>>>,
    duration_ms: Vec<Option<f64>>,
    output: Vec<Option<String>>,
    logs: Vec<Option<String>>,
    dropped: Vec<i32>,
}

fn end_arrays(ends: &[AttemptEnd]) -> EndArrays {
    EndArrays {
        started_at: ends.iter().map(|e| e.started_at).collect(),
        duration_ms: ends.iter().map(|e| e.duration.map(duration_ms)).collect(),
        output: ends.iter().map(|e| e.output.clone()).collect(),
        logs: ends.iter().map(|e| e.logs.clone()).collect(),
        dropped: ends.iter().map(|e| e.logs_dropped).collect(),
    }
}

fn duration_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `INSERT` of attempt records from a statement's common table expression `$from`, which
/// returns the written job's row (`id`, `attempt`, `queue`, `kind`, `meta`, `attempted_by`,
/// `attempted_at`), the attempt's due time `due_at`, the node's `started_at`, `duration_ms`,
/// `output`, `logs` and `dropped` (each may be NULL), and its `outcome` and `error`. The
/// attempt ended at its start plus its duration, both by the node's reading of the database's
/// clock (not when its record is written: that comes later, after the completer's batch).
macro_rules! record_attempts_from {
    ($from:literal) => {
        concat!(
            "INSERT INTO job_attempts (job_id, attempt, queue, kind, schedule_id, node, due_at,
                                       started_at, finished_at, duration_ms, outcome, error,
                                       output, logs, logs_dropped)
             SELECT id, attempt, queue, kind,
                    CASE WHEN (meta->>'schedule_id') ~ '^[0-9]+$'
                              AND char_length(meta->>'schedule_id') <= 18
                         THEN (meta->>'schedule_id')::bigint END,
                    coalesce(attempted_by, ''), due_at, s.at,
                    s.at + make_interval(secs => s.ms / 1000), s.ms,
                    outcome, error, output::jsonb, logs::jsonb, coalesce(dropped, 0)
             FROM (SELECT *, coalesce(started_at, attempted_at, now()) AS at FROM ",
            $from,
            ") r,
             LATERAL (SELECT r.at AS at,
                             coalesce(r.duration_ms, greatest(0, 1000 * extract(epoch FROM
                                 clock_timestamp() - r.at)))::float8 AS ms) s"
        )
    };
}

/// Completes the claims of `$done` (`id`, `token` and the attempt's fields; locked by it) and
/// records their attempts; returns the completed rows' `id` and `token`.
///
/// Each claim's row is found by its key, one at a time in id order (the lock order of every
/// multi-row write): a join let the planner read every executing row's entry of a state index
/// instead, dead entries included (a bitmap scan never marks them dead), 26,000 index entries
/// and 665 heap pages for 369 completions in `kickoff bench throughput`.
macro_rules! complete_and_record {
    ($lock:literal) => {
        concat!(
            "WITH done AS (
                 SELECT j.id, h.token, j.scheduled_at AS due_at, h.started_at,
                        h.duration_ms, h.output, h.logs, h.dropped
                 FROM (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[],
                                            $4::float8[], $5::text[], $6::text[], $7::int[])
                            AS u(id, token, started_at, duration_ms, output, logs, dropped)
                       ORDER BY id) h,
                      LATERAL (SELECT jobs.id, jobs.scheduled_at FROM jobs
                               WHERE jobs.id = h.id AND jobs.claim_token = h.token
                                 AND jobs.state = 'executing'
                               ",
            $lock,
            ") j),
             completed AS (
                 UPDATE jobs SET state = 'completed', finalized_at = now(),
                        lease_expires_at = NULL, claim_token = NULL
                 FROM done WHERE jobs.id = done.id
                 RETURNING jobs.id, jobs.attempt, jobs.queue, jobs.kind, jobs.meta,
                           jobs.attempted_by, jobs.attempted_at, done.token, done.due_at,
                           done.started_at, done.duration_ms, done.output, done.logs,
                           done.dropped, 'completed' AS outcome, NULL::text AS error),
             recorded AS (",
            record_attempts_from!("completed"),
            ")
             SELECT id, token FROM completed"
        )
    };
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
    job_claim_except(db, queue, limit, node, lease, &[]).await
}

/// [`job_claim`], leaving the jobs of the `paused` kinds where they are.
///
/// A pause holds from its commit, also on a node whose notification of it was lost (its listener
/// reconnecting): a claim whose `paused` misses a kind the database holds paused, or whose queue
/// is paused, takes nothing (the node learns the pauses at its next poll, within a second).
/// These are one-time checks (two `InitPlan`s): filtering the rows by the database's list
/// instead would hide its size from the planner, which then sorts every available job of the
/// queue instead of reading `jobs_claim_idx` in order (measured: a full scan of 20,000 rows).
/// The limited claim is handed both lists joined: its function plans with the value.
pub async fn job_claim_except<'e>(
    db: impl PgExecutor<'e>,
    queue: &str,
    limit: i64,
    node: &str,
    lease: Duration,
    paused: &[String],
) -> Result<Vec<Job>, sqlx::Error> {
    // The CTE picks and locks the rows first: an UPDATE cannot take LIMIT or SKIP LOCKED itself, and
    // SKIP LOCKED lets every node claim at once without waiting on each other's rows. One token
    // per statement is enough: the job id tells its rows apart, and a job's next claim draws anew.
    sqlx::query_as(
        "WITH picked AS (
             SELECT id FROM jobs
             WHERE state = 'available' AND queue = $1 AND kind <> ALL ($6)
               AND NOT EXISTS (SELECT 1 FROM kind_pauses p WHERE p.kind <> ALL ($6))
               AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = $1 AND q.paused)
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
    .bind(paused)
    .fetch_all(db)
    .await
}

/// Claims up to `limit` available jobs of a queue with limits across every node (a rate, a global
/// concurrency), within them: see `kickoff_claim_limited` in migrations `20261210000001`,
/// `20261211000002` and `20261214000101`, and the `limits` module. `free`: how many of them would
/// start at once (the rest wait in the fetch-ahead buffer, and under a global concurrency take at
/// most half of the room left). The claims of one limited queue take turns on its row's lock; a
/// partitioned rate walks at most [`PARTITION_KEYS`] keys with available jobs.
#[allow(clippy::too_many_arguments)]
pub async fn job_claim_limited<'e>(
    db: impl PgExecutor<'e>,
    queue: &str,
    limit: i64,
    free: i64,
    node: &str,
    lease: Duration,
    paused: &[String],
) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_as(
        "SELECT * FROM kickoff_claim_limited($1, $2, $3, $4, $5, $6, $7,
                                             $8::text[] || ARRAY(SELECT kind FROM kind_pauses))",
    )
    .bind(queue)
    .bind(limit.min(i32::MAX as i64) as i32)
    .bind(free.clamp(0, limit).min(i32::MAX as i64) as i32)
    .bind(node)
    .bind(secs(lease))
    .bind(ClaimToken::random())
    .bind(PARTITION_KEYS)
    .bind(paused)
    .fetch_all(db)
    .await
}

/// After a limited claim got fewer jobs than its free slots: how long to wait before claiming
/// again because a limit holds the available jobs back (until the rate window ends, or 50 ms under
/// a global concurrency reached; under a partitioned rate with more keys than a claim walks,
/// 50 ms when the keys it looked at were full, or at once when the next turn has room); zero when
/// the limits leave room (jobs that came after the claim looked: their notification brings the
/// next claim); `None` when none are available.
pub async fn limit_wait<'e>(
    db: impl PgExecutor<'e>,
    queue: &str,
    paused: &[String],
) -> Result<Option<Duration>, sqlx::Error> {
    let ms: Option<f64> = sqlx::query_scalar(
        "SELECT kickoff_limit_wait($1, $2::text[] || ARRAY(SELECT kind FROM kind_pauses), $3)",
    )
    .bind(queue)
    .bind(paused)
    .bind(PARTITION_KEYS)
    .fetch_one(db)
    .await?;
    Ok(ms.map(|ms| Duration::from_secs_f64(ms.clamp(0.0, 86_400_000.0) / 1000.0)))
}

/// Claims up to `limit` jobs of `queue` that are `scheduled` or `retryable` and due by `horizon`
/// (a little ahead of the database clock), soonest first, for `node`. Their attempt starts at
/// their due time: `attempted_at` is set to it (or now, if later), and the lease counts from it.
pub async fn job_claim_soon<'e>(
    db: impl PgExecutor<'e>,
    queue: &str,
    limit: i64,
    node: &str,
    lease: Duration,
    horizon: DateTime<Utc>,
    paused: &[String],
) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_as(
        "WITH picked AS (
             SELECT id FROM jobs
             WHERE state IN ('scheduled', 'retryable') AND scheduled_at <= $6 AND queue = $1
               AND kind <> ALL ($7)
               AND NOT EXISTS (SELECT 1 FROM kind_pauses p WHERE p.kind <> ALL ($7))
               AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = $1 AND q.paused)
             ORDER BY scheduled_at, priority, id
             LIMIT $2
             FOR UPDATE SKIP LOCKED)
         UPDATE jobs SET state = 'executing',
                attempt = jobs.attempt + 1,
                attempted_at = greatest(now(), jobs.scheduled_at),
                attempted_by = $3,
                lease_expires_at = greatest(now(), jobs.scheduled_at) + make_interval(secs => $4),
                claim_token = $5
         FROM picked WHERE jobs.id = picked.id
         RETURNING jobs.*",
    )
    .bind(queue)
    .bind(limit)
    .bind(node)
    .bind(secs(lease))
    .bind(ClaimToken::random())
    .bind(horizon)
    .bind(paused)
    .fetch_all(db)
    .await
}

/// The claims, of those given, that still hold their jobs (read without a lock).
async fn claims_still_held<C>(conn: &mut C, claims: &[Claim]) -> Result<Vec<Claim>, sqlx::Error>
where
    for<'c> &'c mut C: PgExecutor<'c>,
{
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

/// The claims of `all` that are not in `written` (in a hash set: a batch holds up to a thousand).
fn claims_not_in(all: &[Claim], written: &[Claim]) -> Vec<Claim> {
    let written: std::collections::HashSet<&Claim> = written.iter().collect();
    all.iter()
        .filter(|c| !written.contains(c))
        .copied()
        .collect()
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

/// Runs a [`complete_and_record!`] statement for `claims` and their `ends`; returns the claims
/// it completed.
async fn complete_recording<'e>(
    db: impl PgExecutor<'e>,
    sql: &'static str,
    claims: &[Claim],
    ends: &[AttemptEnd],
) -> Result<Vec<(JobId, ClaimToken)>, sqlx::Error> {
    let (ids, tokens) = split_claims(claims);
    let e = end_arrays(ends);
    sqlx::query_as(sql)
        .bind(&ids)
        .bind(&tokens)
        .bind(&e.started_at)
        .bind(&e.duration_ms)
        .bind(&e.output)
        .bind(&e.logs)
        .bind(&e.dropped)
        .fetch_all(db)
        .await
}

/// Completes the attempts of these claims that still hold their jobs, waiting for rows that other
/// transactions hold (a handler completing inside its own transaction), and records the attempts
/// with what the job's row says of them. Returns the ids that were completed; a missing id was
/// fenced off (rescued, cancelled, or claimed again since).
pub async fn job_complete_many<'e>(
    db: impl PgExecutor<'e>,
    claims: &[Claim],
) -> Result<Vec<JobId>, sqlx::Error> {
    job_complete_many_with(db, claims, &[]).await
}

/// [`job_complete_many`], recording each attempt with its [`AttemptEnd`] (`ends` parallel to
/// `claims`; missing ones are read from the row).
pub async fn job_complete_many_with<'e>(
    db: impl PgExecutor<'e>,
    claims: &[Claim],
    ends: &[AttemptEnd],
) -> Result<Vec<JobId>, sqlx::Error> {
    // The CTE locks the rows in id order: two multi-row writes then never deadlock (an UPDATE
    // joined to unnest locks in whatever order its plan reads).
    let done = complete_recording(
        db,
        complete_and_record!("FOR NO KEY UPDATE OF jobs"),
        claims,
        ends,
    )
    .await?;
    Ok(done.into_iter().map(|(id, _)| id).collect())
}

/// Completes the attempts of these claims that still hold their jobs, skipping rows another
/// transaction has locked (they are reported in [`ClaimWrite::locked`], to be tried again): the
/// completer must not stall every outcome of the node behind one row an operator holds. Records
/// each completed attempt with its [`AttemptEnd`] (`ends` parallel to `claims`).
pub async fn job_complete_unless_locked<C>(
    conn: &mut C,
    claims: &[Claim],
    ends: &[AttemptEnd],
) -> Result<ClaimWrite, sqlx::Error>
where
    for<'c> &'c mut C: PgExecutor<'c>,
{
    let written = complete_recording(
        &mut *conn,
        complete_and_record!("FOR NO KEY UPDATE OF jobs SKIP LOCKED"),
        claims,
        ends,
    )
    .await?;
    let written: Vec<Claim> = written
        .into_iter()
        .map(|(id, token)| Claim { id, token })
        .collect();
    let rest = claims_not_in(claims, &written);
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
    job_fail_with(db, claim, node, message, fail_as, &AttemptEnd::default()).await
}

/// [`job_fail`], recording the attempt with `end`.
pub async fn job_fail_with<'e>(
    db: impl PgExecutor<'e>,
    claim: Claim,
    node: &str,
    message: &str,
    fail_as: FailAs,
    end: &AttemptEnd,
) -> Result<Option<JobState>, sqlx::Error> {
    let (mode, backoff) = match fail_as {
        FailAs::Retry { backoff } => ("retry", secs(backoff)),
        FailAs::Discard => ("discard", 0.0),
        FailAs::Cancel => ("cancel", 0.0),
    };
    // In SET, column names read the row as it was before this UPDATE.
    sqlx::query_scalar(concat!(
        "WITH next AS (
             SELECT CASE WHEN $5 = 'cancel' THEN 'cancelled'::job_state
                         WHEN $5 = 'discard' OR attempt >= max_attempts THEN 'discarded'::job_state
                         ELSE 'retryable'::job_state END AS state,
                    scheduled_at AS due_at
             FROM jobs WHERE id = $1),
         failed AS (
             UPDATE jobs SET state = next.state,
                    scheduled_at = CASE WHEN next.state = 'retryable'
                                        THEN now() + make_interval(secs => $6) ELSE scheduled_at END,
                    finalized_at = CASE WHEN next.state = 'retryable' THEN NULL ELSE now() END,
                    rate_key = CASE WHEN next.state = 'retryable'
                                    THEN kickoff_rate_key(queue, kind, args, call_host)
                                    ELSE rate_key END,
                    lease_expires_at = NULL, claim_token = NULL,
                    errors = errors || jsonb_build_array(jsonb_build_object(
                        'attempt', attempt, 'started_at', attempted_at, 'at', now(), 'node', $3::text,
                        'message', $4::text))
             FROM next
             WHERE jobs.id = $1 AND jobs.claim_token = $2 AND jobs.state = 'executing'
             RETURNING jobs.id, jobs.state, jobs.attempt, jobs.queue, jobs.kind, jobs.meta,
                       $3::text AS attempted_by, jobs.attempted_at, next.due_at,
                       $7::timestamptz AS started_at, $8::float8 AS duration_ms,
                       $9::text AS output, $10::text AS logs, $11::int AS dropped,
                       CASE jobs.state WHEN 'retryable' THEN 'failed'
                                       ELSE jobs.state::text END AS outcome,
                       $4::text AS error),
         recorded AS (",
        record_attempts_from!("failed"),
        ")
         SELECT state FROM failed"
    ))
    .bind(claim.id)
    .bind(claim.token)
    .bind(node)
    .bind(message)
    .bind(mode)
    .bind(backoff)
    .bind(end.started_at)
    .bind(end.duration.map(duration_ms))
    .bind(&end.output)
    .bind(&end.logs)
    .bind(end.logs_dropped)
    .fetch_optional(db)
    .await
}

/// Puts an executing attempt back to `scheduled` for `delay`, without spending an attempt: the
/// attempt number goes back, so the next run has the number this one had and a job snoozed any
/// number of times keeps every attempt it had (raising `max_attempts` instead, as before, hit its
/// cap of 1000 and then let one failure discard a job that never failed). `meta.snoozes` counts
/// the snoozes, for handlers that limit them. The attempt is recorded as `snoozed`. Returns
/// false when fenced off.
pub async fn job_snooze<'e>(
    db: impl PgExecutor<'e>,
    claim: Claim,
    delay: Duration,
) -> Result<bool, sqlx::Error> {
    job_snooze_with(db, claim, delay, &AttemptEnd::default()).await
}

/// [`job_snooze`], recording the attempt with `end`.
pub async fn job_snooze_with<'e>(
    db: impl PgExecutor<'e>,
    claim: Claim,
    delay: Duration,
    end: &AttemptEnd,
) -> Result<bool, sqlx::Error> {
    let snoozed: Option<JobId> = sqlx::query_scalar(concat!(
        "WITH before AS (SELECT scheduled_at AS due_at, attempt FROM jobs WHERE id = $1),
         snoozed AS (
             UPDATE jobs SET state = 'scheduled',
                    scheduled_at = statement_timestamp() + make_interval(secs => $3),
                    lease_expires_at = NULL, claim_token = NULL, attempt = jobs.attempt - 1,
                    rate_key = kickoff_rate_key(queue, kind, args, call_host),
                    meta = jsonb_set(meta, '{snoozes}', to_jsonb(
                        CASE WHEN jsonb_typeof(meta->'snoozes') = 'number'
                             THEN (meta->>'snoozes')::numeric + 1 ELSE 1 END))
             FROM before
             WHERE id = $1 AND claim_token = $2 AND state = 'executing'
             RETURNING jobs.id, before.attempt, jobs.queue, jobs.kind, jobs.meta,
                       jobs.attempted_by, jobs.attempted_at, before.due_at,
                       $4::timestamptz AS started_at, $5::float8 AS duration_ms,
                       $6::text AS output, $7::text AS logs, $8::int AS dropped,
                       'snoozed' AS outcome, NULL::text AS error),
         recorded AS (",
        record_attempts_from!("snoozed"),
        ")
         SELECT id FROM snoozed"
    ))
    .bind(claim.id)
    .bind(claim.token)
    .bind(secs(delay))
    .bind(end.started_at)
    .bind(end.duration.map(duration_ms))
    .bind(&end.output)
    .bind(&end.logs)
    .bind(end.logs_dropped)
    .fetch_optional(db)
    .await?;
    Ok(snoozed.is_some())
}

/// Hands executing attempts of `node` back (graceful shutdown, or jobs claimed ahead that waited
/// too long): they run again on any node, and the interrupted attempt is not counted against the
/// job (its number goes back). A job claimed ahead of its due time goes back to waiting for it
/// (`scheduled`, or `retryable` if it had attempts before), never to `available`: no node may
/// start it early.
///
/// `ends` (one per claim, or none) say what each attempt had done when it was interrupted: one
/// that had started (`started_at`) is recorded (`interrupted`, with its output and log lines),
/// and its rerun is due from now, so that its lateness (and a late-start policy) counts from the
/// hand-back, not again from the time it first waited.
pub async fn job_hand_back<'e>(
    db: impl PgExecutor<'e>,
    claims: &[Claim],
    ends: &[AttemptEnd],
    node: &str,
) -> Result<u64, sqlx::Error> {
    let (ids, tokens) = split_claims(claims);
    let e = end_arrays(ends);
    let r: i64 = sqlx::query_scalar(concat!(
        "WITH held AS (
             SELECT jobs.id, jobs.scheduled_at AS due_at, h.started_at, h.duration_ms,
                    h.output, h.logs, h.dropped
             FROM jobs
             JOIN unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS h0(id, token, n)
               ON jobs.id = h0.id AND jobs.claim_token = h0.token
             LEFT JOIN unnest($4::timestamptz[], $5::float8[], $6::text[], $7::text[], $8::int[])
                  WITH ORDINALITY AS h(started_at, duration_ms, output, logs, dropped, n)
               ON h.n = h0.n
             WHERE jobs.state = 'executing' AND jobs.attempted_by = $3
             ORDER BY jobs.id
             FOR NO KEY UPDATE OF jobs),
         back AS (
             UPDATE jobs SET state = CASE
                        WHEN held.started_at IS NOT NULL OR jobs.scheduled_at <= now()
                            THEN 'available'::job_state
                        WHEN jobs.attempt > 1 THEN 'retryable'::job_state
                        ELSE 'scheduled'::job_state END,
                    scheduled_at = CASE WHEN held.started_at IS NOT NULL
                                        THEN greatest(jobs.scheduled_at, now())
                                        ELSE jobs.scheduled_at END,
                    lease_expires_at = NULL, claim_token = NULL, attempt = attempt - 1,
                    rate_key = kickoff_rate_key(jobs.queue, jobs.kind, jobs.args, jobs.call_host)
             FROM held WHERE jobs.id = held.id
             RETURNING jobs.id, jobs.attempt + 1 AS attempt, jobs.queue, jobs.kind, jobs.meta,
                       jobs.attempted_by, jobs.attempted_at, held.due_at, held.started_at,
                       held.duration_ms, held.output, held.logs, held.dropped,
                       'interrupted' AS outcome,
                       'interrupted: node ' || jobs.attempted_by
                           || ' stopped before it ended (handed back, not counted)' AS error),
         ran AS (SELECT * FROM back WHERE started_at IS NOT NULL),
         recorded AS (",
        record_attempts_from!("ran"),
        ")
         SELECT count(*) FROM back"
    ))
    .bind(&ids)
    .bind(&tokens)
    .bind(node)
    .bind(&e.started_at)
    .bind(&e.duration_ms)
    .bind(&e.output)
    .bind(&e.logs)
    .bind(&e.dropped)
    .fetch_one(db)
    .await?;
    Ok(r as u64)
}

/// Extends to `lease` the leases of these claims that have under `renew_below` left (the others
/// stand as they are). A claim in neither list of the result has lost its job (cancelled,
/// rescued, claimed again) and its attempt should stop.
///
/// Locked rows are skipped at first, not waited for: one row held by a long transaction must not
/// stall the renewal of every other lease of the node. The skipped claims are then looked up
/// without a lock, to tell "still ours, but busy" from "lost"; those whose lease would lapse
/// before the next renewal (under half of it is left) are renewed one by one, waiting for their
/// lock as long as the connection's `lock_timeout` allows: a row locked for longer than the lease
/// must not become rescuable the moment its lock goes.
pub async fn job_renew_leases<C>(
    conn: &mut C,
    claims: &[Claim],
    lease: Duration,
    renew_below: Duration,
) -> Result<ClaimWrite, sqlx::Error>
where
    for<'c> &'c mut C: PgExecutor<'c>,
{
    let (ids, tokens) = split_claims(claims);
    // Only leases with under `renew_below` left are written: a renewal is a new version of the
    // job's row in every index, and rewriting each attempt's row on every beat took a third of
    // the database's time when completions were backed up (100,000 overdue jobs at start). The
    // others are ours as they stand (read without a lock: a lease far from its end cannot be
    // rescued, and a cancel meanwhile is seen on the next beat).
    let written: Vec<(JobId, ClaimToken)> = sqlx::query_as(
        "WITH mine AS (
             SELECT jobs.id, h.token,
                    jobs.lease_expires_at < now() + make_interval(secs => $4) AS lapsing
             FROM jobs
             JOIN unnest($1::bigint[], $2::bigint[]) AS h(id, token)
               ON jobs.id = h.id AND jobs.claim_token = h.token
             WHERE jobs.state = 'executing'),
         held AS (
             SELECT jobs.id, mine.token FROM jobs JOIN mine ON jobs.id = mine.id
             WHERE mine.lapsing AND jobs.claim_token = mine.token AND jobs.state = 'executing'
             ORDER BY jobs.id
             FOR NO KEY UPDATE OF jobs SKIP LOCKED),
         renewed AS (
             UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3)
             FROM held WHERE jobs.id = held.id
             RETURNING jobs.id, held.token)
         SELECT id, token FROM renewed
         UNION ALL
         SELECT id, token FROM mine WHERE NOT lapsing",
    )
    .bind(&ids)
    .bind(&tokens)
    .bind(secs(lease))
    .bind(secs(renew_below))
    .fetch_all(&mut *conn)
    .await?;
    let mut renewal = ClaimWrite {
        written: written
            .into_iter()
            .map(|(id, token)| Claim { id, token })
            .collect(),
        locked: Vec::new(),
    };
    let rest = claims_not_in(claims, &renewal.written);
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
/// retryable at once, or discarded when out of attempts; each lost attempt is recorded (`lost`,
/// its duration the time since its claim). Returns `(id, new state)` pairs.
pub async fn job_rescue_expired<'e>(
    db: impl PgExecutor<'e>,
    now: Option<DateTime<Utc>>,
    limit: i64,
) -> Result<Vec<(JobId, JobState)>, sqlx::Error> {
    sqlx::query_as(concat!(
        "WITH expired AS (
             SELECT id, claim_token, scheduled_at AS due_at FROM jobs
             WHERE state = 'executing' AND lease_expires_at < coalesce($1, now())
             ORDER BY lease_expires_at
             LIMIT $2
             FOR UPDATE SKIP LOCKED),
         -- What the dead node last wrote of its attempts (their pages showed it) goes into their
         -- records, and their live rows go: no node is left to delete them.
         live AS (
             DELETE FROM job_attempt_live l USING expired e
             WHERE l.job_id = e.id AND l.claim_token = e.claim_token
             RETURNING l.job_id, l.output, l.logs, l.logs_dropped),
         rescued AS (
             UPDATE jobs SET
                    state = CASE WHEN attempt >= max_attempts THEN 'discarded'::job_state
                                 ELSE 'retryable'::job_state END,
                    finalized_at = CASE WHEN attempt >= max_attempts THEN now() END,
                    scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE now() END,
                    rate_key = CASE WHEN attempt >= max_attempts THEN rate_key
                                    ELSE kickoff_rate_key(queue, kind, args, call_host) END,
                    lease_expires_at = NULL, claim_token = NULL,
                    errors = errors || jsonb_build_array(jsonb_build_object(
                        'attempt', attempt, 'started_at', attempted_at, 'at', now(), 'node', attempted_by,
                        'message', 'rescued: the lease of node ' || attempted_by
                                   || ' expired (the node crashed, hung or lost its database connection)'))
             FROM expired LEFT JOIN live ON live.job_id = expired.id
             WHERE jobs.id = expired.id
             RETURNING jobs.id, jobs.state, jobs.attempt, jobs.queue, jobs.kind, jobs.meta,
                       jobs.attempted_by, jobs.attempted_at, expired.due_at,
                       NULL::timestamptz AS started_at, NULL::float8 AS duration_ms,
                       live.output::text AS output, live.logs::text AS logs,
                       coalesce(live.logs_dropped, 0) AS dropped,
                       'lost' AS outcome,
                       'the lease of node ' || jobs.attempted_by || ' expired' AS error),
         recorded AS (",
        record_attempts_from!("rescued"),
        ")
         SELECT id, state FROM rescued"
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Writes what these running attempts of `node` (job, attempt number, what they have so far)
/// logged and recorded so far, for their jobs' pages (`job_attempt_live`).
pub async fn attempt_live_write<'e>(
    db: impl PgExecutor<'e>,
    node: &str,
    live: &[(Claim, i32, AttemptEnd)],
) -> Result<(), sqlx::Error> {
    let ids: Vec<i64> = live.iter().map(|l| l.0.id.0).collect();
    let tokens: Vec<ClaimToken> = live.iter().map(|l| l.0.token).collect();
    let attempts: Vec<i32> = live.iter().map(|l| l.1).collect();
    let ends: Vec<AttemptEnd> = live.iter().map(|l| l.2.clone()).collect();
    let a = end_arrays(&ends);
    sqlx::query(
        "INSERT INTO job_attempt_live AS l (job_id, attempt, claim_token, node, output, logs,
                                              logs_dropped)
         SELECT id, attempt, token, $3, output::jsonb, logs::jsonb, dropped
         FROM unnest($1::bigint[], $2::int[], $4::text[], $5::text[], $6::int[], $7::bigint[])
              AS u(id, attempt, output, logs, dropped, token)
         ON CONFLICT (job_id) DO UPDATE SET attempt = excluded.attempt,
                claim_token = excluded.claim_token, node = excluded.node,
                output = excluded.output, logs = excluded.logs,
                logs_dropped = excluded.logs_dropped, updated_at = now()",
    )
    .bind(&ids)
    .bind(&attempts)
    .bind(node)
    .bind(&a.output)
    .bind(&a.logs)
    .bind(&a.dropped)
    .bind(&tokens)
    .execute(db)
    .await?;
    Ok(())
}

/// Deletes the rows `node` wrote of these jobs' attempts (ended).
pub async fn attempt_live_delete<'e>(
    db: impl PgExecutor<'e>,
    node: &str,
    jobs: &[JobId],
) -> Result<(), sqlx::Error> {
    let ids: Vec<i64> = jobs.iter().map(|j| j.0).collect();
    sqlx::query("DELETE FROM job_attempt_live WHERE job_id = ANY($1) AND node = $2")
        .bind(&ids)
        .bind(node)
        .execute(db)
        .await?;
    Ok(())
}

/// Deletes the rows of attempts that no longer run (their node died before it deleted them, or
/// their job was deleted), written over a minute ago. Returns how many.
pub async fn attempt_live_prune<'e>(db: impl PgExecutor<'e>) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "DELETE FROM job_attempt_live l
         WHERE updated_at < now() - interval '1 minute'
           AND NOT EXISTS (SELECT 1 FROM jobs j
                           WHERE j.id = l.job_id AND j.state = 'executing'
                             AND j.claim_token = l.claim_token)",
    )
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// What the attempt running under `claim` has logged and recorded so far: its output, its log
/// lines and how many were left out; `None` when it wrote nothing yet.
pub async fn attempt_live_of<'e>(
    db: impl PgExecutor<'e>,
    claim: Claim,
) -> Result<Option<(Option<serde_json::Value>, Option<serde_json::Value>, i32)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT output, logs, logs_dropped FROM job_attempt_live
         WHERE job_id = $1 AND claim_token = $2",
    )
    .bind(claim.id)
    .bind(claim.token)
    .fetch_optional(db)
    .await
}

#[cfg(test)]
mod tests {
    /// A cancellation records the attempt it stopped in SQL (`kickoff_cancel_jobs`, which a SQL
    /// caller runs too), with the very `INSERT` every write of an attempt's end uses here.
    #[test]
    fn the_sql_cancellation_records_an_attempt_as_every_end_does() {
        let migration = include_str!("../../../../migrations/20261231000001_sql_actions.sql");
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words(migration).contains(&words(record_attempts_from!("ran"))),
            "kickoff_cancel_jobs records attempts otherwise than record_attempts_from!: write \
             a migration that redefines it"
        );
    }
}
