//! The operator's tools beyond single jobs (issue 35): the REST API's filters against the
//! dashboard's on the same data, their autocomplete, editing waiting jobs, moving them in time,
//! and exporting what a filter shows.

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::{dashboard_as, Dashboard, TOKEN};
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
            .api_as(TOKEN, Method::GET, &format!("/jobs?{query}"), Value::Null)
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
            TOKEN,
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
    // Neither a cursor nor a short page may tell that a hidden match exists.
    let (_, body) = d
        .api_as(
            &ops,
            Method::GET,
            "/jobs?error=hunter2&limit=1",
            Value::Null,
        )
        .await;
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["next_before"], Value::Null, "{page}");
    let (status, body) = d
        .api_as(
            &ops,
            Method::GET,
            "/jobs/export?error=hunter2&format=jsonl",
            Value::Null,
        )
        .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, ""));
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

async fn audit_filter(d: &Dashboard, action: &str) -> Value {
    sqlx::query_scalar("SELECT filter FROM audit_log WHERE action = $1 ORDER BY id DESC LIMIT 1")
        .bind(action)
        .fetch_one(&d.pool)
        .await
        .unwrap()
}

async fn job(d: &Dashboard, id: i64) -> Value {
    d.api(Method::GET, &format!("/jobs/{id}"), Value::Null)
        .await
}

#[tokio::test]
async fn a_waiting_job_is_edited_checked_like_an_insert_and_audited_before_and_after() {
    let d = dashboard_as(Role::Admin).await;
    let id = d
        .new_job(
            json!({"kind": "noop", "args": {"game_id": 7}, "tags": ["a"],
                        "schedule_in_ms": 600_000}),
        )
        .await;
    let edited = d
        .api(
            Method::PATCH,
            &format!("/jobs/{id}"),
            json!({"priority": 3, "queue": "q9", "tags": ["b"], "args_patch": {"team": "x"},
                   "max_attempts": 5, "meta_patch": {"note": "moved"}}),
        )
        .await;
    assert_eq!(edited["args"], json!({"game_id": 7, "team": "x"}));
    assert_eq!(
        (
            &edited["queue"],
            &edited["priority"],
            &edited["tags"],
            &edited["max_attempts"]
        ),
        (&json!("q9"), &json!(3), &json!(["b"]), &json!(5))
    );
    assert_eq!(edited["meta"]["note"], "moved");
    assert_eq!(edited["state"], "scheduled", "its time is not the edit's");
    let entry = audit_filter(&d, "api.PATCH /jobs/{id}").await;
    assert_eq!(entry["before"]["queue"], "default", "{entry}");
    assert_eq!(entry["after"]["queue"], "q9", "{entry}");
    assert_eq!(entry["before"]["args"], json!({"game_id": 7}), "{entry}");
    assert!(
        entry["before"].get("kind").is_none(),
        "only what changed: {entry}"
    );

    // Refused, and nothing changed: the worker's check, the edit's own rules, unknown fields.
    let unchanged = job(&d, id).await;
    for (body, status) in [
        (
            json!({"args_patch": {"sleep_ms": "soon"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"args_patch": {"sleep_ms": 10_000_000}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (json!({}), StatusCode::UNPROCESSABLE_ENTITY),
        (
            json!({"args": {}, "args_patch": {}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"queue": "Not A Queue"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (json!({"priority": 10}), StatusCode::UNPROCESSABLE_ENTITY),
        (
            json!({"meta_patch": {"owner": "question 1"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (json!({"tags": [""]}), StatusCode::UNPROCESSABLE_ENTITY),
        // Kickoff's own keys: a schedule run's `trigger` would escape the missed-run policy.
        (
            json!({"meta_patch": {"trigger": true}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"meta_patch": {"schedule_id": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"meta_patch": {"traceparent": "x"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let (s, text) = d
            .api_as(TOKEN, Method::PATCH, &format!("/jobs/{id}"), body.clone())
            .await;
        assert_eq!(s, status, "{body}: {text}");
    }
    let (s, _) = d
        .api_as(
            TOKEN,
            Method::PATCH,
            &format!("/jobs/{id}"),
            json!({"bogus": 1}),
        )
        .await;
    assert!(s.is_client_error());
    assert_eq!(job(&d, id).await, unchanged);
    let (s, _) = d
        .api_as(TOKEN, Method::PATCH, "/jobs/999999", json!({"priority": 1}))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // The body is checked against the schema the document serves: `3.0` is an integer there.
    let edited = d
        .api(
            Method::PATCH,
            &format!("/jobs/{id}"),
            json!({"priority": 3.0}),
        )
        .await;
    assert_eq!(edited["priority"], 3);
    let (s, text) = d
        .api_as(
            TOKEN,
            Method::PATCH,
            &format!("/jobs/{id}"),
            json!({"max_attempts": 0}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(text.contains("max_attempts"), "{text}");

    // A job that already made attempts must still be allowed its next one.
    let tried = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    sqlx::query("UPDATE jobs SET state = 'retryable', attempt = 2 WHERE id = $1")
        .bind(tried)
        .execute(&d.pool)
        .await
        .unwrap();
    let (s, text) = d
        .api_as(
            TOKEN,
            Method::PATCH,
            &format!("/jobs/{tried}"),
            json!({"max_attempts": 2}),
        )
        .await;
    // The job's state refuses it, not a rule of the edit: 409, as for a running job.
    assert_eq!(s, StatusCode::CONFLICT, "{text}");
    let (s, text) = d
        .api_as(
            TOKEN,
            Method::PATCH,
            &format!("/jobs/{tried}"),
            json!({"max_attempts": 3}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{text}");

    // Never an executing or a final job: 409.
    sqlx::query(
        "UPDATE jobs SET state = 'executing', attempt = 1, attempted_at = now(),
                attempted_by = 'elsewhere', lease_expires_at = now() + interval '1 hour',
                claim_token = 1 WHERE id = $1",
    )
    .bind(id)
    .execute(&d.pool)
    .await
    .unwrap();
    let (s, text) = d
        .api_as(
            TOKEN,
            Method::PATCH,
            &format!("/jobs/{id}"),
            json!({"priority": 1}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{text}");
    let done = d.new_job(json!({"kind": "noop"})).await;
    d.api(Method::POST, &format!("/jobs/{done}/cancel"), Value::Null)
        .await;
    let (s, text) = d
        .api_as(
            TOKEN,
            Method::PATCH,
            &format!("/jobs/{done}"),
            json!({"priority": 1}),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{text}");
}

/// Crossing edits with secrets: an operator who does not see a job's header values must not
/// point it at a URL of theirs (a patch keeps the headers it does not name), nor do it to many
/// jobs at once; the audit entry of an admin's edit keeps no secret.
#[tokio::test]
async fn an_edit_cannot_send_a_secret_the_editor_does_not_see_elsewhere() {
    let d = dashboard_as(Role::Admin).await;
    let id = d
        .new_job(
            json!({"kind": "noop", "args": {"api_key": "hunter2-secret"},
                        "schedule_in_ms": 600_000}),
        )
        .await;
    let ops = operator_token(&d, "ops2").await;
    let (s, text) = d
        .api_as(
            &ops,
            Method::PATCH,
            &format!("/jobs/{id}"),
            json!({"args_patch": {"url": "x"}}),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{text}");
    // Its priority is not a secret.
    let (s, text) = d
        .api_as(
            &ops,
            Method::PATCH,
            &format!("/jobs/{id}"),
            json!({"priority": 2}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let (s, text) = d
        .api_as(
            &ops,
            Method::POST,
            "/jobs/edit",
            json!({"ids": [id], "edit": {"args_patch": {"url": "x"}}}),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{text}");
    d.api(
        Method::PATCH,
        &format!("/jobs/{id}"),
        json!({"args_patch": {"api_key": "new-secret-value"}}),
    )
    .await;
    let entry = audit_filter(&d, "api.PATCH /jobs/{id}").await.to_string();
    assert!(
        !entry.contains("hunter2") && !entry.contains("new-secret-value"),
        "{entry}"
    );
}

#[tokio::test]
async fn a_bulk_edit_on_a_confirmed_filter_leaves_later_jobs_and_refuses_invalid_ones() {
    let d = dashboard_as(Role::Admin).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(
            d.new_job(json!({"kind": "noop", "args": {"partner": "old", "n": n},
                             "schedule_in_ms": 600_000}))
                .await,
        );
    }
    let final_one = d
        .new_job(json!({"kind": "noop", "args": {"partner": "old"}}))
        .await;
    d.api(
        Method::POST,
        &format!("/jobs/{final_one}/cancel"),
        Value::Null,
    )
    .await;
    let count = d
        .api(Method::GET, "/jobs/count?args=partner%3Dold", Value::Null)
        .await;
    assert_eq!(count["count"], 4, "{count}");
    let max_id = count["max_id"].as_i64().unwrap();
    let later = d
        .new_job(json!({"kind": "noop", "args": {"partner": "old"}, "schedule_in_ms": 600_000}))
        .await;
    // Without the snapshot: refused.
    let (s, _) = d
        .api_as(
            TOKEN,
            Method::POST,
            "/jobs/edit",
            json!({"filter": {"args": {"partner": "old"}}, "edit": {"priority": 1}}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    let report = d
        .api(
            Method::POST,
            "/jobs/edit",
            json!({"filter": {"args": {"partner": "old"}, "max_id": max_id},
                   "edit": {"args_patch": {"partner": "new"}, "priority": 2}}),
        )
        .await;
    assert_eq!(report["changed"], 3, "{report}");
    assert_eq!(report["skipped"], 1, "the cancelled one: {report}");
    for id in &ids {
        let j = job(&d, *id).await;
        assert_eq!(
            (&j["args"]["partner"], &j["priority"]),
            (&json!("new"), &json!(2))
        );
    }
    assert_eq!(job(&d, later).await["args"]["partner"], "old");
    assert_eq!(job(&d, final_one).await["args"]["partner"], "old");

    // An edit that makes one job invalid leaves that one and says why.
    sqlx::query("UPDATE jobs SET args = args || '{\"sleep_ms\": 3500000}' WHERE id = $1")
        .bind(ids[0])
        .execute(&d.pool)
        .await
        .unwrap();
    let report = d
        .api(
            Method::POST,
            "/jobs/edit",
            json!({"ids": ids, "edit": {"args_patch": {"sleep_ms": 10_000_000}}}),
        )
        .await;
    assert_eq!(report["refused"], 3, "{report}");
    assert!(
        report["refusal"].as_str().unwrap().contains("sleep_ms"),
        "{report}"
    );
    let entry = audit_filter(&d, "api.POST /jobs/edit").await;
    assert_eq!(
        entry["edit"]["args_patch"]["sleep_ms"], 10_000_000,
        "{entry}"
    );
}

#[tokio::test]
async fn a_bulk_edit_goes_on_past_a_job_the_insert_rules_refuse() {
    // The rules of a job's fields are checked by the database (`kickoff_check_job`): a refusal
    // there must leave the batch's transaction usable for the jobs after it.
    let d = dashboard_as(Role::Admin).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(
            d.new_job(json!({"kind": "noop", "args": {"n": n}, "schedule_in_ms": 600_000}))
                .await,
        );
    }
    // The first job's args are near the bound already: the edit takes them past it.
    sqlx::query("UPDATE jobs SET args = args || jsonb_build_object('pad', repeat('x', 240000)) WHERE id = $1")
        .bind(ids[0])
        .execute(&d.pool)
        .await
        .unwrap();
    let report = d
        .api(
            Method::POST,
            "/jobs/edit",
            json!({"ids": ids, "edit": {"args_patch": {"note": "y".repeat(30_000)}}}),
        )
        .await;
    assert_eq!(
        (&report["changed"], &report["refused"]),
        (&json!(2), &json!(1)),
        "{report}"
    );
    assert!(
        report["refusal"]
            .as_str()
            .unwrap()
            .contains("args: larger than 262144 bytes"),
        "{report}"
    );
    for (i, id) in ids.iter().enumerate() {
        let j = job(&d, *id).await;
        assert_eq!(j["args"].get("note").is_some(), i > 0, "job {id}");
    }
}

async fn due_at(d: &Dashboard, id: i64) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar("SELECT scheduled_at FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&d.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_postponed_game_moves_its_jobs_and_questions_and_leaves_later_jobs() {
    let d = dashboard_as(Role::Admin).await;
    let at = |min: i64| (chrono::Utc::now() + chrono::Duration::minutes(min)).to_rfc3339();
    let reminder = d
        .new_job(json!({"kind": "noop", "args": {"game_id": 42}, "scheduled_at": at(60)}))
        .await;
    let kickoff = d
        .new_job(json!({"kind": "noop", "args": {"game_id": 42}, "scheduled_at": at(120)}))
        .await;
    let now_due = d
        .new_job(json!({"kind": "noop", "args": {"game_id": 42}}))
        .await;
    let other_game = d
        .new_job(json!({"kind": "noop", "args": {"game_id": 43}, "scheduled_at": at(90)}))
        .await;
    let question = d
        .api(
            Method::POST,
            "/questions",
            json!({"game": "Lions vs Bears", "prompt": "First goal?", "choices": ["Lions", "Bears"],
                   "game_time": at(120)}),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let due = |id: i64| due_at(&d, id);
    let question_time = |q: Value| -> chrono::DateTime<chrono::Utc> {
        serde_json::from_value(q["game_time"].clone()).unwrap()
    };
    let game_time_before = question_time(
        d.api(Method::GET, &format!("/questions/{question}"), Value::Null)
            .await,
    );
    let mut before = Vec::new();
    for id in [reminder, kickoff, now_due, other_game] {
        before.push(due(id).await);
    }
    let count = d
        .api(Method::GET, "/jobs/count?args=game_id%3D42", Value::Null)
        .await;
    assert_eq!(count["count"], 3, "{count}");
    let max_id = count["max_id"].as_i64().unwrap();
    let inserted_after = d
        .new_job(json!({"kind": "noop", "args": {"game_id": 42}, "scheduled_at": at(30)}))
        .await;

    for bad in [
        json!({"filter": {"args": {"game_id": 42}}, "by_ms": 3_600_000}),
        json!({"filter": {"args": {"game_id": 42}, "max_id": max_id}, "by_ms": 1, "to": at(1)}),
        json!({"filter": {"args": {"game_id": 42}, "max_id": max_id}}),
        json!({"filter": {"args": {"game_id": 42}, "max_id": max_id}, "by_ms": i64::MAX}),
        json!({"filter": {"args": {"game_id": 42}, "max_id": max_id}, "by_ms": -86_400_000i64 * 3,
               "game": "Lions vs Bears"}),
    ] {
        let (s, text) = d
            .api_as(TOKEN, Method::POST, "/jobs/shift", bad.clone())
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {text}");
    }
    assert_eq!(
        due(reminder).await,
        before[0],
        "a refused shift moves nothing"
    );

    let report = d
        .api(
            Method::POST,
            "/jobs/shift",
            json!({"filter": {"args": {"game_id": 42}, "max_id": max_id}, "by_ms": 3_600_000,
                   "game": "Lions vs Bears"}),
        )
        .await;
    assert_eq!(report["jobs"]["changed"], 3, "{report}");
    assert_eq!(report["questions"], json!([question]), "{report}");
    let hour = chrono::Duration::hours(1);
    assert_eq!(due(reminder).await, before[0] + hour);
    assert_eq!(due(kickoff).await, before[1] + hour);
    assert_eq!(due(now_due).await, before[2] + hour);
    assert_eq!(d.state_of(now_due).await, "scheduled", "due in an hour now");
    assert_eq!(due(other_game).await, before[3], "another game's job stays");
    assert!(
        due(inserted_after).await < before[0],
        "a job inserted after the count stays"
    );
    let q = d
        .api(Method::GET, &format!("/questions/{question}"), Value::Null)
        .await;
    let game_time: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(q["game_time"].clone()).unwrap();
    let lock_job = q["lock_job_id"].as_i64().unwrap();
    assert_eq!(
        due(lock_job).await,
        game_time,
        "the lock job moved with its question"
    );
    assert_eq!(game_time, game_time_before + hour);
    assert!(audit_filter(&d, "questions.shift").await["questions"].is_array());
    assert_eq!(
        audit_filter(&d, "api.POST /jobs/shift").await["by_ms"],
        3_600_000
    );

    // `to`: the earliest matching job lands there, the others keep their distance.
    let target = chrono::Utc::now() + chrono::Duration::hours(5);
    let count = d
        .api(Method::GET, "/jobs/count?args=game_id%3D43", Value::Null)
        .await;
    let report = d
        .api(
            Method::POST,
            "/jobs/shift",
            json!({"filter": {"args": {"game_id": 43}, "max_id": count["max_id"]},
                   "to": target.to_rfc3339()}),
        )
        .await;
    assert_eq!(report["jobs"]["changed"], 1, "{report}");
    let moved = due(other_game).await;
    assert!(
        (moved - target).num_milliseconds().abs() <= 1,
        "{moved} vs {target}"
    );

    // A filter matching a question's lock job moves the question (its owner) with it.
    let count = d
        .api(Method::GET, "/jobs/count?kind=lock_question", Value::Null)
        .await;
    let report = d
        .api(
            Method::POST,
            "/jobs/shift",
            json!({"filter": {"kind": "lock_question", "max_id": count["max_id"]},
                   "by_ms": 600_000}),
        )
        .await;
    assert_eq!(report["questions"], json!([question]), "{report}");
    assert_eq!(
        due(lock_job).await,
        game_time_before + hour + chrono::Duration::minutes(10)
    );
}

/// The peak resident memory of process `pid` so far, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// 100,000 rows of 600 bytes of args each (a 70 MB CSV) leave a real server through a stream:
/// its peak memory grows by a small part of that, every row arrives once, newest first, and the
/// answer states its row limit.
#[tokio::test]
async fn an_export_of_100000_rows_streams_with_bounded_memory() {
    use crate::common::server::{Server, TOKEN as SERVER_TOKEN};
    let db = crate::common::test_db().await;
    sqlx::query(
        "INSERT INTO jobs (queue, kind, args, state, scheduled_at, tags)
         SELECT 'export', 'noop', jsonb_build_object('n', g, 'pad', repeat('x', 600)),
                'scheduled', now() + interval '1 day', '{bulk}'
         FROM generate_series(1, 100000) g",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let server = Server::start(&[("DATABASE_URL", db.url.clone())]);
    let http = reqwest::Client::new();
    let get = |query: &str| {
        http.get(format!("http://{}/api/v1/jobs/export?{query}", server.addr))
            .bearer_auth(SERVER_TOKEN)
    };
    // Warm: the first answers' allocations are not the export's.
    let small = get("format=jsonl&max_rows=1000&tags=bulk")
        .send()
        .await
        .unwrap();
    assert_eq!(small.headers()["kickoff-max-rows"], "1000");
    assert_eq!(small.headers()["content-type"], "application/jsonl");
    let text = small.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1000);
    assert_eq!(lines[0]["args"]["n"], 100_000, "newest first");

    let before = peak_rss_kib(server.child.id());
    let mut res = get("queue=export").send().await.unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::OK);
    assert_eq!(res.headers()["kickoff-max-rows"], "100000");
    let (mut bytes, mut newlines, mut chunks) = (0usize, 0usize, 0usize);
    let mut head = Vec::new();
    while let Some(chunk) = res.chunk().await.unwrap() {
        if head.len() < 2000 {
            head.extend_from_slice(&chunk[..chunk.len().min(2000)]);
        }
        bytes += chunk.len();
        newlines += chunk.iter().filter(|b| **b == b'\n').count();
        chunks += 1;
    }
    let grew_kib = peak_rss_kib(server.child.id()).saturating_sub(before);
    assert_eq!(newlines, 100_001, "a header line and every row once");
    assert!(bytes > 60_000_000, "{bytes} bytes");
    assert!(chunks > 100, "streamed in pieces, not one buffer: {chunks}");
    assert!(
        grew_kib < 20_000,
        "the server's peak memory grew by {grew_kib} KiB for a {bytes}-byte export"
    );
    let mut csv = csv::Reader::from_reader(&head[..]);
    let first = csv.records().next().unwrap().unwrap();
    assert_eq!(csv.headers().unwrap().get(0), Some("id"));
    assert_eq!(&first[2], "noop");
    assert!(first[12].contains("\"n\":100000"), "{first:?}");
}

/// The dashboard's side of the same tools: the job page's edit form (only what changed is sent;
/// args shown with secrets hidden are not written back), a bulk move in time and a bulk edit on
/// a confirmed filter, and the list's export with the session.
#[tokio::test]
async fn the_dashboard_edits_moves_and_exports_what_its_filter_shows() {
    let d = dashboard_as(Role::Operator).await;
    let id = d
        .new_job(
            json!({"kind": "noop", "args": {"game_id": 5}, "tags": ["x"],
                        "schedule_in_ms": 600_000}),
        )
        .await;
    // A tag holding a comma survives an edit of something else on the page.
    let commas = d
        .new_job(json!({"kind": "noop", "tags": ["a,b"], "schedule_in_ms": 600_000}))
        .await;
    let form = |fields: &[(&str, &str)]| -> String {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (k, v) in fields {
            s.append_pair(k, v);
        }
        s.finish()
    };
    let shown = "{\n  \"game_id\": 5\n}";
    let (status, body) = d
        .server_fn(
            "edit_job",
            &form(&[
                ("id", &id.to_string()),
                ("input[args]", shown),
                ("input[args_shown]", shown),
                ("input[priority]", "4"),
                ("input[queue]", "default"),
                ("input[max_attempts]", "25"),
                ("input[tags]", "x, y"),
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let j = job(&d, id).await;
    assert_eq!(
        (&j["priority"], &j["tags"], &j["args"]),
        (&json!(4), &json!(["x", "y"]), &json!({"game_id": 5}))
    );
    let entry: Value = sqlx::query_scalar("SELECT filter FROM audit_log WHERE action = 'job.edit'")
        .fetch_one(&d.pool)
        .await
        .unwrap();
    assert_eq!(entry["after"]["priority"], 4, "{entry}");
    let (status, body) = d
        .server_fn(
            "edit_job",
            &form(&[
                ("id", &commas.to_string()),
                ("input[args]", "{}"),
                ("input[args_shown]", "{}"),
                ("input[priority]", "5"),
                ("input[queue]", "default"),
                ("input[max_attempts]", "20"),
                ("input[tags]", "a,b"),
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let j = job(&d, commas).await;
    assert_eq!((&j["priority"], &j["tags"]), (&json!(5), &json!(["a,b"])));
    // Invalid args: refused, nothing changed.
    let (status, _) = d
        .server_fn(
            "edit_job",
            &form(&[
                ("id", &id.to_string()),
                ("input[args]", r#"{"sleep_ms": "soon"}"#),
                ("input[args_shown]", shown),
                ("input[priority]", "4"),
                ("input[queue]", "default"),
                ("input[max_attempts]", "25"),
                ("input[tags]", "x, y"),
            ]),
        )
        .await;
    assert!(status.is_client_error());
    assert_eq!(job(&d, id).await["args"], json!({"game_id": 5}));

    // A bulk move in time on the confirmed filter.
    let before = due_at(&d, id).await;
    let (status, body) = d.server_fn("bulk_preview", "query[args]=game_id%3D5").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let count: Value = serde_json::from_str(&body).unwrap();
    let max_id = count["max_id"].as_i64().unwrap();
    let (status, body) = d
        .server_fn(
            "bulk",
            &format!("action=shift&query[args]=game_id%3D5&query[max_id]={max_id}&change[by]=-5m"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(due_at(&d, id).await, before - chrono::Duration::minutes(5));
    let (status, body) = d
        .server_fn(
            "bulk",
            &format!(
                "action=edit&query[args]=game_id%3D5&query[max_id]={max_id}&change[priority]=1"
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(job(&d, id).await["priority"], 1);
    let (status, _) = d
        .server_fn("bulk", &format!("action=shift&ids={id}&change[by]=soon"))
        .await;
    assert!(status.is_client_error());
    // Past the schedulable range, with a game's questions to move: refused, nothing moved.
    for by in ["9000000000000000ms", "-5000d"] {
        let (status, body) = d
            .server_fn(
                "bulk",
                &format!(
                    "action=shift&query[args]=game_id%3D5&query[max_id]={max_id}&change[by]={by}\
                     &change[game]=Lions"
                ),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{by}: {body}");
    }
    assert_eq!(due_at(&d, id).await, before - chrono::Duration::minutes(5));
    // Moved into the past: due now, not late by the move (a late-start policy would skip it).
    let (status, body) = d
        .server_fn(
            "bulk",
            &format!("action=shift&query[args]=game_id%3D5&query[max_id]={max_id}&change[by]=-2h"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let now: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&d.pool)
        .await
        .unwrap();
    assert!((due_at(&d, id).await - now).num_seconds().abs() < 5);
    assert_eq!(d.state_of(id).await, "available");

    // The list's export links, with the session.
    let res = d.get("/jobs/export?args=game_id%3D5&format=jsonl").await;
    assert_eq!(res.status(), StatusCode::OK);
    let bytes = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    let rows: Vec<Value> = String::from_utf8_lossy(&bytes)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], id);
    let (status, page) = d.page("/jobs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("/jobs/export?format=csv"),
        "the list offers its export"
    );
}

/// A selection moved in time on the dashboard moves the questions whose lock jobs it holds (a
/// lock job moves only with its question, so its game time and its lock stay together), audited
/// as the filter's move is.
#[tokio::test]
async fn a_selection_moved_in_time_moves_the_questions_of_its_lock_jobs() {
    let d = dashboard_as(Role::Admin).await;
    let game_time = chrono::Utc::now() + chrono::Duration::minutes(90);
    let question = d
        .api(
            Method::POST,
            "/questions",
            json!({"game": "Owls vs Cats", "prompt": "First goal?", "choices": ["Owls", "Cats"],
                   "game_time": game_time.to_rfc3339()}),
        )
        .await;
    let lock = question["lock_job"]["id"].as_i64().unwrap();
    let other = d
        .new_job(json!({"kind": "noop", "scheduled_at": game_time.to_rfc3339()}))
        .await;
    let (lock_before, other_before) = (due_at(&d, lock).await, due_at(&d, other).await);
    let (status, body) = d
        .server_fn(
            "bulk",
            &format!("action=shift&ids={lock}%2C{other}&change[by]=1h"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let hour = chrono::Duration::hours(1);
    assert_eq!(due_at(&d, other).await, other_before + hour);
    assert_eq!(
        due_at(&d, lock).await,
        lock_before + hour,
        "the lock job moved"
    );
    let id = question["id"].as_i64().unwrap();
    let moved = d
        .api(Method::GET, &format!("/questions/{id}"), Value::Null)
        .await;
    let moved: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(moved["game_time"].clone()).unwrap();
    assert_eq!(moved, lock_before + hour, "the question moved with it");
    let entry: Value =
        sqlx::query_scalar("SELECT filter FROM audit_log WHERE action = 'questions.shift'")
            .fetch_one(&d.pool)
            .await
            .unwrap();
    assert_eq!(entry["questions"], json!([id]), "{entry}");
}

/// A tags filter reads the index of the tagged jobs (`jobs_tagged_idx`, which leaves out the jobs
/// without tags so that their completions write no entry into it: issue 48) and still finds
/// every job carrying the tags, running ones included.
#[tokio::test]
async fn a_tags_filter_reads_the_index_of_the_tagged_jobs() {
    use kickoff::engine::store::jobs::{job_list, JobFilter};
    use sqlx::Connection;
    let db = crate::common::test_db().await;
    sqlx::query(
        "INSERT INTO jobs (kind, state, finalized_at, tags)
         SELECT 'probe', 'completed', now(),
                CASE WHEN i % 200 = 0 THEN '{vip,derby}'::text[] ELSE '{}' END
         FROM generate_series(1, 6000) i",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO jobs (kind, state, tags) VALUES ('probe', 'available', '{vip}'),
                                                   ('probe', 'scheduled', '{vip}'),
                                                   ('probe', 'available', '{}')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE jobs").execute(&db.pool).await.unwrap();
    let expected: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM jobs WHERE 'vip' = ANY(tags) ORDER BY id DESC")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(expected.len(), 32);

    // The index's scans, counted on a connection of its own to the database itself (not through
    // a pooler), its statistics flushed once the listing is done.
    let mut conn = sqlx::PgConnection::connect(&db.direct_url).await.unwrap();
    let before = tagged_index_scans(&mut conn).await;
    let filter = JobFilter {
        tags: vec!["vip".into()],
        ..JobFilter::default()
    };
    let listed: Vec<i64> = job_list(&mut conn, &filter, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id.0)
        .collect();
    assert_eq!(listed, expected);
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut conn)
        .await
        .unwrap();
    let after = tagged_index_scans(&mut conn).await;
    assert!(
        after > before,
        "the tags filter did not read jobs_tagged_idx ({before} scans before, {after} after)"
    );
}

/// How many scans `jobs_tagged_idx` has had, as the statistics say.
async fn tagged_index_scans(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'jobs_tagged_idx'",
    )
    .fetch_one(conn)
    .await
    .expect("the index of the tagged jobs")
}
