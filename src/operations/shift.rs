//! Moving waiting jobs in time: a postponed game. The questions the moved jobs belong to (their
//! lock jobs among them) and the open questions of the game named move with them, first and in
//! one transaction (refused as a whole when one cannot move), then the jobs, in batches.

use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};

use crate::audit::{AuditEntry, NotRecorded};
use crate::engine::job_edit::MAX_SHIFT_MS;
use crate::engine::sight::Sight;
use crate::engine::{BulkChange, BulkReport, ClientError, JobFilter, JobId};
use crate::questions::QuestionError;

use super::services::Operations;

/// The jobs an action is applied to.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Listed jobs.
    Ids(Vec<JobId>),
    /// Every job a confirmed filter matches (its `max_id` set).
    Filter(JobFilter),
}

/// How far a shift moves.
#[derive(Debug, Clone, Copy)]
pub enum ShiftBy {
    /// By this many ms (negative: earlier).
    Ms(i64),
    /// The earliest of what moves (a waiting job the filter matches, an open question of the
    /// game) to this instant, the others keeping their distance to it. With a filter only.
    To(DateTime<Utc>),
}

/// What a shift did.
#[derive(Debug, Clone)]
pub struct ShiftReport {
    /// How far the jobs moved, in ms.
    pub by_ms: i64,
    /// The jobs moved, and those matched but left alone (not waiting, belonging to a question or
    /// to a workflow run's step — moved with it instead —, or taken out of the schedulable
    /// range).
    pub jobs: BulkReport,
    /// The questions moved (their game time and lock job).
    pub questions: Vec<i64>,
}

impl Operations<'_> {
    /// Moves `jobs` by `by`, for `sight`, with the open questions of `game` (blank: none) and
    /// those whose lock jobs move. Two audit entries, each committed with its change: the
    /// questions' (`questions.shift`: the game, the questions, `by_ms`), when any move, and the
    /// jobs' (`entry`, whose `filter`, an object saying what the caller applied it to, gains
    /// `by_ms`). Every outcome is recorded here, a refusal's included (worded by `why`).
    pub async fn shift<E>(
        &self,
        sight: &Sight<'_>,
        mut entry: AuditEntry,
        jobs: &Selection,
        by: ShiftBy,
        game: Option<&str>,
        why: fn(&E) -> String,
    ) -> Result<ShiftReport, E>
    where
        E: From<ClientError>
            + From<QuestionError>
            + From<NotRecorded>
            + From<sqlx::Error>
            + Send
            + 'static,
    {
        let game = game.map(str::trim).filter(|g| !g.is_empty());
        let planned = async {
            if let Selection::Filter(filter) = jobs {
                sight.check_walk(filter).map_err(ClientError::from)?;
            }
            let by_ms = self.shift_amount::<E>(jobs, by, game).await?;
            let owners = match jobs {
                Selection::Filter(filter) => self.questions.owning_jobs_matching(filter).await?,
                Selection::Ids(ids) => self.questions.owning_jobs(ids).await?,
            };
            Ok::<_, E>((by_ms, owners))
        };
        let (by_ms, owners) = match planned.await {
            Ok(planned) => planned,
            Err(e) => return Err(self.refused(entry, e, why).await),
        };
        if let Some(Value::Object(applied)) = &mut entry.filter {
            applied.insert("by_ms".into(), json!(by_ms));
        }
        let mut questions = Vec::new();
        if by_ms != 0 && (game.is_some() || !owners.is_empty()) {
            let moved = AuditEntry {
                action: "questions.shift".into(),
                filter: Some(json!({"game": game, "questions": owners, "by_ms": by_ms})),
                count: None,
                ..entry.clone()
            };
            let done = self
                .auditor
                .run(
                    moved.clone(),
                    |ids: &Vec<i64>| Some(ids.len() as i64),
                    async |work| {
                        let conn = work.conn().await?;
                        let by = Duration::milliseconds(by_ms);
                        Ok::<_, E>(self.questions.shift_with(conn, game, &owners, by).await?)
                    },
                )
                .await;
            questions = match done {
                Ok(ids) => ids,
                Err(e) => return Err(self.refused(moved, e, why).await),
            };
        }
        let change = BulkChange::Shift { by_ms };
        let jobs = match jobs {
            Selection::Filter(filter) => {
                self.bulk_filter(sight, entry, change, filter, why).await?
            }
            Selection::Ids(ids) => self.bulk_ids(entry, change, ids, why).await?,
        };
        Ok(ShiftReport {
            by_ms,
            jobs,
            questions,
        })
    }

    /// How far a shift moves, within [`MAX_SHIFT_MS`] either way.
    async fn shift_amount<E: From<ClientError> + From<QuestionError>>(
        &self,
        jobs: &Selection,
        by: ShiftBy,
        game: Option<&str>,
    ) -> Result<i64, E> {
        let by_ms = match (by, jobs) {
            (ShiftBy::Ms(ms), _) => ms,
            (ShiftBy::To(to), Selection::Filter(filter)) => {
                let earliest_job = self.client.earliest_waiting(filter).await?;
                let earliest_question = match game {
                    Some(game) => self.questions.earliest_of_game(game).await?,
                    None => None,
                };
                match earliest_job.into_iter().chain(earliest_question).min() {
                    Some(earliest) => (to - earliest).num_milliseconds(),
                    None => 0,
                }
            }
            (ShiftBy::To(_), Selection::Ids(_)) => {
                return Err(
                    crate::engine::client::invalid("to", "move listed jobs by a duration").into(),
                )
            }
        };
        if by_ms.unsigned_abs() > MAX_SHIFT_MS as u64 {
            return Err(E::from(match by {
                ShiftBy::Ms(_) => ClientError::OutOfWindow {
                    field: "by_ms",
                    message: "at most 10 years either way".into(),
                },
                ShiftBy::To(_) => ClientError::OutOfWindow {
                    field: "to",
                    message: "more than 10 years from the earliest job".into(),
                },
            }));
        }
        Ok(by_ms)
    }
}
