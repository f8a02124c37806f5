//! What a webhook receiver gets to recognise a call (issue 17, first part): the Standard Webhooks
//! `webhook-id`, the same on every attempt of a job and different between jobs, and
//! `webhook-timestamp`; the body's bytes as serialised once; headers a job may not set.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::common::receiver::Receiver;
use crate::common::{state_of, test_db, wait_for};
use kickoff::engine::{Engine, EngineConfig, JobState, NewJob};

#[tokio::test]
async fn every_attempt_of_a_job_carries_its_one_webhook_id_and_a_fresh_timestamp() {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let addr = receiver.addr;
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![addr.to_string()]),
        EngineConfig {
            queues: vec![("default".into(), 4)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let client = engine.client();
    let body = json!({ "game": "Bears vs Wolves", "score": [2, 1], "note": "é ✓" });
    let flaky = client
        .insert(&NewJob::new(
            "webhook",
            json!({ "url": format!("http://{addr}/fail-once"), "body": body }),
        ))
        .await
        .unwrap()
        .job;
    let other = client
        .insert(&NewJob::new(
            "webhook",
            json!({ "url": format!("http://{addr}/other"), "body": body }),
        ))
        .await
        .unwrap()
        .job;
    for id in [flaky.id, other.id] {
        wait_for("both jobs to complete", Duration::from_secs(60), || async {
            state_of(&db.pool, id).await == JobState::Completed
        })
        .await;
    }
    engine.stop().await;

    let attempts = receiver.calls_to("/fail-once");
    assert_eq!(attempts.len(), 2, "a failed attempt, then a completed one");
    let id = attempts[0].header("webhook-id");
    assert_eq!(
        attempts[1].header("webhook-id"),
        id,
        "one id for every attempt"
    );
    assert!(
        id.starts_with(&format!("msg_{}_", flaky.id.0)) && !id.contains('.'),
        "{id}"
    );
    assert_eq!(
        kickoff::workers::webhook::webhook_id(&flaky),
        id,
        "the id comes from the job as stored"
    );
    let second = &receiver.calls_to("/other")[0];
    assert_ne!(second.header("webhook-id"), id, "another job, another id");
    let now = chrono::Utc::now().timestamp();
    for s in &attempts {
        let ts: i64 = s.header("webhook-timestamp").parse().unwrap();
        assert!((now - 120..=now).contains(&ts), "{ts} against {now}");
        assert_eq!(s.header("content-type"), "application/json");
        assert_eq!(
            s.body,
            serde_json::to_vec(&body).unwrap(),
            "the body as serialised once"
        );
        assert_eq!(s.headers.get_all("content-type").iter().count(), 1);
    }
    assert_eq!(attempts[0].header("x-kickoff-attempt"), "1");
    assert_eq!(attempts[1].header("x-kickoff-attempt"), "2");
}

#[tokio::test]
async fn a_job_may_not_set_the_standard_webhooks_headers() {
    let db = test_db().await;
    let client = kickoff::engine::Client::new(
        db.pool.clone(),
        Arc::new(kickoff::workers::builtin(vec!["example.com".into()])),
    );
    for name in ["webhook-id", "Webhook-Timestamp", "WEBHOOK-SIGNATURE"] {
        let refused = client
            .insert(&NewJob::new(
                "webhook",
                json!({ "url": "https://example.com/hook", "headers": { name: "forged" } }),
            ))
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("cannot be set"), "{name}: {refused}");
    }
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 0);
}
