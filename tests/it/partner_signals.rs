//! Partners' signed signals and the alert on a missed deadline (issue 49): a webhook endpoint
//! that names the workflows it may signal sends a signal to a live run by its key, signed by the
//! published Standard Webhooks library (`standardwebhooks` from PyPI) with the endpoint's secret;
//! every unsigned, stale, tampered, misdirected or unknown call is refused and writes nothing; a
//! step whose deadline passed without its signal fires a `workflow_deadline` alert that a retry
//! resolves.

use std::io::Write;
use std::process::{Command, Stdio};

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use chrono::Utc;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::rest::call;
use crate::common::test_db;
use kickoff::alerts::{Alerts, Evaluator, RuleSpec};
use kickoff::engine::maintenance::deadlines::DeadlineKeeper;
use kickoff::engine::workflow_actions::RetryMode;

const TOKEN: &str = "test-token-123";

/// The headers the published library signs `body` with, for `secret`, `age_secs` ago.
fn signed_by_the_library(secret: &str, id: &str, body: &[u8], age_secs: i64) -> Value {
    let python = format!(
        "{}/tools/pyvenv/bin/python",
        std::env::var("KICKOFF_CACHE")
            .unwrap_or_else(|_| format!("{}/.cache/kickoff", std::env::var("HOME").unwrap()))
    );
    let script = "import json, sys, datetime\n\
        from standardwebhooks import Webhook\n\
        at = datetime.datetime.now(tz=datetime.timezone.utc) - datetime.timedelta(seconds=int(sys.argv[3]))\n\
        body = sys.stdin.buffer.read().decode()\n\
        sig = Webhook(sys.argv[1]).sign(sys.argv[2], at, body)\n\
        print(json.dumps({'webhook-id': sys.argv[2], 'webhook-timestamp': str(int(at.timestamp())), 'webhook-signature': sig}))\n";
    let mut child = Command::new(&python)
        .args(["-c", script, secret, id, &age_secs.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{python}: {e} (scripts/bootstrap.sh --e2e installs standardwebhooks)")
        });
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the library did not sign: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A call to the inbound route with `headers` (and `bearer`, if any): status and answer.
async fn inbound(
    app: &axum::Router,
    endpoint: i64,
    headers: &Value,
    bearer: Option<&str>,
    body: &[u8],
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(format!("/api/v1/inbound/{endpoint}/signals"))
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in headers.as_object().unwrap() {
        req = req.header(name.as_str(), value.as_str().unwrap());
    }
    if let Some(token) = bearer {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::from(body.to_vec())).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn api(app: &axum::Router, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
    let body = (!body.is_null()).then_some(body);
    call(
        app,
        method,
        &format!("/api/v1{path}"),
        Some(TOKEN),
        body.as_ref(),
    )
    .await
}

/// A run of `name` keyed `key` whose one step waits for the signal `final` for five hours.
async fn waiting_run(app: &axum::Router, name: &str, key: &str) -> i64 {
    let (status, made) = api(
        app,
        Method::POST,
        "/workflows",
        json!({
            "name": name, "key": key, "times": { "kickoff_at": Utc::now() },
            "steps": [{ "name": "await_final", "job": { "kind": "noop" }, "signal": "final",
                        "deadline": { "time": "kickoff_at", "offset_ms": 18_000_000 } }],
        }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    made["run"]["id"].as_i64().unwrap()
}

#[tokio::test]
async fn a_partners_signed_signal_reaches_its_run_and_every_other_call_is_refused_unwritten() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let (status, made) = api(
        &app,
        Method::POST,
        "/webhook-endpoints",
        json!({ "url_prefix": "https://scores.example/", "signal_workflows": ["game", " game "] }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["endpoint"]["signal_workflows"], json!(["game"]));
    let (endpoint, secret) = (
        made["endpoint"]["id"].as_i64().unwrap(),
        made["secret"].as_str().unwrap().to_string(),
    );
    let (_, quiet) = api(
        &app,
        Method::POST,
        "/webhook-endpoints",
        json!({ "url_prefix": "https://quiet.example/" }),
    )
    .await;
    let (quiet, quiet_secret) = (
        quiet["endpoint"]["id"].as_i64().unwrap(),
        quiet["secret"].as_str().unwrap().to_string(),
    );
    let run = waiting_run(&app, "game", "game:8812").await;
    let training = waiting_run(&app, "training", "training:1").await;

    let body = json!({ "key": "game:8812", "name": "final", "payload": { "home": 2, "away": 1 } })
        .to_string()
        .into_bytes();
    let good = signed_by_the_library(&secret, "msg_1", &body, 0);
    let signals = async |run: i64| -> Value {
        let (_, detail) = api(&app, Method::GET, &format!("/workflows/{run}"), Value::Null).await;
        detail["signals"].clone()
    };

    // Refused, each with its reason, none writing a signal.
    let tampered = json!({ "key": "game:8812", "name": "final", "payload": { "home": 0 } })
        .to_string()
        .into_bytes();
    let stale = signed_by_the_library(&secret, "msg_1", &body, 400);
    let other_key = signed_by_the_library(&quiet_secret, "msg_1", &body, 0);
    let mut headerless = good.clone();
    headerless
        .as_object_mut()
        .unwrap()
        .remove("webhook-signature");
    let unknown_run = json!({ "key": "game:1", "name": "final" })
        .to_string()
        .into_bytes();
    let wrong_workflow = json!({ "key": "training:1", "name": "final" })
        .to_string()
        .into_bytes();
    // (what, endpoint, headers, bearer, body, status, words of the message)
    type Case<'a> = (
        &'a str,
        i64,
        Value,
        Option<&'a str>,
        Vec<u8>,
        StatusCode,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "tampered body",
            endpoint,
            good.clone(),
            None,
            tampered,
            StatusCode::UNAUTHORIZED,
            "no `v1,` signature matches",
        ),
        (
            "stale",
            endpoint,
            stale,
            None,
            body.clone(),
            StatusCode::UNAUTHORIZED,
            "past the 300 s allowed",
        ),
        (
            "another endpoint's secret",
            endpoint,
            other_key,
            None,
            body.clone(),
            StatusCode::UNAUTHORIZED,
            "no `v1,` signature matches",
        ),
        (
            "no signature header",
            endpoint,
            headerless,
            None,
            body.clone(),
            StatusCode::UNAUTHORIZED,
            "no `webhook-signature` header",
        ),
        (
            "a bearer token instead",
            endpoint,
            json!({}),
            Some(TOKEN),
            body.clone(),
            StatusCode::UNAUTHORIZED,
            "no `webhook-id` header",
        ),
        (
            "an endpoint that signals nothing",
            quiet,
            signed_by_the_library(&quiet_secret, "m", &body, 0),
            None,
            body.clone(),
            StatusCode::UNAUTHORIZED,
            "takes no signed calls",
        ),
        (
            "no such endpoint",
            9_999,
            good.clone(),
            None,
            body.clone(),
            StatusCode::UNAUTHORIZED,
            "takes no signed calls",
        ),
        (
            "no live run of the key",
            endpoint,
            signed_by_the_library(&secret, "m2", &unknown_run, 0),
            None,
            unknown_run.clone(),
            StatusCode::NOT_FOUND,
            "a live run of game",
        ),
        (
            "a run of a workflow it may not signal",
            endpoint,
            signed_by_the_library(&secret, "m3", &wrong_workflow, 0),
            None,
            wrong_workflow.clone(),
            StatusCode::NOT_FOUND,
            "a live run of game",
        ),
        (
            "a body that is not the shape",
            endpoint,
            signed_by_the_library(&secret, "m4", b"{\"key\":1}", 0),
            None,
            b"{\"key\":1}".to_vec(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "",
        ),
    ];
    for (what, to, headers, bearer, body, want, words) in &cases {
        let (status, answer) = inbound(&app, *to, headers, *bearer, body).await;
        assert_eq!(status, *want, "{what}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{what}: {answer}");
        if *want == StatusCode::UNAUTHORIZED {
            assert_eq!(answer["error"]["code"], "unsigned", "{what}");
        }
    }
    assert_eq!(signals(run).await, json!([]));
    assert_eq!(signals(training).await, json!([]));

    // The signed call: stored, the waiting step started, the source the endpoint; a replay is
    // answered with the signal that stands.
    let (status, answer) = inbound(&app, endpoint, &good, None, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(
        (answer["run"].as_i64(), answer["existing"].as_bool()),
        (Some(run), Some(false))
    );
    let (status, again) = inbound(&app, endpoint, &good, None, &body).await;
    assert_eq!(
        (status, again["existing"].as_bool()),
        (StatusCode::OK, Some(true))
    );
    let (_, detail) = api(&app, Method::GET, &format!("/workflows/{run}"), Value::Null).await;
    assert_eq!(
        detail["signals"][0]["source"],
        format!("endpoint:{endpoint}")
    );
    assert_eq!(detail["steps"][0]["state"], "ready", "{detail}");
    let payload: Value =
        sqlx::query_scalar("SELECT payload FROM workflow_signals WHERE run_id = $1")
            .bind(run)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(payload, json!({ "home": 2, "away": 1 }));
    let audited: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT actor, role, result FROM audit_log WHERE action = 'api.POST /inbound/{endpoint}/signals'
         ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let actor = format!("endpoint:{endpoint}");
    assert!(
        audited
            .iter()
            .all(|(a, role, _)| *a == actor && role == "operator"),
        "only verified calls are recorded, as their endpoint: {audited:?}"
    );
    assert_eq!(
        audited.iter().filter(|(_, _, r)| r == "ok").count(),
        2,
        "{audited:?}"
    );

    // A rotation: the previous secret verifies during its overlap only.
    let late = json!({ "key": "game:8812", "name": "late" })
        .to_string()
        .into_bytes();
    let (_, rotated) = api(
        &app,
        Method::POST,
        &format!("/webhook-endpoints/{endpoint}/rotate"),
        json!({ "overlap_secs": 60 }),
    )
    .await;
    let new_secret = rotated["secret"].as_str().unwrap().to_string();
    let by_old = signed_by_the_library(&secret, "m5", &late, 0);
    assert_eq!(
        inbound(&app, endpoint, &by_old, None, &late).await.0,
        StatusCode::CREATED
    );
    api(
        &app,
        Method::POST,
        &format!("/webhook-endpoints/{endpoint}/rotate"),
        json!({ "overlap_secs": 0 }),
    )
    .await;
    let early = json!({ "key": "game:8812", "name": "early" })
        .to_string()
        .into_bytes();
    let by_first = signed_by_the_library(&secret, "m6", &early, 0);
    assert_eq!(
        inbound(&app, endpoint, &by_first, None, &early).await.0,
        StatusCode::UNAUTHORIZED
    );
    let by_second = signed_by_the_library(&new_secret, "m7", &early, 0);
    assert_eq!(
        inbound(&app, endpoint, &by_second, None, &early).await.0,
        StatusCode::UNAUTHORIZED,
        "the secret before the last rotation, no overlap"
    );
    // Taking the workflows away stops it.
    let (status, changed) = api(
        &app,
        Method::PATCH,
        &format!("/webhook-endpoints/{endpoint}"),
        json!({ "signal_workflows": [] }),
    )
    .await;
    assert_eq!(
        (status, &changed["signal_workflows"]),
        (StatusCode::OK, &json!([]))
    );
    assert_eq!(signals(run).await.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_missed_deadline_fires_the_workflow_deadline_alert_and_a_retry_resolves_it() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let client = kickoff::engine::Client::new(
        db.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(vec![])),
    );
    let alerts = Alerts::new(db.pool.clone(), client.clone());
    let mut conn = db.pool.pool().acquire().await.unwrap();
    for (name, workflow) in [("games", Some("game")), ("training", Some("training"))] {
        let spec: RuleSpec = serde_json::from_value(
            json!({ "name": name, "condition": "workflow_deadline", "workflow": workflow }),
        )
        .unwrap();
        alerts
            .create_rule_with(&mut conn, spec, Some("test"))
            .await
            .unwrap();
    }
    let refused: Result<RuleSpec, _> = serde_json::from_value::<RuleSpec>(
        json!({ "name": "x", "condition": "workflow_deadline", "queue": "default" }),
    );
    assert!(refused
        .unwrap()
        .check()
        .unwrap_err()
        .contains("not scoped by queue"));
    drop(conn);
    // A partner that never answers: the deadline five hours after kickoff passed.
    let (status, made) = api(
        &app,
        Method::POST,
        "/workflows",
        json!({
            "name": "game", "key": "game:7", "times": { "kickoff_at": Utc::now() - chrono::Duration::hours(6) },
            "steps": [{ "name": "await_final", "job": { "kind": "noop" }, "signal": "final",
                        "deadline": { "time": "kickoff_at", "offset_ms": 18_000_000 } }],
        }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let run = made["run"]["id"].as_i64().unwrap();
    let evaluator = Evaluator::new(db.pool.clone(), client.clone(), "notify");
    assert!(
        evaluator.run_once().await.unwrap().fired.is_empty(),
        "still waiting"
    );
    DeadlineKeeper::new(db.pool.clone())
        .run_once()
        .await
        .unwrap();
    let report = evaluator.run_once().await.unwrap();
    assert_eq!(
        report.fired.len(),
        1,
        "the game rule only: {:?}",
        report.fired
    );
    let fired = &report.fired[0];
    assert_eq!(fired.rule, "games");
    assert!(fired.subject.starts_with("step "), "{fired:?}");
    assert!(
        fired.summary.contains(&format!("workflow game run {run} (game:7): step await_final had no signal final by its deadline")),
        "{}",
        fired.summary
    );
    assert!(evaluator.run_once().await.unwrap().fired.is_empty(), "once");
    client.retry_workflow(run, RetryMode::Failed).await.unwrap();
    let report = evaluator.run_once().await.unwrap();
    assert_eq!(report.resolved.len(), 1, "the retried step waits again");
}

#[tokio::test]
async fn a_steps_output_and_a_signals_payload_are_shown_as_the_rule_of_who_sees_a_jobs_data_says() {
    use crate::common::dashboard::{dashboard_as, TOKEN as ADMIN};
    use kickoff::accounts::{Role, TokenScope};
    let d = dashboard_as(Role::Viewer).await;
    const SECRET: &str = "sk_live_0123456789abcdef";
    let made = d
        .api(
            Method::POST,
            "/workflows",
            json!({
                "name": "game", "times": { "kickoff_at": Utc::now() },
                "steps": [
                    { "name": "settle", "job": { "kind": "noop", "queue": "nobody",
                                                 "args": { "api_key": SECRET } } },
                    { "name": "await_final", "job": { "kind": "noop" }, "signal": "final",
                      "deadline": { "time": "kickoff_at", "offset_ms": 18_000_000 } },
                ],
            }),
        )
        .await;
    let run = made["run"]["id"].as_i64().unwrap();
    // What the settle's completing attempt recorded, quoting its job's secret.
    sqlx::query("UPDATE workflow_steps SET output = $2 WHERE run_id = $1 AND name = 'settle'")
        .bind(run)
        .bind(json!({ "echo": SECRET, "password": "hunter2hunter2", "score": 3 }))
        .execute(&d.pool)
        .await
        .unwrap();
    // An attempt of the settle's job that failed quoting the secret, then one that completed.
    sqlx::query(
        "INSERT INTO job_attempts (job_id, attempt, queue, kind, node, due_at, started_at,
                                   finished_at, duration_ms, outcome, error)
         SELECT job_id, n, 'nobody', 'noop', 'node-1', now() - interval '10 s',
                now() - make_interval(secs => 10 - n), now() - make_interval(secs => 9.5 - n),
                500, CASE n WHEN 1 THEN 'failed' ELSE 'completed' END,
                CASE n WHEN 1 THEN 'the partner refused key ' || $2 END
         FROM workflow_steps, generate_series(1, 2) AS n
         WHERE run_id = $1 AND name = 'settle'",
    )
    .bind(run)
    .bind(SECRET)
    .execute(&d.pool)
    .await
    .unwrap();
    let sender = crate::common::operator_token_of(&d.pool, "sender", TokenScope::Write).await;
    let reader = crate::common::operator_token_of(&d.pool, "reader", TokenScope::Read).await;
    let payload = json!({ "home": 2, "token": "abcdefgh12345", "note": format!("ours: {SECRET}") });
    let (status, _) = call(
        &d.app,
        Method::POST,
        &format!("/api/v1/workflows/{run}/signals"),
        Some(&sender),
        Some(&json!({ "name": "final", "payload": payload })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let read = async |token: &str| -> (Value, Value) {
        let (status, detail) = call(
            &d.app,
            Method::GET,
            &format!("/api/v1/workflows/{run}"),
            Some(token),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{detail}");
        (
            detail["steps"][0]["output"].clone(),
            detail["signals"][0]["payload"].clone(),
        )
    };
    let attempts = async |token: &str| -> Vec<(String, i64, String, Value)> {
        let (_, detail) = call(
            &d.app,
            Method::GET,
            &format!("/api/v1/workflows/{run}"),
            Some(token),
            None,
        )
        .await;
        detail["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["step"].as_str().unwrap().to_string(),
                    a["attempt"].as_i64().unwrap(),
                    a["outcome"].as_str().unwrap().to_string(),
                    a["error"].clone(),
                )
            })
            .collect()
    };
    // The timeline of the run's attempts, in the order they started, through the same rule.
    let timeline = |error: &str| {
        vec![
            ("settle".to_string(), 1, "failed".to_string(), json!(error)),
            (
                "settle".to_string(),
                2,
                "completed".to_string(),
                Value::Null,
            ),
        ]
    };
    assert_eq!(
        attempts(ADMIN).await,
        timeline(&format!("the partner refused key {SECRET}"))
    );
    assert_eq!(
        attempts(&reader).await,
        timeline("the partner refused key [redacted]")
    );
    let whole = json!({ "echo": SECRET, "password": "hunter2hunter2", "score": 3 });
    let hidden = json!({ "echo": "[redacted]", "password": "[redacted]", "score": 3 });
    let payload_hidden = json!({ "home": 2, "token": "[redacted]", "note": "ours: [redacted]" });
    // An admin sees both whole; the sender its payload whole, not the job's secrets (another
    // made the job); a reader neither.
    assert_eq!(read(ADMIN).await, (whole.clone(), payload.clone()));
    assert_eq!(read(&sender).await, (hidden.clone(), payload.clone()));
    assert_eq!(
        read(&reader).await,
        (hidden.clone(), payload_hidden.clone())
    );
    // The dashboard reads them through the same rule.
    let (status, page) = d.server_fn("workflow", &format!("id={run}")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        !page.contains(SECRET) && !page.contains("hunter2") && !page.contains("abcdefgh12345"),
        "{page}"
    );
    let page: Value = serde_json::from_str(&page).unwrap();
    let shown = |s: &Value| serde_json::from_str::<Value>(s.as_str().unwrap()).unwrap();
    assert_eq!(shown(&page["steps"][0]["output"]), hidden);
    assert_eq!(shown(&page["signals"][0]["payload"]), payload_hidden);
    assert_eq!(
        page["attempts"][0]["error"],
        "the partner refused key [redacted]"
    );
    let (status, html) = d.page(&format!("/workflows/{run}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("wf-bar outcome-failed") && html.contains("wf-bar outcome-completed"));
    assert!(!html.contains(SECRET), "the page hides it too");
}
