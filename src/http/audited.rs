//! Actions done with their audit entries that need the engine as well as the audit log (which
//! imports no floor: see docs/ARCHITECTURE.md).

use crate::audit::{AuditEntry, Auditor, NotRecorded};
use crate::engine::{BulkChange, BulkReport, Client, ClientError, JobFilter};

/// A bulk action on every job matching `filter`, in the engine's batches (see
/// [`Client::bulk_filter`]). The last batch commits with `entry` and the count changed, so an
/// action of one batch has one entry, written with its change. Before it, the first batch
/// commits with `entry` reading `started`. When an entry cannot be written, its batch is
/// undone and the answer is [`NotRecorded`]. After an error (or a walk that ends on a full
/// batch), the end is recorded on its own: the count so far and the error worded by `why`.
/// Every outcome is recorded here, a refusal's included.
///
/// The walk runs as a task of its own, which the auditor tracks: a client that goes away, or a
/// server stopping (it awaits the auditor's walks before it closes the pools), does not cut it
/// between a batch and its entry, nor leave it without its closing entry.
pub async fn bulk_filter<E>(
    auditor: &Auditor,
    client: &Client,
    entry: AuditEntry,
    action: impl Into<BulkChange>,
    filter: &JobFilter,
    why: fn(&E) -> String,
) -> Result<BulkReport, E>
where
    E: From<ClientError> + From<NotRecorded> + Send + 'static,
{
    let (auditor, client, filter) = (auditor.clone(), client.clone(), filter.clone());
    let action = action.into();
    let tracked = auditor.clone();
    let walk = tracked
        .spawn_walk(async move { walk(&auditor, &client, entry, action, &filter, why).await });
    match walk.await {
        Ok(done) => done,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

async fn walk<E: From<ClientError> + From<NotRecorded>>(
    auditor: &Auditor,
    client: &Client,
    entry: AuditEntry,
    action: BulkChange,
    filter: &JobFilter,
    why: fn(&E) -> String,
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
