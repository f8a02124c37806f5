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

/// A database, a receiver, an engine running the built-in kinds (calls to the receiver
/// allowed), its client and the questions' service.
async fn running() -> (
    crate::common::TestDb,
    Receiver,
    Engine,
    Client,
    QuestionService,
) {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let engine = engine(&db, &receiver).await;
    let client = engine.client();
    let questions = QuestionService::new(client.clone());
    (db, receiver, engine, client, questions)
}

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

/// The players the receiver was told about at `path` (`game.players` calls), sorted, once
/// `count` came: each with their correct and predicted counts.
async fn told_players(receiver: &Receiver, path: &str, count: usize) -> Vec<(String, i64, i64)> {
    let players = || -> Vec<(String, i64, i64)> {
        let mut all: Vec<(String, i64, i64)> = receiver
            .calls_to(path)
            .iter()
            .flat_map(|c| {
                let body: Value = serde_json::from_slice(&c.body).unwrap();
                assert_eq!(body["type"], "game.players", "{body}");
                body["players"].as_array().unwrap().clone()
            })
            .map(|p| {
                let n = |k: &str| p[k].as_i64().unwrap();
                (
                    p["player"].as_str().unwrap().to_string(),
                    n("correct"),
                    n("predicted"),
                )
            })
            .collect();
        all.sort();
        all
    };
    wait_for("every player told", Duration::from_secs(20), || async {
        players().len() >= count
    })
    .await;
    players()
}

/// A game of one question due in 1.2 s that `players` predicted (those `right` picks the
/// first choice, the others the second), its run started with `settings`, locked at its time
/// and sent its `final` result: the first choice. The run.
async fn game_told(
    client: &Client,
    questions: &QuestionService,
    game: &str,
    players: &[String],
    right: impl Fn(usize) -> bool,
    settings: GameWorkflowSettings,
) -> RunRow {
    let at = Utc::now() + chrono::Duration::milliseconds(1200);
    let choices = ["Home".to_string(), "Away".to_string()];
    let q = questions
        .create(game, "Who wins?", &choices, at)
        .await
        .unwrap()
        .question
        .id;
    for (i, p) in players.iter().enumerate() {
        let pick = &choices[usize::from(!right(i))];
        questions.predict(q, p, pick).await.unwrap();
    }
    let run = start(questions, client, game, settings).await;
    wait_for("the lock", Duration::from_secs(15), || async {
        step_state(client, run.id, "lock").await == "completed"
    })
    .await;
    let answers = json!({ "answers": { q.to_string(): "Home" } });
    client
        .signal_workflow(run.id, "final", &answers, "api")
        .await
        .unwrap();
    run
}

async fn step_state(client: &Client, run: i64, name: &str) -> String {
    let steps = client.workflow_steps(run).await.unwrap();
    steps.into_iter().find(|s| s.name == name).unwrap().state
}

#[tokio::test]
async fn a_game_locks_at_kickoff_settles_on_its_final_result_and_publishes_its_leaderboard() {
    let (_db, receiver, engine, client, questions) = running().await;
    let (first, over) = game_with_players(&questions, "Lions vs Bears").await;
    let run = start(
        &questions,
        &client,
        "Lions vs Bears",
        GameWorkflowSettings {
            notify_url: Some(receiver.url("/notify")),
            deadline_ms: None,
            ..Default::default()
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
    // Each player told how they did, once (the calls go through the webhooks queue, perhaps
    // after the run completed).
    let told = told_players(&receiver, "/notify", 3).await;
    assert_eq!(
        told,
        [("ana", 2, 2), ("ben", 1, 2), ("cem", 1, 2)].map(|(p, c, n)| (p.to_string(), c, n))
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
    let (_db, receiver, engine, client, questions) = running().await;
    let (first, _) = game_with_players(&questions, "Wolves vs Hawks").await;
    let run = start(
        &questions,
        &client,
        "Wolves vs Hawks",
        GameWorkflowSettings {
            notify_url: Some(receiver.url("/notify")),
            deadline_ms: Some(60_000),
            ..Default::default()
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

/// The output step `name`'s job recorded at its latest attempt (a snooze's included).
async fn last_output(db: &crate::common::TestDb, client: &Client, run: i64, name: &str) -> Value {
    let steps = client.workflow_steps(run).await.unwrap();
    let job = steps
        .iter()
        .find(|s| s.name == name)
        .unwrap()
        .job_id
        .unwrap();
    sqlx::query_scalar::<_, Option<Value>>(
        "SELECT output FROM job_attempts WHERE job_id = $1 ORDER BY id DESC LIMIT 1",
    )
    .bind(job.0)
    .fetch_one(&db.pool)
    .await
    .unwrap()
    .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_partner_asked_every_second_settles_the_game_with_its_final_answer() {
    let (db, receiver, engine, client, questions) = running().await;
    let (first, over) = game_with_players(&questions, "Bulls vs Rams").await;
    receiver.answer("/result", 200, r#"{"final": false, "score": "0-0"}"#);
    let run = start(
        &questions,
        &client,
        "Bulls vs Rams",
        GameWorkflowSettings {
            result_url: Some(receiver.url("/result")),
            poll_every_ms: Some(1_000),
            ..Default::default()
        },
    )
    .await;
    // Asked from the lock on, once a second, while the game goes on (the poll snoozes).
    wait_for("two polls", Duration::from_secs(15), || async {
        receiver.calls_to("/result").len() >= 2
    })
    .await;
    assert_eq!(step_state(&client, run.id, "lock").await, "completed");
    assert_eq!(step_state(&client, run.id, "settle").await, "blocked");
    assert_eq!(step_state(&client, run.id, "poll").await, "ready");
    let output = last_output(&db, &client, run.id, "poll").await;
    assert_eq!(output["last"], "not final yet", "{output}");
    // Waiting between polls spends no attempt: each is a snooze.
    let poll_job = client
        .workflow_steps(run.id)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "poll")
        .and_then(|s| s.job_id)
        .unwrap();
    // (Read between two polls: while one runs, its attempt counts.)
    let between = || async {
        sqlx::query_as::<_, (i32, Option<i64>)>(
            "SELECT attempt, (meta->>'snoozes')::bigint FROM jobs
             WHERE id = $1 AND state = 'scheduled'",
        )
        .bind(poll_job.0)
        .fetch_optional(&db.pool)
        .await
        .unwrap()
    };
    let mut seen = None;
    for _ in 0..1_000 {
        seen = between().await;
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (attempt, snoozes) = seen.expect("the poll between two calls within 10 s");
    assert_eq!(attempt, 0);
    assert!(snoozes >= Some(1), "{snoozes:?}");
    // A failing answer is asked again; a Retry-After is followed.
    receiver.answer("/result", 500, "down");
    let asked = receiver.calls_to("/result").len();
    wait_for("a poll answered 500", Duration::from_secs(10), || async {
        receiver.calls_to("/result").len() > asked
    })
    .await;
    receiver.answer_after("/result", 503, "busy", Some(3));
    // Every call from here on is answered 503 (the answer is read after the call is counted).
    let busy = receiver.calls_to("/result").len();
    wait_for("a poll answered 503", Duration::from_secs(10), || async {
        receiver.calls_to("/result").len() > busy
    })
    .await;
    // Final: the answer is the run's signal, the game settles.
    let answers = json!({ first.to_string(): "Lions", over.to_string(): "Yes" });
    receiver.answer(
        "/result",
        200,
        &json!({ "final": true, "answers": answers }).to_string(),
    );
    let done = settled(&client, run.id).await;
    assert_eq!(done.state, "completed");
    // Every poll a GET with its own webhook-id, a second apart at least, three after the 503.
    let polls = receiver.calls_to("/result");
    assert!(polls
        .iter()
        .all(|c| c.method == Method::GET && c.body.is_empty()));
    let mut ids: Vec<&str> = polls.iter().map(|c| c.header("webhook-id")).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), polls.len(), "an id each");
    for pair in polls.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(950), "{gap:?}");
    }
    let waited = polls[busy + 1].at - polls[busy].at;
    assert!(
        waited >= Duration::from_millis(2_900),
        "Retry-After 3: {waited:?}"
    );
    let signals = client.workflow_signals(run.id).await.unwrap();
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0].name, "final");
    assert_eq!(signals[0].source, format!("polled {}", receiver.addr.ip()));
    assert_eq!(signals[0].payload, json!({ "answers": answers }));
    for id in [first, over] {
        assert_eq!(
            questions.get(id).await.unwrap().question.status.as_str(),
            "settled"
        );
    }
    let steps = client.workflow_steps(run.id).await.unwrap();
    let poll = steps.iter().find(|s| s.name == "poll").unwrap();
    assert_eq!(poll.state, "completed");
    let output = poll.output.clone().unwrap();
    assert_eq!(output["final"], true, "{output}");
    assert_eq!(output["signal"], "stored", "{output}");
    // Every poll is a delivery of the step's job (the 500 with its error).
    let calls = receiver.calls_to("/result").len() as i64;
    let (recorded, failed): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE status = 500) FROM webhook_deliveries
         WHERE job_id = $1",
    )
    .bind(poll.job_id.unwrap().0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(recorded, calls);
    assert!(failed >= 1);
    engine.stop().await;
}

#[tokio::test]
async fn a_poll_stops_once_the_final_result_comes_another_way_and_fails_past_the_deadline() {
    let (_db, receiver, engine, client, questions) = running().await;
    let (first, _) = game_with_players(&questions, "Eels vs Cod").await;
    receiver.answer("/result", 200, r#"{"final": false}"#);
    // Asked once a minute: the run ends long before its next poll only if the settle wakes it.
    let settings = GameWorkflowSettings {
        result_url: Some(receiver.url("/result")),
        poll_every_ms: Some(60_000),
        ..Default::default()
    };
    let run = start(&questions, &client, "Eels vs Cod", settings).await;
    wait_for("a poll", Duration::from_secs(15), || async {
        !receiver.calls_to("/result").is_empty()
    })
    .await;
    // The partner's signed call (here the API) comes first: the poll stops at its next wake.
    let answers = json!({ "answers": { first.to_string(): "Lions" } });
    client
        .signal_workflow(run.id, "final", &answers, "endpoint:1")
        .await
        .unwrap();
    assert_eq!(settled(&client, run.id).await.state, "completed");
    let steps = client.workflow_steps(run.id).await.unwrap();
    let poll = steps.iter().find(|s| s.name == "poll").unwrap();
    assert_eq!(poll.state, "completed");
    let stopped = poll.output.clone().unwrap();
    assert!(
        stopped["stopped"]
            .as_str()
            .unwrap()
            .starts_with("the settle step is"),
        "{stopped}"
    );

    // A partner never final: past the settle's deadline the poll fails with it.
    questions
        .create(
            "Yaks vs Gnus",
            "Who wins?",
            &["Yaks".to_string(), "Gnus".to_string()],
            Utc::now() + chrono::Duration::milliseconds(1200),
        )
        .await
        .unwrap();
    let late = start(
        &questions,
        &client,
        "Yaks vs Gnus",
        GameWorkflowSettings {
            deadline_ms: Some(60_000),
            result_url: Some(receiver.url("/never")),
            ..Default::default()
        },
    )
    .await;
    let back = Utc::now() - chrono::Duration::minutes(3);
    client
        .move_workflow_times(late.id, &[("kickoff_at".to_string(), back)].into())
        .await
        .unwrap();
    assert_eq!(settled(&client, late.id).await.state, "failed");
    assert_eq!(step_state(&client, late.id, "settle").await, "failed");
    assert_eq!(step_state(&client, late.id, "poll").await, "failed");
    assert!(
        receiver.calls_to("/never").is_empty(),
        "no poll past the deadline"
    );
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
    let tries: [(&str, Option<&str>, Value, StatusCode); 10] = [
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
            path,
            Some(TOKEN),
            json!({ "notify_tasks": 0 }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            path,
            Some(TOKEN),
            json!({ "notify_batch": 1001 }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            path,
            Some(TOKEN),
            json!({ "result_url": "https://not-allowed.example/result" }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            path,
            Some(TOKEN),
            json!({ "poll_every_ms": 999 }),
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
    let made = &answers[8];
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
    assert_eq!(answers[9]["existing"], json!(true));
    assert_eq!(answers[9]["run"]["id"], made["run"]["id"]);
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
    assert_eq!(audited.len(), 10, "{audited:?}");
    assert_eq!(audited.iter().filter(|(_, ok)| *ok).count(), 2);
}

/// The notify step is a map step: each of its tasks tells a share of the players how they did,
/// a page of players a webhook call through the `webhooks` queue, handed over with the task's
/// cursor; every player is told once, the step's progress counts them, each call is a webhook
/// job with its delivery record, and the receiver's secret stays hidden from a reader of the
/// task's job.
#[tokio::test]
async fn the_notify_step_tells_every_player_once_in_pages_through_the_webhooks_queue() {
    let (db, receiver, engine, client, questions) = running().await;
    let players: Vec<String> = (0..37).map(|i| format!("player-{i:02}")).collect();
    let settings = GameWorkflowSettings {
        notify_url: Some(receiver.url("/players?token=hush")),
        notify_tasks: Some(3),
        notify_batch: Some(5),
        ..Default::default()
    };
    let game = "Rams vs Owls";
    let run = game_told(
        &client,
        &questions,
        game,
        &players,
        |i| i % 3 == 0,
        settings,
    )
    .await;
    assert_eq!(settled(&client, run.id).await.state, "completed");
    let told = told_players(&receiver, "/players", players.len()).await;
    let want: Vec<(String, i64, i64)> = players
        .iter()
        .enumerate()
        .map(|(i, p)| (p.clone(), i64::from(i % 3 == 0), 1))
        .collect();
    assert_eq!(told, want, "each player once, with how they did");
    let calls = receiver.calls_to("/players");
    for c in &calls {
        let body: Value = serde_json::from_slice(&c.body).unwrap();
        let n = body["players"].as_array().unwrap().len();
        assert!((1..=5).contains(&n), "a page of 1 to 5 players: {n}");
    }
    // Three shares, each paged by five: at least ceil(37 / 5) calls, at most that plus a short
    // page per share.
    assert!((8..=10).contains(&calls.len()), "{} calls", calls.len());
    let step = client
        .workflow_steps(run.id)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "notify")
        .unwrap();
    assert_eq!(
        (step.state.as_str(), step.tasks, step.tasks_done, step.items),
        ("completed", Some(3), 3, players.len() as i64)
    );
    // Each call a webhook job of the queue, recorded once its call ended.
    let calls_and_records = async || -> (i64, Vec<String>, i64) {
        sqlx::query_as(
            "SELECT count(*), array_agg(DISTINCT queue),
                    (SELECT count(*) FROM webhook_deliveries d JOIN jobs w ON w.id = d.job_id
                     WHERE w.kind = 'webhook')
             FROM jobs WHERE kind = 'webhook'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    wait_for("each call's record", Duration::from_secs(10), || async {
        let (jobs, _, delivered) = calls_and_records().await;
        delivered >= jobs
    })
    .await;
    let (jobs, queues, delivered) = calls_and_records().await;
    assert_eq!(
        (jobs, queues, delivered),
        (
            calls.len() as i64,
            vec!["webhooks".to_string()],
            calls.len() as i64
        )
    );
    // The task's job shows its receiver as a webhook's URL is shown: without the token.
    let task_job: i64 = sqlx::query_scalar("SELECT min(job_id) FROM workflow_tasks")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let viewer = kickoff::engine::sight::Sight {
        name: "someone-else",
        admin: false,
        reader: true,
        workers: client.workers(),
    };
    let job = client.get(kickoff::engine::JobId(task_job)).await.unwrap();
    let seen = viewer.args(&job);
    let url = seen["url"].as_str().unwrap();
    assert!(!url.contains("hush"), "{url}");
    engine.stop().await;
}

/// A notify task resumes where its last checkpoint left it (a crash after a page's commit): the
/// players before its cursor are not told again, the rest are, once; a paused `notify_players`
/// holds the step's tasks until the kind resumes.
#[tokio::test]
async fn a_notify_task_resumes_after_its_cursor() {
    let (db, receiver, engine, client, questions) = running().await;
    let players: Vec<String> = (0..20).map(|i| format!("player-{i:02}")).collect();
    client
        .pause_kind("notify_players", Some("ops"))
        .await
        .unwrap();
    let settings = GameWorkflowSettings {
        notify_url: Some(receiver.url("/players")),
        notify_tasks: Some(1),
        notify_batch: Some(3),
        ..Default::default()
    };
    let run = game_told(
        &client,
        &questions,
        "Elks vs Yaks",
        &players,
        |_| true,
        settings,
    )
    .await;
    wait_for(
        "the notify step's task",
        Duration::from_secs(15),
        || async {
            let tasks: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_tasks")
                .fetch_one(&db.pool)
                .await
                .unwrap();
            tasks == 1
        },
    )
    .await;
    // As an attempt that told the first ten and then died leaves it.
    sqlx::query("UPDATE workflow_tasks SET cursor = '{\"after\": \"player-09\"}', items = 10")
        .execute(&db.pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        receiver.calls_to("/players").is_empty(),
        "paused: no call yet"
    );
    assert_eq!(step_state(&client, run.id, "notify").await, "ready");
    client.resume_kind("notify_players").await.unwrap();
    assert_eq!(settled(&client, run.id).await.state, "completed");
    let told = told_players(&receiver, "/players", 10).await;
    let want: Vec<(String, i64, i64)> = players[10..].iter().map(|p| (p.clone(), 1, 1)).collect();
    assert_eq!(told, want, "the ten after the cursor, once each");
    let step = client
        .workflow_steps(run.id)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "notify")
        .unwrap();
    assert_eq!(step.items, 20, "ten before the crash, ten after");
    assert_eq!(
        receiver.calls_to("/players").len(),
        4,
        "pages of 3, 3, 3, 1"
    );
    engine.stop().await;
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

/// Creating a game's questions can start its workflow, in the question's transaction: the first
/// question starts the run, a later one keeps it (the run's kickoff following the earliest
/// question), and a run refused takes its question with it.
#[tokio::test]
async fn creating_a_question_can_start_its_games_run() {
    use chrono::{Duration as Span, SubsecRound};
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let t = (Utc::now() + Span::hours(3)).trunc_subsecs(3);
    let ask = |game: &str, at: chrono::DateTime<Utc>, workflow: Option<Value>| {
        let mut body = json!({ "game": game, "prompt": "Who wins?", "choices": ["Home", "Away"],
                               "game_time": at });
        if let Some(w) = workflow {
            body["workflow"] = w;
        }
        body
    };
    let post = async |body: Value| {
        call(
            &app,
            Method::POST,
            "/api/v1/questions",
            Some(TOKEN),
            Some(&body),
        )
        .await
    };
    let (status, first) = post(ask("Bees vs Ants", t, Some(json!({})))).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["workflow"]["existing"], json!(false), "{first}");
    let run = first["workflow"]["run"].as_i64().unwrap();
    let kickoff = async || -> chrono::DateTime<Utc> {
        let times: Value = sqlx::query_scalar("SELECT times FROM workflow_runs WHERE id = $1")
            .bind(run)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        serde_json::from_value(times["kickoff_at"].clone()).unwrap()
    };
    assert_eq!(kickoff().await, t);
    // An earlier question of the game, asking again: the same run, its kickoff the earlier one.
    let (status, second) = post(ask(
        "Bees vs Ants",
        t - Span::minutes(20),
        Some(json!({ "deadline_ms": 600_000 })),
    ))
    .await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(second["workflow"], json!({ "run": run, "existing": true }));
    assert_eq!(kickoff().await, t - Span::minutes(20));
    // Without `workflow`, none is started or named.
    let (status, plain) = post(ask("Cats vs Dogs", t, None)).await;
    assert_eq!(status, StatusCode::CREATED, "{plain}");
    assert!(plain.get("workflow").is_none(), "{plain}");
    // A run refused: its question is not created either.
    let refused = ask(
        "Elk vs Doe",
        t,
        Some(json!({ "notify_url": "https://not-allowed.example/hook" })),
    );
    let (status, answer) = post(refused).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["code"], "args_refused", "{answer}");
    let (questions, runs): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM questions WHERE game = 'Elk vs Doe'),
                (SELECT count(*) FROM workflow_runs)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((questions, runs), (0, 1));
}

/// Two questions of one game moved at once, each in its own transaction: the second reads what
/// the first committed (it waits for it), so the run's kickoff is the earliest of both new
/// times. Without that wait, each read the other's old time, and the kickoff stayed at one of
/// them (an hour before the game's first question).
#[tokio::test]
async fn two_questions_moved_at_once_leave_the_run_at_the_earliest() {
    use chrono::{Duration as Span, SubsecRound};
    let db = test_db().await;
    let client = Client::new(
        db.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(vec![])),
    );
    let questions = QuestionService::new(client.clone());
    let game = "Seals vs Orcas";
    let t = (Utc::now() + Span::hours(2)).trunc_subsecs(3);
    let choices = ["Seals".to_string(), "Orcas".to_string()];
    let mut ids = Vec::new();
    for at in [t, t + Span::hours(1)] {
        let q = questions
            .create(game, "Who wins?", &choices, at)
            .await
            .unwrap();
        ids.push(q.question.id);
    }
    let run = start(&questions, &client, game, GameWorkflowSettings::default()).await;
    // The first moves its question two hours later, and holds its transaction open.
    let mut first = db.pool.begin().await.unwrap();
    questions
        .update_with(&mut first, ids[0], None, None, Some(t + Span::hours(2)))
        .await
        .unwrap();
    // The second moves the other three hours later meanwhile.
    let second = tokio::spawn({
        let (questions, pool, id) = (questions.clone(), db.pool.clone(), ids[1]);
        async move {
            let mut tx = pool.begin().await.unwrap();
            questions
                .update_with(&mut tx, id, None, None, Some(t + Span::hours(3)))
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
    });
    wait_for(
        "the second to finish or to wait for the first",
        Duration::from_secs(10),
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap();
            second.is_finished() || waiting > 0
        },
    )
    .await;
    first.commit().await.unwrap();
    second.await.unwrap();
    let (kickoff, _, _) = game_times(&db.pool, run.id, game).await;
    assert_eq!(
        kickoff,
        (t + Span::hours(2)).format("%H:%M:%S%.3f").to_string()
    );
}

/// Once its lock ran, a move of a game's run changes its settle's deadline alone: a question
/// asked during the game keeps its time.
#[tokio::test]
async fn a_run_moved_after_its_lock_leaves_the_games_later_questions() {
    use chrono::Duration as Span;
    let (db, _receiver, engine, client, questions) = running().await;
    let choices = ["Bats".to_string(), "Owls".to_string()];
    let soon = Utc::now() + Span::milliseconds(1200);
    questions
        .create("Bats vs Owls", "Who scores first?", &choices, soon)
        .await
        .unwrap();
    let run = start(
        &questions,
        &client,
        "Bats vs Owls",
        GameWorkflowSettings::default(),
    )
    .await;
    wait_for("the lock", Duration::from_secs(15), || async {
        step_state(&client, run.id, "lock").await == "completed"
    })
    .await;
    let later = Utc::now() + Span::hours(1);
    let asked = questions
        .create("Bats vs Owls", "Who wins the second half?", &choices, later)
        .await
        .unwrap()
        .question;
    let kickoff =
        kickoff::questions::game_workflow::kickoff_of(&client.workflow_run(run.id).await.unwrap())
            .unwrap();
    let app = crate::common::app(&db.pool, TOKEN);
    let (status, answer) = call(
        &app,
        Method::POST,
        &format!("/api/v1/workflows/{}/times", run.id),
        Some(TOKEN),
        Some(&json!({ "times": { "kickoff_at": kickoff + Span::minutes(10) } })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let now = questions.get(asked.id).await.unwrap().question;
    assert_eq!(
        now.game_time, asked.game_time,
        "the later question kept its time"
    );
    engine.stop().await;
}

/// A game's run cancelled, its question moved meanwhile (no live run to follow it), then run
/// again from its lock: the new run kicks off at the question's time as it is now, not at the
/// time the first run kept.
#[tokio::test]
async fn a_game_run_run_again_follows_its_questions_as_they_are() {
    use chrono::{Duration as Span, SubsecRound};
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let client = Client::new(
        db.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(vec![])),
    );
    let questions = QuestionService::new(client.clone());
    let game = "Hens vs Ducks";
    let t = (Utc::now() + Span::hours(2)).trunc_subsecs(3);
    let choices = ["Hens".to_string(), "Ducks".to_string()];
    let q = questions
        .create(game, "Who wins?", &choices, t)
        .await
        .unwrap()
        .question;
    let run = start(&questions, &client, game, GameWorkflowSettings::default()).await;
    let send = async |method: Method, path: String, body: Option<Value>| {
        let (status, answer) = call(&app, method, &path, Some(TOKEN), body.as_ref()).await;
        assert!(status.is_success(), "{path}: {status} {answer}");
        answer
    };
    send(
        Method::POST,
        format!("/api/v1/workflows/{}/cancel", run.id),
        None,
    )
    .await;
    let sooner = t - Span::hours(1);
    send(
        Method::PATCH,
        format!("/api/v1/questions/{}", q.id),
        Some(json!({ "game_time": sooner })),
    )
    .await;
    let again = send(
        Method::POST,
        format!("/api/v1/workflows/{}/rerun", run.id),
        Some(json!({ "from": "lock" })),
    )
    .await;
    let new = again["run"]["id"].as_i64().unwrap();
    assert_ne!(new, run.id);
    let hm = |at: chrono::DateTime<Utc>| at.format("%H:%M:%S%.3f").to_string();
    let (kickoff, lock, _) = game_times(&db.pool, new, game).await;
    assert_eq!((kickoff, lock), (hm(sooner), hm(sooner)));
}
