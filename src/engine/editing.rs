//! Editing waiting jobs on the client: [`Client::edit_with`] and the check and write a bulk
//! edit makes of each job (the edit itself: [`super::job_edit`]).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;

use super::client::{Client, ClientError};
use super::job::{Job, JobId, JobState};
use super::job_edit::JobEdit;
use super::sight::{self, Sight};
use super::store::jobs::{self as job_store, EditedFields, JobFilter};

/// What a meta patch may not touch: the keys Kickoff sets ([`super::job::RESERVED_META`]; a run
/// given `trigger` would escape the missed-run policy, a forged `schedule_id` would be cancelled as
/// another schedule's run), and a `traceparent` that is not a W3C one.
pub fn check_meta_patch(edit: &JobEdit) -> Result<(), ClientError> {
    let Some(patch) = edit.meta_patch.as_ref().filter(|p| p.is_object()) else {
        return Ok(());
    };
    if let Some(key) = super::job::reserved_meta_key(patch) {
        return Err(ClientError::Invalid {
            field: "meta_patch",
            message: format!("meta.{key} is set by Kickoff (reserved)"),
        });
    }
    match patch.get(crate::telemetry::META_TRACEPARENT) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(t)) if crate::telemetry::is_traceparent(t) => Ok(()),
        Some(_) => Err(ClientError::Invalid {
            field: "meta_patch",
            message: "meta.traceparent: not a W3C traceparent".into(),
        }),
    }
}

/// A job before and after an edit (the audit entry keeps both).
#[derive(Debug, Clone, PartialEq)]
pub struct Edited {
    pub before: Job,
    pub after: Job,
}

impl Client {
    /// The one use case "edit a waiting job" as a caller sees it, which the REST API and the
    /// dashboard both call: the job locked for the caller's transaction, the edit made from what
    /// `sight`'s caller sees of it (`edit_of`: the body as sent, or a form compared with the page
    /// it filled), refused (forbidden) when it changes the args or meta of a job whose secrets the
    /// caller does not see (a patch keeps the secrets it does not name: a new URL would receive
    /// them), then checked and written as [`Client::edit_with`] does.
    pub async fn edit_as_with<E: From<ClientError>>(
        &self,
        conn: &mut PgConnection,
        id: JobId,
        sight: &Sight<'_>,
        edit_of: impl FnOnce(&Job) -> Result<JobEdit, E>,
    ) -> Result<(JobEdit, Edited), E> {
        let before = job_store::job_get_for_update(&mut *conn, id)
            .await
            .map_err(ClientError::from)?
            .ok_or_else(|| ClientError::NotFound(format!("job {id}")))?;
        let edit = edit_of(&sight.job(before.clone()))?;
        if edit.touches_args_or_meta()
            && !sight.sees_secrets_of(&before)
            && sight::has_secrets(self.workers(), &before)
        {
            return Err(ClientError::Forbidden(format!(
                "job {id} carries secrets you do not see: only an admin or its creator can \
                 change its args or meta"
            ))
            .into());
        }
        let edited = self.edit_with(conn, id, &edit).await?;
        Ok((edit, edited))
    }

    /// The earliest due time of the waiting jobs `filter` matches, owned ones included: a shift
    /// `to` a time moves that one there.
    pub async fn earliest_waiting(
        &self,
        filter: &JobFilter,
    ) -> Result<Option<DateTime<Utc>>, ClientError> {
        Ok(job_store::job_earliest_waiting(self.pool(), filter).await?)
    }

    /// The owners (`meta.owner`) of the waiting jobs `filter` matches (at most 10,000): a shift
    /// moves an owned job through its owner.
    pub async fn owners_of_waiting(&self, filter: &JobFilter) -> Result<Vec<String>, ClientError> {
        Ok(job_store::job_owners_matching(self.pool(), filter).await?)
    }

    /// The owners of the listed jobs that wait.
    pub async fn owners_of_waiting_ids(&self, ids: &[JobId]) -> Result<Vec<String>, ClientError> {
        Ok(job_store::job_owners_of(self.pool(), ids).await?)
    }

    /// Edits a waiting job (see [`JobEdit`]): checked by its kind's worker like an insert, in
    /// the caller's transaction. 409 for a job that runs, ended or belongs to a question.
    pub async fn edit_with(
        &self,
        conn: &mut PgConnection,
        id: JobId,
        edit: &JobEdit,
    ) -> Result<Edited, ClientError> {
        edit.check()?;
        let before = job_store::job_get_for_update(&mut *conn, id)
            .await?
            .ok_or_else(|| ClientError::NotFound(format!("job {id}")))?;
        if !matches!(
            before.state,
            JobState::Scheduled | JobState::Available | JobState::Retryable
        ) {
            return Err(ClientError::Conflict(format!(
                "cannot edit job {id} while it is {}: only waiting jobs (scheduled, available, \
                 retryable) can be",
                before.state.as_str()
            )));
        }
        if let Some(field) = &before.unreadable {
            return Err(ClientError::Conflict(format!(
                "job {id} cannot be read as stored ({field}): an edit would write it back changed"
            )));
        }
        if let Some(owner) = before.meta.get("owner").and_then(Value::as_str) {
            return Err(ClientError::Conflict(format!(
                "job {id} belongs to {owner}, which moves and ends it: edit {owner} instead"
            )));
        }
        let after = self.write_edit(conn, &before, edit).await?.ok_or_else(|| {
            ClientError::Conflict(format!("job {id} started while it was being edited"))
        })?;
        Ok(Edited { before, after })
    }

    /// Checks `edit` on `job` (locked by the caller) and writes it; `None` if the job stopped
    /// waiting.
    pub(crate) async fn write_edit(
        &self,
        conn: &mut PgConnection,
        job: &Job,
        edit: &JobEdit,
    ) -> Result<Option<Job>, ClientError> {
        check_meta_patch(edit)?;
        if let Some(field) = &job.unreadable {
            return Err(ClientError::Conflict(format!(
                "job {} cannot be read as stored ({field}): an edit would write it back changed",
                job.id
            )));
        }
        let new = edit.applied_to(job)?;
        // The patch was checked for Kickoff's own meta keys above: those the job carries (a
        // schedule's run's) stay.
        let call_host = self.checked_own_with(&mut *conn, &new).await?;
        // A secret the edit takes out is still in what the job's earlier attempts left (their
        // errors, records, a partner's answers): the job keeps it, to hide it there.
        let dropped = super::sight::secrets_dropped(self.workers(), job, &new.args, &new.meta);
        if job.former_secrets.len() + dropped.len() > super::sight::MAX_FORMER_SECRETS {
            return Err(ClientError::Conflict(format!(
                "job {}: {} secrets were edited out of it already, the most a job keeps hidden: \
                 copy it with its new args instead",
                job.id,
                job.former_secrets.len()
            )));
        }
        let fields = EditedFields {
            args: &new.args,
            queue: &new.queue,
            priority: new.priority,
            max_attempts: new.max_attempts,
            tags: &new.tags,
            meta: &new.meta,
            call_host: call_host.as_deref(),
            former_secrets: &dropped,
        };
        Ok(job_store::job_apply_edit(conn, job.id, &fields).await?)
    }
}
