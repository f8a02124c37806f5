//! Game questions against real PostgreSQL: the question and its lock job are atomic, the lock fires
//! at game time, late predictions are refused even with no engine running, settling scores once.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::{state_of, test_db, wait_for};
use kickoff::engine::{Client, Engine, EngineConfig, JobState, Workers};
use kickoff::questions::{QuestionError, QuestionService, QuestionStatus};

fn choices() -> Vec<String> {
    vec!["Lions".into(), "Tigers".into(), "Nobody".into()]
}

fn in_ms(ms: i64) -> DateTime<Utc> {
    Utc::now() + chrono::Duration::milliseconds(ms)
}

fn service(pool: &kickoff::engine::Db) -> QuestionService {
    let workers = kickoff::workers::builtin(vec![]);
    QuestionService::new(Client::new(pool.clone(), Arc::new(workers)))
}

fn engine_config() -> EngineConfig {
    EngineConfig {
        queues: vec![("questions".into(), 10)],
        ..EngineConfig::default()
    }
}

async fn count(pool: &kickoff::engine::Db, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_question_and_its_lock_job_are_created_together() {
    let db = test_db().await;
    let q = service(&db.pool)
        .create(
            "Lions vs Tigers",
            "Who scores first?",
            &choices(),
            in_ms(60_000),
        )
        .await
        .unwrap();
    let job = q.lock_job.expect("the lock job exists");
    assert_eq!(job.kind, "lock_question");
    assert_eq!(job.state, JobState::Scheduled);
    assert_eq!(job.scheduled_at, q.question.game_time);
    assert_eq!(
        job.unique_key.as_deref(),
        Some(format!("lock_question:{}", q.question.id).as_str())
    );
}

#[tokio::test]
async fn a_failed_create_leaves_neither_question_nor_job() {
    let db = test_db().await;
    // A node without the lock_question worker cannot insert the job: the question rolls back too.
    let broken = QuestionService::new(Client::new(db.pool.clone(), Arc::new(Workers::new())));
    let err = broken
        .create(
            "Lions vs Tigers",
            "Who scores first?",
            &choices(),
            in_ms(60_000),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, QuestionError::Client(_)), "{err}");
    assert_eq!(count(&db.pool, "questions").await, 0);
    assert_eq!(count(&db.pool, "jobs").await, 0);
}

#[tokio::test]
async fn the_lock_fires_at_game_time_and_predictions_are_then_refused() {
    let db = test_db().await;
    let svc = service(&db.pool);
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![]),
        engine_config(),
    )
    .await
    .unwrap();
    let q = svc
        .create(
            "Lions vs Tigers",
            "Who scores first?",
            &choices(),
            in_ms(1_000),
        )
        .await
        .unwrap()
        .question;
    svc.predict(q.id, "ada", "Lions").await.unwrap();
    // A player may change their mind while the question is open.
    let changed = svc.predict(q.id, "ada", "Tigers").await.unwrap();
    assert_eq!(changed.choice, "Tigers");
    wait_for("the question to lock", Duration::from_secs(10), || async {
        svc.get(q.id).await.unwrap().question.status == QuestionStatus::Locked
    })
    .await;
    let locked = svc.get(q.id).await.unwrap();
    assert!(
        locked.question.locked_at.unwrap() >= locked.question.game_time,
        "never before game time"
    );
    assert_eq!(locked.lock_job.unwrap().state, JobState::Completed);
    assert!(matches!(
        svc.predict(q.id, "bob", "Lions").await,
        Err(QuestionError::PredictionsClosed)
    ));
    assert_eq!(locked.predictions, 1);
    // Refusals are counted on the question (an unknown choice is no refusal of the lock's).
    assert!(matches!(
        svc.predict(q.id, "cy", "Tigers").await,
        Err(QuestionError::PredictionsClosed)
    ));
    assert!(matches!(
        svc.predict(q.id, "cy", "Bears").await,
        Err(QuestionError::UnknownChoice(_))
    ));
    assert_eq!(svc.get(q.id).await.unwrap().question.refused_predictions, 2);
    assert_eq!(locked.question.refused_predictions, 0);
    engine.stop().await;
}

#[tokio::test]
async fn a_prediction_just_after_game_time_is_refused_even_with_no_engine() {
    let db = test_db().await;
    let svc = service(&db.pool);
    let q = svc
        .create(
            "Lions vs Tigers",
            "Who scores first?",
            &choices(),
            // Room for the create and the first prediction on a loaded machine (300 ms was not).
            in_ms(1500),
        )
        .await
        .unwrap()
        .question;
    svc.predict(q.id, "early", "Lions").await.unwrap();
    // Wait until the database clock has passed game time by a millisecond.
    wait_for("game time to pass", Duration::from_secs(5), || async {
        let past: bool =
            sqlx::query_scalar("SELECT clock_timestamp() >= $1 + interval '1 millisecond'")
                .bind(q.game_time)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        past
    })
    .await;
    assert!(matches!(
        svc.predict(q.id, "late", "Lions").await,
        Err(QuestionError::PredictionsClosed)
    ));
    // The timer never ran: the question is still open in the table, and still closed to players.
    assert_eq!(
        svc.get(q.id).await.unwrap().question.status,
        QuestionStatus::Open
    );
}

#[tokio::test]
async fn changing_game_time_moves_the_one_lock_job() {
    let db = test_db().await;
    let svc = service(&db.pool);
    let q = svc
        .create(
            "Lions vs Tigers",
            "Who scores first?",
            &choices(),
            in_ms(60_000),
        )
        .await
        .unwrap();
    let later = in_ms(3_600_000);
    let moved = svc
        .update(q.question.id, None, None, Some(later))
        .await
        .unwrap();
    let job = moved.lock_job.unwrap();
    assert_eq!(job.id, q.lock_job.unwrap().id, "the same job");
    assert_eq!(
        job.scheduled_at.timestamp_micros(),
        later.timestamp_micros()
    );
    assert_eq!(count(&db.pool, "jobs").await, 1);
    // Deleting the question cancels its job.
    svc.delete(q.question.id).await.unwrap();
    assert_eq!(state_of(&db.pool, job.id).await, JobState::Cancelled);
    assert!(matches!(
        svc.get(q.question.id).await,
        Err(QuestionError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_question_whose_time_passed_reopens_when_moved_ahead_before_it_locked() {
    let db = test_db().await;
    let svc = service(&db.pool);
    let q = svc
        .create(
            "Lions vs Tigers",
            "Who scores first?",
            &choices(),
            in_ms(200),
        )
        .await
        .unwrap()
        .question;
    wait_for("game time to pass", Duration::from_secs(5), || async {
        matches!(
            svc.predict(q.id, "p", "Lions").await,
            Err(QuestionError::PredictionsClosed)
        )
    })
    .await;
    svc.update(q.id, None, None, Some(in_ms(60_000)))
        .await
        .unwrap();
    svc.predict(q.id, "p", "Lions").await.unwrap();
}

#[tokio::test]
async fn settling_scores_every_prediction_once() {
    let db = test_db().await;
    let svc = service(&db.pool);
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![]),
        engine_config(),
    )
    .await
    .unwrap();
    let q = svc
        .create(
            "Lions vs Tigers",
            "Who scores first?",
            &choices(),
            in_ms(1500),
        )
        .await
        .unwrap()
        .question;
    assert!(
        matches!(
            svc.settle(q.id, "Lions").await,
            Err(QuestionError::Conflict(_))
        ),
        "not before game time"
    );
    // 2,500 players (more than two scoring batches), a third of them right.
    sqlx::query(
        "INSERT INTO predictions (question_id, player, choice)
         SELECT $1, 'player' || i, (ARRAY['Lions', 'Tigers', 'Nobody'])[i % 3 + 1]
         FROM generate_series(0, 2499) AS i",
    )
    .bind(q.id)
    .execute(&db.pool)
    .await
    .unwrap();
    wait_for("the lock", Duration::from_secs(10), || async {
        svc.get(q.id).await.unwrap().question.status == QuestionStatus::Locked
    })
    .await;
    assert!(matches!(
        svc.settle(q.id, "Bears").await,
        Err(QuestionError::UnknownChoice(_))
    ));
    svc.settle(q.id, "Lions").await.unwrap();
    assert!(
        matches!(
            svc.settle(q.id, "Lions").await,
            Err(QuestionError::Conflict(_))
        ),
        "a double settle"
    );
    wait_for("the settle job", Duration::from_secs(20), || async {
        svc.get(q.id).await.unwrap().question.status == QuestionStatus::Settled
    })
    .await;
    let done = svc.get(q.id).await.unwrap();
    let lions = done.counts.iter().find(|c| c.choice == "Lions").unwrap();
    assert_eq!((lions.predictions, lions.correct), (834, 834));
    assert!(done
        .counts
        .iter()
        .filter(|c| c.choice != "Lions")
        .all(|c| c.correct == 0));
    // Running the settle job again (an operator's rerun) scores nothing twice.
    let settle_job: i64 = sqlx::query_scalar("SELECT id FROM jobs WHERE kind = 'settle_question'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    engine
        .client()
        .retry(kickoff::engine::JobId(settle_job))
        .await
        .unwrap();
    wait_for("the rerun", Duration::from_secs(10), || async {
        state_of(&db.pool, kickoff::engine::JobId(settle_job)).await == JobState::Completed
    })
    .await;
    let again = svc.get(q.id).await.unwrap();
    assert_eq!(again.counts, done.counts);
    let scored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM predictions WHERE correct IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(scored, 2500);
    engine.stop().await;
}

async fn call(
    app: &axum::Router,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    crate::common::rest::call(app, method, path, Some("t"), body.as_ref()).await
}

#[tokio::test]
async fn the_questions_api_refuses_bad_input_clearly() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, "t");
    let ahead = in_ms(3_600_000).to_rfc3339();
    let past = in_ms(-60_000).to_rfc3339();
    let far = in_ms(1000 * 86_400_000).to_rfc3339();
    // A time too far from now has its own code: no schema can state the clock's rule.
    let bad = [
        (
            json!({"game": "", "prompt": "p", "choices": ["a", "b"], "game_time": ahead}),
            "invalid",
        ),
        (
            json!({"game": "g", "prompt": "p", "choices": ["a"], "game_time": ahead}),
            "invalid",
        ),
        (
            json!({"game": "g", "prompt": "p", "choices": ["a", "a"], "game_time": ahead}),
            "invalid",
        ),
        (
            json!({"game": "g", "prompt": "p", "choices": ["a", " b"], "game_time": ahead}),
            "invalid",
        ),
        (
            json!({"game": "g", "prompt": "p", "choices": ["a", "b"], "game_time": past}),
            "out_of_window",
        ),
        (
            json!({"game": "g", "prompt": "p", "choices": ["a", "b"], "game_time": far}),
            "out_of_window",
        ),
        (
            json!({"game": "g", "prompt": "p", "choices": ["a", "b"], "game_time": "at kickoff"}),
            "invalid",
        ),
        (
            json!({"game": "g", "prompt": "p", "choices": ["a", "b"]}),
            "invalid",
        ),
        (
            json!({"game": "g", "prompt": "p", "choices": ["a", "b"], "game_time": ahead, "extra": 1}),
            "invalid",
        ),
    ];
    for (body, code) in bad {
        let (s, b) = call(&app, Method::POST, "/api/v1/questions", Some(body.clone())).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body} -> {b}");
        assert_eq!(b["error"]["code"], code, "{body} -> {b}");
    }
    assert_eq!(count(&db.pool, "questions").await, 0);

    let (s, b) = call(
        &app,
        Method::POST,
        "/api/v1/questions",
        Some(json!({"game": "Lions vs Tigers", "prompt": "First to score?", "choices": ["Lions", "Tigers"], "game_time": ahead})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let id = b["id"].as_i64().unwrap();
    assert_eq!(b["lock_job"]["state"], "scheduled");

    let pred = format!("/api/v1/questions/{id}/predictions");
    let (s, b) = call(
        &app,
        Method::POST,
        &pred,
        Some(json!({"player": "ada", "choice": "Bears"})),
    )
    .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("unknown_choice"))
    );
    let (s, b) = call(
        &app,
        Method::POST,
        &pred,
        Some(json!({"player": "", "choice": "Lions"})),
    )
    .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid"))
    );
    let (s, _) = call(
        &app,
        Method::POST,
        &pred,
        Some(json!({"player": "ada", "choice": "Lions"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, b) = call(
        &app,
        Method::POST,
        "/api/v1/questions/999999/predictions",
        Some(json!({"player": "a", "choice": "Lions"})),
    )
    .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (s, b) = call(&app, Method::GET, "/api/v1/questions/abc", None).await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    // Choices cannot change once someone predicted.
    let (s, b) = call(
        &app,
        Method::PATCH,
        &format!("/api/v1/questions/{id}"),
        Some(json!({"choices": ["x", "y"]})),
    )
    .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict"))
    );
    // Settling before game time is a conflict.
    let (s, b) = call(
        &app,
        Method::POST,
        &format!("/api/v1/questions/{id}/settle"),
        Some(json!({"correct_choice": "Lions"})),
    )
    .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict"))
    );
    let (s, b) = call(&app, Method::GET, "/api/v1/questions?status=upcoming", None).await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid"))
    );
    let (s, b) = call(&app, Method::GET, "/api/v1/questions?status=open", None).await;
    assert_eq!(
        (s, b.as_array().map(|a| a.len())),
        (StatusCode::OK, Some(1))
    );
    let (s, b) = call(&app, Method::GET, &format!("/api/v1/questions/{id}"), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        b["counts"][0],
        json!({"choice": "Lions", "predictions": 1, "correct": 0})
    );
    let (s, b) = call(
        &app,
        Method::PATCH,
        &format!("/api/v1/questions/{id}"),
        Some(json!({ "game_time": past })),
    )
    .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("out_of_window"))
    );
    let (s, b) = call(
        &app,
        Method::PATCH,
        "/api/v1/questions/424242",
        Some(json!({ "prompt": "x" })),
    )
    .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (s, b) = call(
        &app,
        Method::POST,
        "/api/v1/questions/424242/settle",
        Some(json!({ "correct_choice": "Lions" })),
    )
    .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (s, b) = call(
        &app,
        Method::POST,
        &format!("/api/v1/questions/{id}/settle"),
        Some(json!({ "correct_choice": "Bears" })),
    )
    .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("unknown_choice"))
    );
    let res = app
        .clone()
        .oneshot(
            Request::post(pred.as_str())
                .header(header::AUTHORIZATION, "Bearer t")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from("{\"player\": "))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let (s, b) = call(&app, Method::GET, &format!("/api/v1/questions/{id}"), None).await;
    assert_eq!(
        (s, b["predictions"].as_i64()),
        (StatusCode::OK, Some(1)),
        "nothing changed: {b}"
    );
    let (s, _) = call(
        &app,
        Method::DELETE,
        &format!("/api/v1/questions/{id}"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _) = call(
        &app,
        Method::DELETE,
        &format!("/api/v1/questions/{id}"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_prediction_is_announced_to_live_pages() {
    let db = test_db().await;
    let questions = service(&db.pool);
    let q = questions
        .create("Owls vs Hawks", "Toss?", &choices(), in_ms(3_600_000))
        .await
        .unwrap();
    let mut listener = sqlx::postgres::PgListener::connect(&db.direct_url)
        .await
        .unwrap();
    listener.listen("kickoff_events").await.unwrap();
    questions
        .predict(q.question.id, "ana", "Lions")
        .await
        .unwrap();
    let announced = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let n = listener.recv().await.unwrap();
            let payload: Value = serde_json::from_str(n.payload()).unwrap();
            if payload["op"] == "predictions" {
                return payload;
            }
        }
    })
    .await
    .expect("the prediction is announced");
    assert_eq!(announced["questions"], json!([q.question.id]));
    assert_eq!(announced["n"], 1);
}

/// Found by the history checker (seed 1): an operator cancelled an open question's lock job
/// through the jobs API, and the question stayed open for ever after its game time. The lock job
/// belongs to its question: an operator's cancel, reschedule or delete of it is refused (409,
/// naming the question), a bulk action on its queue skips it, and the question locks at its time.
#[tokio::test]
async fn an_operator_cannot_cancel_move_or_delete_a_questions_lock_job_by_itself() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, "t");
    let (s, b) = call(
        &app,
        Method::POST,
        "/api/v1/questions",
        Some(
            json!({"game": "Lions vs Tigers", "prompt": "First to score?",
                    "choices": ["Lions", "Tigers"], "game_time": in_ms(1_500).to_rfc3339()}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let question = b["id"].as_i64().unwrap();
    let job = b["lock_job"]["id"].as_i64().unwrap();
    let later = json!({ "scheduled_at": in_ms(3_600_000).to_rfc3339() });
    for (method, path, body) in [
        (Method::POST, format!("/api/v1/jobs/{job}/cancel"), None),
        (
            Method::POST,
            format!("/api/v1/jobs/{job}/reschedule"),
            Some(later),
        ),
        (Method::DELETE, format!("/api/v1/jobs/{job}"), None),
    ] {
        let (s, b) = call(&app, method.clone(), &path, body).await;
        assert_eq!(s, StatusCode::CONFLICT, "{method} {path}: {b}");
        let message = b["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("question {question}")),
            "{message}"
        );
    }
    for action in ["cancel", "delete"] {
        let (s, b) = call(
            &app,
            Method::POST,
            "/api/v1/jobs/bulk",
            Some(json!({ "action": action, "filter": { "queue": "questions" } })),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{b}");
        assert_eq!(b["changed"], 0, "{action}: {b}");
        let (s, b) = call(
            &app,
            Method::POST,
            "/api/v1/jobs/bulk",
            Some(json!({ "action": action, "ids": [job] })),
        )
        .await;
        assert_eq!(
            (s, &b["changed"]),
            (StatusCode::OK, &json!(0)),
            "{action}: {b}"
        );
    }
    // A job inserted through the API may not claim an owner.
    let (s, b) = call(
        &app,
        Method::POST,
        "/api/v1/jobs",
        Some(json!({ "kind": "noop", "meta": { "owner": "question 1" } })),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    // The lock job still stands, and the question locks at its game time.
    assert_eq!(
        state_of(&db.pool, kickoff::engine::JobId(job)).await,
        JobState::Scheduled
    );
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![]),
        engine_config(),
    )
    .await
    .unwrap();
    let svc = service(&db.pool);
    wait_for("the question to lock", Duration::from_secs(10), || async {
        svc.get(question).await.unwrap().question.status == QuestionStatus::Locked
    })
    .await;
    // Deleting the question still ends its lock job.
    let (s, _) = call(
        &app,
        Method::DELETE,
        &format!("/api/v1/questions/{question}"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    engine.stop().await;
}

/// A job inserted with the unique key of a question's lock job neither moves it (`on_conflict:
/// reschedule` would lock the question before its game time) nor is answered with it: 409, the
/// lock job where its question put it.
#[tokio::test]
async fn a_lock_jobs_unique_key_is_not_anothers_to_find_or_move() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, "t");
    let game_time = in_ms(7_200_000);
    let (s, q) = call(
        &app,
        Method::POST,
        "/api/v1/questions",
        Some(json!({"game": "g", "prompt": "p", "choices": ["a", "b"],
                    "game_time": game_time.to_rfc3339()})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{q}");
    let key = q["lock_job"]["unique_key"].as_str().unwrap().to_string();
    let lock = q["lock_job"]["id"].as_i64().unwrap();
    // Another kind's job may not take a key of the lock jobs' namespace either.
    let (s, b) = call(
        &app,
        Method::POST,
        "/api/v1/jobs",
        Some(json!({"kind": "noop", "unique_key": "lock_question:999999"})),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    for conflict in [json!("reschedule"), Value::Null] {
        let (s, b) = call(
            &app,
            Method::POST,
            "/api/v1/jobs",
            Some(
                json!({"kind": "noop", "unique_key": key, "on_conflict": conflict,
                        "schedule_in_ms": 60_000}),
            ),
        )
        .await;
        assert_eq!(s, StatusCode::CONFLICT, "{conflict}: {b}");
        assert!(!b.to_string().contains("lock_question\""), "{b}");
    }
    let due: DateTime<Utc> = sqlx::query_scalar("SELECT scheduled_at FROM jobs WHERE id = $1")
        .bind(lock)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        due.timestamp_micros(),
        game_time.timestamp_micros(),
        "the lock job stays at game time"
    );
    assert_eq!(count(&db.pool, "jobs").await, 1);
}

/// A question's lock job runs once, at its game time: an operator's run now (the lock before
/// its time) and retry (a second attempt of a lock that ran) are refused like a cancel (409,
/// naming the question), and a bulk run now or retry skips it.
#[tokio::test]
async fn an_operator_cannot_run_a_questions_lock_job_early_or_again() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, "t");
    let (s, b) = call(
        &app,
        Method::POST,
        "/api/v1/questions",
        Some(json!({"game": "Owls vs Hawks", "prompt": "First to score?",
                    "choices": ["Owls", "Hawks"], "game_time": in_ms(2_000).to_rfc3339()})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let question = b["id"].as_i64().unwrap();
    let job = b["lock_job"]["id"].as_i64().unwrap();
    let refused = |s: StatusCode, b: &Value, what: &str| {
        assert_eq!(s, StatusCode::CONFLICT, "{what}: {b}");
        let message = b["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("question {question}")),
            "{what}: {message}"
        );
    };
    let (s, b) = call(
        &app,
        Method::POST,
        &format!("/api/v1/jobs/{job}/run-now"),
        None,
    )
    .await;
    refused(s, &b, "run now");
    for body in [
        json!({ "action": "run_now", "ids": [job] }),
        json!({ "action": "run_now", "filter": { "queue": "questions" } }),
    ] {
        let (s, b) = call(&app, Method::POST, "/api/v1/jobs/bulk", Some(body.clone())).await;
        assert_eq!(
            (s, &b["changed"]),
            (StatusCode::OK, &json!(0)),
            "{body}: {b}"
        );
    }
    assert_eq!(
        state_of(&db.pool, kickoff::engine::JobId(job)).await,
        JobState::Scheduled,
        "the lock waits for its game time"
    );
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![]),
        engine_config(),
    )
    .await
    .unwrap();
    let svc = service(&db.pool);
    wait_for("the question to lock", Duration::from_secs(10), || async {
        svc.get(question).await.unwrap().question.status == QuestionStatus::Locked
    })
    .await;
    wait_for(
        "the lock job to complete",
        Duration::from_secs(10),
        || async { state_of(&db.pool, kickoff::engine::JobId(job)).await == JobState::Completed },
    )
    .await;
    let (s, b) = call(
        &app,
        Method::POST,
        &format!("/api/v1/jobs/{job}/retry"),
        None,
    )
    .await;
    refused(s, &b, "retry");
    for body in [
        json!({ "action": "retry", "ids": [job] }),
        json!({ "action": "retry", "filter": { "queue": "questions" } }),
    ] {
        let (s, b) = call(&app, Method::POST, "/api/v1/jobs/bulk", Some(body.clone())).await;
        assert_eq!(
            (s, &b["changed"]),
            (StatusCode::OK, &json!(0)),
            "{body}: {b}"
        );
    }
    let attempts: i32 = sqlx::query_scalar("SELECT attempt FROM jobs WHERE id = $1")
        .bind(job)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 1, "the lock ran once");
    assert_eq!(
        state_of(&db.pool, kickoff::engine::JobId(job)).await,
        JobState::Completed
    );
    engine.stop().await;
}
