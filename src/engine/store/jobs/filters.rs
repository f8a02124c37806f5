//! SQL of filtered job lists and bulk actions: [`JobFilter`] and the statements built from it.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgExecutor, Postgres, QueryBuilder};

use super::{ids_param, CancelledJob};
use crate::engine::job::{Job, JobId, JobState};

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
    /// Jobs with an attempt that started more than this many ms after its due time (read from
    /// `job_attempts`: attempts that ended).
    pub late_by_ms: Option<f64>,
}

/// The largest lateness a filter may ask about: a day, in ms.
pub const LATE_BY_MAX_MS: f64 = 86_400_000.0;

/// `ms` as the "late by more than" of a filter, or why it cannot be.
pub fn late_by_checked(ms: f64) -> Result<f64, String> {
    if ms.is_finite() && (0.0..=LATE_BY_MAX_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(format!(
            "late_by_ms: must be between 0 and {LATE_BY_MAX_MS} (a day)"
        ))
    }
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
    if let Some(late) = filter.late_by_ms {
        // A semi-join: with few late attempts the planner reads `job_attempts_late_idx`.
        qb.push(" AND id IN (SELECT job_id FROM job_attempts WHERE late_ms > ")
            .push_bind(late)
            .push(")");
    }
}

/// The filter's states, each once, in a stable order.
fn distinct_states(filter: &JobFilter) -> Vec<JobState> {
    JobState::ALL
        .into_iter()
        .filter(|s| filter.states.contains(s))
        .collect()
}

/// Whether the filter reads an index that leaves out `available` and `executing` jobs (kind,
/// queue, args, due time: see `migrations/20261208000001_filter_indexes_skip_running.sql`).
fn uses_running_less_index(filter: &JobFilter) -> bool {
    filter.queue.is_some()
        || filter.kind.is_some()
        || filter.args.is_some()
        || filter.scheduled_from.is_some()
        || filter.scheduled_to.is_some()
}

/// The states one branch of a listing reads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Branch {
    /// Any state (the filter names none).
    Any,
    One(JobState),
    /// Every state but `available` and `executing`: written as the filter indexes' own
    /// predicate, so the planner reads them as before they left those two states out.
    NotRunning,
}

/// The condition [`Branch::NotRunning`] adds, word for word the filter indexes' predicate.
const NOT_RUNNING: &str = " AND state NOT IN ('available', 'executing')";

/// The branches of a listing, each read on its own and merged by id: one per state the filter
/// names (each reads the index that serves it best in id order; `state = ANY(...)` could not
/// be read in id order). A filter that names no state but reads an index that leaves out the
/// running states gets three: those indexes, then the two running states from
/// `jobs_state_id_idx` (a single branch could use neither, and would walk the table).
fn branches(filter: &JobFilter) -> Vec<Branch> {
    let states = distinct_states(filter);
    if !states.is_empty() {
        states.into_iter().map(Branch::One).collect()
    } else if uses_running_less_index(filter) {
        vec![
            Branch::NotRunning,
            Branch::One(JobState::Available),
            Branch::One(JobState::Executing),
        ]
    } else {
        vec![Branch::Any]
    }
}

/// Appends the filter's conditions for one branch.
fn push_branch_filter(qb: &mut QueryBuilder<'_, Postgres>, filter: &JobFilter, branch: Branch) {
    match branch {
        Branch::Any => push_filter(qb, filter, &[]),
        Branch::One(state) => push_filter(qb, filter, &[state]),
        Branch::NotRunning => {
            qb.push(NOT_RUNNING);
            push_filter(qb, filter, &[]);
        }
    }
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
    let branches = branches(filter);
    let branch = |qb: &mut QueryBuilder<'_, Postgres>, b: Branch| {
        qb.push("SELECT ")
            .push(columns)
            .push(" FROM jobs WHERE true");
        push_branch_filter(qb, filter, b);
        if let Some(before) = before {
            qb.push(" AND id < ").push_bind(before);
        }
        qb.push(" ORDER BY id DESC LIMIT ").push_bind(limit);
    };
    if let [one] = branches[..] {
        branch(qb, one);
        return;
    }
    qb.push("SELECT ").push(columns).push(" FROM (");
    for (i, b) in branches.iter().enumerate() {
        if i > 0 {
            qb.push(" UNION ALL ");
        }
        qb.push("(");
        branch(qb, *b);
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
/// needs "more than 100,000", not a scan of a million rows). Counted in the branches a listing
/// reads (see [`branches`]).
pub async fn job_count_matching<'e>(
    db: impl PgExecutor<'e>,
    filter: &JobFilter,
    cap: i64,
) -> Result<i64, sqlx::Error> {
    let mut qb = QueryBuilder::new("SELECT count(*) FROM (SELECT 1 FROM (");
    for (i, b) in branches(filter).into_iter().enumerate() {
        if i > 0 {
            qb.push(" UNION ALL ");
        }
        qb.push("SELECT 1 FROM jobs WHERE true");
        push_branch_filter(&mut qb, filter, b);
    }
    qb.push(") matching LIMIT ").push_bind(cap).push(") capped");
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
             SELECT id, state AS before, claim_token, scheduled_at AS due_at FROM jobs
             WHERE finalized_at IS NULL AND NOT meta ? 'owner' AND id = ANY(",
    );
    qb.push_bind(ids_param(ids)).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    qb.push(concat!(
        " ORDER BY id
             FOR UPDATE),",
        cancel_and_record!()
    ));
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
                max_attempts = least(greatest(max_attempts, attempt + 1), 1000),
                rate_key = kickoff_rate_key(queue, kind, args, call_host)
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
    // A live job with an owner (`meta.owner`) ends with its owner: never by a bulk action.
    let mut qb = QueryBuilder::new(
        "DELETE FROM jobs WHERE state <> 'executing'
           AND NOT (meta ? 'owner' AND finalized_at IS NULL) AND id = ANY(",
    );
    qb.push_bind(ids_param(ids)).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    let r = qb.build().persistent(false).execute(db).await?;
    Ok(r.rows_affected())
}
