//! The REST API in-process (tower `oneshot`) against real PostgreSQL: the happy paths, and bad
//! input on every endpoint answered with a clear 4xx and nothing stored.
//!
//! Longer than 700 lines on purpose: one self-contained scenario per test, with the helpers they
//! share at the top; split it by area when a new area's tests arrive.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::common::test_db;

const TOKEN: &str = "test-token-123";

struct Api {
    app: Router,
    pool: kickoff::engine::Db,
}

async fn api() -> Api {
    let db = test_db().await;
    Api {
        app: crate::common::app(&db.pool, TOKEN),
        pool: db.pool,
    }
}

impl Api {
    async fn call(&self, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Value) {
        self.call_with(method, path, body, Some(TOKEN), "application/json")
            .await
    }

    async fn call_with(
        &self,
        method: Method,
        path: &str,
        body: Option<&str>,
        token: Option<&str>,
        content_type: &str,
    ) -> (StatusCode, Value) {
        let body = body.map(|b| (b.as_bytes().to_vec(), content_type));
        let (status, text) = crate::common::rest::send(&self.app, method, path, token, body).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn job_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM jobs")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

fn assert_error(status: StatusCode, body: &Value, want: StatusCode, code: &str) {
    assert_eq!(status, want, "body: {body}");
    assert_eq!(body["error"]["code"], code, "body: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "body: {body}"
    );
}

#[tokio::test]
async fn creates_lists_gets_and_acts_on_jobs() {
    let api = api().await;
    let (s, b) = api
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(r#"{"kind":"noop","args":{},"schedule_in_ms":60000,"tags":["a"]}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["job"]["state"], "scheduled");
    assert_eq!(b["existing"], false);
    let id = b["job"]["id"].as_i64().unwrap();

    let (s, b) = api
        .call(Method::GET, &format!("/api/v1/jobs/{id}"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["kind"], "noop");
    assert_eq!(b["errors"], json!([]));

    let (s, b) = api
        .call(Method::GET, "/api/v1/jobs?state=scheduled&limit=10", None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["jobs"].as_array().unwrap().len(), 1);

    let (s, b) = api
        .call(Method::POST, &format!("/api/v1/jobs/{id}/run-now"), None)
        .await;
    assert_eq!(
        (s, b["state"].as_str()),
        (StatusCode::OK, Some("available"))
    );
    let (s, b) = api
        .call(Method::POST, &format!("/api/v1/jobs/{id}/cancel"), None)
        .await;
    assert_eq!(
        (s, b["state"].as_str()),
        (StatusCode::OK, Some("cancelled"))
    );
    // A double cancel is a conflict.
    let (s, b) = api
        .call(Method::POST, &format!("/api/v1/jobs/{id}/cancel"), None)
        .await;
    assert_error(s, &b, StatusCode::CONFLICT, "conflict");
    let (s, b) = api
        .call(Method::POST, &format!("/api/v1/jobs/{id}/retry"), None)
        .await;
    assert_eq!(
        (s, b["state"].as_str()),
        (StatusCode::OK, Some("available"))
    );
    let (s, _) = api
        .call(Method::DELETE, &format!("/api/v1/jobs/{id}"), None)
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, b) = api
        .call(Method::GET, &format!("/api/v1/jobs/{id}"), None)
        .await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");

    let (s, b) = api.call(Method::GET, "/api/v1/stats", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["states"]["scheduled"], 0);
}

#[tokio::test]
async fn unique_keys_answer_with_the_existing_job() {
    let api = api().await;
    let body = r#"{"kind":"noop","unique_key":"k1","schedule_in_ms":60000}"#;
    let (s1, b1) = api.call(Method::POST, "/api/v1/jobs", Some(body)).await;
    let (s2, b2) = api.call(Method::POST, "/api/v1/jobs", Some(body)).await;
    assert_eq!((s1, s2), (StatusCode::CREATED, StatusCode::OK));
    assert_eq!(b2["existing"], true);
    assert_eq!(b1["job"]["id"], b2["job"]["id"]);
    assert_eq!(api.job_count().await, 1);
}

#[tokio::test]
async fn requests_without_a_valid_token_are_refused() {
    let api = api().await;
    for token in [None, Some("wrong"), Some("")] {
        let (s, b) = api
            .call_with(Method::GET, "/api/v1/jobs", None, token, "application/json")
            .await;
        assert_error(s, &b, StatusCode::UNAUTHORIZED, "unauthorized");
        let (s, b) = api
            .call_with(
                Method::POST,
                "/api/v1/jobs",
                Some(r#"{"kind":"noop"}"#),
                token,
                "application/json",
            )
            .await;
        assert_error(s, &b, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    assert_eq!(api.job_count().await, 0);
}

#[tokio::test]
async fn bad_job_input_gets_a_clear_error_and_stores_nothing() {
    let api = api().await;
    let far = (chrono::Utc::now() + chrono::Duration::days(5000)).to_rfc3339();
    let past = (chrono::Utc::now() - chrono::Duration::days(3)).to_rfc3339();
    let big = "x".repeat(300 * 1024);
    let cases: Vec<(String, StatusCode, &str)> = vec![
        (
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        ("".into(), StatusCode::BAD_REQUEST, "malformed_json"),
        ("[]".into(), StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
        (
            r#"{"args":{}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"nope"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_kind",
        ),
        (
            r#"{"kind":"noop","args":[1]}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","args":{"sleep_ms":"x"}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "args_refused",
        ),
        (
            r#"{"kind":"noop","bogus":1}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","queue":"Bad Queue!"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","priority":42}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","priority":99999999}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","max_attempts":0}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","schedule_in_ms":-5}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","scheduled_at":"tomorrow"}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            format!(r#"{{"kind":"noop","scheduled_at":"{far}"}}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "out_of_window",
        ),
        (
            format!(r#"{{"kind":"noop","scheduled_at":"{past}"}}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "out_of_window",
        ),
        (
            format!(r#"{{"kind":"noop","scheduled_at":"{past}","schedule_in_ms":5}}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","unique_key":""}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","args":{"x":"a\u0000b"}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","tags":["a\u0000"]}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        // A number PostgreSQL keeps exactly but that does not read back as a float (past
        // 1.7976931348623157e308 once rounded): stored, it would fail every read of its row.
        (
            r#"{"kind":"noop","meta":{"x":1.7976931348623157e308}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            r#"{"kind":"noop","args":{"x":[-1.7976931348623157e308]}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            format!(r#"{{"kind":"noop","args":{{"pad":"{big}"}}}}"#),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
        ),
        (
            format!(
                r#"{{"kind":"noop","args":{{"pad":"{}"}}}}"#,
                "y".repeat(2 * 1024 * 1024)
            ),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            r#"{"kind":"webhook","args":{"url":"http://10.0.0.1/x"}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "args_refused",
        ),
        (
            r#"{"kind":"webhook","args":{"url":"ftp://hooks.example.com/"}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "args_refused",
        ),
        (
            r#"{"kind":"webhook","args":{}}"#.into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "args_refused",
        ),
        (
            r#"{"kind":"webhook","args":{"url":"https://hooks.example.com/a","timeout_ms":0}}"#
                .into(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "args_refused",
        ),
    ];
    for (body, want, code) in cases {
        let (s, b) = api.call(Method::POST, "/api/v1/jobs", Some(&body)).await;
        let shown: String = body.chars().take(80).collect();
        assert_eq!(s, want, "body {shown}: {b}");
        assert_eq!(b["error"]["code"], code, "body {shown}: {b}");
    }
    let (s, b) = api
        .call_with(
            Method::POST,
            "/api/v1/jobs",
            Some(r#"{"kind":"noop"}"#),
            Some(TOKEN),
            "text/plain",
        )
        .await;
    assert_error(
        s,
        &b,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    assert_eq!(api.job_count().await, 0, "nothing half-written");
    // The allowed webhook host is accepted.
    let (s, b) = api
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(r#"{"kind":"webhook","args":{"url":"https://hooks.example.com/a"}}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
}

#[tokio::test]
async fn unknown_ids_and_bad_paths_and_queries_are_clear_errors() {
    let api = api().await;
    for path in [
        "/api/v1/jobs/999999",
        "/api/v1/jobs/abc",
        "/api/v1/jobs/-1",
        "/api/v1/jobs/99999999999999999999",
    ] {
        let (s, b) = api.call(Method::GET, path, None).await;
        assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
        for action in ["cancel", "retry", "run-now"] {
            let (s, b) = api
                .call(Method::POST, &format!("{path}/{action}"), None)
                .await;
            assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
        }
        let (s, b) = api.call(Method::DELETE, path, None).await;
        assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
    }
    let (s, b) = api
        .call(Method::GET, "/api/v1/jobs?state=bogus", None)
        .await;
    assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    let (s, b) = api
        .call(Method::GET, "/api/v1/jobs?limit=100000", None)
        .await;
    assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    let (s, b) = api.call(Method::GET, "/api/v1/jobs?queue=%00", None).await;
    assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    let (s, b) = api.call(Method::GET, "/api/v1/jobs?limit=ten", None).await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "bad_query");
    let (s, b) = api.call(Method::GET, "/api/v1/nothing-here", None).await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
    let (s, b) = api
        .call(
            Method::POST,
            "/api/v1/jobs/1/reschedule",
            Some(r#"{"scheduled_at":"never"}"#),
        )
        .await;
    assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
}

#[tokio::test]
async fn actions_that_the_state_forbids_are_conflicts() {
    let api = api().await;
    let (_, b) = api
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(r#"{"kind":"noop","schedule_in_ms":60000}"#),
        )
        .await;
    let id = b["job"]["id"].as_i64().unwrap();
    let (s, b) = api
        .call(Method::POST, &format!("/api/v1/jobs/{id}/retry"), None)
        .await;
    assert_error(s, &b, StatusCode::CONFLICT, "conflict");
    api.call(Method::POST, &format!("/api/v1/jobs/{id}/cancel"), None)
        .await;
    let (s, b) = api
        .call(Method::POST, &format!("/api/v1/jobs/{id}/run-now"), None)
        .await;
    assert_error(s, &b, StatusCode::CONFLICT, "conflict");
    let at = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let (s, b) = api
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{id}/reschedule"),
            Some(&format!(r#"{{"scheduled_at":"{at}"}}"#)),
        )
        .await;
    assert_error(s, &b, StatusCode::CONFLICT, "conflict");
}

#[tokio::test]
async fn bulk_actions_apply_to_ids_or_to_a_filter() {
    let api = api().await;
    let mut ids = Vec::new();
    for queue in ["mail", "mail", "mail", "hooks"] {
        let body = format!(r#"{{"kind":"noop","queue":"{queue}","schedule_in_ms":60000}}"#);
        let (s, b) = api.call(Method::POST, "/api/v1/jobs", Some(&body)).await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        ids.push(b["job"]["id"].as_i64().unwrap());
    }
    let body = format!(r#"{{"action":"cancel","ids":[{},{}]}}"#, ids[0], ids[1]);
    let (s, b) = api
        .call(Method::POST, "/api/v1/jobs/bulk", Some(&body))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        b,
        json!({ "changed": 2, "skipped": 0, "refused": 0, "refusal": null })
    );
    // Retry what is cancelled in `mail`, up to the newest id the caller saw.
    let body = format!(
        r#"{{"action":"retry","filter":{{"states":["cancelled","discarded"],"queue":"mail","max_id":{}}}}}"#,
        ids[3]
    );
    let (s, b) = api
        .call(Method::POST, "/api/v1/jobs/bulk", Some(&body))
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        b,
        json!({ "changed": 2, "skipped": 0, "refused": 0, "refusal": null })
    );
    // Run now: the waiting jobs in `mail` move, none is skipped; an empty filter takes every job.
    let (s, b) = api
        .call(
            Method::POST,
            "/api/v1/jobs/bulk",
            Some(r#"{"action":"run_now","filter":{}}"#),
        )
        .await;
    assert_eq!(
        (s, &b),
        (
            StatusCode::OK,
            &json!({ "changed": 4, "skipped": 0, "refused": 0, "refusal": null })
        )
    );
    let (s, b) = api
        .call(
            Method::POST,
            "/api/v1/jobs/bulk",
            Some(r#"{"action":"retry","filter":{"kind":"noop"}}"#),
        )
        .await;
    assert_eq!(
        (s, &b),
        (
            StatusCode::OK,
            &json!({ "changed": 0, "skipped": 4, "refused": 0, "refusal": null })
        )
    );

    let too_many: Vec<String> = (1..=1001).map(|i| i.to_string()).collect();
    let too_many = format!(r#"{{"action":"delete","ids":[{}]}}"#, too_many.join(","));
    let bad = [
        r#"{"action":"cancel","ids":[1],"filter":{}}"#,
        r#"{"action":"cancel"}"#,
        r#"{"action":"rerun","ids":[1]}"#,
        r#"{"action":"cancel","filter":{"states":["done"]}}"#,
        r#"{"action":"cancel","filter":{"args":[1]}}"#,
        r#"{"action":"cancel","filter":{"color":"red"}}"#,
        r#"{"action":"cancel","ids":["x"]}"#,
        too_many.as_str(),
    ];
    for body in bad {
        let (s, b) = api
            .call(Method::POST, "/api/v1/jobs/bulk", Some(body))
            .await;
        assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    }
    let (s, b) = api
        .call(Method::POST, "/api/v1/jobs/bulk", Some(r#"{"action":"#))
        .await;
    assert_error(s, &b, StatusCode::BAD_REQUEST, "malformed_json");
    assert_eq!(api.job_count().await, 4);
}

#[tokio::test]
async fn queues_pause_resume_and_validate() {
    let api = api().await;
    let (s, b) = api
        .call(Method::POST, "/api/v1/queues/default/pause", None)
        .await;
    assert_eq!((s, b["paused"].as_bool()), (StatusCode::OK, Some(true)));
    let (s, b) = api.call(Method::GET, "/api/v1/queues", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b[0]["name"], "default");
    assert_eq!(b[0]["paused"], true);
    let (s, b) = api
        .call(Method::POST, "/api/v1/queues/default/resume", None)
        .await;
    assert_eq!((s, b["paused"].as_bool()), (StatusCode::OK, Some(false)));
    let (s, b) = api
        .call(Method::POST, "/api/v1/queues/Not%20A%20Queue/pause", None)
        .await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
    let (s, b) = api
        .call(
            Method::PATCH,
            "/api/v1/queues/default",
            Some(r#"{"concurrency":0}"#),
        )
        .await;
    assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
    let (s, b) = api
        .call(
            Method::PATCH,
            "/api/v1/queues/default",
            Some(r#"{"concurrency":4}"#),
        )
        .await;
    assert_eq!((s, b["concurrency"].as_i64()), (StatusCode::OK, Some(4)));
}

#[tokio::test]
async fn queue_limits_are_set_by_patch_each_field_alone_and_bad_ones_change_nothing() {
    let api = api().await;
    let patch = |body: &'static str| api.call(Method::PATCH, "/api/v1/queues/webhooks", Some(body));
    let (s, b) = patch(r#"{"concurrency":4}"#).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = patch(r#"{"rate":"100/s","per":"host","global_concurrency":20}"#).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        (
            &b["rate_limit"],
            &b["rate_period_ms"],
            &b["rate_per"],
            &b["global_concurrency"],
            &b["limits_by"],
            &b["concurrency"]
        ),
        (
            &json!(100),
            &json!(1000),
            &json!("host"),
            &json!(20),
            &json!("operator"),
            &json!(4)
        ),
        "a field not named keeps its value"
    );
    // One field alone: the others stay.
    let (s, b) = patch(r#"{"global_concurrency":null}"#).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        (&b["rate_limit"], &b["global_concurrency"]),
        (&json!(100), &Value::Null)
    );
    for (body, code, field) in [
        (r#"{"rate":"fast"}"#, "invalid", "rate"),
        (r#"{"rate":"0/s"}"#, "invalid", "rate"),
        (r#"{"rate":"10/2day"}"#, "invalid", "rate"),
        (r#"{"per":"tenant"}"#, "invalid", "per"),
        // The queue's partition would be left without its rate.
        (r#"{"rate":null}"#, "inconsistent", "per"),
        (
            r#"{"global_concurrency":0}"#,
            "invalid",
            "global_concurrency",
        ),
        (r#"{}"#, "invalid", "name a setting to change"),
    ] {
        let (s, b) = patch(body).await;
        assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, code);
        assert!(
            b["error"]["message"].as_str().unwrap_or("").contains(field)
                || b.to_string().contains(field),
            "{body}: {b}"
        );
    }
    let (s, b) = patch(r#"{"burst":3}"#).await;
    assert!(s.is_client_error(), "{s} {b}");
    let (_, b) = api.call(Method::GET, "/api/v1/queues", None).await;
    let row = b
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "webhooks")
        .unwrap()
        .clone();
    assert_eq!(
        (
            &row["rate_limit"],
            &row["rate_per"],
            &row["global_concurrency"]
        ),
        (&json!(100), &json!("host"), &Value::Null),
        "a refused patch changed the queue"
    );
}

#[tokio::test]
async fn kinds_are_listed_paused_and_resumed_through_the_api() {
    let api = api().await;
    let (s, b) = api.call(Method::GET, "/api/v1/kinds", None).await;
    assert_eq!(s, StatusCode::OK);
    let noop = b
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "noop")
        .cloned();
    assert_eq!(noop.map(|k| k["paused"].clone()), Some(json!(false)), "{b}");
    let (s, b) = api
        .call(Method::POST, "/api/v1/kinds/noop/pause", None)
        .await;
    assert_eq!((s, &b["paused"]), (StatusCode::OK, &json!(true)), "{b}");
    assert!(b["paused_by"].is_string(), "{b}");
    // Twice: the same answer.
    let (s, again) = api
        .call(Method::POST, "/api/v1/kinds/noop/pause", None)
        .await;
    assert_eq!((s, &again["paused_at"]), (StatusCode::OK, &b["paused_at"]));
    let (_, b) = api.call(Method::GET, "/api/v1/kinds", None).await;
    let noop = b
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "noop")
        .cloned()
        .unwrap();
    assert_eq!(noop["paused"], true);
    let (s, b) = api
        .call(Method::POST, "/api/v1/kinds/no-such-kind/pause", None)
        .await;
    // The path names no kind this server runs: no such record.
    assert_error(s, &b, StatusCode::NOT_FOUND, "not_found");
    let (s, b) = api
        .call(Method::POST, "/api/v1/kinds/noop/resume", None)
        .await;
    assert_eq!((s, &b["paused"]), (StatusCode::OK, &json!(false)), "{b}");
    let (_, b) = api.call(Method::GET, "/api/v1/kinds", None).await;
    assert!(
        b.as_array().unwrap().iter().all(|k| k["paused"] == false),
        "{b}"
    );
}

#[tokio::test]
async fn health_probes_answer() {
    let api = api().await;
    let res = api
        .app
        .clone()
        .oneshot(Request::get("/healthz").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let (s, b) = api.call_with(Method::GET, "/readyz", None, None, "").await;
    assert_eq!((s, b["ready"].as_bool()), (StatusCode::OK, Some(true)));
}

#[tokio::test]
async fn api_actions_are_recorded_in_the_audit_log_and_reads_are_not() {
    let api = api().await;
    let (status, created) = api
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(r#"{"kind":"noop","schedule_in_ms":60000}"#),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let id = created["job"]["id"].as_i64().unwrap();
    api.call(Method::GET, &format!("/api/v1/jobs/{id}"), None)
        .await;
    api.call(Method::POST, &format!("/api/v1/jobs/{id}/cancel"), None)
        .await;
    let (status, _) = api
        .call(Method::POST, &format!("/api/v1/jobs/{id}/cancel"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let rows: Vec<(String, String, Option<String>, bool, String)> =
        sqlx::query_as("SELECT actor, action, target, ok, result FROM audit_log ORDER BY id")
            .fetch_all(&api.pool)
            .await
            .unwrap();
    assert_eq!(
        rows.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(),
        [
            "api.POST /jobs",
            "api.POST /jobs/{id}/cancel",
            "api.POST /jobs/{id}/cancel"
        ]
    );
    assert!(rows.iter().all(|r| r.0 == "api-token"));
    assert_eq!(
        rows[1].2.as_deref(),
        Some(format!("/api/v1/jobs/{id}/cancel").as_str())
    );
    assert!(rows[1].3 && !rows[2].3);
    assert_eq!(rows[2].4, "HTTP 409");
}

#[tokio::test]
async fn an_api_bulk_call_is_recorded_with_its_filter_or_ids_and_its_count() {
    let api = api().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, made) = api
            .call(
                Method::POST,
                "/api/v1/jobs",
                Some(&format!(
                    r#"{{"kind":"noop","schedule_in_ms":60000,"args":{{"b":"x","i":{i}}}}}"#
                )),
            )
            .await;
        ids.push(made["job"]["id"].as_i64().unwrap());
    }
    let (status, _) = api
        .call(
            Method::POST,
            "/api/v1/jobs/bulk",
            Some(&format!(r#"{{"action":"cancel","ids":[{}]}}"#, ids[0])),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api
        .call(
            Method::POST,
            "/api/v1/jobs/bulk",
            Some(r#"{"action":"cancel","filter":{"args":{"b":"x"},"states":["scheduled"]}}"#),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let rows: Vec<(Option<Value>, Option<i64>)> = sqlx::query_as(
        "SELECT filter, count FROM audit_log WHERE action = 'api.POST /jobs/bulk' ORDER BY id",
    )
    .fetch_all(&api.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0], (Some(json!({"ids": [ids[0]]})), Some(1)));
    let filter = rows[1].0.clone().unwrap();
    assert_eq!(filter["args"], json!({"b": "x"}), "{filter}");
    assert_eq!(filter["states"], json!(["scheduled"]), "{filter}");
    assert_eq!(rows[1].1, Some(2));
}

#[tokio::test]
async fn a_write_the_database_refuses_for_an_outage_answers_503_and_writes_nothing() {
    // A standby after a failover (read-only), a server shutting down, a lost connection: the
    // client's request was fine and may be sent again, so the answer is 503, not 500.
    let api = api().await;
    for code in ["25006", "57P01", "08006", "53300"] {
        sqlx::query(&format!(
            "CREATE OR REPLACE FUNCTION refuse_insert() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'injected {code}' USING ERRCODE = '{code}'; END $$"
        ))
        .execute(&api.pool)
        .await
        .unwrap();
        sqlx::query(
            "CREATE OR REPLACE TRIGGER refuse_insert BEFORE INSERT ON jobs
             FOR EACH ROW EXECUTE FUNCTION refuse_insert()",
        )
        .execute(&api.pool)
        .await
        .unwrap();
        let (s, b) = api
            .call(Method::POST, "/api/v1/jobs", Some(r#"{"kind":"noop"}"#))
            .await;
        assert_eq!(
            (s, b["error"]["code"].as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, Some("unavailable")),
            "SQLSTATE {code}: {b}"
        );
        assert_eq!(api.job_count().await, 0);
    }
}

#[tokio::test]
async fn the_readiness_probe_tells_only_whether_the_node_is_ready() {
    // Unauthenticated: it must not name the node, nor pass on a database error's text.
    let api = api().await;
    let (s, b) = api.call_with(Method::GET, "/readyz", None, None, "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b, serde_json::json!({ "ready": true }));
    api.pool.close().await;
    let (s, b) = api.call_with(Method::GET, "/readyz", None, None, "").await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(b, serde_json::json!({ "ready": false }));
}

#[tokio::test]
async fn a_webhook_may_not_set_the_host_or_hop_by_hop_headers() {
    // `Host` would reach a virtual host that is not allowlisted on an allowed address; the
    // hop-by-hop headers and the length would let the caller frame the request itself.
    let api = api().await;
    for name in [
        "Host",
        "host",
        "Connection",
        "Transfer-Encoding",
        "Content-Length",
        "Keep-Alive",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Upgrade",
    ] {
        let body = serde_json::json!({
            "kind": "webhook",
            "args": { "url": "http://hooks.example.com/in", "headers": { name: "x" } }
        });
        let (s, b) = api
            .call(Method::POST, "/api/v1/jobs", Some(&body.to_string()))
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{name}: {b}");
        let message = b["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(name), "{name}: {message}");
    }
    assert_eq!(api.job_count().await, 0);
    let ok = serde_json::json!({
        "kind": "webhook",
        "args": { "url": "http://hooks.example.com/in", "headers": { "Authorization": "Bearer x" } }
    });
    let (s, b) = api
        .call(Method::POST, "/api/v1/jobs", Some(&ok.to_string()))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
}

#[tokio::test]
async fn an_allowlist_entry_without_a_port_allows_only_the_schemes_default_port() {
    // `hooks.example.com` is listed without a port: its Redis or Docker port is not a webhook.
    let api = api().await;
    let webhook =
        |url: &str| serde_json::json!({ "kind": "webhook", "args": { "url": url } }).to_string();
    for url in [
        "http://hooks.example.com:6379/",
        "http://hooks.example.com:2375/v1/containers",
        "https://hooks.example.com:80/",
        "http://hooks.example.com:443/",
    ] {
        let (s, b) = api
            .call(Method::POST, "/api/v1/jobs", Some(&webhook(url)))
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {b}");
        assert!(
            b["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("is not in KICKOFF_WEBHOOK_ALLOWED_HOSTS")),
            "{url}: {b}"
        );
    }
    assert_eq!(api.job_count().await, 0);
    for url in [
        "http://hooks.example.com/in",
        "http://hooks.example.com:80/in",
        "https://hooks.example.com/in",
        "https://hooks.example.com:443/in",
    ] {
        let (s, b) = api
            .call(Method::POST, "/api/v1/jobs", Some(&webhook(url)))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{url}: {b}");
    }
}

#[tokio::test]
async fn no_spelling_of_a_path_escapes_the_audit_log() {
    // An id written with a sign and 90 zeros still names job 42; a queue may be called
    // `predictions`. Each change is recorded under its route, whatever the path's spelling.
    let api = api().await;
    let (s, created) = api
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(r#"{"kind":"noop","schedule_in_ms":60000}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let id = created["job"]["id"].as_i64().unwrap();
    let padded = format!("/api/v1/jobs/+{}{id}", "0".repeat(90));
    let (s, _) = api
        .call(Method::POST, &format!("{padded}/cancel"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "the padded id names the job");
    let (s, _) = api.call(Method::DELETE, &padded, None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    sqlx::query("INSERT INTO queues (name) VALUES ('predictions') ON CONFLICT DO NOTHING")
        .execute(&api.pool)
        .await
        .unwrap();
    let (s, b) = api
        .call(
            Method::PATCH,
            "/api/v1/queues/predictions",
            Some(r#"{"concurrency":3}"#),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let actions: Vec<String> = sqlx::query_scalar("SELECT action FROM audit_log ORDER BY id")
        .fetch_all(&api.pool)
        .await
        .unwrap();
    assert_eq!(
        actions,
        [
            "api.POST /jobs",
            "api.POST /jobs/{id}/cancel",
            "api.DELETE /jobs/{id}",
            "api.PATCH /queues/{name}",
        ]
    );
}

#[tokio::test]
async fn an_insert_is_recorded_alike_whether_written_in_one_statement_or_in_a_transaction() {
    let api = api().await;
    let body = r#"{"kind":"noop","schedule_in_ms":60000,"unique_key":"once"}"#;
    // The first is written with its entry in one statement; the second meets the live job's
    // unique key and takes the transaction that finds it.
    let (status, first) = api.call(Method::POST, "/api/v1/jobs", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, again) = api.call(Method::POST, "/api/v1/jobs", Some(body)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["job"]["id"], again["job"]["id"]);
    assert_eq!(again["existing"], true);
    type Entry = (
        String,
        String,
        String,
        Option<String>,
        Option<Value>,
        Option<i64>,
        Option<String>,
        bool,
        String,
    );
    let rows: Vec<Entry> = sqlx::query_as(
        "SELECT actor, role, action, target, filter, count, host(address), ok, result
         FROM audit_log ORDER BY id",
    )
    .fetch_all(&api.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0], rows[1]);
    assert_eq!(
        (
            rows[0].2.as_str(),
            rows[0].3.as_deref(),
            rows[0].7,
            rows[0].8.as_str()
        ),
        ("api.POST /jobs", Some("/api/v1/jobs"), true, "ok")
    );
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&api.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 1);
}

/// What a client sends is what a partner receives: a number written `10.0` in args or meta (a
/// webhook's body, say) stays `10.0`, though an integer field (`priority`) written `5.0` is
/// still read as 5.
#[tokio::test]
async fn an_integral_float_in_args_and_meta_is_kept_as_written() {
    let a = api().await;
    let (status, body) = a
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(
                r#"{"kind": "noop", "priority": 5.0, "schedule_in_ms": 60000,
                    "args": {"amount": 10.0, "list": [1.0, 2.5, 3], "deep": {"x": -0.0}},
                    "meta": {"ratio": 2.0}}"#,
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["job"]["priority"], 5);
    let id = body["job"]["id"].as_i64().unwrap();
    let (args, meta): (String, String) =
        sqlx::query_as("SELECT args::text, meta::text FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&a.pool)
            .await
            .unwrap();
    assert!(args.contains(r#""amount": 10.0"#), "{args}");
    assert!(args.contains(r#"[1.0, 2.5, 3]"#), "{args}");
    assert!(meta.contains(r#""ratio": 2.0"#), "{meta}");
    let (status, job) = a
        .call(Method::GET, &format!("/api/v1/jobs/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(job["args"]["amount"].is_f64(), "{job}");
    assert_eq!(job["args"]["amount"].to_string(), "10.0");
}

/// The API document's schemas of the engine's types are held at the HTTP edge
/// (`http/schema.rs`), mirrors of the types: every field the engine writes is stated, every
/// field stated as required is written. A field added to an engine type and not to its mirror
/// fails here.
#[tokio::test]
async fn the_documents_schemas_state_every_field_the_engine_writes() {
    use kickoff::engine::job_edit::JobEdit;
    use kickoff::engine::schedules::{JobTemplate, ScheduleSpec};
    let api = api().await;
    let doc = kickoff::http::openapi::document();
    let check = |name: &str, value: &Value| {
        let schema = &doc["components"]["schemas"][name];
        let stated: std::collections::BTreeSet<&str> = schema["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("no schema {name}"))
            .keys()
            .map(String::as_str)
            .collect();
        let written: std::collections::BTreeSet<&str> = value
            .as_object()
            .unwrap_or_else(|| panic!("{name}: {value}"))
            .keys()
            .map(String::as_str)
            .collect();
        let unstated: Vec<_> = written.difference(&stated).collect();
        assert!(
            unstated.is_empty(),
            "{name} writes fields its schema does not state: {unstated:?}"
        );
        for required in schema["required"].as_array().into_iter().flatten() {
            let field = required.as_str().unwrap();
            assert!(
                written.contains(field),
                "{name}: `{field}` is required, not written: {value}"
            );
        }
    };
    let (status, inserted) = api
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(
                r#"{"kind": "noop", "args": {"a": 1}, "tags": ["t"], "meta": {"m": 1},
                    "unique_key": "drift", "schedule_in_ms": 600000}"#,
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{inserted}");
    check("Job", &inserted["job"]);
    let id = inserted["job"]["id"].as_i64().unwrap();
    let (status, report) = api
        .call(
            Method::POST,
            "/api/v1/jobs/bulk",
            Some(&json!({"action": "cancel", "ids": [id]}).to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    check("BulkReport", &report);
    let (status, schedule) = api
        .call(
            Method::POST,
            "/api/v1/schedules",
            Some(r#"{"name": "drift", "cron": "0 3 * * *", "job": {"kind": "noop"}}"#),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{schedule}");
    check("ScheduleView", &schedule);
    check("JobTemplate", &schedule["job"]);
    let (status, queue) = api
        .call(
            Method::PATCH,
            "/api/v1/queues/default",
            Some(r#"{"concurrency": 5, "rate": "10/s", "per": "kind"}"#),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{queue}");
    check("QueueRow", &queue);
    // What requests carry, every field given.
    let edit = JobEdit {
        args: Some(json!({})),
        args_patch: Some(json!({})),
        priority: Some(1),
        queue: Some("q".into()),
        max_attempts: Some(2),
        tags: Some(vec!["t".into()]),
        meta_patch: Some(json!({})),
    };
    check("JobEdit", &serde_json::to_value(&edit).unwrap());
    let mut spec = ScheduleSpec::cron("drift", "0 3 * * *", JobTemplate::new("noop", json!({})));
    spec.every_ms = Some(60_000);
    spec.starts_at = Some(chrono::Utc::now());
    spec.ends_at = Some(chrono::Utc::now());
    check("ScheduleSpec", &serde_json::to_value(&spec).unwrap());
}

#[tokio::test]
async fn a_nul_in_the_histories_filters_is_refused_in_the_fields_words() {
    let api = api().await;
    for field in ["queue", "kind", "schedule"] {
        let (s, b) = api
            .call(
                Method::GET,
                &format!("/api/v1/stats/history?{field}=a%00b"),
                None,
            )
            .await;
        assert_error(s, &b, StatusCode::UNPROCESSABLE_ENTITY, "invalid");
        assert!(
            b["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("{field}: must not contain NUL")),
            "{field}: {b}"
        );
    }
}

#[tokio::test]
async fn a_nul_in_the_history_pages_filters_is_refused_in_the_fields_words() {
    let d = crate::common::dashboard::dashboard().await;
    for field in ["queue", "kind", "schedule"] {
        let (status, body) = d
            .server_fn("history", &format!("query[{field}]=a%00b"))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {body}");
        assert!(
            body.contains(&format!("{field}: must not contain NUL")),
            "{field}: {body}"
        );
    }
}
