//! Acting on many jobs at once: an action, a move in time or an edit (`BulkChange`) applied to
//! listed jobs in one transaction (`Client::bulk_ids_with`) or to every job a filter matches,
//! newest first, in batches of short transactions (`Client::bulk_walk`, `BulkWalk`), with the
//! state rules of the single-job operations; and the count of what a filter matches.

use crate::db::in_transaction;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;

use super::client::{check_filter, invalid, is_unique_violation, Client, ClientError};
use super::job::JobId;
use super::store::jobs::{self as job_store, JobFilter};
use super::store::stats as stats_store;

/// The most ids one bulk action by ids takes.
pub const MAX_BULK_IDS: usize = 1000;
/// Jobs per batch (and per short transaction) of a bulk action on a filter.
pub const BULK_BATCH: i64 = 1000;
/// An action applied to many jobs at once, with the state rules of the single-job operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Cancel jobs that are not final (executing attempts are stopped on their node).
    Cancel,
    /// Run retryable and final jobs again.
    Retry,
    /// Make scheduled, retryable and available jobs due now.
    RunNow,
    /// Delete jobs that are not executing.
    Delete,
}

impl BulkAction {
    pub const ALL: [BulkAction; 4] = [
        BulkAction::Cancel,
        BulkAction::Retry,
        BulkAction::RunNow,
        BulkAction::Delete,
    ];

    /// The name used in the API and the UI.
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Cancel => "cancel",
            BulkAction::Retry => "retry",
            BulkAction::RunNow => "run_now",
            BulkAction::Delete => "delete",
        }
    }
}

impl std::str::FromStr for BulkAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BulkAction::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| format!("unknown action `{s}` (cancel, retry, run_now or delete)"))
    }
}

/// What a bulk walk does to each job it matches: an action, a move in time or an edit.
#[derive(Debug, Clone, PartialEq)]
pub enum BulkChange {
    Action(BulkAction),
    /// Moves waiting jobs by this many ms (see [`crate::engine::job_edit::ShiftBy`]).
    Shift {
        by_ms: i64,
    },
    /// Edits waiting jobs, each checked by its kind's worker.
    Edit(crate::engine::job_edit::JobEdit),
}

impl From<BulkAction> for BulkChange {
    fn from(action: BulkAction) -> Self {
        BulkChange::Action(action)
    }
}

/// What a bulk action did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BulkReport {
    /// Jobs the action changed.
    pub changed: u64,
    /// Jobs matched (or listed) but left alone: their state did not allow the action (a retry
    /// whose unique key a live job holds included), they changed meanwhile, they belong to a
    /// question, a move would take them out of the schedulable range, or (by ids) they do not
    /// exist.
    pub skipped: u64,
    /// Jobs an edit would have made invalid (their kind's check refused it), left as they were
    /// (always 0 for the other actions).
    pub refused: u64,
    /// Why the first of them was refused.
    pub refusal: Option<String>,
}

impl Client {
    /// How many jobs match `filter`, counting at most `cap`.
    ///
    /// A filter on states and queue only (and `max_id`) is answered from the maintained counts,
    /// exactly and at once: "all 800,000 completed jobs" needs no scan. Other filters count rows,
    /// stopping at `cap`.
    pub async fn count_matching(&self, filter: &JobFilter, cap: i64) -> Result<i64, ClientError> {
        check_filter(filter)?;
        if cap < 1 {
            return Err(invalid("cap", "must be at least 1"));
        }
        let n = if filter.is_counted() {
            stats_store::job_counts_total(
                &self.pool,
                &filter.states,
                filter.queue.as_deref(),
                filter.max_id,
            )
            .await?
            .min(cap)
        } else {
            job_store::job_count_matching(&self.pool, filter, cap).await?
        };
        Ok(n)
    }

    /// Applies `action` to the listed jobs (at most [`MAX_BULK_IDS`]; duplicates count once), in
    /// one transaction.
    #[tracing::instrument(level = "debug", skip_all, fields(action = ?action, jobs = ids.len()))]
    pub async fn bulk_ids(
        &self,
        action: BulkAction,
        ids: &[JobId],
    ) -> Result<BulkReport, ClientError> {
        in_transaction!(self, |tx| self.bulk_ids_with(tx, action, ids))
    }

    /// [`Self::bulk_ids`] on the caller's connection or inside the caller's transaction.
    pub async fn bulk_ids_with(
        &self,
        conn: &mut PgConnection,
        action: impl Into<BulkChange>,
        ids: &[JobId],
    ) -> Result<BulkReport, ClientError> {
        if ids.len() > MAX_BULK_IDS {
            return Err(invalid(
                "ids",
                format!("at most {MAX_BULK_IDS} ids at once; act on a filter for more"),
            ));
        }
        let change = action.into();
        check_change(&change)?;
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut report = BulkReport::default();
        bulk_batch(
            self,
            conn,
            &change,
            &ids,
            &JobFilter::default(),
            &mut report,
        )
        .await?;
        report.skipped = ids.len() as u64 - report.changed - report.refused;
        Ok(report)
    }

    /// Applies `action` to every job matching `filter`, newest first, in batches of
    /// [`BULK_BATCH`], each in a short transaction of its own, so no lock is held for long and
    /// workers keep completing jobs meanwhile. Jobs with an id above `filter.max_id` (the snapshot
    /// the operator confirmed; when `None`, the newest id at the start) are left alone, so jobs
    /// inserted during the action are not touched.
    ///
    /// Not atomic: an error stops the walk with the batches before it applied.
    pub async fn bulk_filter(
        &self,
        action: impl Into<BulkChange>,
        filter: &JobFilter,
    ) -> Result<BulkReport, ClientError> {
        let mut walk = self.bulk_walk(action, filter).await?;
        while let Some(batch) = walk.next().await? {
            walk.commit(batch).await?;
        }
        Ok(walk.report)
    }

    /// [`Self::bulk_filter`] one batch at a time, so that the caller can add to each batch's
    /// transaction (an audit entry, say) before it commits.
    pub async fn bulk_walk(
        &self,
        action: impl Into<BulkChange>,
        filter: &JobFilter,
    ) -> Result<BulkWalk, ClientError> {
        check_filter(filter)?;
        let action = action.into();
        check_change(&action)?;
        let mut filter = filter.clone();
        let mut done = false;
        if filter.max_id.is_none() {
            match job_store::job_max_id(&self.pool).await? {
                Some(newest) => filter.max_id = Some(newest),
                None => done = true,
            }
        }
        Ok(BulkWalk {
            client: self.clone(),
            action,
            filter,
            before: None,
            done,
            report: BulkReport::default(),
        })
    }
}

/// A bulk action on a filter, walked one batch at a time (see [`Client::bulk_walk`]).
pub struct BulkWalk {
    client: Client,
    action: BulkChange,
    filter: JobFilter,
    /// Where the next batch starts (the last batch's oldest id).
    before: Option<JobId>,
    done: bool,
    /// What the committed batches did.
    pub report: BulkReport,
}

/// One batch of a [`BulkWalk`]: its change made in its own transaction, not committed yet.
pub struct BulkBatch {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    /// What the batch did (its `skipped` not counted yet).
    done: BulkReport,
    listed: u64,
}

impl BulkBatch {
    /// The batch's transaction, to add to before it commits.
    pub fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// How many jobs the batch changed.
    pub fn changed(&self) -> u64 {
        self.done.changed
    }
}

impl BulkWalk {
    /// The next batch, applied and not committed; `None` once every matching job was walked.
    pub async fn next(&mut self) -> Result<Option<BulkBatch>, ClientError> {
        if self.done {
            return Ok(None);
        }
        let pool = &self.client.pool;
        let ids = job_store::job_list_ids(pool, &self.filter, self.before, BULK_BATCH).await?;
        let Some(&oldest) = ids.last() else {
            self.done = true;
            return Ok(None);
        };
        self.before = Some(oldest);
        self.done = (ids.len() as i64) < BULK_BATCH;
        let mut tx = pool.begin().await?;
        let mut done = BulkReport::default();
        bulk_batch(
            &self.client,
            &mut tx,
            &self.action,
            &ids,
            &self.filter,
            &mut done,
        )
        .await?;
        Ok(Some(BulkBatch {
            tx,
            done,
            listed: ids.len() as u64,
        }))
    }

    /// Whether the batch [`Self::next`] gave last was the walk's last (a short one). A walk that
    /// ends on a full batch learns it only from the next `None`.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Commits a batch and counts it in [`Self::report`].
    pub async fn commit(&mut self, batch: BulkBatch) -> Result<(), ClientError> {
        batch.tx.commit().await?;
        let done = batch.done;
        self.report.changed += done.changed;
        self.report.refused += done.refused;
        self.report.skipped += batch.listed - done.changed - done.refused;
        if self.report.refusal.is_none() {
            self.report.refusal = done.refusal;
        }
        Ok(())
    }
}

/// One batch of a bulk action on `conn`: the listed jobs that still match `filter`. Returns how
/// many changed.
async fn bulk_batch(
    client: &Client,
    conn: &mut PgConnection,
    change: &BulkChange,
    ids: &[JobId],
    filter: &JobFilter,
    report: &mut BulkReport,
) -> Result<(), ClientError> {
    if ids.is_empty() {
        return Ok(());
    }
    let action = match change {
        BulkChange::Action(action) => *action,
        BulkChange::Shift { by_ms } => {
            let (earliest, latest) = crate::engine::job_edit::shift_window(Utc::now());
            report.changed +=
                job_store::job_shift_matching(&mut *conn, ids, filter, *by_ms, earliest, latest)
                    .await?;
            return Ok(());
        }
        BulkChange::Edit(edit) => {
            for job in job_store::job_lock_waiting_matching(&mut *conn, ids, filter).await? {
                match client.write_edit(conn, &job, edit).await {
                    Ok(Some(_)) => report.changed += 1,
                    Ok(None) => {}
                    // A job its own state refuses (its attempts made) is counted, as an invalid
                    // one is: the others of the batch go on.
                    Err(e) if e.is_refusal() || matches!(e, ClientError::Conflict(_)) => {
                        report.refused += 1;
                        report
                            .refusal
                            .get_or_insert_with(|| format!("job {}: {e}", job.id));
                    }
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        }
    };
    report.changed += match action {
        BulkAction::Cancel => {
            // The nodes running their attempts are told at commit (`kickoff_cancel_jobs`).
            job_store::job_cancel_matching(&mut *conn, ids, filter)
                .await?
                .len() as u64
        }
        BulkAction::Retry => match retry_matching(conn, ids, filter).await? {
            Some(n) => n,
            // A job took one of the batch's unique keys after the statement's snapshot: the
            // statement failed as a whole (and was undone to its savepoint), so go one job at a
            // time, skipping the conflicts.
            None => {
                let mut n = 0;
                for id in ids {
                    n += retry_matching(conn, &[*id], filter).await?.unwrap_or(0);
                }
                n
            }
        },
        BulkAction::RunNow => job_store::job_run_now_matching(&mut *conn, ids, filter).await?,
        BulkAction::Delete => job_store::job_delete_matching(&mut *conn, ids, filter).await?,
    };
    Ok(())
}

/// Retries the listed jobs that match `filter` under a savepoint; `None` when a unique key
/// conflict undid them (the caller's transaction carries on).
async fn retry_matching(
    conn: &mut PgConnection,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<Option<u64>, ClientError> {
    let mut savepoint = sqlx::Connection::begin(&mut *conn).await?;
    match job_store::job_retry_matching(&mut *savepoint, ids, filter).await {
        Ok(n) => {
            savepoint.commit().await?;
            Ok(Some(n))
        }
        Err(e) if is_unique_violation(&e) => {
            savepoint.rollback().await?;
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// What is wrong with a bulk change itself, before any job is read: an edit's own rules, a move
/// past the schedulable range.
fn check_change(change: &BulkChange) -> Result<(), ClientError> {
    match change {
        BulkChange::Action(_) => Ok(()),
        BulkChange::Edit(edit) => Ok(edit.check()?),
        BulkChange::Shift { by_ms } => {
            if by_ms.unsigned_abs() > crate::engine::job_edit::MAX_SHIFT_MS as u64 {
                return Err(invalid("by_ms", "at most 10 years either way"));
            }
            Ok(())
        }
    }
}
