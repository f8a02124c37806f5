//! SQL of the `questions` and `predictions` tables.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, PgExecutor};

use crate::engine::JobId;

#[derive(
    schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, sqlx::Type,
)]
#[sqlx(type_name = "question_status", rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum QuestionStatus {
    /// Taking predictions until `game_time`. The lock job moves it to `locked`.
    Open,
    /// No more predictions. An operator's settle moves it to `settled` (through the settle job).
    Locked,
    /// Every prediction is scored. Final.
    Settled,
}

impl QuestionStatus {
    /// The name used in the database, the API and the UI.
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionStatus::Open => "open",
            QuestionStatus::Locked => "locked",
            QuestionStatus::Settled => "settled",
        }
    }
}

impl std::str::FromStr for QuestionStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "open" => Ok(QuestionStatus::Open),
            "locked" => Ok(QuestionStatus::Locked),
            "settled" => Ok(QuestionStatus::Settled),
            other => Err(format!(
                "unknown status `{other}`: use open, locked or settled"
            )),
        }
    }
}

#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Question {
    pub id: i64,
    pub game: String,
    pub prompt: String,
    pub choices: Vec<String>,
    pub game_time: DateTime<Utc>,
    pub status: QuestionStatus,
    pub locked_at: Option<DateTime<Utc>>,
    pub correct_choice: Option<String>,
    pub settled_at: Option<DateTime<Utc>>,
    pub lock_job_id: Option<JobId>,
    pub created_at: DateTime<Utc>,
    /// Predictions refused because the question had locked, or its game time had passed.
    #[sqlx(default)]
    pub refused_predictions: i64,
}

#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Prediction {
    pub question_id: i64,
    pub player: String,
    pub choice: String,
    pub at: DateTime<Utc>,
    pub correct: Option<bool>,
}

/// Predictions per choice, with how many were scored correct.
#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct ChoiceCount {
    pub choice: String,
    pub predictions: i64,
    pub correct: i64,
}

/// Creates a question of `game` with its lock job, and the game's live run follows it
/// (`kickoff_add_question`, migration `20261231000001_sql_actions.sql`: the one place a
/// question's creation and its rules are written, which an application calls from SQL too).
/// Refused (SQLSTATE class `KO`) as the SQL function refuses it; the lock job's kind must be one
/// of `kinds`, the kinds the caller's node runs, and it continues the trace of the span the call
/// runs in.
pub async fn question_add<'e>(
    db: impl PgExecutor<'e>,
    game: &str,
    prompt: &str,
    choices: &[String],
    game_time: DateTime<Utc>,
    kinds: &[&str],
) -> Result<Question, sqlx::Error> {
    sqlx::query_as("SELECT * FROM kickoff_add_question($1, $2, $3, $4, $5, $6)")
        .bind(game)
        .bind(prompt)
        .bind(choices)
        .bind(game_time)
        .bind(kinds)
        .bind(crate::telemetry::current_traceparent())
        .fetch_one(db)
        .await
}

/// The rules of a question's fields, those given (`kickoff_check_question`).
pub async fn question_check<'e>(
    db: impl PgExecutor<'e>,
    game: Option<&str>,
    prompt: Option<&str>,
    choices: Option<&[String]>,
    game_time: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT kickoff_check_question($1, $2, $3, $4)")
        .bind(game)
        .bind(prompt)
        .bind(choices)
        .bind(game_time)
        .execute(db)
        .await?;
    Ok(())
}

/// The live run of `game`'s workflow follows the earliest game time of its open questions
/// (`kickoff_game_follow`). Whether it moved.
pub async fn game_follow(tx: &mut PgConnection, game: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT kickoff_game_follow($1)")
        .bind(game)
        .fetch_one(tx)
        .await
}

/// Whether game run `run` locked its game (`kickoff_game_kicked_off`).
pub async fn game_kicked_off(tx: &mut PgConnection, run: i64) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT kickoff_game_kicked_off($1)")
        .bind(run)
        .fetch_one(tx)
        .await
}

pub async fn question_set_lock_job<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    job: JobId,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE questions SET lock_job_id = $2 WHERE id = $1")
        .bind(id)
        .bind(job)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn question_get<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<Option<Question>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM questions WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Reads a question and locks its row until the end of the transaction.
pub async fn question_get_for_update<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<Option<Question>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM questions WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Questions, upcoming first (by game time), optionally of one status.
pub async fn question_list<'e>(
    db: impl PgExecutor<'e>,
    status: Option<QuestionStatus>,
    limit: i64,
) -> Result<Vec<Question>, sqlx::Error> {
    sqlx::query_as(
        "SELECT * FROM questions WHERE ($1::question_status IS NULL OR status = $1)
         ORDER BY game_time, id LIMIT $2",
    )
    .bind(status)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Updates the editable fields that are given.
pub async fn question_update<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    prompt: Option<&str>,
    choices: Option<&[String]>,
    game_time: Option<DateTime<Utc>>,
) -> Result<Question, sqlx::Error> {
    sqlx::query_as(
        "UPDATE questions SET prompt = coalesce($2, prompt), choices = coalesce($3, choices),
                game_time = coalesce($4, game_time)
         WHERE id = $1 RETURNING *",
    )
    .bind(id)
    .bind(prompt)
    .bind(choices)
    .bind(game_time)
    .fetch_one(db)
    .await
}

pub async fn question_delete<'e>(db: impl PgExecutor<'e>, id: i64) -> Result<bool, sqlx::Error> {
    let r = sqlx::query("DELETE FROM questions WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// Locks an open question whose game time has come. Returns whether it changed (running it
/// again is harmless).
pub async fn question_lock<'e>(db: impl PgExecutor<'e>, id: i64) -> Result<bool, sqlx::Error> {
    let r = sqlx::query(
        "UPDATE questions SET status = 'locked', locked_at = now()
         WHERE id = $1 AND status = 'open' AND game_time <= now()",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Records the correct choice of a locked question (scoring is the settle job's).
pub async fn question_set_answer<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    choice: &str,
) -> Result<Question, sqlx::Error> {
    sqlx::query_as("UPDATE questions SET correct_choice = $2 WHERE id = $1 RETURNING *")
        .bind(id)
        .bind(choice)
        .fetch_one(db)
        .await
}

/// Counts a prediction the question refused because it had locked (or its game time passed).
pub async fn question_count_refused<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE questions SET refused_predictions = refused_predictions + 1 WHERE id = $1")
        .bind(id)
        .execute(db)
        .await
        .map(drop)
}

/// Marks a question settled once all its predictions are scored. Returns whether it changed.
pub async fn question_mark_settled<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<bool, sqlx::Error> {
    let r = sqlx::query(
        "UPDATE questions SET status = 'settled', settled_at = now()
         WHERE id = $1 AND status = 'locked' AND correct_choice IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM predictions WHERE question_id = $1 AND correct IS NULL)",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Inserts or changes a player's prediction while the question is open and its game time has not
/// come (by the database clock). The question row is share-locked, so a prediction cannot slip in
/// beside a lock that commits at the same moment. Returns `None` when refused.
pub async fn prediction_upsert<'e>(
    db: impl PgExecutor<'e>,
    question: i64,
    player: &str,
    choice: &str,
) -> Result<Option<Prediction>, sqlx::Error> {
    sqlx::query_as(
        "WITH q AS (
             SELECT id FROM questions
             WHERE id = $1 AND status = 'open' AND game_time > clock_timestamp() AND $3 = ANY (choices)
             FOR SHARE)
         INSERT INTO predictions (question_id, player, choice)
         SELECT id, $2, $3 FROM q
         ON CONFLICT (question_id, player) DO UPDATE SET choice = excluded.choice, at = now()
         RETURNING *",
    )
    .bind(question)
    .bind(player)
    .bind(choice)
    .fetch_optional(db)
    .await
}

pub async fn prediction_count<'e>(
    db: impl PgExecutor<'e>,
    question: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM predictions WHERE question_id = $1")
        .bind(question)
        .fetch_one(db)
        .await
}

/// Scores up to `limit` unscored predictions of a question. Returns how many were scored.
pub async fn prediction_score_batch<'e>(
    db: impl PgExecutor<'e>,
    question: i64,
    correct_choice: &str,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "UPDATE predictions SET correct = (choice = $2)
         WHERE question_id = $1 AND player IN (
             SELECT player FROM predictions WHERE question_id = $1 AND correct IS NULL
             LIMIT $3 FOR UPDATE SKIP LOCKED)",
    )
    .bind(question)
    .bind(correct_choice)
    .bind(limit)
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Predictions per choice of a question (every choice listed, with zeros).
pub async fn prediction_counts<'e>(
    db: impl PgExecutor<'e>,
    question: i64,
) -> Result<Vec<ChoiceCount>, sqlx::Error> {
    sqlx::query_as(
        "SELECT c.choice, count(p.player) AS predictions, count(p.player) FILTER (WHERE p.correct) AS correct
         FROM questions q
         CROSS JOIN LATERAL unnest(q.choices) WITH ORDINALITY AS c(choice, n)
         LEFT JOIN predictions p ON p.question_id = q.id AND p.choice = c.choice
         WHERE q.id = $1
         GROUP BY c.choice, c.n ORDER BY c.n",
    )
    .bind(question)
    .fetch_all(db)
    .await
}

/// How long until a question's game time, by the database clock (zero if it passed).
pub async fn question_time_to_game<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<f64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT greatest(extract(epoch FROM game_time - clock_timestamp())::float8, 0)
         FROM questions WHERE id = $1",
    )
    .bind(id)
    .fetch_one(db)
    .await
}

/// The open questions of `game` and those of `ids` that are open, locked for an update, by id.
pub async fn question_open_of_game(
    tx: &mut PgConnection,
    game: Option<&str>,
    ids: &[i64],
) -> Result<Vec<Question>, sqlx::Error> {
    sqlx::query_as(
        "SELECT * FROM questions WHERE status = 'open' AND (game = $1 OR id = ANY($2))
         ORDER BY id FOR UPDATE",
    )
    .bind(game)
    .bind(ids)
    .fetch_all(tx)
    .await
}

/// Holds `game`'s times until the transaction ends: a change of its questions' times and of its
/// run's each read what the one before committed (an advisory lock of the transaction).
pub async fn game_lock(tx: &mut PgConnection, game: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('kickoff:game:' || $1, 0))")
        .bind(game)
        .execute(tx)
        .await?;
    Ok(())
}

/// The earliest game time of the open questions of `game`.
pub async fn question_earliest_of_game<'e>(
    db: impl PgExecutor<'e>,
    game: &str,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar("SELECT min(game_time) FROM questions WHERE status = 'open' AND game = $1")
        .bind(game)
        .fetch_one(db)
        .await
}

/// Every question of `game`, by id.
pub async fn questions_of_game<'e>(
    db: impl PgExecutor<'e>,
    game: &str,
) -> Result<Vec<Question>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM questions WHERE game = $1 ORDER BY id")
        .bind(game)
        .fetch_all(db)
        .await
}

/// A player's standing in a game: predictions made and those correct.
#[derive(Debug, Clone, PartialEq, serde::Serialize, sqlx::FromRow)]
pub struct Standing {
    pub player: String,
    pub correct: i64,
    pub predicted: i64,
}

/// The players of `game` in share `share` of `shares` (by the md5 of their name: the same share
/// on any server and PostgreSQL version), after `after` by name, at most `limit`, each with
/// their standing: a page of a map step's task that tells each player how they did. Read from
/// each question's first `limit` players of the share after `after` (its primary key, in name
/// order: every one of the page's players is among the first of each question it predicted),
/// so that a page costs the same wherever it starts (3.6 ms for a page of 100 of 300,000
/// players over two questions, where a scan of the game took 200 ms).
pub async fn standings_of_share<'e>(
    db: impl PgExecutor<'e>,
    game: &str,
    share: i32,
    shares: i32,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<Standing>, sqlx::Error> {
    sqlx::query_as(
        "WITH page AS (
             SELECT DISTINCT c.player FROM questions q CROSS JOIN LATERAL (
                 SELECT p.player FROM predictions p
                 WHERE p.question_id = q.id AND p.player > coalesce($4::text, '')
                   AND ('x' || left(md5(p.player), 15))::bit(60)::bigint % $3 = $2
                 ORDER BY p.player LIMIT $5) c
             WHERE q.game = $1
             ORDER BY c.player LIMIT $5)
         SELECT page.player, count(*) FILTER (WHERE p.correct) AS correct, count(*) AS predicted
         FROM page CROSS JOIN questions q
         JOIN predictions p ON p.question_id = q.id AND p.player = page.player
         WHERE q.game = $1
         GROUP BY page.player ORDER BY page.player",
    )
    .bind(game)
    .bind(i64::from(share))
    .bind(i64::from(shares))
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The first `limit` players of `game` by correct predictions (then by name), and how many
/// players predicted at all.
pub async fn leaderboard<'e>(
    db: impl PgExecutor<'e> + Copy,
    game: &str,
    limit: i64,
) -> Result<(Vec<Standing>, i64), sqlx::Error> {
    let top = sqlx::query_as(
        "SELECT p.player, count(*) FILTER (WHERE p.correct) AS correct, count(*) AS predicted
         FROM predictions p JOIN questions q ON q.id = p.question_id
         WHERE q.game = $1
         GROUP BY p.player ORDER BY correct DESC, p.player LIMIT $2",
    )
    .bind(game)
    .bind(limit)
    .fetch_all(db)
    .await?;
    let players = sqlx::query_scalar(
        "SELECT count(DISTINCT p.player) FROM predictions p JOIN questions q ON q.id = p.question_id
         WHERE q.game = $1",
    )
    .bind(game)
    .fetch_one(db)
    .await?;
    Ok((top, players))
}
