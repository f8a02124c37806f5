//! The audit log: every operator and API action (who, role, action, target, bulk filter and
//! count, from which address, when, result), stored append-only (the database refuses updates and
//! deletes of its rows) and listed for the dashboard.

pub mod store;

use std::net::IpAddr;

use crate::db::Db;
use serde_json::Value;
use sqlx::{PgConnection, Postgres, QueryBuilder, Transaction};

pub use store::{AuditFilter, AuditRow};

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
    pool: Db,
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
    pool: Db,
    /// Recorded work that outlives the request that started it (a bulk walk goes on when its
    /// client goes away): the server awaits it before it closes the pools.
    walks: tokio_util::task::TaskTracker,
}

impl Auditor {
    pub fn new(pool: Db) -> Self {
        Auditor {
            pool,
            walks: tokio_util::task::TaskTracker::new(),
        }
    }

    /// Runs `walk` as a task of its own, tracked: [`Auditor::finish_walks`] awaits it.
    pub fn spawn_walk<F>(&self, walk: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.walks.spawn(walk)
    }

    /// Awaits the walks running (and any started meanwhile), for at most `grace`; whether all
    /// ended.
    pub async fn finish_walks(&self, grace: std::time::Duration) -> bool {
        self.walks.close();
        let ended = tokio::time::timeout(grace, self.walks.wait()).await.is_ok();
        if !ended {
            tracing::warn!(
                walks = self.walks.len(),
                "bulk actions still running after {grace:?}: their closing audit entries may be lost"
            );
        }
        ended
    }

    /// Runs `action` with its [`Work`] and, when it succeeds, writes `entry` (with the count
    /// `count` finds in the result) in the action's transaction and commits both. When the entry
    /// cannot be written or the commit fails, the change is undone and the answer is
    /// [`NotRecorded`]. When the action fails, its transaction is rolled back and its error
    /// returned; recording the refusal is the caller's (it knows how to word it).
    pub async fn run<T, E: From<NotRecorded>>(
        &self,
        entry: AuditEntry,
        count: impl FnOnce(&T) -> Option<i64>,
        action: impl AsyncFnOnce(&mut Work) -> Result<T, E>,
    ) -> Result<T, E> {
        let note = |done: &T, entry: &mut AuditEntry| entry.count = count(done).or(entry.count);
        self.run_noting(entry, note, action).await
    }

    /// [`Self::run`], the entry completed by `note` from the action's result (an edit's before and
    /// after, say) before it is written.
    pub async fn run_noting<T, E: From<NotRecorded>>(
        &self,
        mut entry: AuditEntry,
        note: impl FnOnce(&T, &mut AuditEntry),
        action: impl AsyncFnOnce(&mut Work) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut work = Work {
            pool: self.pool.clone(),
            tx: None,
        };
        let done = action(&mut work).await?;
        note(&done, &mut entry);
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

    /// Writes `entry` on `conn`, inside the caller's transaction, so that it commits with the
    /// caller's change or not at all.
    pub async fn record_with(
        &self,
        conn: &mut PgConnection,
        entry: &AuditEntry,
    ) -> Result<(), NotRecorded> {
        insert(conn, entry).await.map_err(NotRecorded)
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

    /// Writes an entry on its own, before an action that is not a database change of ours (a
    /// session starting): when it fails, the caller must not go on.
    pub async fn record_first(&self, entry: &AuditEntry) -> Result<(), NotRecorded> {
        let mut tx = self.pool.begin().await.map_err(NotRecorded)?;
        insert(&mut tx, entry).await.map_err(NotRecorded)?;
        tx.commit().await.map_err(NotRecorded)
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

/// Writes `entry` (a successful action's, counting nothing) in the statement `qb` is building,
/// once for each row of its common table expression `from`: the change and its entry are one
/// statement, one round trip and one commit (see `engine::store::jobs::Companion`).
pub fn record_with_row_of(qb: &mut QueryBuilder<'_, Postgres>, from: &str, entry: &AuditEntry) {
    let target = entry.target.as_deref().map(cut);
    store::audit_insert_with_row_of(
        qb,
        from,
        &entry.actor,
        &entry.role,
        &entry.action,
        target.as_deref(),
        entry.address,
        OK,
    );
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

#[cfg(test)]
mod walk_tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn auditor() -> Auditor {
        // Never connected: the walks here touch no database.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect_lazy("postgres://nobody@127.0.0.1:1/none")
            .unwrap();
        Auditor::new(Db::new(pool, crate::db::PoolMode::Direct))
    }

    #[tokio::test]
    async fn a_walk_whose_request_went_away_is_awaited_before_the_pools_close() {
        let auditor = auditor();
        let done = Arc::new(AtomicBool::new(false));
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let walk = auditor.spawn_walk({
            let done = done.clone();
            async move {
                released.await.ok();
                done.store(true, Ordering::SeqCst);
            }
        });
        // The request that awaited it is gone.
        drop(walk);
        // The walk ends only once the stop is already waiting for it.
        let (finished, ()) = tokio::join!(auditor.finish_walks(Duration::from_secs(10)), async {
            release.send(()).ok();
        });
        assert!(finished);
        assert!(done.load(Ordering::SeqCst), "the walk was not awaited");
    }

    #[tokio::test]
    async fn a_walk_that_will_not_end_is_left_after_the_grace() {
        let auditor = auditor();
        let _walk = auditor.spawn_walk(std::future::pending::<()>());
        assert!(!auditor.finish_walks(Duration::from_millis(20)).await);
    }
}
