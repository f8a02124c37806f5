//! A job inserted through the REST API commits without notifying from its transaction (a durable
//! commit that notifies holds a database-wide lock through its disk flush, so such commits run one
//! at a time); the nodes and the dashboard still hear of it at once, from the announcer, after
//! the commit.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use kickoff::engine::Db;
use serde_json::{json, Value};
use sqlx::postgres::PgListener;

use crate::common::rest::call;
use crate::common::{state_of, test_db, wait_for};
use kickoff::engine::{Engine, EngineConfig, JobState};

const TOKEN: &str = "insert-notifications-token";

/// The next notification on `listener`, within 5 s: its channel, payload and the name of the
/// session that sent it.
async fn next_notification(listener: &mut PgListener, pool: &Db) -> (String, Value, String) {
    let n = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("a notification within 5 s")
        .unwrap();
    let sender: String =
        sqlx::query_scalar("SELECT application_name FROM pg_stat_activity WHERE pid = $1")
            .bind(n.process_id() as i32)
            .fetch_optional(pool)
            .await
            .unwrap()
            .unwrap_or_default();
    (
        n.channel().to_string(),
        serde_json::from_str(n.payload()).unwrap(),
        sender,
    )
}

#[tokio::test]
async fn an_api_insert_is_announced_after_its_commit_by_the_announcer() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let mut listener = PgListener::connect(&db.url).await.unwrap();
    listener
        .listen_all(["kickoff_due", "kickoff_events"])
        .await
        .unwrap();

    let (status, body) = call(
        &app,
        Method::POST,
        "/api/v1/jobs",
        Some(TOKEN),
        Some(&json!({ "kind": "noop", "schedule_in_ms": 60_000, "unique_key": "game-7-lock" })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["job"]["id"].as_i64().unwrap();
    let at_ms = chrono::DateTime::parse_from_rfc3339(body["job"]["scheduled_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis();

    let mut heard = Vec::new();
    for _ in 0..2 {
        heard.push(next_notification(&mut listener, &db.pool).await);
    }
    heard.sort_by(|a, b| a.0.cmp(&b.0));
    let [(due_channel, due, due_sender), (events_channel, event, events_sender)] = &heard[..]
    else {
        panic!("two notifications: {heard:?}");
    };
    assert_eq!(due_channel, "kickoff_due");
    assert_eq!(
        due,
        &json!({ "queue": "default", "state": "scheduled", "at_ms": at_ms })
    );
    assert_eq!(events_channel, "kickoff_events");
    assert_eq!(
        event,
        &json!({ "op": "insert", "n": 1, "to": { "scheduled": 1 }, "ids": [id] })
    );
    for sender in [due_sender, events_sender] {
        assert!(
            sender.ends_with("-announcer"),
            "sent by `{sender}`, not by the announcer after the commit"
        );
    }

    // The same unique key, moved earlier: announced as an update at the new time.
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/v1/jobs",
        Some(TOKEN),
        Some(
            &json!({ "kind": "noop", "schedule_in_ms": 30_000, "unique_key": "game-7-lock",
                      "on_conflict": "reschedule" }),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["job"]["id"].as_i64(), Some(id));
    let moved_ms =
        chrono::DateTime::parse_from_rfc3339(body["job"]["scheduled_at"].as_str().unwrap())
            .unwrap()
            .timestamp_millis();
    assert!(moved_ms < at_ms);
    let mut heard = Vec::new();
    for _ in 0..2 {
        heard.push(next_notification(&mut listener, &db.pool).await);
    }
    heard.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        heard[0].1,
        json!({ "queue": "default", "state": "scheduled", "at_ms": moved_ms })
    );
    assert_eq!(heard[1].1["op"], "update");
    assert_eq!(heard[1].1["ids"], json!([id]));
    assert!(
        heard.iter().all(|h| h.2.ends_with("-announcer")),
        "{heard:?}"
    );

    // Writes outside the API's insert still notify from their transaction, as before.
    sqlx::query("UPDATE jobs SET scheduled_at = scheduled_at - interval '1 second' WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap();
    let (channel, _, sender) = next_notification(&mut listener, &db.pool).await;
    assert!(
        !sender.ends_with("-announcer"),
        "{channel} came from the announcer"
    );
}

#[tokio::test]
async fn a_job_inserted_through_the_api_wakes_an_engine_long_before_its_backstop_poll() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(Vec::new()),
        EngineConfig {
            backstop_poll: Duration::from_secs(60),
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut ids = Vec::new();
    for body in [
        json!({ "kind": "noop" }),
        json!({ "kind": "noop", "schedule_in_ms": 300 }),
    ] {
        let (status, body) =
            call(&app, Method::POST, "/api/v1/jobs", Some(TOKEN), Some(&body)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        ids.push(kickoff::engine::JobId(body["job"]["id"].as_i64().unwrap()));
    }
    for id in ids {
        wait_for(
            "the job ran, woken by its notification",
            Duration::from_secs(5),
            || async { state_of(&db.pool, id).await == JobState::Completed },
        )
        .await;
    }
    engine.stop().await;
}

#[tokio::test]
async fn only_the_quiet_insert_statement_is_quiet_the_rest_of_its_transaction_notifies() {
    let db = test_db().await;
    let client = kickoff::engine::Client::new(
        db.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(Vec::new())),
    );
    let mut listener = PgListener::connect(&db.url).await.unwrap();
    listener.listen("kickoff_due").await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let new = kickoff::engine::NewJob::new("noop", json!({}))
        .at(chrono::Utc::now() + chrono::Duration::minutes(5));
    let (inserted, wakeup) = client.insert_quietly_with(&mut tx, &new).await.unwrap();
    // A later write of the same transaction (a second job) notifies from it, as any write does.
    let second = client.insert_with(&mut tx, &new).await.unwrap();
    tx.commit().await.unwrap();
    let (_, payload, sender) = next_notification(&mut listener, &db.pool).await;
    assert!(!sender.ends_with("-announcer"), "{payload}");
    assert_eq!(
        payload["at_ms"].as_i64(),
        Some(second.job.scheduled_at.timestamp_millis())
    );
    // The quiet insert is heard once announced.
    wakeup.send();
    let (_, payload, sender) = next_notification(&mut listener, &db.pool).await;
    assert!(sender.ends_with("-announcer"), "{payload} from {sender}");
    assert_eq!(
        payload["at_ms"].as_i64(),
        Some(inserted.job.scheduled_at.timestamp_millis())
    );
}
