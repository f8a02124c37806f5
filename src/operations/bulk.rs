//! Acting on many jobs: the count that confirms a filter's snapshot, and the walk over every job
//! a filter matches, in batches, with its audit entries.

use crate::audit::{AuditEntry, Auditor, NotRecorded};
use crate::engine::sight::Sight;
use crate::engine::{BulkChange, BulkReport, Client, ClientError, JobFilter, JobId};

use super::services::Operations;

/// The most a confirmation counts.
pub const COUNT_CAP: i64 = 100_000;

/// What a filter matches now: the confirmation before acting on all of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confirmation {
    /// How many jobs it matches up to `max_id`, at most [`COUNT_CAP`].
    pub count: i64,
    /// It matches more than [`COUNT_CAP`].
    pub capped: bool,
    /// The newest matching job: the snapshot (give it as the filter's `max_id`, so that jobs
    /// inserted after the confirmation are left alone). `None` when nothing matches.
    pub max_id: Option<JobId>,
}

impl Operations<'_> {
    /// Counts what `filter` matches for `sight` (who may count what: [`Sight::check_walk`]), the
    /// newest matching job being the snapshot.
    pub async fn confirm(
        &self,
        sight: &Sight<'_>,
        filter: &JobFilter,
    ) -> Result<Confirmation, ClientError> {
        sight.check_walk(filter)?;
        let newest = self.client.list(filter, None, 1).await?;
        let Some(max_id) = newest.first().map(|j| j.id) else {
            return Ok(Confirmation {
                count: 0,
                capped: false,
                max_id: None,
            });
        };
        let snapshot = JobFilter {
            max_id: Some(max_id),
            ..filter.clone()
        };
        let n = self.client.count_matching(&snapshot, COUNT_CAP + 1).await?;
        Ok(Confirmation {
            count: n.min(COUNT_CAP),
            capped: n > COUNT_CAP,
            max_id: Some(max_id),
        })
    }

    /// A change to every job matching `filter`, for `sight` (refused as
    /// [`Sight::check_walk`] says), in the engine's batches (see [`Client::bulk_filter`]). The
    /// last batch commits with `entry` and the count changed, so an action of one batch has one
    /// entry, written with its change. Before it, the first batch commits with `entry` reading
    /// `started`. When an entry cannot be written, its batch is undone and the answer is
    /// [`NotRecorded`]. After an error (or a walk that ends on a full batch), the end is recorded
    /// on its own: the count so far and the error worded by `why`. Every outcome is recorded
    /// here, a refusal's included.
    ///
    /// The walk runs as a task of its own, which the auditor tracks: a client that goes away, or a
    /// server stopping (it awaits the auditor's walks before it closes the pools), does not cut it
    /// between a batch and its entry, nor leave it without its closing entry.
    pub async fn bulk_filter<E>(
        &self,
        sight: &Sight<'_>,
        entry: AuditEntry,
        change: impl Into<BulkChange>,
        filter: &JobFilter,
        why: fn(&E) -> String,
    ) -> Result<BulkReport, E>
    where
        E: From<ClientError> + From<NotRecorded> + Send + 'static,
    {
        if let Err(refused) = sight.check_walk(filter) {
            let e = E::from(ClientError::from(refused));
            return Err(self.refused(entry, e, why).await);
        }
        let (auditor, client, filter) = (self.auditor.clone(), self.client.clone(), filter.clone());
        let change = change.into();
        let walk = self
            .auditor
            .spawn_walk(async move { walk(&auditor, &client, entry, change, &filter, why).await });
        match walk.await {
            Ok(done) => done,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// A change to the listed jobs, in one transaction with `entry` (its count: how many
    /// changed). A refusal is recorded here too.
    pub async fn bulk_ids<E>(
        &self,
        entry: AuditEntry,
        change: impl Into<BulkChange>,
        ids: &[JobId],
        why: fn(&E) -> String,
    ) -> Result<BulkReport, E>
    where
        E: From<ClientError> + From<NotRecorded> + From<sqlx::Error>,
    {
        let change = change.into();
        let changed = |r: &BulkReport| Some(i64::try_from(r.changed).unwrap_or(i64::MAX));
        let done = self
            .auditor
            .run(entry.clone(), changed, async |work| {
                let conn = work.conn().await?;
                Ok(self.client.bulk_ids_with(conn, change, ids).await?)
            })
            .await;
        match done {
            Ok(report) => Ok(report),
            Err(e) => Err(self.refused(entry, e, why).await),
        }
    }
}

async fn walk<E: From<ClientError> + From<NotRecorded>>(
    auditor: &Auditor,
    client: &Client,
    entry: AuditEntry,
    change: BulkChange,
    filter: &JobFilter,
    why: fn(&E) -> String,
) -> Result<BulkReport, E> {
    let mut started = false;
    let mut finished = false;
    let mut report = BulkReport::default();
    let walked: Result<(), E> = async {
        let mut walk = client.bulk_walk(change, filter).await?;
        while let Some(mut batch) = walk.next().await? {
            if walk.is_done() {
                let changed = walk.report.changed + batch.changed();
                let end = AuditEntry {
                    count: Some(i64::try_from(changed).unwrap_or(i64::MAX)),
                    ..entry.clone()
                };
                auditor.record_with(batch.conn(), &end).await?;
                walk.commit(batch).await?;
                finished = true;
            } else {
                if !started {
                    auditor.record_started_with(batch.conn(), &entry).await?;
                }
                walk.commit(batch).await?;
            }
            started = true;
            report = walk.report.clone();
        }
        Ok(())
    }
    .await;
    if finished {
        return walked.map(|()| report);
    }
    let changed = i64::try_from(report.changed).unwrap_or(i64::MAX);
    auditor
        .record(AuditEntry {
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
