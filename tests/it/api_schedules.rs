//! `/api/v1/schedules` in-process against real PostgreSQL: the whole life of a schedule, the
//! daylight-saving slots through the preview in three zones, and every bad input answered with a
//! clear 4xx, nothing stored and the refusal audited.

use axum::http::{Method, StatusCode};
use axum::Router;
use serde_json::{json, Value};

use crate::common::rest::{call, send};
use crate::common::test_db;

const TOKEN: &str = "schedules-token-123";

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
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        call(&self.app, method, path, Some(TOKEN), body.as_ref()).await
    }

    async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

fn webhook(name: &str, cron: &str, zone: &str) -> Value {
    json!({
        "name": name,
        "cron": cron,
        "time_zone": zone,
        "job": { "kind": "webhook", "args": { "url": "https://hooks.example.com/fixtures" },
                 "queue": "webhooks" }
    })
}

#[tokio::test]
async fn a_schedule_is_created_listed_previewed_changed_paused_triggered_and_deleted() {
    let a = api().await;
    let (status, created) = a
        .call(
            Method::POST,
            "/api/v1/schedules",
            Some(webhook("fixtures", "0 6 * * *", "Europe/London")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["source"], "api");
    assert_eq!(created["created_by"], "(bootstrap token)");
    assert!(
        created["rule_text"].as_str().unwrap().contains("06:00"),
        "{created}"
    );
    assert!(created["next_run_at"].is_string(), "the next run exists");
    assert_eq!(created["job"]["queue"], "webhooks");

    let (status, list) = a.call(Method::GET, "/api/v1/schedules", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 1);
    let (status, one) = a
        .call(Method::GET, "/api/v1/schedules/fixtures", None)
        .await;
    assert_eq!((status, &one["name"]), (StatusCode::OK, &json!("fixtures")));

    let (status, preview) = a
        .call(Method::GET, "/api/v1/schedules/fixtures/preview?n=3", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    let slots = preview["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 3);
    assert_eq!(slots[0]["at"], one["next_run_at"]);
    assert!(slots[0]["local"].as_str().unwrap().contains("T06:00:00"));

    // Change the rule: the run ahead is replaced.
    let (status, changed) = a
        .call(
            Method::PATCH,
            "/api/v1/schedules/fixtures",
            Some(json!({ "cron": "30 7 * * 1-5", "overlap": "skip" })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["version"], 2);
    assert_eq!(changed["overlap"], "skip");
    let ahead: Vec<Value> = sqlx::query_scalar(
        "SELECT meta FROM jobs WHERE meta ->> 'schedule' = 'fixtures' AND state = 'scheduled'",
    )
    .fetch_all(&a.pool)
    .await
    .unwrap();
    assert_eq!(ahead.len(), 1, "one run ahead");
    assert_eq!(ahead[0]["overlap"], "skip");

    let (status, paused) = a
        .call(Method::POST, "/api/v1/schedules/fixtures/pause", None)
        .await;
    assert_eq!((status, &paused["paused"]), (StatusCode::OK, &json!(true)));
    assert!(paused["next_run_at"].is_null());
    let (status, job) = a
        .call(Method::POST, "/api/v1/schedules/fixtures/trigger", None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    assert_eq!(job["kind"], "webhook");
    assert_eq!(job["meta"]["trigger"], true);
    let (status, runs) = a
        .call(Method::GET, "/api/v1/schedules/fixtures/runs", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        runs["runs"][0]["id"], job["id"],
        "the triggered run is in the history"
    );
    let (status, resumed) = a
        .call(Method::POST, "/api/v1/schedules/fixtures/resume", None)
        .await;
    assert_eq!(
        (status, &resumed["paused"]),
        (StatusCode::OK, &json!(false))
    );
    assert!(resumed["next_run_at"].is_string());

    let (status, _) = a
        .call(Method::DELETE, "/api/v1/schedules/fixtures", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = a
        .call(Method::GET, "/api/v1/schedules/fixtures", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE meta ->> 'schedule' = 'fixtures' AND state = 'scheduled'",
    )
    .fetch_one(&a.pool)
    .await
    .unwrap();
    assert_eq!(live, 0, "no run ahead is left behind");

    // Every change is in the audit log, with its route.
    let actions: Vec<String> =
        sqlx::query_scalar("SELECT action FROM audit_log WHERE ok ORDER BY id")
            .fetch_all(&a.pool)
            .await
            .unwrap();
    for action in [
        "api.POST /schedules",
        "api.PATCH /schedules/{name}",
        "api.POST /schedules/{name}/pause",
        "api.POST /schedules/{name}/trigger",
        "api.POST /schedules/{name}/resume",
        "api.DELETE /schedules/{name}",
    ] {
        assert!(actions.iter().any(|a| a == action), "{action}: {actions:?}");
    }
}

/// The preview of a daily 02:30 (01:30 in London, whose clocks change at 01:00) on both sides of
/// both daylight-saving switches of 2027, in three zones: once at the end of the skipped hour,
/// once at the first pass of the repeated one.
#[tokio::test]
async fn the_preview_shows_each_daylight_saving_rule_in_three_zones() {
    let a = api().await;
    let cases = [
        // (zone, time, from, the three slots in UTC)
        (
            "Europe/London",
            "30 1 * * *",
            "2027-03-27T00:00:00Z",
            [
                "2027-03-27T01:30:00Z",
                "2027-03-28T01:00:00Z",
                "2027-03-29T00:30:00Z",
            ],
        ),
        (
            "Europe/London",
            "30 1 * * *",
            "2027-10-30T00:00:00Z",
            [
                "2027-10-30T00:30:00Z",
                "2027-10-31T00:30:00Z",
                "2027-11-01T01:30:00Z",
            ],
        ),
        (
            "America/New_York",
            "30 2 * * *",
            "2027-03-13T00:00:00Z",
            [
                "2027-03-13T07:30:00Z",
                "2027-03-14T07:00:00Z",
                "2027-03-15T06:30:00Z",
            ],
        ),
        (
            "America/New_York",
            "30 1 * * *",
            "2027-11-06T00:00:00Z",
            [
                "2027-11-06T05:30:00Z",
                "2027-11-07T05:30:00Z",
                "2027-11-08T06:30:00Z",
            ],
        ),
        (
            "Australia/Sydney",
            "30 2 * * *",
            "2027-10-01T00:00:00Z",
            [
                "2027-10-01T16:30:00Z",
                "2027-10-02T16:00:00Z",
                "2027-10-03T15:30:00Z",
            ],
        ),
        (
            "Australia/Sydney",
            "30 2 * * *",
            "2027-04-02T00:00:00Z",
            [
                "2027-04-02T15:30:00Z",
                "2027-04-03T15:30:00Z",
                "2027-04-04T16:30:00Z",
            ],
        ),
    ];
    for (i, (zone, cron, from, want)) in cases.iter().enumerate() {
        let name = format!("dst-{i}");
        let (status, body) = a
            .call(
                Method::POST,
                "/api/v1/schedules",
                Some(webhook(&name, cron, zone)),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let (status, preview) = a
            .call(
                Method::GET,
                &format!("/api/v1/schedules/{name}/preview?n=3&from={from}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{preview}");
        let got: Vec<String> = preview["slots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                chrono::DateTime::parse_from_rfc3339(s["at"].as_str().unwrap())
                    .unwrap()
                    .to_utc()
                    .format("%Y-%m-%dT%H:%M:%SZ")
                    .to_string()
            })
            .collect();
        assert_eq!(got, want, "{zone} from {from}");
    }
}

#[tokio::test]
async fn bad_schedules_are_refused_with_the_reason_and_nothing_is_stored() {
    let a = api().await;
    let (status, _) = a
        .call(
            Method::POST,
            "/api/v1/schedules",
            Some(webhook("kept", "0 6 * * *", "UTC")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let jobs_before = a.count("jobs").await;

    let mut cases: Vec<(Value, StatusCode, &str)> = vec![
        (
            webhook("bad-hour", "0 25 * * *", "UTC"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "hour",
        ),
        (
            webhook("seven", "0 0 * * * * *", "UTC"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "7 fields",
        ),
        (
            webhook("never", "0 0 30 2 *", "UTC"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "never",
        ),
        (
            webhook("zone", "0 6 * * *", "Mars/Olympus"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "IANA",
        ),
        (
            webhook("kept", "0 7 * * *", "UTC"),
            StatusCode::CONFLICT,
            "exists",
        ),
        (
            webhook("bad name!", "0 7 * * *", "UTC"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "name",
        ),
        (
            json!({ "name": "both", "cron": "* * * * *", "every_ms": 1000,
                    "job": { "kind": "webhook", "args": { "url": "https://hooks.example.com/" } } }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "exactly one",
        ),
        (
            json!({ "name": "fast", "every_ms": 10,
                    "job": { "kind": "webhook", "args": { "url": "https://hooks.example.com/" } } }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "every_ms",
        ),
        (
            json!({ "name": "kind", "cron": "@daily", "job": { "kind": "no_such_kind" } }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "no_such_kind",
        ),
        (
            json!({ "name": "args", "cron": "@daily", "job": { "kind": "webhook", "args": {} } }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "url",
        ),
        (
            json!({ "name": "ended", "cron": "@daily", "ends_at": "2020-01-01T00:00:00Z",
                    "job": { "kind": "webhook", "args": { "url": "https://hooks.example.com/" } } }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "ends_at",
        ),
        (
            json!({ "name": "x", "cron": "@daily", "surprise": 1,
                    "job": { "kind": "webhook", "args": { "url": "https://hooks.example.com/" } } }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "surprise",
        ),
        (
            json!({ "name": "limit", "cron": "@daily", "missed": "run_all", "missed_limit": 0,
                    "job": { "kind": "webhook", "args": { "url": "https://hooks.example.com/" } } }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "missed_limit",
        ),
    ];
    cases.push((
        json!({ "name": "policy", "cron": "@daily", "overlap": "sometimes",
                "job": { "kind": "webhook", "args": { "url": "https://hooks.example.com/" } } }),
        StatusCode::UNPROCESSABLE_ENTITY,
        "overlap",
    ));
    for (body, want, says) in cases {
        let (status, answer) = a
            .call(Method::POST, "/api/v1/schedules", Some(body.clone()))
            .await;
        assert_eq!(status, want, "{body} -> {answer}");
        let text = answer.to_string();
        assert!(text.contains(says), "{body}: {text} should say {says}");
    }
    // The position of a bad field is given.
    let (_, answer) = a
        .call(
            Method::POST,
            "/api/v1/schedules",
            Some(webhook("pos", "0 0 * FOO *", "UTC")),
        )
        .await;
    assert_eq!(answer["error"]["code"], "invalid_cron", "{answer}");
    assert!(
        answer
            .to_string()
            .contains("at character 6, the month field"),
        "{answer}"
    );
    // Malformed JSON.
    let (status, _) = send(
        &a.app,
        Method::POST,
        "/api/v1/schedules",
        Some(TOKEN),
        Some((b"{\"name\": ".to_vec(), "application/json")),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Bad changes of the one that exists, and calls on one that does not.
    for (method, path, body, want) in [
        (
            Method::PATCH,
            "/api/v1/schedules/kept",
            Some(json!({ "cron": "0 99 * * *" })),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::PATCH,
            "/api/v1/schedules/kept",
            Some(json!({ "time_zone": "Nowhere" })),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::PATCH,
            "/api/v1/schedules/kept",
            Some(json!({ "name": "renamed" })),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::GET,
            "/api/v1/schedules/kept/preview?n=0",
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::GET,
            "/api/v1/schedules/kept/preview?n=101",
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::GET,
            "/api/v1/schedules/kept/runs?limit=0",
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::PATCH,
            "/api/v1/schedules/missing",
            Some(json!({ "paused": true })),
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/api/v1/schedules/missing/pause",
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/api/v1/schedules/missing/trigger",
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::DELETE,
            "/api/v1/schedules/missing",
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            "/api/v1/schedules/missing/preview",
            None,
            StatusCode::NOT_FOUND,
        ),
    ] {
        let (status, answer) = a.call(method.clone(), path, body).await;
        assert_eq!(status, want, "{method} {path}: {answer}");
    }
    // Nothing half-written: one schedule, its one run ahead, no more jobs.
    assert_eq!(a.count("schedules").await, 1);
    assert_eq!(a.count("jobs").await, jobs_before);
    let (_, kept) = a.call(Method::GET, "/api/v1/schedules/kept", None).await;
    assert_eq!(
        (kept["cron"].as_str(), kept["version"].as_i64()),
        (Some("0 6 * * *"), Some(1))
    );
    // Refusals are audited too.
    let refused: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE NOT ok AND action LIKE 'api.% /schedules%'",
    )
    .fetch_one(&a.pool)
    .await
    .unwrap();
    assert!(refused >= 15, "{refused} refusals audited");
}

#[tokio::test]
async fn the_openapi_document_lists_the_schedule_routes() {
    let a = api().await;
    let (status, doc) = a.call(Method::GET, "/api/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    for path in [
        "/schedules",
        "/schedules/{name}",
        "/schedules/{name}/pause",
        "/schedules/{name}/resume",
        "/schedules/{name}/trigger",
        "/schedules/{name}/preview",
        "/schedules/{name}/runs",
    ] {
        assert!(
            doc["paths"][format!("/api/v1{path}")].is_object(),
            "{path} missing"
        );
    }
    let spec = doc.to_string();
    assert!(
        spec.contains("cancel_previous") && spec.contains("run_all"),
        "the policies are listed"
    );
}
