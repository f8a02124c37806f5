//! The game's workflow, built in (issue 49): questions of a game and their players' predictions;
//! the run locks them at kickoff, waits for the final result, settles and scores every
//! prediction with it, notifies the receiver and publishes the leaderboard; a partner that never
//! answers fails the settle at its deadline and nothing after it runs; the REST route starts one
//! run per game, for operators, audited.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use chrono::Utc;
use serde_json::{json, Value};

use crate::common::receiver::Receiver;
use crate::common::rest::call;
use crate::common::{test_db, wait_for};
use kickoff::engine::workflow::RunRow;
use kickoff::engine::{Client, Engine, EngineConfig};
use kickoff::questions::game_workflow::GameWorkflowSettings;
use kickoff::questions::QuestionService;

async fn engine(db: &crate::common::TestDb, receiver: &Receiver) -> Engine {
    Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![receiver.addr.to_string()]),
        EngineConfig {
            queues: vec![
                ("default".into(), 4),
                ("questions".into(), 4),
                ("webhooks".into(), 2),
            ],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap()
}

/// Two questions of `game` a second from now, and three players' predictions.
async fn game_with_players(questions: &QuestionService, game: &str) -> (i64, i64) {
    let at = Utc::now() + chrono::Duration::milliseconds(1200);
    let ask = async |prompt: &str, choices: [&str; 2]| {
        let choices: Vec<String> = choices.iter().map(|c| c.to_string()).collect();
        questions
            .create(game, prompt, &choices, at)
            .await
            .unwrap()
            .question
            .id
    };
    let first = ask("Who scores first?", ["Lions", "Bears"]).await;
    let over = ask("Over 40 points?", ["Yes", "No"]).await;
    for (player, a, b) in [
        ("ana", "Lions", "Yes"),
        ("ben", "Bears", "Yes"),
        ("cem", "Lions", "No"),
    ] {
        questions.predict(first, player, a).await.unwrap();
        questions.predict(over, player, b).await.unwrap();
    }
    (first, over)
}

async fn start(
    questions: &QuestionService,
    client: &Client,
    game: &str,
    settings: GameWorkflowSettings,
) -> RunRow {
    let mut tx = client.pool().begin().await.unwrap();
    let run = questions
        .start_game_workflow_with(&mut tx, game, &settings, Some("ops"))
        .await
        .unwrap()
        .run;
    tx.commit().await.unwrap();
    run
}

async fn settled(client: &Client, run: i64) -> RunRow {
    wait_for("the run to settle", Duration::from_secs(30), || async {
        client.workflow_run(run).await.unwrap().state != "running"
    })
    .await;
    client.workflow_run(run).await.unwrap()
}

async fn step_state(client: &Client, run: i64, name: &str) -> String {
    let steps = client.workflow_steps(run).await.unwrap();
    steps.into_iter().find(|s| s.name == name).unwrap().state
}

#[tokio::test]
async fn a_game_locks_at_kickoff_settles_on_its_final_result_and_publishes_its_leaderboard() {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let engine = engine(&db, &receiver).await;
    let client = engine.client();
    let questions = QuestionService::new(client.clone());
    let (first, over) = game_with_players(&questions, "Lions vs Bears").await;
    let run = start(
        &questions,
        &client,
        "Lions vs Bears",
        GameWorkflowSettings {
            notify_url: Some(receiver.url("/notify")),
            deadline_ms: None,
        },
    )
    .await;
    assert_eq!(run.key.as_deref(), Some("game:Lions vs Bears"));
    // Locked at kickoff; the settle waits for the final result.
    wait_for(
        "the lock step to complete",
        Duration::from_secs(15),
        || async { step_state(&client, run.id, "lock").await == "completed" },
    )
    .await;
    for id in [first, over] {
        let q = questions.get(id).await.unwrap().question;
        assert_eq!(q.status.as_str(), "locked", "question {id}");
        assert!(q.locked_at.unwrap() >= q.game_time);
    }
    assert_eq!(step_state(&client, run.id, "settle").await, "blocked");
    let answers = json!({ "answers": { first.to_string(): "Lions", over.to_string(): "Yes" } });
    client
        .signal_workflow(run.id, "final", &answers, "endpoint:1")
        .await
        .unwrap();
    let done = settled(&client, run.id).await;
    assert_eq!(done.state, "completed");
    for id in [first, over] {
        assert_eq!(
            questions.get(id).await.unwrap().question.status.as_str(),
            "settled"
        );
    }
    let calls = receiver.calls_to("/notify");
    assert_eq!(calls.len(), 1, "notified once");
    let body: Value = serde_json::from_slice(&calls[0].body).unwrap();
    assert_eq!(
        body,
        json!({ "type": "game.settled", "game": "Lions vs Bears" })
    );
    let steps = client.workflow_steps(run.id).await.unwrap();
    let board = steps
        .iter()
        .find(|s| s.name == "leaderboard")
        .and_then(|s| s.output.clone())
        .unwrap();
    assert_eq!(
        board,
        json!({ "game": "Lions vs Bears", "players": 3, "top": [
            { "rank": 1, "player": "ana", "correct": 2, "predicted": 2 },
            { "rank": 2, "player": "ben", "correct": 1, "predicted": 2 },
            { "rank": 2, "player": "cem", "correct": 1, "predicted": 2 },
        ] })
    );
    engine.stop().await;
}

#[tokio::test]
async fn a_partner_that_never_answers_fails_the_settle_at_its_deadline_and_nothing_after_runs() {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let engine = engine(&db, &receiver).await;
    let client = engine.client();
    let questions = QuestionService::new(client.clone());
    let (first, _) = game_with_players(&questions, "Wolves vs Hawks").await;
    let run = start(
        &questions,
        &client,
        "Wolves vs Hawks",
        GameWorkflowSettings {
            notify_url: Some(receiver.url("/notify")),
            deadline_ms: Some(60_000),
        },
    )
    .await;
    // Kickoff a few minutes back: the deadline (kickoff + 1 minute) passed once the lock is done.
    let back = Utc::now() - chrono::Duration::minutes(3);
    client
        .move_workflow_times(run.id, &[("kickoff_at".to_string(), back)].into())
        .await
        .unwrap();
    let done = settled(&client, run.id).await;
    assert_eq!(done.state, "failed");
    let states: Vec<(String, String)> = client
        .workflow_steps(run.id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.state))
        .collect();
    assert_eq!(
        states,
        [
            ("lock", "completed"),
            ("settle", "failed"),
            ("notify", "failed"),
            ("leaderboard", "failed"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    assert!(receiver.calls_to("/notify").is_empty(), "no notification");
    let q = questions.get(first).await.unwrap().question;
    assert_eq!(q.status.as_str(), "locked", "locked, never settled");
    engine.stop().await;
}

const TOKEN: &str = "test-token-123";

#[tokio::test]
async fn the_api_starts_one_run_per_game_for_operators_audited() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let client = Client::new(
        db.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(vec![])),
    );
    let questions = QuestionService::new(client);
    game_with_players(&questions, "Owls vs Cats").await;
    let path = "/api/v1/games/Owls%20vs%20Cats/workflow";
    let viewer =
        crate::common::operator_token_of(&db.pool, "reader", kickoff::accounts::TokenScope::Read)
            .await;
    let tries: [(&str, Option<&str>, Value, StatusCode); 6] = [
        (path, Some(&viewer), json!({}), StatusCode::FORBIDDEN),
        (
            path,
            Some(TOKEN),
            json!({ "deadline_ms": 5 }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            path,
            Some(TOKEN),
            json!({ "notify_url": "https://not-allowed.example/hook" }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "/api/v1/games/Nobody/workflow",
            Some(TOKEN),
            json!({}),
            StatusCode::CONFLICT,
        ),
        (path, Some(TOKEN), json!({}), StatusCode::CREATED),
        (
            path,
            Some(TOKEN),
            json!({ "deadline_ms": 600_000 }),
            StatusCode::OK,
        ),
    ];
    let mut answers = Vec::new();
    for (path, token, body, want) in tries {
        let (status, answer) = call(&app, Method::POST, path, token, Some(&body)).await;
        assert_eq!(status, want, "{path} {body}: {answer}");
        answers.push(answer);
    }
    let made = &answers[4];
    assert_eq!(made["run"]["name"], "game");
    assert_eq!(made["run"]["key"], "game:Owls vs Cats");
    let names: Vec<&str> = made["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["lock", "settle", "leaderboard"],
        "no receiver: no notify"
    );
    assert!(
        made["steps"][1]["waits"]
            .as_str()
            .unwrap()
            .contains("1 of its 1"),
        "{made}"
    );
    assert_eq!(answers[5]["existing"], json!(true));
    assert_eq!(answers[5]["run"]["id"], made["run"]["id"]);
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_runs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(runs, 1, "the refusals wrote nothing");
    let audited: Vec<(String, bool)> = sqlx::query_as(
        "SELECT actor, ok FROM audit_log WHERE action = 'api.POST /games/{game}/workflow' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(audited.len(), 6, "{audited:?}");
    assert_eq!(audited.iter().filter(|(_, ok)| *ok).count(), 2);
}

/// The game's times as stored: its run's `kickoff_at`, the due time of its `lock` step's job,
/// and each question's game time with its lock job's due time, by id.
async fn game_times(
    pool: &kickoff::engine::Db,
    run: i64,
    game: &str,
) -> (String, String, Vec<(String, String)>) {
    let text = "to_char(%s AT TIME ZONE 'UTC', 'HH24:MI:SS.MS')";
    let (kickoff, lock): (String, String) = sqlx::query_as(&format!(
        "SELECT r.times ->> 'kickoff_at', {}
         FROM workflow_runs r JOIN workflow_steps s ON s.run_id = r.id AND s.name = 'lock'
         JOIN jobs j ON j.id = s.job_id WHERE r.id = $1",
        text.replace("%s", "j.scheduled_at")
    ))
    .bind(run)
    .fetch_one(pool)
    .await
    .unwrap();
    let kickoff: chrono::DateTime<Utc> = kickoff.parse().unwrap();
    let questions: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT {}, {} FROM questions q JOIN jobs j ON j.id = q.lock_job_id
         WHERE q.game = $1 ORDER BY q.id",
        text.replace("%s", "q.game_time"),
        text.replace("%s", "j.scheduled_at")
    ))
    .bind(game)
    .fetch_all(pool)
    .await
    .unwrap();
    (kickoff.format("%H:%M:%S%.3f").to_string(), lock, questions)
}

/// A postponed game moves as one, whichever of its parts an operator moves: a question's new
/// game time moves its game's run (its kickoff, the lock's job); a move of the run moves the
/// game's open questions and their lock jobs by as much, in the same transaction; a move either
/// side refuses moves nothing; a shift of jobs with the game moves each once (a step's job goes
/// with its run, not a second time with the jobs); a question deleted leaves the run at the
/// earliest of the others.
#[tokio::test]
async fn a_game_and_its_run_move_together() {
    use chrono::{Duration as Span, SubsecRound};
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let client = Client::new(
        db.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(vec![])),
    );
    let questions = QuestionService::new(client.clone());
    let game = "Hawks vs Foxes";
    let t = (Utc::now() + Span::hours(2)).trunc_subsecs(3);
    let hm = |at: chrono::DateTime<Utc>| at.format("%H:%M:%S%.3f").to_string();
    let choices = ["Hawks".to_string(), "Foxes".to_string()];
    let first = questions
        .create(game, "Who scores first?", &choices, t)
        .await
        .unwrap()
        .question
        .id;
    let later = questions
        .create(
            game,
            "Who wins the second half?",
            &choices,
            t + Span::minutes(10),
        )
        .await
        .unwrap()
        .question
        .id;
    let run = start(&questions, &client, game, GameWorkflowSettings::default()).await;
    let at = |m: i64| hm(t + Span::minutes(m));
    let pairs = |a: i64, b: i64| vec![(at(a), at(a)), (at(b), at(b))];
    assert_eq!(
        game_times(&db.pool, run.id, game).await,
        (at(0), at(0), pairs(0, 10))
    );
    // A question moved later: the run's kickoff follows the earliest question left.
    let (status, answer) = call(
        &app,
        Method::PATCH,
        &format!("/api/v1/questions/{first}"),
        Some(TOKEN),
        Some(&json!({ "game_time": t + Span::minutes(30) })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        game_times(&db.pool, run.id, game).await,
        (at(10), at(10), pairs(30, 10))
    );
    // The run moved an hour later: its questions and their lock jobs by as much.
    let times = format!("/api/v1/workflows/{}/times", run.id);
    let (status, answer) = call(
        &app,
        Method::POST,
        &times,
        Some(TOKEN),
        Some(&json!({ "times": { "kickoff_at": t + Span::minutes(70) } })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        game_times(&db.pool, run.id, game).await,
        (at(70), at(70), pairs(90, 70))
    );
    // Moved into the past: the questions refuse it, and nothing moves.
    let (status, answer) = call(
        &app,
        Method::POST,
        &times,
        Some(TOKEN),
        Some(&json!({ "times": { "kickoff_at": Utc::now() - Span::minutes(5) } })),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["code"], "out_of_window", "{answer}");
    assert_eq!(
        game_times(&db.pool, run.id, game).await,
        (at(70), at(70), pairs(90, 70))
    );
    // A shift of the game's jobs with the game: ten minutes for each, once.
    let max_id: i64 = sqlx::query_scalar("SELECT max(id) FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let (status, answer) = call(
        &app,
        Method::POST,
        "/api/v1/jobs/shift",
        Some(TOKEN),
        Some(
            &json!({ "filter": { "args": { "game": game }, "max_id": max_id },
                      "by_ms": 600_000, "game": game }),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        game_times(&db.pool, run.id, game).await,
        (at(80), at(80), pairs(100, 80))
    );
    // The earliest question deleted: the run's kickoff is the other's.
    let (status, answer) = call(
        &app,
        Method::DELETE,
        &format!("/api/v1/questions/{later}"),
        Some(TOKEN),
        None,
    )
    .await;
    assert!(status.is_success(), "{status} {answer}");
    let (kickoff, lock, _) = game_times(&db.pool, run.id, game).await;
    assert_eq!((kickoff, lock), (at(100), at(100)));
    let audited: Vec<(String, bool)> = sqlx::query_as(
        "SELECT action, ok FROM audit_log WHERE action LIKE 'api.POST /workflows/%' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        audited,
        [
            ("api.POST /workflows/{id}/times".to_string(), true),
            ("api.POST /workflows/{id}/times".to_string(), false)
        ]
    );
}
