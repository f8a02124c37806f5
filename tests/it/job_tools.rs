//! The operator's tools beyond single jobs (issue 35): the REST API's filters against the
//! dashboard's on the same data, their autocomplete, editing waiting jobs, moving them in time,
//! and exporting what a filter shows.

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::{dashboard_as, Dashboard};
use kickoff::accounts::{Accounts, Role, TokenScope};

/// A write token of a new operator (not an admin, not the creator of the test's jobs).
async fn operator_token(d: &Dashboard, name: &str) -> String {
    let accounts = Accounts::new(d.pool.clone());
    let user = accounts
        .create(name, "a long enough password", Role::Operator)
        .await
        .unwrap();
    accounts
        .create_token(&user, "script", TokenScope::Write)
        .await
        .unwrap()
        .1
}

/// The ids of a `GET /api/v1/jobs` answer.
fn api_ids(page: &Value) -> BTreeSet<i64> {
    page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect()
}

/// The ids the dashboard's list shows for its filter form's fields.
async fn dashboard_ids(d: &Dashboard, fields: &[(&str, &str)]) -> BTreeSet<i64> {
    let form: String = fields
        .iter()
        .map(|(k, v)| {
            format!(
                "query[{k}]={}",
                form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join("&");
    let (status, body) = d.server_fn("jobs", &form).await;
    assert_eq!(status, StatusCode::OK, "{fields:?}: {body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    page["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

async fn fail(d: &Dashboard, id: i64, state: &str, message: &str) {
    sqlx::query(
        "UPDATE jobs SET state = $2::job_state, attempt = 1,
                finalized_at = CASE WHEN $2 = 'discarded' THEN now() END,
                errors = jsonb_build_array(jsonb_build_object(
                    'attempt', 1, 'at', now(), 'node', 'test', 'message', $3::text))
         WHERE id = $1",
    )
    .bind(id)
    .bind(state)
    .bind(message)
    .execute(&d.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn the_apis_filters_match_the_dashboards_on_the_same_data() {
    let d = dashboard_as(Role::Admin).await;
    let in_min = |m: i64| m * 60_000;
    let j1 = d
        .new_job(
            json!({"kind": "noop", "queue": "q1", "tags": ["vip", "derby"],
                        "args": {"game_id": 1, "team": "lions"}, "schedule_in_ms": in_min(10)}),
        )
        .await;
    let j2 = d
        .new_job(json!({"kind": "noop", "queue": "q2", "tags": ["vip"],
                        "args": {"game_id": 2}, "schedule_in_ms": in_min(20)}))
        .await;
    let j3 = d
        .new_job(json!({"kind": "noop", "queue": "q1", "args": {"game_id": 1}}))
        .await;
    let j4 = d
        .new_job(json!({"kind": "noop", "queue": "q2", "tags": ["a,b"], "args": {}}))
        .await;
    fail(&d, j3, "retryable", "HTTP 503 from partner").await;
    fail(&d, j4, "discarded", "Timeout: 50%_ of the budget").await;
    // An earlier attempt of j2 started 2 s after it was due.
    sqlx::query(
        "INSERT INTO job_attempts (job_id, attempt, queue, kind, node, due_at, started_at,
                                   duration_ms, outcome)
         VALUES ($1, 1, 'q2', 'noop', 'test', now() - interval '3 s', now() - interval '1 s',
                 5, 'snoozed')",
    )
    .bind(j2)
    .execute(&d.pool)
    .await
    .unwrap();

    let from = chrono::Utc::now() + chrono::Duration::minutes(15);
    let from_api = from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let from_local = from.format("%Y-%m-%dT%H:%M").to_string();
    let ids = |v: &[i64]| v.iter().copied().collect::<BTreeSet<i64>>();
    // (the API's query, the dashboard's fields, the jobs both must list)
    type Case<'a> = (String, Vec<(&'a str, &'a str)>, BTreeSet<i64>);
    let cases: Vec<Case> = vec![
        (
            "state=scheduled".into(),
            vec![("state", "scheduled")],
            ids(&[j1, j2]),
        ),
        (
            "state=retryable,discarded".into(),
            vec![("state", "retryable,discarded")],
            ids(&[j3, j4]),
        ),
        ("queue=q1".into(), vec![("queue", "q1")], ids(&[j1, j3])),
        (
            "kind=noop&tags=vip".into(),
            vec![("kind", "noop"), ("tags", "vip")],
            ids(&[j1, j2]),
        ),
        (
            "tags=vip,derby".into(),
            vec![("tags", "vip,derby")],
            ids(&[j1]),
        ),
        (
            format!("tags={}", urlencode(r#"["a,b"]"#)),
            vec![("tags", r#"["a,b"]"#)],
            ids(&[j4]),
        ),
        (
            "args=game_id%3D1".into(),
            vec![("args", "game_id=1")],
            ids(&[j1, j3]),
        ),
        (
            format!("args={}", urlencode(r#"{"team":"lions"}"#)),
            vec![("args", r#"{"team":"lions"}"#)],
            ids(&[j1]),
        ),
        (
            "error=PARTNER".into(),
            vec![("error", "PARTNER")],
            ids(&[j3]),
        ),
        // `%` and `_` are matched as themselves, not as wildcards (`50%_` would match "503 f").
        (
            format!("error={}", urlencode("50%_")),
            vec![("error", "50%_")],
            ids(&[j4]),
        ),
        ("late_by_ms=1000".into(), vec![("late", "1000")], ids(&[j2])),
        (
            format!("scheduled_from={}", urlencode(&from_api)),
            vec![("from", &from_local), ("zone", "UTC")],
            ids(&[j2]),
        ),
        (
            "state=scheduled&queue=q1&tags=derby&args=team%3Dlions".into(),
            vec![
                ("state", "scheduled"),
                ("queue", "q1"),
                ("tags", "derby"),
                ("args", "team=lions"),
            ],
            ids(&[j1]),
        ),
    ];
    for (query, fields, expected) in cases {
        let page = d
            .api(Method::GET, &format!("/jobs?{query}"), Value::Null)
            .await;
        assert_eq!(api_ids(&page), expected, "the API's {query}");
        assert_eq!(
            dashboard_ids(&d, &fields).await,
            expected,
            "the dashboard's {fields:?}"
        );
    }

    // The same bad input is refused by both, naming the field.
    for (query, field) in [
        ("state=exploded", "state"),
        ("tags=", "none"),
        ("args=nopair", "args"),
        ("late_by_ms=-5", "late_by_ms"),
    ] {
        let (status, body) = d
            .api_as(
                crate::common::dashboard::TOKEN,
                Method::GET,
                &format!("/jobs?{query}"),
                Value::Null,
            )
            .await;
        if field == "none" {
            assert_eq!(
                status,
                StatusCode::OK,
                "a blank filter filters nothing: {body}"
            );
        } else {
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {body}");
            assert!(body.contains(field), "{query}: {body}");
        }
    }
    let long = "x".repeat(201);
    let (status, body) = d
        .api_as(
            crate::common::dashboard::TOKEN,
            Method::GET,
            &format!("/jobs?error={long}"),
            Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, _) = d.server_fn("jobs", &format!("query[error]={long}")).await;
    assert!(status.is_client_error());

    // Autocomplete: one endpoint, bounded lists, what recent jobs carry.
    let s = d.api(Method::GET, "/jobs/suggestions", Value::Null).await;
    let has = |list: &str, v: &str| s[list].as_array().unwrap().iter().any(|x| x == v);
    assert!(has("kinds", "noop") && has("kinds", "webhook"), "{s}");
    assert!(has("queues", "q1") && has("queues", "q2"), "{s}");
    assert!(
        has("tags", "vip") && has("tags", "derby") && has("tags", "a,b"),
        "{s}"
    );
    assert!(
        has("args_keys", "game_id") && has("args_keys", "team"),
        "{s}"
    );
    let (status, body) = d.server_fn("job_choices", "").await;
    assert_eq!(status, StatusCode::OK);
    let choices: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(choices["tags"], s["tags"]);
    assert_eq!(choices["args_keys"], s["args_keys"]);
    assert_eq!(choices["seen_kinds"], s["kinds"]);
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Crossing the error filter with secrets: a job's errors quote a secret its creator gave; an
/// operator sees that error with the secret hidden, so searching for the secret must not find
/// the job (the answer would confirm a guess), and a count or a bulk action over such a filter is
/// refused to them. An admin finds it.
#[tokio::test]
async fn the_error_filter_does_not_find_a_secret_the_caller_sees_hidden() {
    let d = dashboard_as(Role::Operator).await;
    let id = d
        .new_job(json!({"kind": "noop", "args": {"api_key": "hunter2-secret"}}))
        .await;
    fail(&d, id, "retryable", "partner refused key hunter2-secret").await;
    let ops = operator_token(&d, "ops2").await;

    let admin = d.api(Method::GET, "/jobs?error=hunter2", Value::Null).await;
    assert_eq!(api_ids(&admin), BTreeSet::from([id]));
    let (status, body) = d
        .api_as(&ops, Method::GET, "/jobs?error=hunter2", Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        api_ids(&serde_json::from_str(&body).unwrap()),
        BTreeSet::new()
    );
    // What they see of the message still matches.
    let (_, body) = d
        .api_as(
            &ops,
            Method::GET,
            "/jobs?error=partner%20refused",
            Value::Null,
        )
        .await;
    assert_eq!(
        api_ids(&serde_json::from_str(&body).unwrap()),
        BTreeSet::from([id])
    );
    // The dashboard's operator: the same.
    assert_eq!(
        dashboard_ids(&d, &[("error", "hunter2")]).await,
        BTreeSet::new()
    );
    assert_eq!(
        dashboard_ids(&d, &[("error", "partner")]).await,
        BTreeSet::from([id])
    );

    // Counting or acting on the filter would tell: refused, nothing changed.
    let (status, body) = d
        .api_as(
            &ops,
            Method::POST,
            "/jobs/bulk",
            json!({"action": "cancel", "filter": {"error": "hunter2"}}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = d.server_fn("bulk_preview", "query[error]=hunter2").await;
    assert!(status.is_client_error(), "{status}: {body}");
    assert_eq!(d.state_of(id).await, "retryable");
}

/// A confirmation count must count what the action will touch: with a late-by filter it counted
/// every job of the filter's states (the per-state counters answered it).
#[tokio::test]
async fn a_bulk_confirmation_counts_only_the_late_jobs() {
    let d = dashboard_as(Role::Operator).await;
    d.new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    // The newest: the confirmation's snapshot (`max_id`) holds both.
    let late = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    sqlx::query(
        "INSERT INTO job_attempts (job_id, attempt, queue, kind, node, due_at, started_at,
                                   duration_ms, outcome)
         VALUES ($1, 1, 'default', 'noop', 'test', now() - interval '3 s', now(), 5, 'snoozed')",
    )
    .bind(late)
    .execute(&d.pool)
    .await
    .unwrap();
    let (status, body) = d
        .server_fn("bulk_preview", "query[state]=scheduled&query[late]=1000")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let count: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(count["count"], 1, "{count}");
}
