//! What the API does with questions: each operation validates first, then writes the question and
//! its jobs in one transaction.

use crate::db::Db;
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use super::game_workflow::{game_of_run, kickoff_of, KICKOFF_AT};
use super::jobs::{lock_job, lock_key, question_of_owner, settle_job};
use super::store::{self, ChoiceCount, Prediction, Question, QuestionStatus};
use crate::db::in_transaction;
use crate::engine::{Client, ClientError, Job, JobFilter, JobId, OnConflict};

/// How far ahead a game may be scheduled.
pub const MAX_GAME_AHEAD_DAYS: i64 = 730;
pub const MAX_CHOICES: usize = 20;
pub const MAX_CHOICE_CHARS: usize = 100;
pub const MAX_PLAYER_CHARS: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum QuestionError {
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("question {0} not found")]
    NotFound(i64),
    #[error("`{0}` is not one of the question's choices")]
    UnknownChoice(String),
    #[error("predictions are closed: the game has started")]
    PredictionsClosed,
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Database(sqlx::Error),
}

/// A refusal of the SQL rules (SQLSTATE class `KO`: `kickoff_check_question`'s, a job's) is the
/// engine's error it reads back as; any other is the database's.
impl From<sqlx::Error> for QuestionError {
    fn from(e: sqlx::Error) -> Self {
        match ClientError::from(e) {
            ClientError::Database(e) => QuestionError::Database(e),
            refused => QuestionError::Client(refused),
        }
    }
}

fn invalid(field: &'static str, message: impl Into<String>) -> QuestionError {
    QuestionError::Invalid {
        field,
        message: message.into(),
    }
}

/// A question with what an operator wants to see about it.
#[derive(schemars::JsonSchema, Debug, Clone, Serialize)]
pub struct QuestionDetail {
    #[serde(flatten)]
    pub question: Question,
    pub counts: Vec<ChoiceCount>,
    pub predictions: i64,
    pub lock_job: Option<Job>,
}

/// A question to create.
#[derive(Debug, Clone, Copy)]
pub struct NewQuestion<'a> {
    pub game: &'a str,
    pub prompt: &'a str,
    pub choices: &'a [String],
    pub game_time: DateTime<Utc>,
}

#[derive(Clone)]
pub struct QuestionService {
    pool: Db,
    client: Client,
}

impl QuestionService {
    pub fn new(client: Client) -> Self {
        QuestionService {
            pool: client.pool().clone(),
            client,
        }
    }

    /// Creates a question and its lock job, together or not at all.
    pub async fn create(
        &self,
        game: &str,
        prompt: &str,
        choices: &[String],
        game_time: DateTime<Utc>,
    ) -> Result<QuestionDetail, QuestionError> {
        in_transaction!(self, |tx| self
            .create_with(tx, game, prompt, choices, game_time))
    }

    /// [`Self::create`] inside the caller's transaction.
    pub async fn create_with(
        &self,
        conn: &mut PgConnection,
        game: &str,
        prompt: &str,
        choices: &[String],
        game_time: DateTime<Utc>,
    ) -> Result<QuestionDetail, QuestionError> {
        refuse_nul(Some(game), Some(prompt), Some(choices))?;
        let kinds = self.client.rules(true).kinds;
        let q = store::question_add(&mut *conn, game, prompt, choices, game_time, kinds).await?;
        get_with(conn, q.id).await
    }

    /// [`Self::create_with`], then, given `workflow`, the game's workflow started in the same
    /// transaction ([`Self::start_game_workflow_with`]; a live run of the game answers as it
    /// is, its kickoff already following the new question): creating a game's questions starts
    /// it, and a question whose run was refused is not created either.
    pub async fn create_in_game_with(
        &self,
        conn: &mut PgConnection,
        new: &NewQuestion<'_>,
        workflow: Option<&super::game_workflow::GameWorkflowSettings>,
        by: Option<&str>,
    ) -> Result<(QuestionDetail, Option<crate::engine::workflow::RunInserted>), QuestionError> {
        let q = self
            .create_with(&mut *conn, new.game, new.prompt, new.choices, new.game_time)
            .await?;
        let run = match workflow {
            Some(settings) => Some(
                self.start_game_workflow_with(&mut *conn, new.game, settings, by)
                    .await?,
            ),
            None => None,
        };
        Ok((q, run))
    }

    /// Starts the game's workflow (see [`super::game_workflow`]) inside the caller's
    /// transaction: its `kickoff_at` the earliest game time of the game's open questions. A
    /// live run of the game answers as it is (`existing`). 409 when the game has no open
    /// question.
    pub async fn start_game_workflow_with(
        &self,
        conn: &mut PgConnection,
        game: &str,
        settings: &super::game_workflow::GameWorkflowSettings,
        by: Option<&str>,
    ) -> Result<crate::engine::workflow::RunInserted, QuestionError> {
        use super::game_workflow::{workflow, MAX_DEADLINE_MS};
        refuse_nul(Some(game), None, None)?;
        store::question_check(&mut *conn, Some(game), None, None, None).await?;
        use super::game_workflow::{MAX_NOTIFY_BATCH as MAX_BATCH, MAX_NOTIFY_TASKS};
        if settings
            .notify_tasks
            .is_some_and(|n| !(1..=MAX_NOTIFY_TASKS).contains(&n))
        {
            return Err(invalid(
                "notify_tasks",
                format!("1 to {MAX_NOTIFY_TASKS} tasks"),
            ));
        }
        if settings
            .notify_batch
            .is_some_and(|n| !(1..=MAX_BATCH).contains(&n))
        {
            return Err(invalid(
                "notify_batch",
                format!("1 to {MAX_BATCH} players a call"),
            ));
        }
        if settings.poll_every_ms.is_some_and(|ms| {
            !(super::game_workflow::MIN_POLL_EVERY_MS..=super::game_workflow::MAX_POLL_EVERY_MS)
                .contains(&ms)
        }) {
            return Err(invalid(
                "poll_every_ms",
                "1000 (a second) to 3600000 (an hour)",
            ));
        }
        if let Some(ms) = settings.deadline_ms {
            if !(60_000..=MAX_DEADLINE_MS).contains(&ms) {
                return Err(invalid(
                    "deadline_ms",
                    format!("60000 (a minute) to {MAX_DEADLINE_MS} (two days)"),
                ));
            }
        }
        let kickoff = store::question_earliest_of_game(&mut *conn, game.trim())
            .await?
            .ok_or_else(|| {
                QuestionError::Conflict(format!(
                    "game {:?} has no open question: its run starts before its kickoff",
                    game.trim()
                ))
            })?;
        Ok(self
            .client
            .insert_workflow_with(&mut *conn, &workflow(game.trim(), kickoff, settings, by))
            .await?)
    }

    pub async fn get(&self, id: i64) -> Result<QuestionDetail, QuestionError> {
        crate::db::in_transaction!(self, |tx| get_with(tx, id))
    }

    pub async fn list(
        &self,
        status: Option<QuestionStatus>,
        limit: i64,
    ) -> Result<Vec<Question>, QuestionError> {
        if !(1..=500).contains(&limit) {
            return Err(invalid("limit", "must be between 1 and 500"));
        }
        Ok(store::question_list(&self.pool, status, limit).await?)
    }

    /// Edits a question. Choices only while nobody predicted; game time only while open (the lock
    /// job moves with it, and a question whose game time passed but did not lock yet opens again).
    pub async fn update(
        &self,
        id: i64,
        prompt: Option<&str>,
        choices: Option<&[String]>,
        game_time: Option<DateTime<Utc>>,
    ) -> Result<QuestionDetail, QuestionError> {
        in_transaction!(self, |tx| self
            .update_with(tx, id, prompt, choices, game_time))
    }

    /// [`Self::update`] inside the caller's transaction. A new game time moves the game's live
    /// run with it (`Self::follow_game_run`).
    pub async fn update_with(
        &self,
        tx: &mut PgConnection,
        id: i64,
        prompt: Option<&str>,
        choices: Option<&[String]>,
        game_time: Option<DateTime<Utc>>,
    ) -> Result<QuestionDetail, QuestionError> {
        let detail = self
            .update_alone(&mut *tx, id, prompt, choices, game_time)
            .await?;
        if game_time.is_some() {
            self.follow_game_run(&mut *tx, &detail.question.game)
                .await?;
        }
        Ok(detail)
    }

    /// [`Self::update_with`], the game's run left as it is.
    async fn update_alone(
        &self,
        tx: &mut PgConnection,
        id: i64,
        prompt: Option<&str>,
        choices: Option<&[String]>,
        game_time: Option<DateTime<Utc>>,
    ) -> Result<QuestionDetail, QuestionError> {
        refuse_nul(None, prompt, choices)?;
        store::question_check(&mut *tx, None, prompt, choices, game_time).await?;
        let q = store::question_get_for_update(&mut *tx, id)
            .await?
            .ok_or(QuestionError::NotFound(id))?;
        if choices.is_some() && store::prediction_count(&mut *tx, id).await? > 0 {
            return Err(QuestionError::Conflict(
                "choices cannot change once players have predicted".into(),
            ));
        }
        if game_time.is_some() && q.status != QuestionStatus::Open {
            return Err(QuestionError::Conflict(format!(
                "question {id} is {}: its game time can no longer change",
                q.status.as_str()
            )));
        }
        store::question_update(&mut *tx, id, prompt.map(str::trim), choices, game_time).await?;
        if let Some(t) = game_time {
            // The same job, moved (a lock job that is running right now snoozes until the new time).
            let job = self
                .client
                .insert_own_with(
                    &mut *tx,
                    &lock_job(id, t).with_unique_key(lock_key(id), OnConflict::Reschedule),
                )
                .await?
                .job;
            store::question_set_lock_job(&mut *tx, id, job.id).await?;
        }
        get_with(tx, id).await
    }

    /// Moves the open questions of `game` and those listed in `ids` by `by` (a postponed game):
    /// each through [`Self::update_with`], so its lock job moves with it, and the live run of
    /// each game moved with them. Refused as a whole (nothing moved) when a question's new game
    /// time would be refused. Returns the ids moved.
    pub async fn shift_with(
        &self,
        tx: &mut PgConnection,
        game: Option<&str>,
        ids: &[i64],
        by: ChronoDuration,
    ) -> Result<Vec<i64>, QuestionError> {
        let open = self.shift_alone(&mut *tx, game, ids, by).await?;
        let games: std::collections::BTreeSet<&str> =
            open.iter().map(|q| q.game.as_str()).collect();
        for game in games {
            self.follow_game_run(&mut *tx, game).await?;
        }
        Ok(open.into_iter().map(|q| q.id).collect())
    }

    /// [`Self::shift_with`], the games' runs left as they are: the questions moved (as they
    /// were before).
    async fn shift_alone(
        &self,
        tx: &mut PgConnection,
        game: Option<&str>,
        ids: &[i64],
        by: ChronoDuration,
    ) -> Result<Vec<Question>, QuestionError> {
        let open = store::question_open_of_game(&mut *tx, game, ids).await?;
        for q in &open {
            let to = q.game_time.checked_add_signed(by).ok_or_else(|| {
                invalid(
                    "game_time",
                    format!("question {} cannot move that far", q.id),
                )
            })?;
            self.update_alone(&mut *tx, q.id, None, None, Some(to))
                .await
                .map_err(|e| match e {
                    QuestionError::Invalid { message, .. } => invalid(
                        "game_time",
                        format!("question {} would move to {to}: {message}", q.id),
                    ),
                    e => e,
                })?;
        }
        Ok(open)
    }

    /// Moves run `id`'s named times ([`Client::move_workflow_times_with`]) inside the caller's
    /// transaction. A game's run (the built-in game workflow) moves its game with it until its
    /// lock ran: the game's open questions by as much as its `kickoff_at` moved, their lock jobs
    /// with them, so that the run and its questions keep one game time whichever of them an
    /// operator moves (after the lock, a move changes the settle's deadline alone).
    pub async fn move_workflow_times_with(
        &self,
        tx: &mut PgConnection,
        id: i64,
        times: &std::collections::BTreeMap<String, DateTime<Utc>>,
    ) -> Result<crate::engine::workflow::RunRow, QuestionError> {
        let run = self.client.workflow_run_with(&mut *tx, id).await?;
        if let (Some(game), Some(to)) = (game_of_run(&run), times.get(KICKOFF_AT)) {
            // The game's questions first, then the game (the order of a question's change), then
            // the run read again: it moved as far as it moves now, whatever moved it meanwhile.
            self.hold_game_of(tx, id).await?;
            let run = self.client.workflow_run_with(&mut *tx, id).await?;
            if let (Some(from), false) = (kickoff_of(&run), self.kicked_off(tx, &run).await?) {
                let by = *to - from;
                if by != ChronoDuration::zero() {
                    self.shift_alone(&mut *tx, Some(game), &[], by).await?;
                }
            }
        }
        Ok(self
            .client
            .move_workflow_times_with(&mut *tx, id, times)
            .await?)
    }

    /// Retries run `id` ([`Client::retry_workflow_with`]) inside the caller's transaction; a
    /// game's run, running again, follows its game's questions as they are now (they may have
    /// moved while it was settled), until kickoff.
    pub async fn retry_workflow_with(
        &self,
        tx: &mut PgConnection,
        id: i64,
        mode: crate::engine::workflow_actions::RetryMode,
    ) -> Result<crate::engine::workflow::RunRow, QuestionError> {
        self.hold_game_of(tx, id).await?;
        let run = self.client.retry_workflow_with(&mut *tx, id, mode).await?;
        self.taken_up(tx, run).await
    }

    /// Runs run `id` again from step `from` ([`Client::rerun_workflow_with`]) inside the
    /// caller's transaction; a game's new run follows its game's questions as they are now.
    pub async fn rerun_workflow_with(
        &self,
        tx: &mut PgConnection,
        id: i64,
        from: &str,
        by: Option<&str>,
    ) -> Result<crate::engine::workflow::RunRow, QuestionError> {
        self.hold_game_of(tx, id).await?;
        let run = self
            .client
            .rerun_workflow_with(&mut *tx, id, from, by)
            .await?;
        self.taken_up(tx, run).await
    }

    /// For a game's run `id`: its game's open questions' rows, then the game, before the run is
    /// touched (the order every change of a game's times takes them in).
    async fn hold_game_of(&self, tx: &mut PgConnection, id: i64) -> Result<(), QuestionError> {
        let run = self.client.workflow_run_with(&mut *tx, id).await?;
        if let Some(game) = game_of_run(&run) {
            store::question_open_of_game(&mut *tx, Some(game), &[]).await?;
            store::game_lock(&mut *tx, game).await?;
        }
        Ok(())
    }

    /// `run`, running again: a game's follows its questions ([`Self::follow_game_run`]).
    async fn taken_up(
        &self,
        tx: &mut PgConnection,
        run: crate::engine::workflow::RunRow,
    ) -> Result<crate::engine::workflow::RunRow, QuestionError> {
        let Some(game) = game_of_run(&run) else {
            return Ok(run);
        };
        let game = game.to_string();
        self.follow_game_run(&mut *tx, &game).await?;
        Ok(self.client.workflow_run_with(&mut *tx, run.id).await?)
    }

    /// The game's live run (the built-in game workflow) follows its open questions: until it
    /// kicks off (its `kickoff_at` ahead, its `lock` step not done), its `kickoff_at` is the
    /// earliest game time among them, moved in the
    /// caller's transaction with what moves with it (the lock's time, the settle's deadline). A
    /// game without open questions, or that kicked off, leaves its run as it is.
    async fn follow_game_run(
        &self,
        tx: &mut PgConnection,
        game: &str,
    ) -> Result<(), QuestionError> {
        // `kickoff_game_follow`: the one place this is written, which a question created from
        // SQL (`kickoff_add_question`) follows too.
        store::game_follow(tx, game).await?;
        Ok(())
    }

    /// Whether a game's run locked its game: its `lock` step is past waiting and ready.
    async fn kicked_off(
        &self,
        tx: &mut PgConnection,
        run: &crate::engine::workflow::RunRow,
    ) -> Result<bool, QuestionError> {
        Ok(store::game_kicked_off(tx, run.id).await?)
    }

    /// The earliest game time of `game`'s open questions (a move of the game `to` a time takes
    /// it as the game's start when no job of it is earlier).
    pub async fn earliest_of_game(
        &self,
        game: &str,
    ) -> Result<Option<DateTime<Utc>>, QuestionError> {
        Ok(store::question_earliest_of_game(self.client.pool(), game).await?)
    }

    /// The questions owning waiting jobs `filter` matches (their lock jobs): a shift of those
    /// jobs moves them through their question.
    pub async fn owning_jobs_matching(
        &self,
        filter: &JobFilter,
    ) -> Result<Vec<i64>, QuestionError> {
        let owners = self.client.owners_of_waiting(filter).await?;
        Ok(owners.iter().filter_map(|o| question_of_owner(o)).collect())
    }

    /// The questions owning any of the listed waiting jobs.
    pub async fn owning_jobs(&self, ids: &[JobId]) -> Result<Vec<i64>, QuestionError> {
        let owners = self.client.owners_of_waiting_ids(ids).await?;
        Ok(owners.iter().filter_map(|o| question_of_owner(o)).collect())
    }

    /// Deletes a question, its predictions, and cancels its pending jobs.
    pub async fn delete(&self, id: i64) -> Result<(), QuestionError> {
        in_transaction!(self, |tx| self.delete_with(tx, id))
    }

    /// [`Self::delete`] inside the caller's transaction.
    pub async fn delete_with(&self, tx: &mut PgConnection, id: i64) -> Result<(), QuestionError> {
        let q = store::question_get_for_update(&mut *tx, id)
            .await?
            .ok_or(QuestionError::NotFound(id))?;
        if let Some(job) = q.lock_job_id {
            self.client.cancel_with(&mut *tx, &[job]).await?;
        }
        store::question_delete(&mut *tx, id).await?;
        self.follow_game_run(&mut *tx, &q.game).await?;
        Ok(())
    }

    /// Records a player's prediction (or changes it) while the question is open.
    pub async fn predict(
        &self,
        id: i64,
        player: &str,
        choice: &str,
    ) -> Result<Prediction, QuestionError> {
        check_text("player", player, MAX_PLAYER_CHARS)?;
        if choice.contains('\0') || choice.chars().count() > MAX_CHOICE_CHARS {
            return Err(QuestionError::UnknownChoice(
                choice.replace('\0', "\u{FFFD}"),
            ));
        }
        if let Some(p) = store::prediction_upsert(&self.pool, id, player.trim(), choice).await? {
            return Ok(p);
        }
        let q = store::question_get(&self.pool, id)
            .await?
            .ok_or(QuestionError::NotFound(id))?;
        if !q.choices.iter().any(|c| c == choice) {
            return Err(QuestionError::UnknownChoice(choice.to_string()));
        }
        // Counted for the lock's proof; the refusal stands whether or not the count is written.
        if let Err(e) = store::question_count_refused(&self.pool, id).await {
            tracing::warn!(question = id, error = %e, "a refused prediction was not counted");
        }
        Err(QuestionError::PredictionsClosed)
    }

    /// Records the correct choice and starts the settle job, which scores every prediction.
    pub async fn settle(
        &self,
        id: i64,
        correct_choice: &str,
    ) -> Result<QuestionDetail, QuestionError> {
        in_transaction!(self, |tx| self.settle_with(tx, id, correct_choice))
    }

    /// [`Self::settle`] inside the caller's transaction.
    pub async fn settle_with(
        &self,
        tx: &mut PgConnection,
        id: i64,
        correct_choice: &str,
    ) -> Result<QuestionDetail, QuestionError> {
        let q = store::question_get_for_update(&mut *tx, id)
            .await?
            .ok_or(QuestionError::NotFound(id))?;
        if !q.choices.iter().any(|c| c == correct_choice) {
            return Err(QuestionError::UnknownChoice(correct_choice.to_string()));
        }
        if q.status == QuestionStatus::Settled || q.correct_choice.is_some() {
            return Err(QuestionError::Conflict(format!(
                "question {id} is already settled or settling"
            )));
        }
        if q.status == QuestionStatus::Open && !store::question_lock(&mut *tx, id).await? {
            return Err(QuestionError::Conflict(format!(
                "question {id} cannot be settled before its game time"
            )));
        }
        store::question_set_answer(&mut *tx, id, correct_choice).await?;
        self.client
            .insert_own_with(&mut *tx, &settle_job(id))
            .await?;
        get_with(tx, id).await
    }
}

/// A question's detail, read on `conn` (inside the caller's transaction, its changes included).
async fn get_with(conn: &mut PgConnection, id: i64) -> Result<QuestionDetail, QuestionError> {
    let question = store::question_get(&mut *conn, id)
        .await?
        .ok_or(QuestionError::NotFound(id))?;
    let counts = store::prediction_counts(&mut *conn, id).await?;
    let predictions = counts.iter().map(|c| c.predictions).sum();
    let lock_job = match question.lock_job_id {
        Some(job) => Client::find_with(&mut *conn, job).await?,
        None => None,
    };
    Ok(QuestionDetail {
        question,
        counts,
        predictions,
        lock_job,
    })
}

fn check_text(field: &'static str, value: &str, max: usize) -> Result<(), QuestionError> {
    if value.contains('\0') {
        return Err(invalid(field, "must not contain NUL characters"));
    }
    let n = value.trim().chars().count();
    if n == 0 || n > max {
        return Err(invalid(field, format!("must be 1 to {max} characters")));
    }
    Ok(())
}

/// What of a question cannot reach the database to be checked there: a NUL character, which
/// text cannot hold (PostgreSQL would refuse it without naming the field). The rest of a
/// question's rules are SQL's (`kickoff_check_question`).
fn refuse_nul(
    game: Option<&str>,
    prompt: Option<&str>,
    choices: Option<&[String]>,
) -> Result<(), QuestionError> {
    for (field, text) in [("game", game), ("prompt", prompt)] {
        if text.is_some_and(|t| t.contains('\0')) {
            return Err(invalid(field, "must not contain NUL characters"));
        }
    }
    if choices.is_some_and(|c| c.iter().any(|c| c.contains('\0'))) {
        return Err(invalid(
            "choices",
            format!("each choice is 1 to {MAX_CHOICE_CHARS} characters without outer spaces"),
        ));
    }
    Ok(())
}
