//! Users managed by admins in the dashboard, per-user API tokens, and what each role and scope may
//! do: through the whole router in-process, against real PostgreSQL.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::{dashboard_as, get_as, server_fn_as, sign_in, Dashboard, PASSWORD};
use kickoff::accounts::{AccountError, Accounts, Role};

const NEW_PASSWORD: &str = "a brand new password";

fn form(s: &str) -> String {
    s.replace(' ', "+")
}

async fn user_count(d: &Dashboard) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM users")
        .fetch_one(&d.pool)
        .await
        .unwrap()
}

async fn user_id(d: &Dashboard, name: &str) -> i64 {
    sqlx::query_scalar("SELECT id FROM users WHERE name = $1")
        .bind(name)
        .fetch_one(&d.pool)
        .await
        .unwrap()
}

/// Makes a token through the account page's server function; returns its id and text.
async fn make_token(d: &Dashboard, name: &str, scope: &str) -> (i64, String) {
    let (status, body) = d
        .server_fn(
            "create_token",
            &format!(
                "name={}&scope={scope}&password={}",
                form(name),
                form(PASSWORD)
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    (
        v["id"].as_i64().unwrap(),
        v["token"].as_str().unwrap().to_string(),
    )
}

async fn jobs_count(d: &Dashboard) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&d.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_admin_adds_a_user_who_can_then_sign_in_and_bad_input_adds_nobody() {
    let d = dashboard_as(Role::Admin).await;
    let (status, body) = d
        .server_fn(
            "create_user",
            &format!("name=Bob&role=operator&password={}", form(NEW_PASSWORD)),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Names are lowered; bob signs in and is an operator.
    let (cookie, _) = sign_in(&d.app, "bob", NEW_PASSWORD, None).await;
    assert_eq!(get_as(&d.app, &cookie, "/jobs").await.0, StatusCode::OK);
    let (_, page) = d.page("/users").await;
    assert!(
        page.contains("data-user=\"bob\""),
        "the users page lists bob"
    );

    let before = user_count(&d).await;
    for (input, status) in [
        (
            format!("name=bob&role=viewer&password={}", form(NEW_PASSWORD)),
            StatusCode::CONFLICT,
        ),
        (
            "name=carol&role=viewer&password=short".to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            format!("name=carol&role=root&password={}", form(NEW_PASSWORD)),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            format!(
                "name=no%20spaces&role=viewer&password={}",
                form(NEW_PASSWORD)
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            format!(
                "name={}&role=viewer&password={}",
                "x".repeat(65),
                form(NEW_PASSWORD)
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "name=carol&role=viewer".to_string(),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (got, body) = d.server_fn("create_user", &input).await;
        assert_eq!(got, status, "{input}: {body}");
    }
    assert_eq!(
        user_count(&d).await,
        before,
        "no refused input stored a user"
    );
}

#[tokio::test]
async fn only_admins_see_and_manage_users() {
    for role in [Role::Viewer, Role::Operator] {
        let d = dashboard_as(role).await;
        let accounts = Accounts::new(d.pool.clone());
        let other = accounts
            .create("other", PASSWORD, Role::Viewer)
            .await
            .unwrap();
        let (status, _) = d.page("/users").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{role}");
        let (status, _) = d.server_fn("users", "").await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{role}");
        for (function, input) in [
            (
                "create_user",
                format!("name=mallory&role=admin&password={}", form(NEW_PASSWORD)),
            ),
            (
                "update_user",
                format!("id={}&action=role&role=admin", other.id),
            ),
            ("update_user", format!("id={}&action=disable", other.id)),
            (
                "update_user",
                format!(
                    "id={}&action=password&password={}",
                    other.id,
                    form(NEW_PASSWORD)
                ),
            ),
        ] {
            let (status, body) = d.server_fn(function, &input).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{role} {function}: {body}");
        }
        let after = accounts.get(other.id).await.unwrap().unwrap();
        assert_eq!(after, other, "{role}: nothing changed");
        assert_eq!(user_count(&d).await, 2);
    }
}

#[tokio::test]
async fn an_admin_changes_roles_and_cannot_lock_themselves_out() {
    let d = dashboard_as(Role::Admin).await;
    let accounts = Accounts::new(d.pool.clone());
    let bob = accounts
        .create("bob", PASSWORD, Role::Viewer)
        .await
        .unwrap();
    let me = user_id(&d, "ops").await;
    let (status, body) = d
        .server_fn(
            "update_user",
            &format!("id={}&action=role&role=operator", bob.id),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        accounts.get(bob.id).await.unwrap().unwrap().role,
        Role::Operator
    );

    for (input, status) in [
        (
            format!("id={me}&action=role&role=viewer"),
            StatusCode::CONFLICT,
        ),
        (format!("id={me}&action=disable"), StatusCode::CONFLICT),
        (
            format!("id={me}&action=password&password={}", form(NEW_PASSWORD)),
            StatusCode::CONFLICT,
        ),
        (
            format!("id={}&action=role&role=root", bob.id),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            format!("id={}&action=promote", bob.id),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "id=999999&action=disable".to_string(),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let (got, body) = d.server_fn("update_user", &input).await;
        assert_eq!(got, status, "{input}: {body}");
    }
    let me_now = accounts.get(me).await.unwrap().unwrap();
    assert_eq!(me_now.role, Role::Admin);
    assert!(!me_now.disabled);
}

#[tokio::test]
async fn the_last_enabled_admin_stays_even_when_two_admins_demote_each_other_at_once() {
    let db = crate::common::test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let a = accounts.create("a", PASSWORD, Role::Admin).await.unwrap();
    let b = accounts.create("b", PASSWORD, Role::Admin).await.unwrap();
    for _ in 0..5 {
        let (ra, rb) = tokio::join!(
            accounts.set_disabled(a.id, true),
            accounts.set_disabled(b.id, true)
        );
        assert!(
            ra.is_ok() != rb.is_ok(),
            "exactly one of two concurrent disables passes: {ra:?} {rb:?}"
        );
        let refused = if ra.is_ok() { rb } else { ra };
        assert!(matches!(refused, Err(AccountError::Conflict(_))));
        accounts.set_disabled(a.id, false).await.unwrap();
        accounts.set_disabled(b.id, false).await.unwrap();
    }
    accounts.set_role(a.id, Role::Operator).await.unwrap();
    assert!(matches!(
        accounts.set_role(b.id, Role::Viewer).await,
        Err(AccountError::Conflict(_))
    ));
    // An admin role given to someone else is fine, and then b may step down.
    accounts.set_role(a.id, Role::Admin).await.unwrap();
    accounts.set_role(b.id, Role::Viewer).await.unwrap();
}

#[tokio::test]
async fn a_password_reset_ends_the_users_sessions() {
    let d = dashboard_as(Role::Admin).await;
    let accounts = Accounts::new(d.pool.clone());
    let bob = accounts
        .create("bob", PASSWORD, Role::Operator)
        .await
        .unwrap();
    let (bob_cookie, _) = sign_in(&d.app, "bob", PASSWORD, None).await;
    assert_eq!(get_as(&d.app, &bob_cookie, "/jobs").await.0, StatusCode::OK);
    let (status, body) = d
        .server_fn(
            "update_user",
            &format!(
                "id={}&action=password&password={}",
                bob.id,
                form(NEW_PASSWORD)
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        get_as(&d.app, &bob_cookie, "/jobs").await.0,
        StatusCode::SEE_OTHER
    );
    assert!(accounts
        .authenticate("bob", PASSWORD, "192.0.2.1".parse().unwrap())
        .await
        .is_err());
    let (cookie, _) = sign_in(&d.app, "bob", NEW_PASSWORD, None).await;
    assert_eq!(get_as(&d.app, &cookie, "/jobs").await.0, StatusCode::OK);
    // The admin's own session is untouched.
    assert_eq!(get_as(&d.app, &d.cookie, "/users").await.0, StatusCode::OK);
}

#[tokio::test]
async fn changing_ones_password_needs_the_current_one_and_ends_the_other_sessions() {
    let d = dashboard_as(Role::Viewer).await;
    let (other_cookie, _) = sign_in(&d.app, "ops", PASSWORD, None).await;
    for (input, status) in [
        (
            format!("current=wrong+password+here&new={}", form(NEW_PASSWORD)),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            format!("current={}&new=short", form(PASSWORD)),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let (got, body) = d.server_fn("change_password", &input).await;
        assert_eq!(got, status, "{input}: {body}");
    }
    assert_eq!(
        get_as(&d.app, &other_cookie, "/jobs").await.0,
        StatusCode::OK,
        "nothing changed yet"
    );
    let (status, body) = d
        .server_fn(
            "change_password",
            &format!("current={}&new={}", form(PASSWORD), form(NEW_PASSWORD)),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // This session goes on (same cookie, same CSRF token); the other one has ended.
    assert_eq!(get_as(&d.app, &d.cookie, "/jobs").await.0, StatusCode::OK);
    let (status, _) = d.server_fn("account", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        get_as(&d.app, &other_cookie, "/jobs").await.0,
        StatusCode::SEE_OTHER
    );
    let (cookie, _) = sign_in(&d.app, "ops", NEW_PASSWORD, None).await;
    assert_eq!(get_as(&d.app, &cookie, "/jobs").await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_revoked_token_stops_working_at_once() {
    let d = dashboard_as(Role::Operator).await;
    let (id, token) = make_token(&d, "deploy script", "write").await;
    assert!(token.starts_with("ko_"));
    // Stored only as a hash: the text appears nowhere in the table.
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_tokens WHERE prefix = $1 OR encode(secret_hash, 'escape') LIKE '%' || $1 || '%'",
    )
    .bind(&token)
    .fetch_one(&d.pool)
    .await
    .unwrap();
    assert_eq!(stored, 0);
    let (status, _) = d.api_as(&token, Method::GET, "/jobs", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = d
        .api_as(&token, Method::POST, "/jobs", json!({"kind": "noop"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, page) = d.page("/account").await;
    assert!(page.contains("deploy script"));
    assert!(
        !page.contains(&token),
        "the token's text is never shown again"
    );

    let (status, body) = d.server_fn("revoke_token", &format!("id={id}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (method, body) in [
        (Method::GET, Value::Null),
        (Method::POST, json!({"kind": "noop"})),
    ] {
        let (status, _) = d.api_as(&token, method, "/jobs", body).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(jobs_count(&d).await, 1);
    let (status, _) = d.server_fn("revoke_token", &format!("id={id}")).await;
    assert_eq!(status, StatusCode::CONFLICT, "revoked already");
    let (status, _) = d.server_fn("revoke_token", "id=424242").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_token_acts_within_its_scope_and_its_owners_role() {
    let d = dashboard_as(Role::Operator).await;
    let (_, read) = make_token(&d, "dashboard screen", "read").await;
    let (status, _) = d.api_as(&read, Method::GET, "/stats", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = d
        .api_as(&read, Method::POST, "/jobs", json!({"kind": "noop"}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("may only read"));
    assert_eq!(jobs_count(&d).await, 0);

    // A write token whose owner became a viewer may only read.
    let (_, write) = make_token(&d, "cron", "write").await;
    let accounts = Accounts::new(d.pool.clone());
    let ops = user_id(&d, "ops").await;
    accounts.set_role(ops, Role::Viewer).await.unwrap();
    let (status, body) = d
        .api_as(&write, Method::POST, "/jobs", json!({"kind": "noop"}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(jobs_count(&d).await, 0);
    // A viewer gets no write token at all.
    let pw = form(PASSWORD);
    let (status, body) = d
        .server_fn("create_token", &format!("name=x&scope=write&password={pw}"))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // Making a token takes the password again: a session alone (perhaps a stolen one) cannot.
    let (status, body) = d
        .server_fn(
            "create_token",
            "name=x&scope=read&password=not+the+password",
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("password is wrong"), "{body}");
    for input in [
        format!("name=&scope=read&password={pw}"),
        format!("name=x&scope=admin&password={pw}"),
    ] {
        let (status, body) = d.server_fn("create_token", &input).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{input}: {body}");
    }
    let long = format!("name={}&scope=read&password={pw}", "n".repeat(101));
    let (status, _) = d.server_fn("create_token", &long).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let tokens: i64 = sqlx::query_scalar("SELECT count(*) FROM api_tokens")
        .fetch_one(&d.pool)
        .await
        .unwrap();
    assert_eq!(tokens, 2, "no refused token was stored");

    // Disabling the owner stops their tokens; enabling them again lets them read again.
    accounts.set_disabled(ops, true).await.unwrap();
    let (status, _) = d.api_as(&read, Method::GET, "/stats", Value::Null).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    accounts.set_disabled(ops, false).await.unwrap();
    let (status, _) = d.api_as(&read, Method::GET, "/stats", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    // Unknown tokens, in the right shape or not, are refused alike.
    for bad in [
        "ko_".to_string() + &"0".repeat(64),
        "nonsense".into(),
        String::new(),
    ] {
        let (status, _) = d.api_as(&bad, Method::GET, "/stats", Value::Null).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bad}");
    }
}

#[tokio::test]
async fn only_the_owner_or_an_admin_revokes_a_token() {
    let d = dashboard_as(Role::Operator).await;
    let accounts = Accounts::new(d.pool.clone());
    let bob = accounts.create("bob", PASSWORD, Role::Admin).await.unwrap();
    let (bobs, bobs_text) = accounts
        .create_token(&bob, "bob's", kickoff::accounts::TokenScope::Read)
        .await
        .unwrap();
    let (status, _) = d
        .server_fn("revoke_token", &format!("id={}", bobs.id))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, page) = d.page("/account").await;
    assert!(
        !page.contains("bob&#x27;s") && !page.contains("bob's"),
        "the account page lists only one's own tokens"
    );
    let (status, _) = d
        .api_as(&bobs_text, Method::GET, "/stats", Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK);

    // An admin sees every token on the users page and may revoke any.
    let (mine, _) = make_token(&d, "mine", "read").await;
    let (admin_cookie, admin_csrf) = sign_in(&d.app, "bob", PASSWORD, None).await;
    let (_, page) = get_as(&d.app, &admin_cookie, "/users").await;
    assert!(page.contains(&format!("data-token=\"{mine}\"")));
    let (status, body) = server_fn_as(
        &d.app,
        &admin_cookie,
        &admin_csrf,
        "revoke_token",
        &format!("id={mine}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn api_calls_are_audited_under_the_tokens_owner() {
    let d = dashboard_as(Role::Operator).await;
    let (write_id, write) = make_token(&d, "cron", "write").await;
    let (_, read) = make_token(&d, "screen", "read").await;
    let (status, _) = d
        .api_as(&write, Method::POST, "/jobs", json!({"kind": "noop"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = d
        .api_as(&read, Method::POST, "/jobs", json!({"kind": "noop"}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let rows: Vec<(String, String, String, Option<String>, bool, String)> = sqlx::query_as(
        "SELECT actor, role, action, target, ok, result FROM audit_log
         WHERE action LIKE 'api.%' OR action LIKE 'token.%' ORDER BY id",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    let summary: Vec<(&str, &str, &str, bool)> = rows
        .iter()
        .map(|r| (r.0.as_str(), r.1.as_str(), r.2.as_str(), r.4))
        .collect();
    assert_eq!(
        summary,
        [
            ("ops", "operator", "token.create", true),
            ("ops", "operator", "token.create", true),
            ("ops", "operator", "api.POST /jobs", true),
            ("ops", "operator", "api.POST /jobs", false),
        ]
    );
    assert_eq!(
        rows[2].3.as_deref(),
        Some(format!("/api/v1/jobs (token {write_id})").as_str())
    );
    assert_eq!(rows[3].5, "HTTP 403");
    // The token's text is in no audit entry.
    let leaked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE target LIKE '%' || $1 || '%' OR result LIKE '%' || $1 || '%'",
    )
    .bind(&write[3..])
    .fetch_one(&d.pool)
    .await
    .unwrap();
    assert_eq!(leaked, 0);
}

#[tokio::test]
async fn a_locked_sign_in_says_when_to_try_again() {
    let d = dashboard_as(Role::Viewer).await;
    // The lock as ten failures in a row leave it (the throttle's own tests make it that way).
    sqlx::query(
        "INSERT INTO login_failures (scope, key, failures, window_started_at, locked_until)
         VALUES ('name', 'ops', 10, now(), now() + interval '15 minutes')",
    )
    .execute(&d.pool)
    .await
    .unwrap();
    let req = Request::post("/_console/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("name=ops&password={}", form(PASSWORD))))
        .unwrap();
    let res = tower::ServiceExt::oneshot(d.app.clone(), req)
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = res.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((890..=900).contains(&retry), "Retry-After {retry}");
}
