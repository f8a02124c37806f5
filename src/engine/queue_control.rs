//! The client's queue settings and kinds' pauses, applied on every node: a queue's pause,
//! concurrency and limits (rate, its partition, global concurrency), and a kind's pause; each
//! change tells every node at commit (`control.rs`), which applies it (`queue_settings.rs`).

use crate::db::in_transaction;
use sqlx::PgConnection;

use super::client::{invalid, Client, ClientError};
use super::control::Control;
use super::job::{is_valid_queue_name, Job};
use super::limits::{self, QueueLimits};
use super::store::kinds::{self as kind_store, KindPause};
use super::store::queues::{self as queue_store, QueueRow};

impl Client {
    pub async fn queues(&self) -> Result<Vec<QueueRow>, ClientError> {
        Ok(queue_store::queue_list(&self.pool).await?)
    }

    /// Pauses or resumes a queue on every node.
    pub async fn set_queue_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<QueueRow, ClientError> {
        in_transaction!(self, |tx| self.set_queue_paused_with(tx, name, paused))
    }

    /// [`Self::set_queue_paused`] inside the caller's transaction (the nodes are told at commit).
    pub async fn set_queue_paused_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
        paused: bool,
    ) -> Result<QueueRow, ClientError> {
        if !is_valid_queue_name(name) {
            return Err(ClientError::NotFound(format!("queue `{name}`")));
        }
        let row = queue_store::queue_set_paused(&mut *conn, name, paused).await?;
        Control::QueueChanged(name.to_string())
            .send(&mut *conn)
            .await?;
        Ok(row)
    }

    /// Sets a queue's per-node concurrency on every node (`None`: each node's configured limit).
    pub async fn set_queue_concurrency(
        &self,
        name: &str,
        concurrency: Option<i32>,
    ) -> Result<QueueRow, ClientError> {
        in_transaction!(self, |tx| self.set_queue_concurrency_with(
            tx,
            name,
            concurrency
        ))
    }

    /// [`Self::set_queue_concurrency`] inside the caller's transaction (the nodes are told at
    /// commit).
    pub async fn set_queue_concurrency_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
        concurrency: Option<i32>,
    ) -> Result<QueueRow, ClientError> {
        if !is_valid_queue_name(name) {
            return Err(ClientError::NotFound(format!("queue `{name}`")));
        }
        if let Some(c) = concurrency {
            if !(1..=10_000).contains(&c) {
                return Err(invalid("concurrency", "must be between 1 and 10000"));
            }
        }
        let row = queue_store::queue_set_concurrency(&mut *conn, name, concurrency).await?;
        Control::QueueChanged(name.to_string())
            .send(&mut *conn)
            .await?;
        Ok(row)
    }

    /// A queue's row (`None`: the queue has no row).
    pub async fn queue(&self, name: &str) -> Result<Option<QueueRow>, ClientError> {
        Ok(queue_store::queue_get(&self.pool, name).await?)
    }

    /// A queue's row, read on the caller's connection (`None`: the queue has no row).
    pub async fn queue_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
    ) -> Result<Option<QueueRow>, ClientError> {
        Ok(queue_store::queue_get(&mut *conn, name).await?)
    }

    /// Sets a queue's limits across every node (a rate, its partition, a global concurrency) as
    /// an operator's: a node's configuration no longer overwrites them at its start.
    pub async fn set_queue_limits(
        &self,
        name: &str,
        limits: &QueueLimits,
    ) -> Result<QueueRow, ClientError> {
        in_transaction!(self, |tx| self.set_queue_limits_with(tx, name, limits))
    }

    /// [`Self::set_queue_limits`] inside the caller's transaction (the nodes are told at commit).
    pub async fn set_queue_limits_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
        limits: &QueueLimits,
    ) -> Result<QueueRow, ClientError> {
        if !is_valid_queue_name(name) {
            return Err(ClientError::NotFound(format!("queue `{name}`")));
        }
        limits.check().map_err(|e| invalid("limits", e))?;
        let row = queue_store::queue_set_limits(&mut *conn, name, limits, "operator").await?;
        Control::QueueChanged(name.to_string())
            .send(&mut *conn)
            .await?;
        Ok(row)
    }

    /// Attempts started in the current window of each rate-limited queue: `(queue, used, limit)`.
    pub async fn queue_window_use(&self) -> Result<Vec<(String, i64, i32)>, ClientError> {
        Ok(queue_store::queue_window_use(&self.pool).await?)
    }

    /// Where each queue with limits across every node stands: its current window's use and the
    /// available jobs its limits hold back (of the first [`limits::PARTITION_SCAN`]).
    pub async fn queue_limit_use(&self) -> Result<Vec<queue_store::LimitUse>, ClientError> {
        Ok(queue_store::queue_limit_use(&self.pool, limits::PARTITION_SCAN).await?)
    }

    /// The room `queue`'s limits leave now for `job` (its key's use of the current rate window,
    /// the attempts executing on all nodes).
    pub async fn queue_limit_room(
        &self,
        queue: &str,
        job: &Job,
    ) -> Result<Option<queue_store::LimitRoom>, ClientError> {
        Ok(queue_store::queue_limit_room(&self.pool, queue, job).await?)
    }

    /// The kinds paused on every node.
    pub async fn paused_kinds(&self) -> Result<Vec<KindPause>, ClientError> {
        Ok(kind_store::kind_pause_list(&self.pool).await?)
    }

    /// Every kind this node's workers run and any other kind paused (a kind another release
    /// runs), sorted, each with its pause if it is paused: what the kinds' pages list.
    pub async fn kinds_and_pauses(&self) -> Result<Vec<(String, Option<KindPause>)>, ClientError> {
        let mut kinds: std::collections::BTreeMap<String, Option<KindPause>> = self
            .workers()
            .kinds()
            .iter()
            .map(|kind| (kind.to_string(), None))
            .collect();
        for pause in self.paused_kinds().await? {
            kinds.insert(pause.kind.clone(), Some(pause));
        }
        Ok(kinds.into_iter().collect())
    }

    /// Pauses a kind on every node: no node claims its jobs (they stay as they are: available,
    /// scheduled) until it is resumed; attempts already running finish. Pausing a paused kind
    /// keeps the first pause. A kind no worker of this node runs is refused.
    pub async fn pause_kind_with(
        &self,
        conn: &mut PgConnection,
        kind: &str,
        by: Option<&str>,
    ) -> Result<KindPause, ClientError> {
        if self.workers.get(kind).is_none() {
            return Err(ClientError::UnknownKind(kind.to_string()));
        }
        let row = kind_store::kind_pause(&mut *conn, kind, by).await?;
        Control::KindsChanged.send(&mut *conn).await?;
        Ok(row)
    }

    /// Resumes a paused kind on every node. Returns whether it was paused.
    pub async fn resume_kind_with(
        &self,
        conn: &mut PgConnection,
        kind: &str,
    ) -> Result<bool, ClientError> {
        let was = kind_store::kind_resume(&mut *conn, kind).await?;
        if was {
            Control::KindsChanged.send(&mut *conn).await?;
        }
        Ok(was)
    }

    /// [`Self::pause_kind_with`] in a transaction of its own.
    pub async fn pause_kind(&self, kind: &str, by: Option<&str>) -> Result<KindPause, ClientError> {
        in_transaction!(self, |tx| self.pause_kind_with(tx, kind, by))
    }

    /// [`Self::resume_kind_with`] in a transaction of its own.
    pub async fn resume_kind(&self, kind: &str) -> Result<bool, ClientError> {
        in_transaction!(self, |tx| self.resume_kind_with(tx, kind))
    }
}
