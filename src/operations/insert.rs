//! Inserting a job with its audit entry: what `POST /api/v1/jobs` and the dashboard's new-job
//! form both call.

use crate::audit::{AuditEntry, NotRecorded};
use crate::engine::{is_transient, ClientError, Inserted, NewJob};

use super::services::Operations;

impl Operations<'_> {
    /// Inserts `new` with `entry`, checked as every insert is (its kind's worker, the reserved
    /// meta keys, the numbers' bounds). Most inserts are one statement with their entry: one
    /// round trip and one commit. When a live job holds its unique key, or the database refused
    /// that statement (a constraint, the audit log refusing the entry: it cannot say which of
    /// its two writes it refused), the insert runs in a transaction with the entry instead,
    /// which tells them apart and answers the live job (`existing`). Any other failure is
    /// answered as it is: after a broken connection the statement may have committed, and a
    /// second try could insert the job twice. The nodes hear of the job once it committed (see
    /// `engine::announcer`). A refusal is the caller's to record, as with `Auditor::run`.
    pub async fn insert<E>(&self, entry: AuditEntry, new: &NewJob) -> Result<Inserted, E>
    where
        E: From<ClientError> + From<NotRecorded> + From<sqlx::Error>,
    {
        let companion = |qb: &mut sqlx::QueryBuilder<'_, sqlx::Postgres>, inserted: &str| {
            crate::audit::record_with_row_of(qb, inserted, &entry)
        };
        match self.client.insert_alone(new, &companion).await {
            Ok(Some((inserted, wakeup))) => {
                wakeup.send();
                return Ok(inserted);
            }
            Ok(None) => {}
            Err(ClientError::Database(e @ sqlx::Error::Database(_))) if !is_transient(&e) => {
                tracing::debug!(error = %e, "the one-statement insert was refused; trying it in a transaction");
            }
            Err(e) => return Err(e.into()),
        }
        let mut wakeup = None;
        let inserted = self
            .auditor
            .run(
                entry.clone(),
                |_| None,
                async |work| {
                    let conn = work.conn().await?;
                    let (inserted, woken) = self.client.insert_quietly_with(conn, new).await?;
                    wakeup = Some(woken);
                    Ok::<_, E>(inserted)
                },
            )
            .await?;
        // Committed with its audit entry: now the nodes hear of it.
        if let Some(wakeup) = wakeup {
            wakeup.send();
        }
        Ok(inserted)
    }
}
