//! The meta keys Kickoff writes itself (a schedule's run's, a question's lock job's, an alert's
//! notification's, the snooze count) are refused on every insert path: the API, the engine's
//! client for Rust callers, and a copy of a job (which no longer inherits them). One list,
//! `engine::RESERVED_META`, says which.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::rest::call;
use crate::common::{operator_token, test_db};
use kickoff::engine::schedules::RESERVED_META;
use kickoff::engine::{Client, ClientError, NewJob};

const TOKEN: &str = "reserved-meta-admin";

#[tokio::test]
async fn no_insert_path_accepts_a_key_kickoff_writes_into_meta() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let ops = operator_token(&db.pool).await;
    // An admin's every-second schedule that skips a run while the last one runs: the forged run
    // of the issue would have held it back.
    let (status, created) = call(
        &app,
        Method::POST,
        "/api/v1/schedules",
        Some(TOKEN),
        Some(&json!({"name": "tick", "every_ms": 1000, "overlap": "skip",
                     "job": {"kind": "noop"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let schedule: i64 = sqlx::query_scalar("SELECT id FROM schedules WHERE name = 'tick'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let jobs_before: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();

    // Every key of the one list, and the two forgeries the issue traced.
    let written_by_kickoff = [
        "schedule_id",
        "schedule",
        "slot",
        "slot_ms",
        "overlap",
        "trigger",
        "triggered_by",
        "snoozes",
        "owner",
        "alert_incident",
        "alert_rule",
        "alert_event",
        "alert_digest",
    ];
    let mut metas: Vec<Value> = RESERVED_META
        .iter()
        .chain(&written_by_kickoff)
        .map(|k| json!({ *k: 1 }))
        .collect();
    metas.push(json!({"schedule_id": schedule, "slot_ms": 0}));
    metas.push(json!({"trigger": "manual", "schedule_id": schedule}));
    for meta in &metas {
        for token in [ops.as_str(), TOKEN] {
            let body = json!({"kind": "noop", "schedule_in_ms": 20_000, "meta": meta});
            let (status, answer) =
                call(&app, Method::POST, "/api/v1/jobs", Some(token), Some(&body)).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{meta} -> {answer}"
            );
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("reserved"),
                "{answer}"
            );
        }
        // The engine's client, for a Rust application.
        let client = Client::new(db.pool.clone(), Arc::new(kickoff::workers::builtin(vec![])));
        let refused = client
            .insert(&NewJob::new("noop", json!({})).with_meta(meta.clone()))
            .await;
        assert!(
            matches!(refused, Err(ClientError::Invalid { field: "meta", .. })),
            "{meta}: {refused:?}"
        );
    }
    let jobs_after: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs_after, jobs_before, "nothing was written");
    for key in written_by_kickoff {
        assert!(RESERVED_META.contains(&key), "{key} is Kickoff's own");
    }

    // Nor may a caller's job take a schedule's run's unique key (the stager would count the slot
    // as run), or be one of the kinds only Kickoff inserts (a question's lock and settle jobs).
    let slot_key = format!("schedule:{schedule}:0");
    for (body, want) in [
        (
            json!({"kind": "noop", "unique_key": slot_key}),
            StatusCode::CONFLICT,
        ),
        (
            json!({"kind": "lock_question", "args": {"question_id": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"kind": "settle_question", "args": {"question_id": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let (status, answer) =
            call(&app, Method::POST, "/api/v1/jobs", Some(&ops), Some(&body)).await;
        assert_eq!(status, want, "{body} -> {answer}");
    }

    // A copy of a schedule's run is nobody's run: it keeps the template's meta, none of the
    // run's own keys.
    let (status, run) = call(
        &app,
        Method::POST,
        "/api/v1/schedules/tick/trigger",
        Some(TOKEN),
        Some(&json!({})),
    )
    .await;
    assert!(status.is_success(), "{run}");
    let run_id = run["id"]
        .as_i64()
        .or_else(|| run["job"]["id"].as_i64())
        .unwrap();
    let client = Client::new(db.pool.clone(), Arc::new(kickoff::workers::builtin(vec![])));
    let copy = client
        .clone_job(kickoff::engine::JobId(run_id))
        .await
        .unwrap();
    for key in RESERVED_META {
        assert!(
            copy.meta.get(key).is_none(),
            "the copy has {key}: {}",
            copy.meta
        );
    }

    // An alert's notification is not copied either (its URL's path is the rule's secret, hidden
    // by what its meta says).
    let notification: i64 = sqlx::query_scalar(
        r#"INSERT INTO jobs (queue, kind, args, meta, state, scheduled_at)
           VALUES ('webhooks', 'webhook', '{"url": "https://hooks.example.com/services/T0/tok3n"}',
                   '{"alert_incident": 1, "alert_event": "fired"}', 'scheduled', now() + interval '1 hour')
           RETURNING id"#,
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let refused = client.clone_job(kickoff::engine::JobId(notification)).await;
    assert!(
        matches!(refused, Err(ClientError::Conflict(_))),
        "{refused:?}"
    );
}
