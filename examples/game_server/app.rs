//! The game server's own code: its `games` table, its job kind, its routes, and Kickoff mounted
//! under `/kickoff`. `main.rs` runs it; `tests/it/embedded_app.rs` tests this same code.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use kickoff::embed::Kickoff;
use kickoff::engine::{
    BoxFuture, ClientError, JobContext, JobId, NewJob, OnConflict, WorkError, Worker,
};
use kickoff::questions::QuestionError;

/// The application's own table (Kickoff's tables are beside it, in the same database).
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS games (
    id bigserial PRIMARY KEY,
    name text NOT NULL,
    starts_at timestamptz NOT NULL,
    started_at timestamptz
);
ALTER TABLE games ADD COLUMN IF NOT EXISTS kick_off_job bigint,
                  ADD COLUMN IF NOT EXISTS question bigint;";

/// The game's own job kind: at its start time the game is marked started, in the transaction
/// that completes the job (exactly once, however many times the job is tried).
pub const KICK_OFF: &str = "game.kick_off";

pub struct KickOffWorker;

impl Worker for KickOffWorker {
    fn kind(&self) -> &'static str {
        KICK_OFF
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        match args.get("game_id").and_then(Value::as_i64) {
            Some(id) if id > 0 => Ok(()),
            _ => Err("args.game_id: a game's id".into()),
        }
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let game_id = ctx.job.args["game_id"].as_i64().unwrap_or_default();
            let mut tx = ctx.begin().await?;
            sqlx::query("UPDATE games SET started_at = now() WHERE id = $1 AND started_at IS NULL")
                .bind(game_id)
                .execute(&mut *tx)
                .await?;
            ctx.complete_with(tx).await
        })
    }
}

/// What the routes reach.
#[derive(Clone)]
pub struct Game {
    pub kickoff: Arc<Kickoff>,
}

/// The game's routes, and Kickoff's dashboard and API under `/kickoff`.
pub fn router(game: Game) -> Router {
    let kickoff = game.kickoff.router();
    Router::new()
        .route(
            "/",
            get(|| async { "A game server with Kickoff inside: /kickoff" }),
        )
        .route("/games", post(create_game))
        .route("/games/{id}", get(read_game).delete(call_off))
        .with_state(game)
        .merge(kickoff)
}

#[derive(Deserialize)]
struct NewGame {
    name: String,
    starts_at: DateTime<Utc>,
    /// A question about the game, locked at its start by Kickoff's own lock job.
    question: Option<NewQuestion>,
    /// Rolls the transaction back after everything was inserted (to see that nothing stays).
    #[serde(default)]
    roll_back: bool,
}

#[derive(Deserialize)]
struct NewQuestion {
    prompt: String,
    choices: Vec<String>,
}

type Answer = (StatusCode, Json<Value>);

fn refused(status: StatusCode, message: impl std::fmt::Display) -> Answer {
    (status, Json(json!({ "error": message.to_string() })))
}

/// Saves a game, its kick-off job and its question with the question's lock job: in one
/// transaction, all or nothing.
async fn create_game(State(game): State<Game>, Json(new): Json<NewGame>) -> Answer {
    let client = game.kickoff.client();
    let mut tx = match client.pool().begin().await {
        Ok(tx) => tx,
        Err(e) => return refused(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let id: i64 = match sqlx::query_scalar(
        "INSERT INTO games (name, starts_at) VALUES ($1, $2) RETURNING id",
    )
    .bind(&new.name)
    .bind(new.starts_at)
    .fetch_one(&mut *tx)
    .await
    {
        Ok(id) => id,
        Err(e) => return refused(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let job = NewJob::new(KICK_OFF, json!({ "game_id": id }))
        .at(new.starts_at)
        .with_unique_key(format!("game:{id}:kick_off"), OnConflict::Keep);
    let job = match client.insert_with(&mut tx, &job).await {
        Ok(inserted) => inserted.job,
        Err(e) if e.is_refusal() => return refused(StatusCode::UNPROCESSABLE_ENTITY, e),
        Err(e) => return refused(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let question = match &new.question {
        Some(q) => match game
            .kickoff
            .questions()
            .create_with(&mut tx, &new.name, &q.prompt, &q.choices, new.starts_at)
            .await
        {
            Ok(detail) => Some(detail.question.id),
            Err(e) => return refused(StatusCode::UNPROCESSABLE_ENTITY, e),
        },
        None => None,
    };
    // The game keeps what it made: calling it off cancels them.
    if let Err(e) = sqlx::query("UPDATE games SET kick_off_job = $2, question = $3 WHERE id = $1")
        .bind(id)
        .bind(job.id)
        .bind(question)
        .execute(&mut *tx)
        .await
    {
        return refused(StatusCode::SERVICE_UNAVAILABLE, e);
    }
    if new.roll_back {
        return match tx.rollback().await {
            Ok(()) => refused(
                StatusCode::CONFLICT,
                "rolled back as asked: nothing was saved",
            ),
            Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, e),
        };
    }
    match tx.commit().await {
        Ok(()) => (
            StatusCode::CREATED,
            Json(json!({ "id": id, "kick_off_job": job.id, "question": question })),
        ),
        Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// Calls off a game that has not started: its row deleted, its kick-off job cancelled (stopped on
/// its node if it is running right now), its question deleted with the job that would lock it; in
/// one transaction, all or nothing.
async fn call_off(State(game): State<Game>, Path(id): Path<i64>) -> Answer {
    let client = game.kickoff.client();
    let mut tx = match client.pool().begin().await {
        Ok(tx) => tx,
        Err(e) => return refused(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let made: Option<(Option<i64>, Option<i64>)> = match sqlx::query_as(
        "DELETE FROM games WHERE id = $1 AND started_at IS NULL RETURNING kick_off_job, question",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await
    {
        Ok(made) => made,
        Err(e) => return refused(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let Some((job, question)) = made else {
        // Started (its kick-off committed first: this statement waited for it), or none.
        let exists =
            sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT FROM games WHERE id = $1)")
                .bind(id)
                .fetch_one(&mut *tx)
                .await;
        return match exists {
            Ok(true) => refused(
                StatusCode::CONFLICT,
                format!("game {id} has started: too late to call it off"),
            ),
            Ok(false) => refused(StatusCode::NOT_FOUND, format!("no game {id}")),
            Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, e),
        };
    };
    if let Some(job) = job {
        match client.cancel_one_with(&mut tx, JobId(job)).await {
            // Finished as the game started meanwhile: its start stands, with this call-off.
            Ok(_) | Err(ClientError::Conflict(_) | ClientError::NotFound(_)) => {}
            Err(e) => return refused(StatusCode::SERVICE_UNAVAILABLE, e),
        }
    }
    if let Some(question) = question {
        match game
            .kickoff
            .questions()
            .delete_with(&mut tx, question)
            .await
        {
            Ok(()) | Err(QuestionError::NotFound(_)) => {}
            Err(e) => return refused(StatusCode::SERVICE_UNAVAILABLE, e),
        }
    }
    match tx.commit().await {
        Ok(()) => (
            StatusCode::OK,
            Json(json!({ "id": id, "called_off": true })),
        ),
        Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// A game's row: its name, when it starts, when it started.
type GameRow = (String, DateTime<Utc>, Option<DateTime<Utc>>);

async fn read_game(State(game): State<Game>, Path(id): Path<i64>) -> Answer {
    let row: Result<Option<GameRow>, _> =
        sqlx::query_as("SELECT name, starts_at, started_at FROM games WHERE id = $1")
            .bind(id)
            .fetch_optional(game.kickoff.client().pool().pool())
            .await;
    match row {
        Ok(Some((name, starts_at, started_at))) => (
            StatusCode::OK,
            Json(
                json!({ "id": id, "name": name, "starts_at": starts_at, "started_at": started_at }),
            ),
        ),
        Ok(None) => refused(StatusCode::NOT_FOUND, format!("no game {id}")),
        Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// The game's staff as an authenticating proxy in front of the game server names them (an
/// oauth2-proxy's `X-Forwarded-User`, say): the header `header` holds the name; the names in
/// `admins` are Kickoff's admins, the others its operators. Only behind such a proxy, which sets
/// the header itself and drops any a client sent.
pub struct ProxySignIn {
    pub header: axum::http::HeaderName,
    pub admins: Vec<String>,
}

impl kickoff::http::app_auth::Authenticate for ProxySignIn {
    fn caller<'a>(
        &'a self,
        request: &'a axum::http::request::Parts,
    ) -> BoxFuture<'a, Option<kickoff::http::app_auth::Caller>> {
        Box::pin(async move {
            let name = request.headers.get(&self.header)?.to_str().ok()?.trim();
            let role = if self.admins.iter().any(|a| a == name) {
                kickoff::accounts::Role::Admin
            } else {
                kickoff::accounts::Role::Operator
            };
            Some(kickoff::http::app_auth::Caller {
                name: name.to_string(),
                role,
            })
        })
    }
}
