//! The audit log: every operator and API action (who, role, action, target, bulk filter and
//! count, from which address, when, result), stored append-only (the database refuses updates and
//! deletes of its rows) and listed for the dashboard.

pub mod store;

use std::net::IpAddr;

use serde_json::Value;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};

pub use store::{AuditFilter, AuditRow};

use crate::engine::{BulkAction, BulkReport, Client, ClientError, JobFilter};

/// One action to record.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub actor: String,
    pub role: String,
    pub action: String,
    pub target: Option<String>,
    pub filter: Option<Value>,
    pub count: Option<i64>,
    pub address: Option<IpAddr>,
    /// `Ok(())`, or why the action was refused.
    pub result: Result<(), String>,
}

/// Why an action was not done: its audit entry could not be written, so its change was undone.
#[derive(Debug, thiserror::Error)]
#[error("the action was not done: the audit log could not record it; try again")]
pub struct NotRecorded(#[source] pub sqlx::Error);

/// The database work of one action: a transaction of the auditor's pool, begun at the first
/// [`Work::conn`] (so an action can check and hash first without holding a connection), and
/// committed by [`Auditor::run`] only together with the action's entry.
pub struct Work {
    pool: PgPool,
    tx: Option<Transaction<'static, Postgres>>,
}

impl Work {
    /// The action's transaction, begun now if it has not been.
    pub async fn conn(&mut self) -> Result<&mut PgConnection, sqlx::Error> {
        let tx = match &mut self.tx {
            Some(tx) => tx,
            empty => empty.insert(self.pool.begin().await?),
        };
        Ok(&mut **tx)
    }
}

/// The longest target or result kept (longer ones are cut).
const MAX_TEXT: usize = 2000;

fn cut(s: &str) -> String {
    s.chars().take(MAX_TEXT).collect()
}

/// Records and lists audit entries. Cheap to clone.
#[derive(Clone)]
pub struct Auditor {
    pool: PgPool,
}

impl Auditor {
    pub fn new(pool: PgPool) -> Self {
        Auditor { pool }
    }

    /// Runs `action` with its [`Work`] and, when it succeeds, writes `entry` (with the count
    /// `count` finds in the result) in the action's transaction and commits both. When the entry
    /// cannot be written or the commit fails, the change is undone and the answer is
    /// [`NotRecorded`]. When the action fails, its transaction is rolled back and its error
    /// returned; recording the refusal is the caller's (it knows how to word it).
    pub async fn run<T, E: From<NotRecorded>>(
        &self,
        mut entry: AuditEntry,
        count: impl FnOnce(&T) -> Option<i64>,
        action: impl AsyncFnOnce(&mut Work) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut work = Work {
            pool: self.pool.clone(),
            tx: None,
        };
        let done = action(&mut work).await?;
        entry.count = count(&done).or(entry.count);
        entry.result = Ok(());
        let committed = async {
            insert(work.conn().await?, &entry).await?;
            match work.tx.take() {
                Some(tx) => tx.commit().await,
                None => Ok(()),
            }
        };
        match committed.await {
            Ok(()) => Ok(done),
            Err(e) => {
                tracing::error!(error = %e, action = %entry.action, actor = %entry.actor,
                                "an action was undone: its audit entry could not be written");
                Err(NotRecorded(e).into())
            }
        }
    }

    /// Writes the entry of an action done in several transactions (a bulk action on a filter)
    /// on `conn`, inside its first transaction, so that its first change commits with it or not
    /// at all. Its result reads `started`; the action's end adds an entry with its count.
    pub async fn record_started_with(
        &self,
        conn: &mut PgConnection,
        entry: &AuditEntry,
    ) -> Result<(), NotRecorded> {
        insert_as(conn, entry, STARTED).await.map_err(NotRecorded)
    }

    /// A bulk action on every job matching `filter`, in the engine's batches (see
    /// [`Client::bulk_filter`]). The last batch commits with `entry` and the count changed, so an
    /// action of one batch has one entry, written with its change. Before it, the first batch
    /// commits with `entry` reading `started`. When an entry cannot be written, its batch is
    /// undone and the answer is [`NotRecorded`]. After an error (or a walk that ends on a full
    /// batch), the end is recorded on its own: the count so far and the error worded by `why`.
    /// Every outcome is recorded here, a refusal's included.
    pub async fn bulk_filter<E: From<ClientError> + From<NotRecorded>>(
        &self,
        client: &Client,
        entry: AuditEntry,
        action: BulkAction,
        filter: &JobFilter,
        why: impl Fn(&E) -> String,
    ) -> Result<BulkReport, E> {
        let mut started = false;
        let mut finished = false;
        let mut report = BulkReport::default();
        let walked: Result<(), E> = async {
            let mut walk = client.bulk_walk(action, filter).await?;
            while let Some(mut batch) = walk.next().await? {
                if walk.is_done() {
                    let changed = walk.report.changed + batch.changed();
                    let end = AuditEntry {
                        count: Some(i64::try_from(changed).unwrap_or(i64::MAX)),
                        ..entry.clone()
                    };
                    insert(batch.conn(), &end).await.map_err(NotRecorded)?;
                    walk.commit(batch).await?;
                    finished = true;
                } else {
                    if !started {
                        self.record_started_with(batch.conn(), &entry).await?;
                    }
                    walk.commit(batch).await?;
                }
                started = true;
                report = walk.report;
            }
            Ok(())
        }
        .await;
        if finished {
            return walked.map(|()| report);
        }
        let changed = i64::try_from(report.changed).unwrap_or(i64::MAX);
        self.record(AuditEntry {
            count: (started || walked.is_ok()).then_some(changed),
            result: match &walked {
                Ok(()) => Ok(()),
                // Nothing changed: a refusal.
                Err(e) if !started => Err(why(e)),
                Err(e) => Err(format!("stopped after {changed} changed: {}", why(e))),
            },
            ..entry
        })
        .await;
        walked.map(|()| report)
    }

    /// Writes an entry on its own, before an action that is not a database change of ours (a
    /// session starting): when it fails, the caller must not go on.
    pub async fn record_first(&self, entry: &AuditEntry) -> Result<(), NotRecorded> {
        let mut conn = self.pool.acquire().await.map_err(NotRecorded)?;
        insert(&mut conn, entry).await.map_err(NotRecorded)
    }

    /// Records an entry on its own: a refusal (which changed nothing), or the end of an action
    /// whose change already committed with an entry of its own. A failure to record is logged,
    /// not returned.
    pub async fn record(&self, entry: AuditEntry) {
        if let Err(e) = self.record_first(&entry).await {
            tracing::error!(error = %e, action = %entry.action, actor = %entry.actor,
                            "could not record an audit entry");
        }
    }

    pub async fn list(
        &self,
        filter: &AuditFilter,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AuditRow>, sqlx::Error> {
        store::audit_list(&self.pool, filter, before, limit.clamp(1, 500)).await
    }
}

/// The result of a successful action's entry.
const OK: &str = "ok";
/// The result of the first entry of an action done in several transactions.
pub const STARTED: &str = "started";

async fn insert(conn: &mut PgConnection, entry: &AuditEntry) -> Result<(), sqlx::Error> {
    insert_as(conn, entry, OK).await
}

/// Writes `entry`, its success reading `ok_result`.
async fn insert_as(
    conn: &mut PgConnection,
    entry: &AuditEntry,
    ok_result: &str,
) -> Result<(), sqlx::Error> {
    let (ok, result) = match &entry.result {
        Ok(()) => (true, ok_result.to_string()),
        Err(why) => (false, cut(why)),
    };
    let target = entry.target.as_deref().map(cut);
    store::audit_insert(
        conn,
        &entry.actor,
        &entry.role,
        &entry.action,
        target.as_deref(),
        entry.filter.as_ref(),
        entry.count,
        entry.address,
        ok,
        &result,
    )
    .await
}
