//! `GET /metrics`: the Prometheus exposition of a running node, behind the API's tokens.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

use crate::common::{test_db, wait_for};
use kickoff::engine::{Engine, EngineConfig, JobState, NewJob};

const TOKEN: &str = "metrics-test-token";

async fn scrape(app: &axum::Router, token: Option<&str>) -> (StatusCode, String) {
    let mut req = Request::get("/metrics");
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// The value of the sample `line_start` (name and labels exactly), if present.
fn value(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_report_attempts_lateness_and_jobs_by_state() {
    let db = test_db().await;
    let workers = kickoff::workers::builtin(vec![]);
    let engine = Engine::start(
        db.pool.clone(),
        workers,
        EngineConfig {
            queues: vec![("default".into(), 10)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let client = engine.client();
    let app = crate::common::app_with_metrics(&db.pool, TOKEN, engine.metrics());

    for _ in 0..3 {
        client
            .insert(&NewJob::new("noop", json!({})))
            .await
            .unwrap();
    }
    let failing = client
        .insert(&NewJob::new("noop", json!({"fail_attempts": 5})).with_max_attempts(1))
        .await
        .unwrap()
        .job
        .id;
    client
        .insert(&NewJob::new("noop", json!({})).after(Duration::from_secs(3600)))
        .await
        .unwrap();
    wait_for("the jobs to finish", Duration::from_secs(15), || async {
        crate::common::state_of(&db.pool, failing).await == JobState::Discarded
            && client
                .counts()
                .await
                .unwrap()
                .iter()
                .filter(|(_, s, _)| *s == JobState::Completed)
                .map(|(_, _, n)| n)
                .sum::<i64>()
                == 3
    })
    .await;

    let (status, _) = scrape(&app, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no token, no metrics");
    let (status, text) = scrape(&app, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        value(
            &text,
            "kickoff_attempts_total{kind=\"noop\",outcome=\"completed\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "kickoff_attempts_total{kind=\"noop\",outcome=\"failed\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "kickoff_jobs{queue=\"default\",state=\"scheduled\"}"),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "kickoff_jobs{queue=\"default\",state=\"discarded\"}"),
        Some(1.0)
    );
    // A state without jobs reads 0 rather than vanishing.
    assert_eq!(
        value(&text, "kickoff_jobs{queue=\"default\",state=\"cancelled\"}"),
        Some(0.0)
    );
    assert_eq!(value(&text, "kickoff_claimed_total"), Some(4.0));
    assert_eq!(
        value(&text, "kickoff_lateness_seconds_count{queue=\"default\"}"),
        Some(4.0)
    );
    assert_eq!(
        value(
            &text,
            "kickoff_lateness_seconds_bucket{queue=\"default\",le=\"+Inf\"}"
        ),
        Some(4.0)
    );
    assert_eq!(
        value(
            &text,
            "kickoff_attempt_duration_seconds_count{kind=\"noop\"}"
        ),
        Some(4.0)
    );
    assert!(text.contains("# TYPE kickoff_lateness_seconds histogram"));
    assert!(value(&text, "kickoff_db_pool_max_connections").is_some());
    assert_eq!(value(&text, "kickoff_sse_clients"), Some(0.0));
    // Every sample line is `name{labels} number`.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (_, v) = line.rsplit_once(' ').unwrap();
        assert!(v.parse::<f64>().is_ok(), "{line}");
    }
    engine.stop().await;
}

#[tokio::test]
async fn metrics_report_each_schedule_s_runs_skips_and_latest_lateness() {
    use kickoff::engine::schedules::{JobTemplate, Overlap, ScheduleSpec, Schedules};
    let db = test_db().await;
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![]),
        EngineConfig {
            queues: vec![("default".into(), 10)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let app = crate::common::app_with_metrics(&db.pool, TOKEN, engine.metrics());
    let schedules = Schedules::new(engine.client());
    // A run every second that holds 1.5 s, skipped while the previous one runs.
    let mut spec = ScheduleSpec::every(
        "pulse",
        Duration::from_secs(1),
        JobTemplate::new("noop", json!({ "sleep_ms": 1500 })),
    );
    spec.overlap = Overlap::Skip;
    schedules.create(&spec, None).await.unwrap();
    let paused = ScheduleSpec::cron("weekly", "@weekly", JobTemplate::new("noop", json!({})));
    schedules.create(&paused, None).await.unwrap();
    schedules.set_paused("weekly", true).await.unwrap();
    wait_for(
        "a run skipped by the overlap policy",
        Duration::from_secs(10),
        || async { schedules.get("pulse").await.unwrap().runs_skipped >= 1 },
    )
    .await;
    let (status, text) = scrape(&app, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let enqueued = value(
        &text,
        "kickoff_schedule_runs_enqueued_total{schedule=\"pulse\"}",
    );
    assert!(enqueued.is_some_and(|n| n >= 12.0), "{text}");
    let skipped = value(
        &text,
        "kickoff_schedule_runs_skipped_total{schedule=\"pulse\"}",
    );
    assert!(skipped.is_some_and(|n| n >= 1.0), "{text}");
    let late = value(
        &text,
        "kickoff_schedule_last_run_lateness_seconds{schedule=\"pulse\"}",
    );
    assert!(late.is_some_and(|s| (0.0..5.0).contains(&s)), "{text}");
    assert_eq!(
        value(&text, "kickoff_schedule_paused{schedule=\"weekly\"}"),
        Some(1.0)
    );
    assert!(value(
        &text,
        "kickoff_schedule_next_run_timestamp_seconds{schedule=\"pulse\"}"
    )
    .is_some());
    assert!(
        value(
            &text,
            "kickoff_schedule_next_run_timestamp_seconds{schedule=\"weekly\"}"
        )
        .is_none(),
        "a paused schedule has no next run"
    );
    engine.stop().await;
}
