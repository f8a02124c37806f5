//! The first admin's setup link, through the whole router in-process against real PostgreSQL: a
//! server started on a database with no user prints `/setup?code=…`; only that code opens the page
//! (everything else is a 404, and a wrong code counts like a failed sign-in); it makes one admin,
//! signed in, once, however many setups race; and once any user exists every link is dead.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use kickoff::engine::Db;

use crate::common::dashboard::{get_as, send, send_for_session};
use crate::common::{app, app_with_setup_link, test_db};
use kickoff::accounts::{Accounts, Role, LOCK_AFTER_FAILURES};

const TOKEN: &str = "setup-test-token";
const CODE: &str = "5e7c0de05e7c0de05e7c0de05e7c0de05e7c0de05e7c0de0";
const OTHER_CODE: &str = "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b";
const PASSWORD: &str = "the first admin's password";

struct Answer {
    status: StatusCode,
    location: Option<String>,
    body: String,
    cookie: Option<String>,
}

/// Posts the setup form as the hydrated page does, or as a plain form (`accept: text/html`).
async fn post_setup(app: &Router, code: &str, name: &str, password: &str, accept: &str) -> Answer {
    post_setup_confirmed(app, code, name, password, password, accept).await
}

async fn post_setup_confirmed(
    app: &Router,
    code: &str,
    name: &str,
    password: &str,
    confirm: &str,
    accept: &str,
) -> Answer {
    let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let req = Request::post("/_console/setup")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, accept)
        .body(Body::from(format!(
            "code={}&name={}&password={}&confirm={}",
            enc(code),
            enc(name),
            enc(password),
            enc(confirm)
        )))
        .unwrap();
    let (status, location, body, cookie) = send_for_session(app, req).await;
    Answer {
        status,
        location,
        body,
        cookie,
    }
}

async fn get(app: &Router, path: &str) -> (StatusCode, String) {
    let (status, _, body) = send(app, Request::get(path).body(Body::empty()).unwrap()).await;
    (status, body)
}

/// Every user as `name role`.
async fn users(pool: &Db) -> Vec<String> {
    sqlx::query_scalar("SELECT name || ' ' || role::text FROM users ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_setup_page_is_a_404_without_the_servers_live_code() {
    let db = test_db().await;
    let node = app_with_setup_link(&db.pool, TOKEN, CODE);
    for path in ["/setup", "/setup?code=", "/setup?next=/"] {
        let (status, body) = get(&node, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(body.contains("Page not found."), "{path}: {body}");
        assert!(!body.contains("Create the first admin"), "{path}");
    }
    // A server whose link was never made (it started with users, or with KICKOFF_ADMIN_PASSWORD)
    // knows no code at all.
    let (status, _) = get(&app(&db.pool, TOKEN), &format!("/setup?code={CODE}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let a = post_setup(&node, "", "alice", PASSWORD, "*/*").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    assert!(users(&db.pool).await.is_empty());
    // The login page of this fresh install points to the link in the server's output.
    let (status, body) = get(&node, "/login").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("setup link the server printed"), "{body}");
}

#[tokio::test]
async fn the_right_code_makes_the_first_admin_signed_in_and_then_the_link_is_dead() {
    let db = test_db().await;
    let node = app_with_setup_link(&db.pool, TOKEN, CODE);
    let (status, body) = get(&node, &format!("/setup?code={CODE}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("Create the first admin"), "{body}");

    // Mistakes in the form leave the link live.
    let a = post_setup_confirmed(&node, CODE, "alice", PASSWORD, "another password", "*/*").await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(a.body.contains("the two passwords differ"), "{}", a.body);
    let a = post_setup(&node, CODE, "alice", "short", "*/*").await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(a.body.contains("password"), "{}", a.body);
    let a = post_setup(&node, CODE, "al ice", PASSWORD, "*/*").await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(users(&db.pool).await.is_empty());

    let a = post_setup(&node, CODE, "Alice", PASSWORD, "*/*").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body, "\"/\"");
    assert_eq!(users(&db.pool).await, ["alice admin"]);
    // Signed in: the overview renders for this session, as alice the admin.
    let cookie = a.cookie.expect("a session cookie");
    let (status, page) = get_as(&node, &cookie, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("Jobs by state"));
    assert!(page.contains(r#"<meta name="kickoff-user" content="alice""#));
    assert!(page.contains(r#"<meta name="kickoff-role" content="admin""#));
    let audit: Vec<String> = sqlx::query_scalar(
        "SELECT actor || ' ' || action || ' ' || result FROM audit_log WHERE ok ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(audit, ["alice user.create ok", "alice session.sign_in ok"]);

    // Spent: the page and the form are 404s, and nobody else becomes an admin through it.
    let (status, _) = get(&node, &format!("/setup?code={CODE}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let a = post_setup(&node, CODE, "mallory", PASSWORD, "*/*").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    assert_eq!(users(&db.pool).await, ["alice admin"]);
    let (_, login) = get(&node, "/login").await;
    assert!(!login.contains("setup link"));
}

#[tokio::test]
async fn a_plain_form_post_sets_up_the_first_admin_without_javascript() {
    let db = test_db().await;
    let node = app_with_setup_link(&db.pool, TOKEN, CODE);
    let a = post_setup(&node, CODE, "alice", PASSWORD, "text/html").await;
    assert_eq!(a.status, StatusCode::FOUND, "{}", a.body);
    assert_eq!(a.location.as_deref(), Some("/"));
    let (status, page) = get_as(&node, &a.cookie.expect("a session cookie"), "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"<meta name="kickoff-user" content="alice""#));
    assert_eq!(users(&db.pool).await, ["alice admin"]);
}

#[tokio::test]
async fn a_wrong_code_is_a_404_and_counts_like_a_failed_sign_in() {
    let db = test_db().await;
    let node = app_with_setup_link(&db.pool, TOKEN, CODE);
    let a = post_setup(&node, OTHER_CODE, "alice", PASSWORD, "*/*").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    let near = &CODE[..CODE.len() - 1];
    for _ in 2..LOCK_AFTER_FAILURES {
        let (status, body) = get(&node, &format!("/setup?code={near}1")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("Page not found."));
    }
    // The tenth wrong code locks this address, for the setup (even with the right code) and for
    // signing in alike.
    let (status, _) = get(&node, &format!("/setup?code={near}2")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _) = get(&node, &format!("/setup?code={CODE}")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let a = post_setup(&node, CODE, "alice", PASSWORD, "*/*").await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.body);
    let req = Request::post("/_console/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("name=nobody&password=whatever+it+is"))
        .unwrap();
    let (status, _, body) = send(&node, req).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(users(&db.pool).await.is_empty());
    let refused: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'user.create' AND NOT ok",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        refused, 1,
        "the refused setup form checked is in the audit log"
    );
    // Those refused unchecked while locked (two setups, a sign-in) are counted, and written as
    // one entry when the lock is over.
    let after_the_lock = chrono::Utc::now() + chrono::Duration::hours(1);
    let flush = kickoff::accounts::store::login_lock_refusals_flush;
    assert_eq!(flush(&db.pool, Some(after_the_lock)).await.unwrap(), 1);
    let count: Option<i64> = sqlx::query_scalar(
        "SELECT count FROM audit_log WHERE action = 'session.sign_in' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(count, Some(3));
}

#[tokio::test]
async fn once_any_user_exists_every_setup_link_is_dead() {
    // `kickoff user add` while the server runs.
    let db = test_db().await;
    let node = app_with_setup_link(&db.pool, TOKEN, CODE);
    Accounts::new(db.pool.clone())
        .create("bob", PASSWORD, Role::Viewer)
        .await
        .unwrap();
    let (status, _) = get(&node, &format!("/setup?code={CODE}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let a = post_setup(&node, CODE, "alice", PASSWORD, "*/*").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    assert_eq!(users(&db.pool).await, ["bob viewer"]);

    // Another node started with KICKOFF_ADMIN_PASSWORD after this one printed its link.
    let db = test_db().await;
    let node = app_with_setup_link(&db.pool, TOKEN, CODE);
    let (status, _) = get(&node, &format!("/setup?code={CODE}")).await;
    assert_eq!(status, StatusCode::OK);
    Accounts::new(db.pool.clone())
        .ensure_first_admin(Some(PASSWORD))
        .await
        .unwrap()
        .expect("the first admin");
    let a = post_setup(&node, CODE, "alice", PASSWORD, "*/*").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    assert_eq!(users(&db.pool).await, ["admin admin"]);
}

/// What racing setups answer: one is made, the others get the 404 (not an error). Whether they
/// truly overlap is up to timing here; tests/accounts.rs provokes the interleaving on purpose.
#[tokio::test]
async fn setups_racing_on_two_nodes_and_a_first_start_make_one_admin() {
    for round in 0..3 {
        let db = test_db().await;
        // Two nodes, each with its own link and its own connections; a third node starting with
        // KICKOFF_ADMIN_PASSWORD at the same moment.
        let pool_b = db.other_pool(10).await;
        let node_a = app_with_setup_link(&db.pool, TOKEN, CODE);
        let node_b = app_with_setup_link(&pool_b, TOKEN, OTHER_CODE);
        let node_c = Accounts::new(pool_b.clone());
        let (alice, carol, bob, admin) = tokio::join!(
            post_setup(&node_a, CODE, "alice", PASSWORD, "*/*"),
            // A second tab with the same link.
            post_setup(&node_a, CODE, "carol", PASSWORD, "*/*"),
            post_setup(&node_b, OTHER_CODE, "bob", PASSWORD, "*/*"),
            node_c.ensure_first_admin(Some(PASSWORD)),
        );
        let made_by_links = [&alice, &carol, &bob]
            .iter()
            .filter(|a| a.status == StatusCode::OK)
            .count();
        let made_at_start = admin.unwrap().is_some() as usize;
        assert_eq!(made_by_links + made_at_start, 1, "round {round}");
        for a in [&alice, &carol, &bob] {
            assert!(
                [StatusCode::OK, StatusCode::NOT_FOUND].contains(&a.status),
                "round {round}: {} {}",
                a.status,
                a.body
            );
        }
        assert_eq!(users(&db.pool).await.len(), 1, "round {round}");
    }
}

#[tokio::test]
async fn a_setup_posted_from_another_site_is_refused() {
    let db = test_db().await;
    let node = app_with_setup_link(&db.pool, TOKEN, CODE);
    let req = Request::post("/_console/setup")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::HOST, "kickoff.local")
        .header(header::ORIGIN, "https://evil.example")
        .body(Body::from(format!(
            "code={CODE}&name=mallory&password={0}&confirm={0}",
            PASSWORD.replace(' ', "+").replace('\'', "%27")
        )))
        .unwrap();
    let (status, _, _) = send(&node, req).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(users(&db.pool).await.is_empty());
}

#[tokio::test]
async fn a_setup_the_audit_log_cannot_record_makes_no_admin_and_leaves_the_link_live() {
    let db = test_db().await;
    let node = app_with_setup_link(&db.pool, TOKEN, CODE);
    crate::common::audit_log_refuses(&db.pool, "true").await;
    let a = post_setup(&node, CODE, "alice", PASSWORD, "*/*").await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    assert!(a.body.contains("audit log"), "{}", a.body);
    assert!(
        users(&db.pool).await.is_empty(),
        "no admin without its entry"
    );

    crate::common::audit_log_works(&db.pool).await;
    let a = post_setup(&node, CODE, "alice", PASSWORD, "*/*").await;
    assert_eq!(
        a.status,
        StatusCode::OK,
        "the link is still live: {}",
        a.body
    );
    assert_eq!(users(&db.pool).await, ["alice admin"]);
    let entries: Vec<(String, String, bool)> =
        sqlx::query_as("SELECT actor, action, ok FROM audit_log ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        entries,
        [
            ("alice".to_string(), "user.create".to_string(), true),
            ("alice".to_string(), "session.sign_in".to_string(), true)
        ]
    );
}
