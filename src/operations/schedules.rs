//! Changing a schedule as its caller sees it: the one use case the API's `PATCH` and the
//! dashboard's form both call.

use sqlx::PgConnection;

use crate::engine::schedules::service::spec_of;
use crate::engine::schedules::{ScheduleError, ScheduleRow, ScheduleSpec, Schedules};
use crate::engine::sight::Sight;
use crate::engine::ClientError;

use super::services::Operations;

impl Operations<'_> {
    /// Changes the schedule `name` in the caller's transaction, its row locked: `change` edits
    /// its spec as `sight`'s caller sees it (its template's secrets hidden when they are not the
    /// caller's to see). A template's args or meta given back as they were shown keep what is
    /// stored (a form or a `GET` sent back whole writes no `[redacted]` over a secret); changing
    /// them beside a secret the caller does not see is refused (forbidden), as a job's edit is
    /// (a new URL would receive the header). Then checked and written as
    /// [`Schedules::replace_with`] does, its source kept.
    pub async fn change_schedule_with<E>(
        &self,
        conn: &mut PgConnection,
        sight: &Sight<'_>,
        name: &str,
        change: impl FnOnce(&mut ScheduleSpec) -> Result<(), E>,
    ) -> Result<ScheduleRow, E>
    where
        E: From<ScheduleError>,
    {
        let schedules = Schedules::new(self.client.clone());
        let row = schedules.row_with(&mut *conn, name).await?;
        let stored = spec_of(&row);
        let seen = sight.template(row.created_by.as_deref(), stored.job.clone());
        let mut spec = ScheduleSpec {
            job: seen.clone(),
            ..stored.clone()
        };
        change(&mut spec)?;
        let mut hidden_changed = false;
        if spec.job.args == seen.args {
            spec.job.args = stored.job.args.clone();
        } else {
            hidden_changed |= seen.args != stored.job.args;
        }
        if spec.job.meta == seen.meta {
            spec.job.meta = stored.job.meta.clone();
        } else {
            hidden_changed |= seen.meta != stored.job.meta;
        }
        if hidden_changed {
            return Err(ScheduleError::Client(ClientError::Forbidden(format!(
                "schedule `{name}` carries secrets you do not see: only an admin or its creator \
                 can change its job's args or meta"
            )))
            .into());
        }
        Ok(schedules.replace_with(conn, &spec, &row.source).await?)
    }
}
