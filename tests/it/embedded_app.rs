//! The example game server (`examples/game_server`), Kickoff inside it, on a database of its own
//! that Kickoff has not seen: its game, the game's kick-off job and its question with the lock job
//! are saved in one transaction (rolled back: none of them exists; committed: the job runs at the
//! game's time and marks the game started, the question locks), a restart of the application
//! loses nothing, and the dashboard and API mounted under `/kickoff` show the application's kind.

// The example's own code; what only its `main.rs` uses (the proxy's sign-in, tested in
// Chromium: `end2end/tests/game_server.test.mjs`) is not used here.
#[allow(dead_code)]
#[path = "../../examples/game_server/app.rs"]
mod game_server;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use chrono::Utc;
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;

use crate::common::dashboard::{send, send_for_session};
use crate::common::{empty_db, wait_for};
use kickoff::embed::{Kickoff, Options};
use kickoff::engine::{Db, EngineConfig, PoolMode};

const TOKEN: &str = "game-server-token";
const PASSWORD: &str = "the game's admin password";

/// The application as `main.rs` starts it (its queues, its kind beside Kickoff's), on `pool`.
async fn start(pool: &sqlx::PgPool) -> (Arc<Kickoff>, axum::Router) {
    sqlx::raw_sql(game_server::SCHEMA)
        .execute(pool)
        .await
        .unwrap();
    let mut options = Options::new("/kickoff");
    options.engine = EngineConfig {
        queues: vec![("default".into(), 4), ("questions".into(), 4)],
        shutdown_grace: Duration::from_secs(2),
        ..EngineConfig::default()
    };
    options.api_token = Some(TOKEN.into());
    options.admin_password = Some(PASSWORD.into());
    let mut workers = kickoff::workers::builtin(Vec::new());
    workers.register(game_server::KickOffWorker);
    let kickoff = Arc::new(
        Kickoff::start(Db::new(pool.clone(), PoolMode::Direct), workers, options)
            .await
            .unwrap(),
    );
    let router = game_server::router(game_server::Game {
        kickoff: kickoff.clone(),
    });
    (kickoff, router)
}

/// The application started on a database of its own, Kickoff never seen there.
async fn started_on(name: &str) -> (sqlx::PgPool, Arc<Kickoff>, axum::Router) {
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .connect_with(empty_db(name).await)
        .await
        .unwrap();
    let (kickoff, app) = start(&pool).await;
    (pool, kickoff, app)
}

async fn post_game(app: &axum::Router, body: Value) -> (StatusCode, Value) {
    let req = Request::post("/games")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let (status, _, body) = send(app, req).await;
    (status, serde_json::from_str(&body).unwrap())
}

/// Saves a game starting in `in_ms` with `question`: its id and its question's.
async fn save_game(app: &axum::Router, name: &str, in_ms: i64, question: &Value) -> (i64, i64) {
    let starts_at = Utc::now() + chrono::Duration::milliseconds(in_ms);
    let (status, body) = post_game(
        app,
        json!({"name": name, "starts_at": starts_at, "question": question}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    (
        body["id"].as_i64().unwrap(),
        body["question"].as_i64().unwrap(),
    )
}

async fn count(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

async fn started(pool: &sqlx::PgPool, game: i64) -> bool {
    sqlx::query_scalar("SELECT started_at IS NOT NULL FROM games WHERE id = $1")
        .bind(game)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn question_status(pool: &sqlx::PgPool, question: i64) -> String {
    sqlx::query_scalar("SELECT status::text FROM questions WHERE id = $1")
        .bind(question)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Waits for `game` to be started and its question `q` locked (each runs at the game's time).
async fn started_and_locked(pool: &sqlx::PgPool, game: i64, q: i64) {
    wait_for("the game to start", Duration::from_secs(15), || {
        started(pool, game)
    })
    .await;
    wait_for("the question to lock", Duration::from_secs(15), || async {
        question_status(pool, q).await == "locked"
    })
    .await;
}

/// A game called off before it starts takes its jobs with it, in the application's transaction:
/// its kick-off job cancelled, its question deleted and the question's lock job cancelled.
#[tokio::test]
async fn a_game_called_off_cancels_its_kick_off_and_its_questions_lock_in_one_transaction() {
    let (pool, kickoff, app) = started_on("game_server_off").await;
    let question = json!({"prompt": "First goal?", "choices": ["Bears", "Wolves"]});
    let (game, q) = save_game(&app, "Bears vs Wolves", 60_000, &question).await;
    let call_off = |id: i64| {
        let app = app.clone();
        async move {
            let req = Request::delete(format!("/games/{id}"))
                .body(Body::empty())
                .unwrap();
            send(&app, req).await
        }
    };
    let (status, _, body) = call_off(game).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(count(&pool, "SELECT count(*) FROM games").await, 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM questions").await,
        0,
        "question {q}"
    );
    let states: Vec<(String, String)> =
        sqlx::query_as("SELECT kind, state::text FROM jobs ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        states,
        [
            ("game.kick_off".to_string(), "cancelled".to_string()),
            ("lock_question".to_string(), "cancelled".to_string())
        ]
    );
    let (status, _, body) = call_off(game).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // A game that has started is too late to call off: refused, nothing changed.
    let (started_game, _) = save_game(&app, "Lions vs Tigers", 300, &question).await;
    wait_for("the game to start", Duration::from_secs(15), || {
        started(&pool, started_game)
    })
    .await;
    let (status, _, body) = call_off(started_game).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(started(&pool, started_game).await);
    drop(app);
    Arc::try_unwrap(kickoff)
        .ok()
        .expect("the only handle")
        .stop()
        .await;
}

#[tokio::test]
async fn a_game_and_its_jobs_commit_together_fire_at_its_time_and_survive_a_restart() {
    let (pool, kickoff, app) = started_on("game_server").await;
    let question = json!({"prompt": "First goal?", "choices": ["Bears", "Wolves"]});

    // Rolled back after the game, its kick-off job, its question and the lock job were
    // inserted: none of them exists.
    let (status, body) = post_game(
        &app,
        json!({"name": "Bears vs Wolves", "starts_at": Utc::now() + chrono::Duration::seconds(1),
               "question": question, "roll_back": true}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(count(&pool, "SELECT count(*) FROM games").await, 0);
    assert_eq!(count(&pool, "SELECT count(*) FROM jobs").await, 0);
    assert_eq!(count(&pool, "SELECT count(*) FROM questions").await, 0);
    // A refused question refuses the whole game: nothing half-written.
    let (status, body) = post_game(
        &app,
        json!({"name": "Bears vs Wolves", "starts_at": Utc::now() + chrono::Duration::seconds(60),
               "question": {"prompt": "First goal?", "choices": ["Bears"]}}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(count(&pool, "SELECT count(*) FROM games").await, 0);
    assert_eq!(count(&pool, "SELECT count(*) FROM jobs").await, 0);

    // Committed: at the game's time the game is started and its question locked.
    let (game, q) = save_game(&app, "Bears vs Wolves", 800, &question).await;
    assert!(!started(&pool, game).await);
    started_and_locked(&pool, game, q).await;

    // A game whose time comes while the application is down starts once it is back.
    let (game, q) = save_game(&app, "Lions vs Tigers", 1500, &question).await;
    drop(app);
    Arc::try_unwrap(kickoff)
        .ok()
        .expect("the only handle")
        .stop()
        .await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(
        !started(&pool, game).await,
        "started while the application was down"
    );
    let (kickoff, app) = start(&pool).await;
    started_and_locked(&pool, game, q).await;
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM jobs WHERE kind = 'game.kick_off' AND state = 'completed'"
        )
        .await,
        2
    );

    // The dashboard and the API under /kickoff know the application's kind.
    let req = Request::get("/kickoff/api/v1/jobs?kind=game.kick_off")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = send(&app, req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body.matches("\"kind\":\"game.kick_off\"").count(),
        2,
        "{body}"
    );
    let req = Request::post("/kickoff/_console/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!(
            "name=admin&password={}",
            PASSWORD.replace(' ', "+").replace('\'', "%27")
        )))
        .unwrap();
    let (status, _, body, cookie) = send_for_session(&app, req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let req = Request::get("/kickoff/jobs/new")
        .header(header::COOKIE, cookie.unwrap())
        .body(Body::empty())
        .unwrap();
    let (status, _, page) = send(&app, req).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"<option value="game.kick_off""#), "{page}");
    drop(app);
    Arc::try_unwrap(kickoff)
        .ok()
        .expect("the only handle")
        .stop()
        .await;
}
