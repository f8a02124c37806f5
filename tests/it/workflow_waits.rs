//! Workflows' waits (issue 49) against real PostgreSQL and a running engine: a step waits for
//! its signal (one that came first is used, the first of a name stands), fails at its deadline
//! with its dependents following their edges, and a timer anchored to a run's named time fires at
//! it and moves with it; the REST routes with their refusals, roles and audit entries.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::workflows::{audited_actions, by_name, engine_healable, owned, settled, step};
use crate::common::{test_db, wait_for, TestDb};
use kickoff::engine::workflow::{OnDepFailure, StepRow, Workflow};
use kickoff::engine::{ClientError, NewJob};

/// Now, to the microsecond (as a run's times are kept).
fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

fn minutes(n: i64) -> chrono::Duration {
    chrono::Duration::minutes(n)
}

/// The next start the steps' worker reports (its name and what it read).
async fn next_start(started: &mut mpsc::UnboundedReceiver<(String, Value)>) -> (String, Value) {
    tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .expect("a step started")
        .unwrap()
}

async fn job_times(db: &TestDb, step: &StepRow) -> (String, DateTime<Utc>) {
    sqlx::query_as("SELECT state::text, scheduled_at FROM jobs WHERE id = $1")
        .bind(step.job_id.unwrap().0)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_step_waits_for_its_signal_and_the_first_of_a_name_stands() {
    let db = test_db().await;
    let (engine, mut started, _) = engine_healable(&db).await;
    let client = engine.client();
    let kickoff = now();
    let flow = Workflow::new("game")
        .time("kickoff_at", kickoff)
        .step("lock", step("lock"))
        .step(
            "await_final",
            NewJob::new(
                "wf_step",
                json!({ "name": "await_final", "signal": "final" }),
            ),
        )
        .after("lock")
        .signal("final", "kickoff_at", minutes(300));
    let run = client.insert_workflow(&flow).await.unwrap().run;
    assert_eq!(next_start(&mut started).await.0, "lock");
    wait_for("the step to wait", Duration::from_secs(10), || async {
        by_name(&client.workflow_steps(run.id).await.unwrap(), "await_final")
            .waiting_since
            .is_some()
    })
    .await;
    let waiting = by_name(&client.workflow_steps(run.id).await.unwrap(), "await_final");
    assert_eq!(
        (waiting.state.as_str(), waiting.job_id, waiting.deadline_at),
        ("blocked", None, Some(kickoff + minutes(300))),
        "it waits without a job, until kickoff_at + 5 h"
    );

    // A payload the database cannot hold is refused and stores nothing (the first signal is
    // still to come).
    let err = client
        .signal_workflow(run.id, "final", &json!({ "k\u{0}": 1 }), "api:partner")
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Invalid { .. }), "{err}");
    assert!(client.workflow_signals(run.id).await.unwrap().is_empty());
    let (signal, stored) = client
        .signal_workflow(
            run.id,
            "final",
            &json!({ "home": 2, "away": 1 }),
            "api:partner",
        )
        .await
        .unwrap();
    assert!(stored);
    assert_eq!(signal.source, "api:partner");
    let (name, read) = next_start(&mut started).await;
    assert_eq!(name, "await_final");
    assert_eq!(read["signal:final"], json!({ "home": 2, "away": 1 }));
    assert_eq!(settled(&engine, run.id).await.state, "completed");

    // A second signal of the name changes nothing (the run has settled: refused anyway).
    let err = client
        .signal_workflow(run.id, "final", &json!({ "home": 0 }), "api:partner")
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Conflict(_)), "{err}");
    let err = client
        .signal_workflow(987_654, "final", &Value::Null, "api:x")
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::NotFound(_)), "{err}");
    engine.stop().await;
}

#[tokio::test]
async fn a_signal_that_came_before_the_wait_is_used_and_a_second_one_is_not() {
    let db = test_db().await;
    let (engine, mut started, _) = engine_healable(&db).await;
    let client = engine.client();
    let flow = Workflow::new("game")
        .time("kickoff_at", now())
        // A queue no node runs: the step before the wait holds until it is skipped.
        .step("lock", step("lock").with_queue("nobody"))
        .step(
            "await_final",
            NewJob::new(
                "wf_step",
                json!({ "name": "await_final", "signal": "final" }),
            ),
        )
        .after("lock")
        .signal("final", "kickoff_at", minutes(300));
    let run = client.insert_workflow(&flow).await.unwrap().run;
    let (_, stored) = client
        .signal_workflow(run.id, "final", &json!("first"), "api:a")
        .await
        .unwrap();
    assert!(stored, "kept though no step waits for it yet");
    let (kept, stored) = client
        .signal_workflow(run.id, "final", &json!("second"), "api:b")
        .await
        .unwrap();
    assert!(!stored);
    assert_eq!(
        (kept.payload, kept.source.as_str()),
        (json!("first"), "api:a")
    );
    client.skip_workflow_step(run.id, "lock").await.unwrap();
    let (name, read) = next_start(&mut started).await;
    assert_eq!(name, "await_final");
    assert_eq!(read["signal:final"], json!("first"));
    let steps = client.workflow_steps(run.id).await.unwrap();
    assert!(
        by_name(&steps, "await_final").waiting_since.is_none(),
        "it never waited"
    );
    assert_eq!(settled(&engine, run.id).await.state, "completed");
    engine.stop().await;
}

#[tokio::test]
async fn a_deadline_fails_the_waiting_step_and_its_dependents_follow_their_edges() {
    let db = test_db().await;
    let (engine, mut started, _) = engine_healable(&db).await;
    let client = engine.client();
    let flow = Workflow::new("game")
        .time("kickoff_at", now() - minutes(60))
        .step("await_final", step("await_final"))
        // Its deadline passed already: it fails as soon as it would wait.
        .signal("final", "kickoff_at", minutes(1))
        .step("settle", step("settle"))
        .after("await_final")
        .step("leaderboard", step("leaderboard"))
        .after_or("settle", OnDepFailure::Run);
    let run = client.insert_workflow(&flow).await.unwrap().run;
    let done = settled(&engine, run.id).await;
    assert_eq!(
        (done.state.as_str(), done.failed, done.completed),
        ("failed", 2, 1)
    );
    assert_eq!(next_start(&mut started).await.0, "leaderboard");
    let steps = client.workflow_steps(run.id).await.unwrap();
    let waited = by_name(&steps, "await_final");
    assert_eq!((waited.state.as_str(), waited.job_id), ("failed", None));
    assert!(waited.finished_at.unwrap() >= waited.deadline_at.unwrap());
    assert!(by_name(&steps, "settle").job_id.is_none());
    engine.stop().await;
}

#[tokio::test]
async fn a_timer_fires_at_its_runs_time_and_moves_with_it() {
    let db = test_db().await;
    let (engine, mut started, _) = engine_healable(&db).await;
    let client = engine.client();
    let kickoff = now() + minutes(60);
    let flow = Workflow::new("game")
        .time("kickoff_at", kickoff)
        .step("lock", step("lock"))
        .at("kickoff_at", chrono::Duration::zero())
        .step("await_final", step("await_final"))
        .signal("final", "kickoff_at", minutes(300));
    let run = client.insert_workflow(&flow).await.unwrap().run;
    let steps = client.workflow_steps(run.id).await.unwrap();
    let lock = by_name(&steps, "lock");
    assert_eq!(lock.state, "ready");
    assert_eq!(
        job_times(&db, &lock).await,
        ("scheduled".to_string(), kickoff)
    );
    assert_eq!(lock.due_at, Some(kickoff));
    let waiting = by_name(&steps, "await_final");
    assert_eq!(waiting.deadline_at, Some(kickoff + minutes(300)));

    // The game is postponed by a day, then brought forward to a moment from now.
    let later = kickoff + chrono::Duration::days(1);
    let moved = client
        .move_workflow_times(run.id, &BTreeMap::from([("kickoff_at".to_string(), later)]))
        .await
        .unwrap();
    assert_eq!(moved.times["kickoff_at"], json!(later));
    let steps = client.workflow_steps(run.id).await.unwrap();
    assert_eq!(job_times(&db, &by_name(&steps, "lock")).await.1, later);
    assert_eq!(
        by_name(&steps, "await_final").deadline_at,
        Some(later + minutes(300)),
        "the deadline moved with it"
    );
    let soon = now() + chrono::Duration::milliseconds(300);
    client
        .move_workflow_times(run.id, &BTreeMap::from([("kickoff_at".to_string(), soon)]))
        .await
        .unwrap();
    assert_eq!(next_start(&mut started).await.0, "lock");
    let attempted: DateTime<Utc> =
        sqlx::query_scalar("SELECT attempted_at FROM jobs WHERE id = $1")
            .bind(lock.job_id.unwrap().0)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        attempted >= soon,
        "not before its time: {attempted} < {soon}"
    );

    let err = client
        .move_workflow_times(run.id, &BTreeMap::from([("whistle".to_string(), soon)]))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Inconsistent { .. }), "{err}");
    let err = client
        .move_workflow_times(
            run.id,
            &BTreeMap::from([(
                "kickoff_at".to_string(),
                soon + chrono::Duration::days(5000),
            )]),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::OutOfWindow { .. }), "{err}");
    client.cancel_workflow(run.id).await.unwrap();
    let err = client
        .move_workflow_times(run.id, &BTreeMap::from([("kickoff_at".to_string(), soon)]))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Conflict(_)), "{err}");
    engine.stop().await;
}

#[tokio::test]
async fn waits_that_do_not_fit_the_run_are_refused_and_write_nothing() {
    let db = test_db().await;
    let (engine, _started, _) = engine_healable(&db).await;
    let client = engine.client();
    let now = now();
    let refused = [
        Workflow::new("x")
            .step("a", step("a"))
            .at("kickoff_at", minutes(0)),
        Workflow::new("x")
            .time("kickoff_at", now)
            .step("a", step("a"))
            .signal("final", "whistle", minutes(0)),
        {
            let mut w = Workflow::new("x")
                .time("kickoff_at", now)
                .step("a", step("a"));
            w.steps[0].signal = Some("final".into());
            w
        },
        Workflow::new("x")
            .time("kickoff_at", now + chrono::Duration::days(5000))
            .step("a", step("a")),
    ];
    for (i, flow) in refused.iter().enumerate() {
        let err = client.insert_workflow(flow).await.unwrap_err();
        let want = if i == 3 {
            matches!(err, ClientError::OutOfWindow { .. })
        } else {
            matches!(err, ClientError::Inconsistent { .. })
        };
        assert!(want, "{i}: {err}");
    }
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_runs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(runs, 0);
    engine.stop().await;
}

const TOKEN: &str = "test-token-123";

#[tokio::test]
async fn the_api_sends_signals_and_moves_times_audited_and_for_operators_only() {
    use crate::common::rest::call;
    use axum::http::{Method, StatusCode};
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let kickoff = now() + minutes(60);
    let body = json!({
        "name": "game", "times": { "kickoff_at": kickoff },
        "steps": [
            { "name": "lock", "job": { "kind": "noop" }, "at": { "time": "kickoff_at" } },
            { "name": "await_final", "job": { "kind": "noop" }, "after": [{ "step": "lock" }],
              "signal": "final", "deadline": { "time": "kickoff_at", "offset_ms": 18_000_000 } },
        ],
    });
    let (status, made) = call(
        &app,
        Method::POST,
        "/api/v1/workflows",
        Some(TOKEN),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let id = made["run"]["id"].as_i64().unwrap();
    assert_eq!(made["run"]["times"]["kickoff_at"], json!(kickoff));
    assert!(
        made["steps"][0]["waits"]
            .as_str()
            .unwrap()
            .starts_with("waits for its time:"),
        "{made}"
    );
    assert_eq!(
        made["steps"][1]["waits"],
        "waits for 1 of its 1 dependencies"
    );
    let path = |action: &str| format!("/api/v1/workflows/{id}/{action}");
    let later = kickoff + minutes(30);
    let tries: [(&str, Value, StatusCode); 7] = [
        (
            "signals",
            json!({ "name": "" }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "signals",
            json!({ "name": "final", "payload": { "home": 3 } }),
            StatusCode::CREATED,
        ),
        (
            "signals",
            json!({ "name": "final", "payload": { "home": 0 } }),
            StatusCode::OK,
        ),
        (
            "times",
            json!({ "times": {} }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "times",
            json!({ "times": { "whistle": later } }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "times",
            json!({ "times": { "kickoff_at": "soon" } }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "times",
            json!({ "times": { "kickoff_at": later } }),
            StatusCode::OK,
        ),
    ];
    let mut answers = Vec::new();
    for (action, body, want) in &tries {
        let (status, answer) =
            call(&app, Method::POST, &path(action), Some(TOKEN), Some(body)).await;
        assert_eq!(status, *want, "{action} {body}: {answer}");
        answers.push(answer);
    }
    assert_eq!(
        answers[2]["existing"],
        json!(true),
        "the first signal stands"
    );
    assert_eq!(answers[2]["signals"][0]["source"], "api:(bootstrap token)");
    assert_eq!(answers[6]["run"]["times"]["kickoff_at"], json!(later));
    let lock_job = answers[6]["steps"][0]["job_id"].as_i64().unwrap();
    let due: DateTime<Utc> = sqlx::query_scalar("SELECT scheduled_at FROM jobs WHERE id = $1")
        .bind(lock_job)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(due, later, "the timer moved with the time");

    let read_only =
        crate::common::operator_token_of(&db.pool, "reader", kickoff::accounts::TokenScope::Read)
            .await;
    for (action, body) in [
        ("signals", json!({ "name": "other" })),
        ("times", json!({ "times": { "kickoff_at": later } })),
    ] {
        let (status, _) = call(
            &app,
            Method::POST,
            &path(action),
            Some(&read_only),
            Some(&body),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{action}");
    }
    let audited = audited_actions(&db, "signals|times").await;
    let want = owned(&[
        ("signals", "HTTP 422"),
        ("signals", "ok"),
        ("signals", "ok"),
        ("times", "HTTP 422"),
        ("times", "HTTP 422"),
        ("times", "HTTP 422"),
        ("times", "ok"),
        ("signals", "HTTP 403"),
        ("times", "HTTP 403"),
    ]);
    assert_eq!(audited, want);
}

/// A timer's job is its run's to start: run now and reschedule of it before its first start are
/// refused (409, nothing changed), and a bulk run now leaves it where it is (found by the
/// history checker's long run: an operator's bulk run now of a queue started a step 1.3 s before
/// its run's time). Once it ran, a retry's wait is the job's own and may be hurried.
#[tokio::test]
async fn a_timers_job_is_not_run_now_or_rescheduled_before_its_first_start() {
    use crate::common::rest::call;
    use axum::http::{Method, StatusCode};
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let kickoff = now() + minutes(60);
    let body = json!({
        "name": "timed", "times": { "kickoff_at": kickoff },
        "steps": [{ "name": "lock", "job": { "kind": "noop", "queue": "timers" },
                    "at": { "time": "kickoff_at" } }],
    });
    let (status, made) = call(
        &app,
        Method::POST,
        "/api/v1/workflows",
        Some(TOKEN),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let job = made["steps"][0]["job_id"].as_i64().unwrap();
    let send = async |method: Method, path: String, body: Option<Value>| {
        call(&app, method, &path, Some(TOKEN), body.as_ref()).await
    };
    let (status, answer) = send(Method::POST, format!("/api/v1/jobs/{job}/run-now"), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let later = json!({ "scheduled_at": kickoff + minutes(5) });
    let (status, answer) = send(
        Method::POST,
        format!("/api/v1/jobs/{job}/reschedule"),
        Some(later),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let bulk =
        json!({ "action": "run_now", "filter": { "queue": "timers", "states": ["scheduled"] } });
    let (status, answer) = send(Method::POST, "/api/v1/jobs/bulk".into(), Some(bulk.clone())).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["changed"], json!(0), "{answer}");
    let due = || async {
        sqlx::query_as::<_, (String, DateTime<Utc>)>(
            "SELECT state::text, scheduled_at FROM jobs WHERE id = $1",
        )
        .bind(job)
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    assert_eq!(due().await, ("scheduled".to_string(), kickoff));
    // As a first attempt that failed leaves it: waiting for its retry, which may be hurried.
    sqlx::query("UPDATE jobs SET state = 'retryable', attempt = 1 WHERE id = $1")
        .bind(job)
        .execute(&db.pool)
        .await
        .unwrap();
    let (status, answer) = send(Method::POST, format!("/api/v1/jobs/{job}/run-now"), None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(due().await.0, "available");
}
