//! The dashboard's server side in-process (tower `oneshot`) against real PostgreSQL: every page
//! renders its data on the server, and the server functions behind its forms answer bad input
//! with a 4xx and leave everything as it was.
//!
//! Longer than 700 lines on purpose: one self-contained scenario per test, with the helpers they
//! share at the top; split it by area when a new area's tests arrive.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::{dashboard, dashboard_as, send, server_fn_as, sign_in, PASSWORD};
use kickoff::accounts::Role;

#[tokio::test]
async fn every_page_renders_its_data_on_the_server() {
    let d = dashboard().await;
    let id = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"game_id": 4242}}))
        .await;
    let question = d
        .api(
            Method::POST,
            "/questions",
            json!({"game": "Bears vs Wolves", "prompt": "First goal?", "choices": ["Bears", "Wolves"],
                   "game_time": (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339()}),
        )
        .await["id"]
        .as_i64()
        .unwrap();

    let pages = [
        ("/", "Jobs by state"),
        ("/jobs", "game_id"),
        ("/jobs?args=game_id%3D4242", "4242"),
        (&format!("/jobs/{id}") as &str, "\"game_id\": 4242"),
        ("/timers", "in 9 min"),
        ("/failures", "No jobs match"),
        ("/queues", "default"),
        ("/jobs/new", "Create job"),
        ("/questions", "Bears vs Wolves"),
        (&format!("/questions/{question}"), "Predictions per choice"),
        ("/questions/new", "Create question"),
    ];
    for (path, expected) in pages {
        let (status, body) = d.page(path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        // Rendered on the server, data included (the dashboard works without JavaScript).
        assert!(body.contains(expected), "{path} lacks {expected:?}");
    }
}

#[tokio::test]
async fn a_page_for_a_missing_job_or_question_is_a_404_that_says_so() {
    let d = dashboard().await;
    let (status, body) = d.page("/jobs/987654").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("job 987654 not found"));
    let (status, _) = d.page("/questions/987654").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_bad_filter_in_the_address_is_explained_not_a_server_error() {
    let d = dashboard().await;
    for (path, message) in [
        ("/jobs?state=exploded", "unknown state"),
        ("/jobs?args=no-pair-here", "is not key=value"),
        ("/jobs?from=yesterday", "is not a date and time"),
    ] {
        let (status, body) = d.page(path).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}");
        assert!(body.contains(message), "{path} lacks {message:?}");
    }
}

#[tokio::test]
async fn job_actions_refuse_bad_input_with_a_4xx_and_change_nothing() {
    let d = dashboard().await;
    let id = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;

    let cases = [
        (
            "job_action",
            "id=987654&action=cancel".to_string(),
            StatusCode::NOT_FOUND,
        ),
        (
            "job_action",
            format!("id={id}&action=explode"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "job_action",
            "id=abc&action=cancel".to_string(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "job_action",
            "action=cancel".to_string(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "reschedule_job",
            format!("id={id}&at=soon"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "reschedule_job",
            format!("id={id}&at=2999-01-01T00:00"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "reschedule_job",
            format!("id={id}&at=2030-01-01T00:00&zone=Mars%2FOlympus"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("clone_job", "id=987654".to_string(), StatusCode::NOT_FOUND),
    ];
    for (function, form, expected) in cases {
        let (status, body) = d.server_fn(function, &form).await;
        assert_eq!(status, expected, "{function} {form}: {body}");
    }
    assert_eq!(d.state_of(id).await, "scheduled");
    assert_eq!(d.job_count().await, 1);

    // A double action: the second cancel is refused as a conflict.
    let (status, _) = d
        .server_fn("job_action", &format!("id={id}&action=cancel"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = d
        .server_fn("job_action", &format!("id={id}&action=cancel"))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body.contains("already finished"), "{body}");
}

#[tokio::test]
async fn the_new_job_form_refuses_bad_input_and_stores_nothing() {
    let d = dashboard().await;
    // The form's fields with some replaced or added (`key=value&...`).
    let form = |fields: &str| {
        let mut pairs: Vec<(String, String)> = [
            ("kind", "noop"),
            ("args", "%7B%7D"),
            ("queue", "default"),
            ("when", "now"),
        ]
        .iter()
        .map(|(k, v)| (format!("input[{k}]"), v.to_string()))
        .collect();
        for pair in fields.split('&') {
            let (k, v) = pair.split_once('=').unwrap();
            match pairs.iter_mut().find(|(key, _)| key == k) {
                Some(existing) => existing.1 = v.to_string(),
                None => pairs.push((k.to_string(), v.to_string())),
            }
        }
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    };
    let cases = [
        form("input[args]=%7Boops"),
        form("input[args]=%5B1%5D"),
        form("input[kind]=nope"),
        form("input[when]=in&input[in_minutes]=-3"),
        form("input[when]=in&input[in_minutes]=lots"),
        form("input[when]=at&input[at]=2999-01-01T00:00"),
        form("input[when]=at&input[at]=2000-01-01T00:00"),
        form("input[when]=later"),
        form("input[priority]=12"),
        form("input[max_attempts]=0"),
        form("input[queue]=Bad%20Queue"),
    ];
    for body in cases {
        let (status, text) = d.server_fn("create_job", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {text}");
    }
    assert_eq!(d.job_count().await, 0);

    let (status, text) = d
        .server_fn(
            "create_job",
            &form("input[when]=in&input[in_minutes]=2&input[priority]=3"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let id: i64 = serde_json::from_str(&text).unwrap();
    let (priority, state): (i16, String) =
        sqlx::query_as("SELECT priority, state::text FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&d.pool)
            .await
            .unwrap();
    assert_eq!((priority, state.as_str()), (3, "scheduled"));
}

#[tokio::test]
async fn a_bulk_action_on_a_filter_stops_at_the_confirmed_snapshot() {
    let d = dashboard().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            d.new_job(
                json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"batch": "b7", "i": i}}),
            )
            .await,
        );
    }
    let other = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"batch": "other"}}))
        .await;
    let (status, text) = d.server_fn("bulk_preview", "query[args]=batch%3Db7").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let preview: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(preview["count"], 3);
    let max_id = preview["max_id"].as_i64().unwrap();

    let late = d
        .new_job(
            json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"batch": "b7", "i": 3}}),
        )
        .await;
    let bad = [
        (
            "action=explode&query[args]=batch%3Db7".to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        // Without the confirmed snapshot, a filter-wide action is refused.
        (
            "action=cancel&query[args]=batch%3Db7".to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "action=cancel&ids=1,x".to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ];
    for (form, expected) in bad {
        let (status, text) = d.server_fn("bulk", &form).await;
        assert_eq!(status, expected, "{form}: {text}");
    }
    // As a browser without JavaScript posts it: done, it goes back to the list with the result,
    // not to the confirmation (whose button would act again).
    let (status, location, text) = d
        .send(
            Request::post("/_console/bulk")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header(header::ACCEPT, "text/html,application/xhtml+xml")
                .header(header::REFERER, "http://localhost/jobs?bulk=cancel&scope=filter")
                .body(Body::from(format!(
                    "csrf={}&action=cancel&query[args]=batch%3Db7&query[max_id]={max_id}&back=%2Fjobs%3Fargs%3Dbatch%253Db7",
                    d.csrf
                )))
                .unwrap(),
        )
        .await;
    assert_eq!(status, StatusCode::FOUND, "{text}");
    assert_eq!(
        location.as_deref(),
        Some("/jobs?args=batch%3Db7&done=cancel&changed=3&skipped=0")
    );
    for id in ids {
        assert_eq!(d.state_of(id).await, "cancelled");
    }
    assert_eq!(d.state_of(late).await, "scheduled");
    assert_eq!(d.state_of(other).await, "scheduled");
}

#[tokio::test]
async fn queue_and_question_forms_refuse_bad_input_and_change_nothing() {
    let d = dashboard().await;
    for (form, expected) in [
        (
            "name=default&action=concurrency&concurrency=abc",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "name=default&action=concurrency&concurrency=0",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "name=default&action=explode",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("name=Bad%20Name&action=pause", StatusCode::NOT_FOUND),
    ] {
        let (status, text) = d.server_fn("queue_action", form).await;
        assert_eq!(status, expected, "{form}: {text}");
    }
    let paused: Option<bool> =
        sqlx::query_scalar("SELECT paused FROM queues WHERE name = 'default'")
            .fetch_optional(&d.pool)
            .await
            .unwrap();
    assert_ne!(paused, Some(true));

    let in_an_hour = (chrono::Utc::now() + chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    for form in [
        "game=G&prompt=P&choices=Only&game_time=2030-01-01T00:00".to_string(),
        "game=G&prompt=P&choices=A%0AB&game_time=2001-01-01T00:00".to_string(),
        "game=G&prompt=P&choices=A%0AB&game_time=whenever".to_string(),
        format!("game=&prompt=P&choices=A%0AB&game_time={in_an_hour}"),
    ] {
        let (status, text) = d.server_fn("create_question", &form).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{form}: {text}");
    }
    let questions: i64 = sqlx::query_scalar("SELECT count(*) FROM questions")
        .fetch_one(&d.pool)
        .await
        .unwrap();
    assert_eq!((questions, d.job_count().await), (0, 0));
    let (status, _) = d
        .server_fn(
            "move_question",
            &format!("id=987654&game_time={in_an_hour}"),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_plain_form_post_without_javascript_acts_and_goes_back_to_the_page() {
    let d = dashboard().await;
    let id = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    let req = Request::post("/_console/job_action")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "text/html,application/xhtml+xml")
        .header(header::REFERER, "http://localhost/jobs?state=scheduled")
        .body(Body::from(format!("id={id}&action=cancel&csrf={}", d.csrf)))
        .unwrap();
    let (status, location, _) = d.send(req).await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(
        location.as_deref(),
        Some("http://localhost/jobs?state=scheduled")
    );
    assert_eq!(d.state_of(id).await, "cancelled");
}

#[tokio::test]
async fn the_jobs_list_pages_by_keyset_from_newest_to_oldest() {
    let d = dashboard().await;
    let mut ids = Vec::new();
    for i in 0..105 {
        ids.push(
            d.new_job(json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"n": i}}))
                .await,
        );
    }
    let (status, first) = d.page("/jobs").await;
    assert_eq!(status, StatusCode::OK);
    let newest = ids[104];
    let cursor = ids[5];
    assert!(first.contains(&format!("href=\"/jobs/{newest}\"")));
    assert!(!first.contains(&format!("href=\"/jobs/{}\"", ids[4])));
    // 100 rows a page: the next page starts below the 100th newest.
    assert!(
        first.contains(&format!("/jobs?before={cursor}")),
        "no link to the older page"
    );
    let (status, older) = d.page(&format!("/jobs?before={cursor}")).await;
    assert_eq!(status, StatusCode::OK);
    for id in &ids[..5] {
        assert!(older.contains(&format!("href=\"/jobs/{id}\"")));
    }
    assert!(!older.contains(&format!("href=\"/jobs/{cursor}\"")));
    assert!(!older.contains("Older →"));
}

#[tokio::test]
async fn nothing_of_the_dashboard_answers_without_a_session() {
    let d = dashboard().await;
    let id = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    for path in [
        "/",
        "/jobs",
        "/jobs/new",
        &format!("/jobs/{id}"),
        "/timers",
        "/failures",
        "/queues",
        "/questions",
        "/questions/new",
        "/audit",
        "/users",
        "/account",
    ] {
        let (status, location, _) =
            send(&d.app, Request::get(path).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{path}");
        assert!(location.unwrap().starts_with("/login?next="), "{path}");
    }
    let (status, _, _) = send(&d.app, Request::get("/events").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    for function in [
        "overview",
        "jobs",
        "job",
        "job_action",
        "bulk",
        "bulk_preview",
        "timers",
        "queues",
        "queue_action",
        "create_job",
        "clone_job",
        "reschedule_job",
        "questions",
        "question",
        "create_question",
        "move_question",
        "job_choices",
        "logout",
        "audit",
        "users",
        "create_user",
        "update_user",
        "account",
        "create_token",
        "revoke_token",
        "change_password",
    ] {
        let req = Request::post(format!("/_console/{function}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("id={id}&action=cancel")))
            .unwrap();
        let (status, _, _) = send(&d.app, req).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{function}");
    }
    assert_eq!(d.state_of(id).await, "scheduled");
    // The login page and the API (with its own token) stay reachable.
    let (status, _, _) = send(&d.app, Request::get("/login").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_post_without_the_csrf_token_is_refused_and_changes_nothing() {
    let d = dashboard().await;
    let id = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    for body in [
        format!("id={id}&action=cancel"),
        format!("id={id}&action=cancel&csrf=forged"),
    ] {
        let req = Request::post("/_console/job_action")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(body))
            .unwrap();
        let (status, _, _) = d.send(req).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    assert_eq!(d.state_of(id).await, "scheduled");
    // The header works as well as the form field.
    let req = Request::post("/_console/job_action")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("x-csrf-token", &d.csrf)
        .body(Body::from(format!("id={id}&action=cancel")))
        .unwrap();
    let (status, _, _) = d.send(req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(d.state_of(id).await, "cancelled");
}

#[tokio::test]
async fn a_viewer_reads_everything_and_acts_on_nothing() {
    let d = dashboard_as(Role::Viewer).await;
    let id = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    let (status, body) = d.page(&format!("/jobs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !body.contains("Cancel job"),
        "a viewer is offered no actions"
    );
    let (status, _) = d.server_fn("jobs", "").await;
    assert_eq!(status, StatusCode::OK);
    for (function, form) in [
        ("job_action", format!("id={id}&action=cancel")),
        ("clone_job", format!("id={id}")),
        ("bulk", format!("action=cancel&ids={id}")),
        ("queue_action", "name=default&action=pause".to_string()),
        (
            "create_job",
            "input[kind]=noop&input[args]=%7B%7D&input[queue]=default&input[when]=now".to_string(),
        ),
    ] {
        let (status, body) = d.server_fn(function, &form).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{function}: {body}");
    }
    assert_eq!(d.state_of(id).await, "scheduled");
    assert_eq!(d.job_count().await, 1);
    // Each refusal is in the audit log, under the action tried.
    let refused: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, result FROM audit_log WHERE role = 'viewer' AND NOT ok ORDER BY id",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    let actions: Vec<&str> = refused.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        actions,
        [
            "job.cancel",
            "job.clone",
            "jobs.bulk_cancel",
            "queue.pause",
            "job.create"
        ],
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .all(|(_, r)| r.contains("only an operator or admin")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn signing_in_gives_a_new_session_id_and_signing_out_ends_it() {
    let d = dashboard().await;
    // Signing in again from a session: the old id stops working.
    let (second, _) = sign_in(&d.app, "ops", PASSWORD, Some(&d.cookie)).await;
    assert_ne!(second, d.cookie);
    let page = |cookie: String| {
        Request::get("/jobs")
            .header(header::COOKIE, cookie)
            .body(Body::empty())
            .unwrap()
    };
    let (status, _, _) = send(&d.app, page(d.cookie.clone())).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (status, _, _) = send(&d.app, page(second.clone())).await;
    assert_eq!(status, StatusCode::OK);

    let (_, csrf) = sign_in(&d.app, "ops", PASSWORD, Some(&second)).await;
    let _ = csrf;
    let (third, csrf) = sign_in(&d.app, "ops", PASSWORD, None).await;
    let (status, _) = server_fn_as(&d.app, &third, &csrf, "logout", "").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(&d.app, page(third)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);

    // Wrong credentials: one answer for a wrong password and an unknown name.
    for (name, password) in [("ops", "wrong password here"), ("nobody", PASSWORD)] {
        let req = Request::post("/_console/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!(
                "name={name}&password={}",
                password.replace(' ', "+")
            )))
            .unwrap();
        let (status, _, body) = send(&d.app, req).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(body.contains("wrong name or password"));
    }
    // A cross-site sign-in attempt is refused before the password is even checked.
    let req = Request::post("/_console/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::HOST, "kickoff.local")
        .header(header::ORIGIN, "https://evil.example")
        .body(Body::from(format!(
            "name=ops&password={}",
            PASSWORD.replace(' ', "+")
        )))
        .unwrap();
    let (status, _, _) = send(&d.app, req).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn every_response_carries_the_security_headers() {
    let d = dashboard().await;
    for path in [
        "/login",
        "/jobs",
        "/healthz",
        "/api/v1/stats",
        "/pkg/kickoff.css",
    ] {
        let res = d.get(path).await;
        let h = res.headers();
        let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(
            !script_src(csp).contains("'unsafe-inline'"),
            "{path}: no inline script runs without the page's nonce: {csp}"
        );
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(h[header::REFERRER_POLICY], "same-origin");
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY", "{path}");
    }
}

#[tokio::test]
async fn pages_and_answers_are_not_stored_by_caches_and_https_servers_send_hsts() {
    // A page or an answer may carry a token, a CSRF token or a job's secrets: no cache (a shared
    // proxy, the browser's disk) keeps it. Static files may be cached.
    let d = dashboard().await;
    for path in [
        "/",
        "/jobs",
        "/account",
        "/login",
        "/api/v1/stats",
        "/healthz",
    ] {
        let res = d.get(path).await;
        assert_eq!(
            res.headers()
                .get(header::CACHE_CONTROL)
                .map(|v| v.to_str().unwrap()),
            Some("no-store"),
            "{path}"
        );
        assert!(
            res.headers()
                .get(header::STRICT_TRANSPORT_SECURITY)
                .is_none(),
            "{path}: HSTS over plain HTTP"
        );
    }
    let res = d.get("/pkg/kickoff.css").await;
    assert_ne!(
        res.headers()
            .get(header::CACHE_CONTROL)
            .map(|v| v.to_str().unwrap()),
        Some("no-store")
    );
    let https = crate::common::app_over_https(&d.pool, "t");
    let res =
        tower::ServiceExt::oneshot(https, Request::get("/login").body(Body::empty()).unwrap())
            .await
            .unwrap();
    assert_eq!(
        res.headers()[header::STRICT_TRANSPORT_SECURITY],
        "max-age=31536000"
    );
}

/// The `script-src` directive of a policy.
fn script_src(csp: &str) -> &str {
    csp.split(';')
        .map(str::trim)
        .find(|d| d.starts_with("script-src"))
        .unwrap_or("")
}

#[tokio::test]
async fn a_page_allows_exactly_its_own_scripts_by_a_fresh_nonce() {
    let d = dashboard().await;
    let mut nonces = Vec::new();
    for path in ["/", "/jobs", "/login"] {
        let res = d.get(path).await;
        let csp = res.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_string();
        let directive = script_src(&csp);
        let nonce = directive
            .split_whitespace()
            .find_map(|t| t.strip_prefix("'nonce-"))
            .and_then(|t| t.strip_suffix('\''))
            .unwrap_or_else(|| panic!("{path}: no nonce in {directive}"))
            .to_string();
        assert!(!directive.contains("'unsafe-inline'"), "{directive}");
        let html = String::from_utf8(
            http_body_util::BodyExt::collect(res.into_body())
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
        .unwrap();
        let scripts: Vec<&str> = html.split("<script").skip(1).collect();
        assert!(
            !scripts.is_empty(),
            "{path}: the page has its hydration script"
        );
        for s in scripts {
            let tag = s.split('>').next().unwrap();
            assert!(
                tag.contains(&format!("nonce=\"{nonce}\"")),
                "{path}: a script without the page's nonce: <script{tag}>"
            );
        }
        nonces.push(nonce);
    }
    nonces.sort();
    nonces.dedup();
    assert_eq!(nonces.len(), 3, "each response has a nonce of its own");
}

#[tokio::test]
async fn the_audit_log_records_each_action_and_refuses_changes() {
    let d = dashboard().await;
    let id = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    let mut batch = Vec::new();
    for _ in 0..3 {
        batch.push(
            d.new_job(
                json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"batch": "audit"}}),
            )
            .await,
        );
    }
    let (status, _) = d
        .server_fn("job_action", &format!("id={id}&action=cancel"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = d
        .server_fn("job_action", &format!("id={id}&action=cancel"))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (_, text) = d
        .server_fn("bulk_preview", "query[args]=batch%3Daudit")
        .await;
    let max_id = serde_json::from_str::<Value>(&text).unwrap()["max_id"]
        .as_i64()
        .unwrap();
    let (status, _) = d
        .server_fn(
            "bulk",
            &format!("action=retry&query[args]=batch%3Daudit&query[max_id]={max_id}"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = d
        .server_fn(
            "bulk",
            &format!("action=cancel&query[args]=batch%3Daudit&query[max_id]={max_id}"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    // actor, role, action, target, count, ok, result, filter
    type Entry = (
        String,
        String,
        String,
        Option<String>,
        Option<i64>,
        bool,
        String,
        Option<Value>,
    );
    let rows: Vec<Entry> = sqlx::query_as(
        // The jobs made through the API above are recorded too (as `api-token`): not looked at here.
        "SELECT actor, role, action, target, count, ok, result, filter FROM audit_log
         WHERE action NOT LIKE 'api.%' ORDER BY id",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    let actions: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(
        actions,
        [
            "session.sign_in",
            "job.cancel",
            "job.cancel",
            "jobs.bulk_retry",
            "jobs.bulk_cancel"
        ]
    );
    assert!(rows.iter().all(|r| r.0 == "ops" && r.1 == "operator"));
    assert_eq!(rows[1].3.as_deref(), Some(format!("job {id}").as_str()));
    assert!(
        rows[1].5 && !rows[2].5,
        "the second cancel is recorded as refused"
    );
    assert!(rows[2].6.contains("already finished"));
    // Bulk actions keep their filter and how many jobs they changed.
    assert_eq!(rows[3].4, Some(0), "nothing was retryable");
    assert_eq!(rows[4].4, Some(3));
    assert_eq!(rows[4].7.as_ref().unwrap()["args"], "batch=audit");

    // The page lists them, newest first, filtered by action.
    let (status, body) = d.page("/audit?action=jobs.bulk").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("jobs.bulk_cancel") && !body.contains("job.cancel<"));

    // Append-only: the database refuses to change or remove entries.
    for sql in [
        "UPDATE audit_log SET ok = true",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ] {
        let err = sqlx::query(sql).execute(&d.pool).await.unwrap_err();
        assert!(err.to_string().contains("append-only"), "{sql}: {err}");
    }
}

#[tokio::test]
async fn an_oversize_dashboard_request_is_refused_and_stores_nothing() {
    let d = dashboard().await;
    let pad = "x".repeat(2 * 1024 * 1024);
    // Open (sign-in), read-only and state-changing functions alike.
    for (function, body) in [
        ("login", format!("name=ops&password={pad}")),
        ("jobs", format!("query[kind]={pad}")),
        (
            "create_job",
            format!(
                "input[kind]=noop&input[args]=%7B%22pad%22%3A%22{pad}%22%7D&input[queue]=default&input[when]=now&csrf={}",
                d.csrf
            ),
        ),
    ] {
        let req = Request::post(format!("/_console/{function}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(body))
            .unwrap();
        let (status, _, text) = d.send(req).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{function}: {text}");
    }
    // Args within the request limit but over the engine's 256 KiB: a 422 that says so.
    let args = format!("%7B%22pad%22%3A%22{}%22%7D", "y".repeat(300 * 1024));
    let (status, text) = d
        .server_fn(
            "create_job",
            &format!("input[kind]=noop&input[args]={args}&input[queue]=default&input[when]=now"),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(text.contains("bytes"), "{text}");
    assert_eq!(d.job_count().await, 0);
}

/// What the hydrated dashboard posts for a server function's arguments: leptos's `PostUrl`
/// encoding, which is `serde_qs`.
fn as_the_browser_posts(args: &impl serde::Serialize) -> String {
    serde_qs::to_string(args).unwrap()
}

#[tokio::test]
async fn unfiltered_lists_answer_what_the_hydrated_browser_posts() {
    use kickoff_app::console::audit::{AuditQuery, ListAudit};
    use kickoff_app::console::jobs::{BulkJobs, BulkPreview, JobQuery, ListJobs};
    let d = dashboard().await;
    let id = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"first": "look"}}))
        .await;
    let post = |function: &str, body: String| {
        Request::post(format!("/_console/{function}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .body(Body::from(body))
            .unwrap()
    };

    // An empty filter is encoded as nothing at all: no `query` for the server to find.
    let unfiltered = as_the_browser_posts(&ListJobs {
        query: JobQuery::default(),
    });
    assert_eq!(unfiltered, "");
    let (status, _, text) = d.send(post("jobs", unfiltered)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let page: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(page["rows"][0]["id"], id, "{text}");
    assert_eq!(page["rows"][0]["args_preview"], r#"{"first":"look"}"#);

    let (status, _, text) = d
        .send(post(
            "audit",
            as_the_browser_posts(&ListAudit {
                query: AuditQuery::default(),
            }),
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let audit: Value = serde_json::from_str(&text).unwrap();
    let actions: Vec<&str> = audit["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"session.sign_in"), "{text}");

    let (status, _, text) = d
        .send(post(
            "bulk_preview",
            as_the_browser_posts(&BulkPreview {
                query: JobQuery::default(),
            }),
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["count"], 1);

    // The selected jobs of an unfiltered list: the ids, and an empty filter beside them.
    let (status, location, text) = d
        .send(post(
            "bulk",
            as_the_browser_posts(&BulkJobs {
                csrf: Some(d.csrf.clone()),
                action: "cancel".into(),
                ids: Some(id.to_string()),
                query: JobQuery::default(),
                change: Default::default(),
                // Off-site: the result goes to the overview instead.
                back: Some("//elsewhere.example/jobs".into()),
            }),
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["changed"], 1);
    assert_eq!(d.state_of(id).await, "cancelled");
    assert_eq!(
        location.as_deref(),
        Some("/?done=cancel&changed=1&skipped=0")
    );
}

/// An instant as the REST API stores it (`field` of `path`), in UTC.
async fn stored(d: &crate::common::dashboard::Dashboard, path: &str, field: &str) -> String {
    let body = d.api(Method::GET, path, json!(null)).await;
    chrono::DateTime::parse_from_rfc3339(body[field].as_str().unwrap())
        .unwrap()
        .to_utc()
        .to_rfc3339()
}

async fn game_time_of(d: &crate::common::dashboard::Dashboard, id: i64) -> String {
    stored(d, &format!("/questions/{id}"), "game_time").await
}

async fn scheduled_at_of(d: &crate::common::dashboard::Dashboard, id: i64) -> String {
    stored(d, &format!("/jobs/{id}"), "scheduled_at").await
}

#[tokio::test]
async fn times_typed_in_a_zone_get_the_offset_of_their_own_date() {
    let d = dashboard().await;
    let ny = "zone=America%2FNew_York";
    // Typed in December (UTC-05:00 in New York) for an April game (UTC-04:00 by then).
    let (status, text) = d
        .server_fn(
            "create_question",
            &format!("game=G&prompt=P&choices=A%0AB&game_time=2027-04-10T19:00&{ny}"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let question: i64 = serde_json::from_str(&text).unwrap();
    assert_eq!(
        game_time_of(&d, question).await,
        "2027-04-10T23:00:00+00:00"
    );
    let (status, text) = d
        .server_fn(
            "move_question",
            &format!("id={question}&game_time=2028-01-10T19:00&{ny}"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        game_time_of(&d, question).await,
        "2028-01-11T00:00:00+00:00"
    );

    let job = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    let (status, text) = d
        .server_fn(
            "reschedule_job",
            &format!("id={job}&at=2027-07-10T19:00&zone=Europe%2FLondon"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(scheduled_at_of(&d, job).await, "2027-07-10T18:00:00+00:00");

    let (status, text) = d
        .server_fn(
            "create_job",
            "input[kind]=noop&input[args]=%7B%7D&input[queue]=default&input[when]=at\
             &input[at]=2027-07-10T19:00&input[zone]=Asia%2FKolkata",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let created: i64 = serde_json::from_str(&text).unwrap();
    assert_eq!(
        scheduled_at_of(&d, created).await,
        "2027-07-10T13:30:00+00:00"
    );

    // The due-time filter: each bound in the offset of its own date.
    let (status, text) = d
        .server_fn(
            "jobs",
            "query[from]=2027-07-10T13:30&query[to]=2027-07-10T14:30\
             &query[zone]=America%2FNew_York",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let rows: Value = serde_json::from_str(&text).unwrap();
    let ids: Vec<i64> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        [job],
        "18:00 UTC is 14:00 in New York in July, within 13:30-14:30"
    );

    // Without JavaScript the forms send no zone: UTC, as the page says.
    let (status, _) = d
        .server_fn("reschedule_job", &format!("id={job}&at=2027-07-10T19:00"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(scheduled_at_of(&d, job).await, "2027-07-10T19:00:00+00:00");
}

#[tokio::test]
async fn a_skipped_time_is_refused_and_a_repeated_one_waits_for_which() {
    let d = dashboard().await;
    let job = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    let before = scheduled_at_of(&d, job).await;
    let ny = "zone=America%2FNew_York";

    let (status, text) = d
        .server_fn(
            "reschedule_job",
            &format!("id={job}&at=2027-03-14T02:30&{ny}"),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(
        text.contains(
            "2027-03-14 02:30 does not exist in America/New_York: the clocks go forward from \
             02:00 to 03:00 that night (UTC-05:00 to UTC-04:00)."
        ),
        "{text}"
    );
    let (status, text) = d
        .server_fn(
            "create_question",
            "game=G&prompt=P&choices=A%0AB&game_time=2027-03-28T01:15&zone=Europe%2FLondon",
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(text.contains("from 01:00 to 02:00"), "{text}");

    let (status, text) = d
        .server_fn(
            "reschedule_job",
            &format!("id={job}&at=2027-11-07T01:30&{ny}"),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(
        text.contains(
            "2027-11-07 01:30 happens twice in America/New_York (the clocks go back): first at \
             UTC-04:00 (05:30 UTC), then at UTC-05:00 (06:30 UTC). Say which one is meant."
        ),
        "{text}"
    );
    assert_eq!(scheduled_at_of(&d, job).await, before, "nothing moved");

    for (which, expected) in [
        ("later", "2027-11-07T06:30:00+00:00"),
        ("earlier", "2027-11-07T05:30:00+00:00"),
    ] {
        let (status, text) = d
            .server_fn(
                "reschedule_job",
                &format!("id={job}&at=2027-11-07T01:30&{ny}&which={which}"),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert_eq!(scheduled_at_of(&d, job).await, expected);
    }
}

/// Where a `next` must not lead (another site, or something a browser turns into another site) and
/// where it may: the table of `safe_next`.
#[test]
fn safe_next_keeps_only_paths_of_this_site() {
    use kickoff_app::console::accounts::safe_next;
    for (next, expected) in [
        ("/", "/"),
        ("/jobs?state=scheduled", "/jobs?state=scheduled"),
        ("/jobs/42", "/jobs/42"),
        (
            "/audit?action=job.&result=ok",
            "/audit?action=job.&result=ok",
        ),
        ("/jobs?args=game_id%3D42", "/jobs?args=game_id%3D42"),
        // A percent sign is only text here: no browser decodes it into a tab before parsing.
        ("/%09/evil.example", "/%09/evil.example"),
        ("/jobs#top", "/jobs#top"),
    ] {
        assert_eq!(safe_next(Some(next)), expected, "{next:?}");
    }
    for next in [
        "",
        "jobs",
        " /jobs",
        "//evil.example",
        "///evil.example",
        "https://evil.example/",
        "http:evil.example",
        "javascript:alert(1)",
        "\\evil.example",
        "/\\evil.example",
        "/\\/evil.example",
        // Browsers drop tabs and newlines from URLs: these are `//evil.example` to them.
        "/\t/evil.example",
        "/\n/evil.example",
        "/\r\n/evil.example",
        "\t//evil.example",
        "/\u{0}/evil.example",
        "/\u{1b}x",
        "/\u{7f}x",
        "/\u{85}x",
        // Paths that normalise (dot segments) to a `//` start.
        "/.//evil.example",
        "/x/..//evil.example",
        "/%2e%2e//evil.example",
        "/%2e//evil.example",
    ] {
        assert_eq!(safe_next(Some(next)), "/", "{next:?}");
    }
    assert_eq!(safe_next(None), "/");
    // Whatever comes in, what goes out is a path of this site that a Location header can hold.
    for c in (0u32..0x3000).chain([0xfeff, 0xff0f, 0x2215, 0x10ffff]) {
        let Some(c) = char::from_u32(c) else { continue };
        for next in [
            format!("/a{c}b"),
            format!("/{c}/evil.example"),
            format!("/{c}"),
        ] {
            let out = safe_next(Some(&next));
            assert!(
                out.starts_with('/') && !out.starts_with("//") && !out.contains('\\'),
                "{next:?} -> {out:?}"
            );
            assert!(
                axum::http::HeaderValue::from_str(&out).is_ok() && out.is_ascii(),
                "{next:?} -> {out:?} is no header value"
            );
        }
    }
}

/// A sign-in from `/login?next=...` whose `next` leaves the site, or holds a newline, goes to the
/// overview: as the hydrated page posts it and as a plain form does (a redirect), never a panic.
#[tokio::test]
async fn a_sign_in_whose_next_leaves_the_site_goes_to_the_overview() {
    let d = dashboard().await;
    for next in [
        "%2F%09%2Fevil.example",
        "%2F%0A%2Fevil.example",
        "%2F%0D%0A%2Fevil.example",
        "%2F%2Fevil.example",
        "%2F%5Cevil.example",
    ] {
        let body = format!(
            "name=ops&password={}&next={next}",
            PASSWORD.replace(' ', "+")
        );
        let post = |accept: &str| {
            Request::post("/_console/login")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header(header::ACCEPT, accept)
                .body(Body::from(body.clone()))
                .unwrap()
        };
        // The hydrated page: the answer names the target, which the page then loads.
        let (status, location, answer) = send(&d.app, post("*/*")).await;
        assert_eq!(status, StatusCode::OK, "{next}: {answer}");
        assert_eq!(answer, "\"/\"", "{next}");
        assert_eq!(location.as_deref(), Some("/"), "{next}");
        // A plain form post (no JavaScript): the browser follows the redirect.
        let (status, location, _) = send(&d.app, post("text/html")).await;
        assert_eq!(status, StatusCode::FOUND, "{next}");
        assert_eq!(location.as_deref(), Some("/"), "{next}");
    }
    // A path of this site is kept.
    let req = Request::post("/_console/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "text/html")
        .body(Body::from(format!(
            "name=ops&password={}&next=%2Fjobs%3Fstate%3Dscheduled",
            PASSWORD.replace(' ', "+")
        )))
        .unwrap();
    let (status, location, _) = send(&d.app, req).await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(location.as_deref(), Some("/jobs?state=scheduled"));
}

#[tokio::test]
async fn sign_ins_refused_while_locked_make_one_audit_entry_with_their_count() {
    use kickoff::accounts::LOCK_AFTER_FAILURES;
    let d = dashboard().await;
    let login = |name: String| {
        Request::post("/_console/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .body(Body::from(format!(
                "name={name}&password=wrong-wrong-wrong"
            )))
            .unwrap()
    };
    // Checked and failed, the last one setting the lock: each is an entry.
    for i in 0..LOCK_AFTER_FAILURES {
        let (status, _, text) = send(&d.app, login("ops".into())).await;
        let expected = if i + 1 == LOCK_AFTER_FAILURES {
            StatusCode::TOO_MANY_REQUESTS
        } else {
            StatusCode::UNAUTHORIZED
        };
        assert_eq!(status, expected, "attempt {}: {text}", i + 1);
    }
    // Refused unchecked, under names of the sender's choosing: counted, not written one by one.
    for i in 0..25 {
        let (status, _, text) = send(&d.app, login(format!("spam-{i}-%3Cscript%3E"))).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{text}");
    }
    let entries = || async {
        sqlx::query_as::<_, (String, Option<String>, Option<i64>, String)>(
            "SELECT actor, target, count, result FROM audit_log
             WHERE action = 'session.sign_in' AND NOT ok ORDER BY id",
        )
        .fetch_all(&d.pool)
        .await
        .unwrap()
    };
    let rows = entries().await;
    assert_eq!(rows.len(), LOCK_AFTER_FAILURES as usize, "{rows:?}");
    assert!(rows.iter().all(|r| r.0 == "ops"), "{rows:?}");

    // While locked, nothing more; once the lock is over, the sweep writes one entry with the count.
    let store = kickoff::accounts::store::login_lock_refusals_flush;
    assert_eq!(
        store(&d.pool, None).await.unwrap(),
        0,
        "the lock is not over yet"
    );
    let after_the_lock = chrono::Utc::now() + chrono::Duration::hours(1);
    assert_eq!(store(&d.pool, Some(after_the_lock)).await.unwrap(), 1);
    let rows = entries().await;
    let (actor, target, count, result) = rows.last().unwrap().clone();
    assert_eq!((actor.as_str(), count), ("?", Some(25)), "{rows:?}");
    assert!(target.unwrap().starts_with("address "), "{rows:?}");
    assert_eq!(result, "refused unchecked while locked: 25 attempts");
    assert_eq!(
        store(&d.pool, Some(after_the_lock)).await.unwrap(),
        0,
        "written once"
    );
}

#[tokio::test]
async fn a_signed_out_request_is_refused_before_its_body_is_read() {
    let d = dashboard().await;
    // A body that never arrives: a guard that read it first would wait forever.
    for path in ["/_console/job_action", "/_console/jobs"] {
        let req = Request::post(path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from_stream(futures_util::stream::pending::<
                Result<Vec<u8>, std::io::Error>,
            >()))
            .unwrap();
        let answered =
            tokio::time::timeout(std::time::Duration::from_secs(5), send(&d.app, req)).await;
        let (status, _, _) =
            answered.unwrap_or_else(|_| panic!("{path}: no answer while the body was pending"));
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_has_its_own_sign_in_lock_and_audit_address() {
    use axum::extract::ConnectInfo;
    use kickoff::accounts::{Accounts, LOCK_AFTER_FAILURES};
    use std::net::SocketAddr;
    let db = crate::common::test_db().await;
    let app = crate::common::app_behind_proxies(&db.pool, "proxy-test-token", &["10.0.0.0/8"]);
    Accounts::new(db.pool.clone())
        .create("ops", PASSWORD, Role::Operator)
        .await
        .unwrap();
    // Every request arrives from the proxy at 10.0.0.2, for the client it names.
    let login = |client: &str, name: &str, password: &str| {
        Request::post("/_console/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .header("x-forwarded-for", client)
            .extension(ConnectInfo("10.0.0.2:40000".parse::<SocketAddr>().unwrap()))
            .body(Body::from(format!("name={name}&password={password}")))
            .unwrap()
    };
    // One client guesses under many names until its address is locked.
    for i in 0..LOCK_AFTER_FAILURES {
        let _ = send(
            &app,
            login("203.0.113.7", &format!("guess{i}"), "wrong-wrong-wrong"),
        )
        .await;
    }
    let (status, _, _) = send(
        &app,
        login("203.0.113.7", "ops", "correct+horse+battery+staple"),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the guesser is locked"
    );
    // Another client behind the same proxy is not.
    let (status, _, text) = send(
        &app,
        login("198.51.100.20", "ops", "correct+horse+battery+staple"),
    )
    .await;
    assert!(status.is_success(), "{status}: {text}");
    let addresses: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT host(address) FROM audit_log WHERE action = 'session.sign_in' ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(addresses, ["198.51.100.20", "203.0.113.7"]);

    // A client that is not the proxy cannot choose its address with the header.
    let spoof = Request::post("/_console/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("x-forwarded-for", "198.51.100.20")
        .extension(ConnectInfo(
            "192.0.2.66:40000".parse::<SocketAddr>().unwrap(),
        ))
        .body(Body::from("name=ops&password=wrong-wrong-wrong"))
        .unwrap();
    let _ = send(&app, spoof).await;
    let last: String =
        sqlx::query_scalar("SELECT host(address) FROM audit_log ORDER BY id DESC LIMIT 1")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(last, "192.0.2.66");
}

#[tokio::test]
async fn a_request_naming_another_host_is_refused_as_a_rebinding_page_would_send_it() {
    use kickoff::http::host_check::AllowedHosts;
    let db = crate::common::test_db().await;
    let listen = "127.0.0.1:3000".parse().unwrap();
    let app = crate::common::app_changed(&db.pool, "host-test-token", |s| {
        s.with_allowed_hosts(AllowedHosts::new(listen, &[]).unwrap())
    });
    let get = |path: &str, host: &str| {
        Request::get(path)
            .header(header::HOST, host)
            .header(header::AUTHORIZATION, "Bearer host-test-token")
            .body(Body::empty())
            .unwrap()
    };
    // A page on evil.example whose name now points at 127.0.0.1.
    for path in ["/login", "/api/v1/jobs", "/_console/login_info"] {
        let (status, _, body) = send(&app, get(path, "evil.example:3000")).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{path}: {body}");
        assert!(body.contains("KICKOFF_ALLOWED_HOSTS"), "{body}");
    }
    for host in ["localhost:3000", "127.0.0.1:3000"] {
        let (status, _, _) = send(&app, get("/login", host)).await;
        assert_eq!(status, StatusCode::OK, "{host}");
    }
    let (status, _, _) = send(&app, get("/api/v1/jobs", "localhost:3000")).await;
    assert_eq!(status, StatusCode::OK);
    // The probes answer whatever name a load balancer uses.
    let (status, _, _) = send(&app, get("/healthz", "10.1.2.3:3000")).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn readers_see_webhook_headers_and_secret_fields_redacted_and_actors_see_them_whole() {
    use kickoff::accounts::{Accounts, TokenScope};
    let d = dashboard_as(Role::Viewer).await;
    let made = d
        .api(
            Method::POST,
            "/jobs",
            json!({"kind": "webhook", "schedule_in_ms": 600_000, "args": {
                "url": "https://hooks.example.com/scores",
                "headers": {"Authorization": "Bearer s3cr3t-header"},
                "body": {"game": 7, "partner_token": "s3cr3t-field"},
            }}),
        )
        .await;
    let id = made["job"]["id"].as_i64().unwrap();

    // The viewer's dashboard: the detail page and the list.
    let (status, page) = d.page(&format!("/jobs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("s3cr3t"), "a secret reached a viewer's page");
    assert!(page.contains("[redacted]"), "the page says what it hides");
    let (status, list) = d.server_fn("jobs", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!list.contains("s3cr3t"), "{list}");
    // Nor can a viewer test guesses against the hidden value with a filter.
    let (status, text) = d
        .server_fn(
            "jobs",
            "query[args]=%7B%22headers%22%3A%7B%22Authorization%22%3A%22Bearer%20s3%22%7D%7D",
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");

    // The API: a read token sees it redacted; a write token (who may clone it anyway) whole.
    let accounts = Accounts::new(d.pool.clone());
    let viewer = accounts.list().await.unwrap().remove(0);
    let (_, read) = accounts
        .create_token(&viewer, "read", TokenScope::Read)
        .await
        .unwrap();
    for path in [format!("/jobs/{id}"), "/jobs?kind=webhook".to_string()] {
        let (status, body) = d.api_as(&read, Method::GET, &path, json!(null)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(!body.contains("s3cr3t"), "{path}: {body}");
    }
    let whole = d
        .api(Method::GET, &format!("/jobs/{id}"), json!(null))
        .await;
    assert_eq!(
        whole["args"]["headers"]["Authorization"],
        "Bearer s3cr3t-header"
    );
    assert_eq!(whole["args"]["body"]["partner_token"], "s3cr3t-field");

    // The timers page lists the job (it is due later): redacted too.
    let (status, timers) = d.server_fn("timers", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(timers.contains(&format!("\"id\":{id}")), "{timers}");
    assert!(!timers.contains("s3cr3t"), "{timers}");
    // Nor can the bulk count answer a guess.
    let (status, text) = d
        .server_fn(
            "bulk_preview",
            "query[args]=%7B%22headers%22%3A%7B%22Authorization%22%3A%22Bearer%20s3%22%7D%7D",
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    // An operator's bulk action on a filter naming the secret: the audit log keeps it, and a
    // viewer reading the log sees the filter's args hidden.
    d.api(
        Method::POST,
        "/jobs/bulk",
        json!({"action": "cancel", "filter": {"args": {"headers": {"Authorization": "Bearer s3cr3t-header"}}}}),
    )
    .await;
    let (status, audit) = d.server_fn("audit", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(audit.contains("jobs/bulk"), "{audit}");
    assert!(!audit.contains("s3cr3t"), "{audit}");
}

/// Issue 30, point 12: a refused sign-in never writes the name typed where others read it, when
/// it names no account (a password typed into the name field): not the audit log, not the URL of
/// the page a plain form post comes back to. The name still comes back into the form, through a
/// short-lived cookie for the login page.
#[tokio::test]
async fn a_refused_sign_in_keeps_a_name_that_is_no_account_out_of_the_log_and_the_url() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let d = dashboard().await;
    let post = |name: &str| {
        Request::post("/_console/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "text/html")
            .body(Body::from(format!(
                "name={name}&password=wrong-wrong-wrong&next=%2Fqueues"
            )))
            .unwrap()
    };
    let res = d.app.clone().oneshot(post("Hunter2Secret")).await.unwrap();
    assert_eq!(res.status(), StatusCode::FOUND);
    let location = res.headers()[header::LOCATION]
        .to_str()
        .unwrap()
        .to_string();
    assert!(!location.contains("Hunter2"), "{location}");
    assert!(location.contains("next=%2Fqueues"), "{location}");
    let cookie = res
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("kickoff_login_name="))
        .expect("the name typed goes back in a cookie");
    assert!(
        cookie.contains("Path=/login") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    // The login page puts it back into the field, and clears the cookie.
    let pair = cookie.split(';').next().unwrap().to_string();
    let page = Request::get(&location)
        .header(header::COOKIE, &pair)
        .body(Body::empty())
        .unwrap();
    let res = d.app.clone().oneshot(page).await.unwrap();
    let cleared = res
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .any(|v| v.to_str().unwrap().starts_with("kickoff_login_name=;"));
    let html =
        String::from_utf8_lossy(&res.into_body().collect().await.unwrap().to_bytes()).into_owned();
    assert!(html.contains("value=\"Hunter2Secret\""), "{html}");
    assert!(cleared, "the cookie is cleared once read");

    // A name of an account is recorded; a name of nobody is not.
    let res = d.app.clone().oneshot(post("ops")).await.unwrap();
    assert_eq!(res.status(), StatusCode::FOUND);
    let actors: Vec<String> = sqlx::query_scalar(
        "SELECT actor FROM audit_log WHERE action = 'session.sign_in' AND NOT ok ORDER BY id",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    assert_eq!(actors, ["(unknown name)", "ops"]);
}
