//! Kickoff served under a path (`/kickoff`) of an application's own router, in-process against
//! real PostgreSQL: the sign-in, every page, the dashboard's forms and the REST API answer under
//! it, everything the pages link to or load stays under it, and the application's own routes are
//! its own.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::json;

use std::sync::Arc;

use axum::http::request::Parts;

use crate::common::dashboard::{send, TOKEN};
use crate::common::{app_under, app_under_signed_in_by, test_db};
use kickoff::accounts::{Accounts, Role};
use kickoff::engine::BoxFuture;
use kickoff::http::app_auth::{Authenticate, Caller};

const BASE: &str = "/kickoff";

/// Every `href`, `src` and `action` of `html` that is a path.
fn paths_in(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for attr in ["href=\"", "src=\"", "action=\""] {
        for rest in html.split(attr).skip(1) {
            let value = rest.split('"').next().unwrap_or("");
            if value.starts_with('/') {
                found.push(value.to_string());
            }
        }
    }
    found
}

#[tokio::test]
async fn the_dashboard_and_the_api_answer_under_the_applications_path_and_link_only_inside_it() {
    let db = test_db().await;
    let app = app_under(&db.pool, TOKEN, BASE);
    Accounts::new(db.pool.clone())
        .create("ops", "correct horse battery staple", Role::Admin)
        .await
        .unwrap();

    // The application's own routes stay its own; Kickoff's root paths are not taken.
    let (status, _, body) = send(&app, Request::get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "the game's own page")
    );
    for taken_at_the_root in ["/jobs", "/login", "/api/v1/jobs", "/_console/login"] {
        let req = Request::get(taken_at_the_root)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .body(Body::empty())
            .unwrap();
        let (status, _, _) = send(&app, req).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{taken_at_the_root}");
    }

    // A page without a session goes to the login page under the base, and back after it.
    let (status, location, _) = send(
        &app,
        Request::get("/kickoff/jobs?state=failed")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        location.as_deref(),
        Some("/kickoff/login?next=%2Fjobs%3Fstate%3Dfailed")
    );
    let (status, _, login) = send(
        &app,
        Request::get("/kickoff/login?next=%2Fjobs")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        login.contains(r#"<meta name="kickoff-base" content="/kickoff""#),
        "{login}"
    );
    // Posted before the page's script runs, the form reaches the dashboard's sign-in.
    assert!(
        login.contains(r#"action="/kickoff/_console/login""#),
        "{login}"
    );
    assert!(login.contains("/kickoff/pkg/kickoff.css"), "{login}");
    assert!(login.contains("/kickoff/pkg/kickoff.js"), "{login}");

    // Signing in with a plain form post goes on to the page asked for, under the base.
    let req = Request::post("/kickoff/_console/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "text/html")
        .body(Body::from(
            "name=ops&password=correct+horse+battery+staple&next=%2Fjobs",
        ))
        .unwrap();
    let res = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
    assert_eq!(res.status(), StatusCode::FOUND);
    assert_eq!(res.headers()[header::LOCATION], "/kickoff/jobs");
    // The session is the base's: the application's other paths are not sent it.
    let set_cookie = res.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(set_cookie.contains("Path=/kickoff;"), "{set_cookie}");
    let cookie = crate::common::dashboard::session_cookie(&res).expect("a session cookie");

    // The REST API answers under the base, with its token.
    let req = Request::post("/kickoff/api/v1/jobs")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"game": "Bears"}})
                .to_string(),
        ))
        .unwrap();
    let (status, _, body) = send(&app, req).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Recorded under its route, as at the root.
    let action: String =
        sqlx::query_scalar("SELECT action FROM audit_log ORDER BY id DESC LIMIT 1")
            .fetch_one(db.pool.pool())
            .await
            .unwrap();
    assert_eq!(action, "api.POST /jobs");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["job"]["id"]
        .as_i64()
        .unwrap();

    // Every page renders under the base, and links or loads nothing outside it.
    let page = |path: String| {
        let (app, cookie) = (app.clone(), cookie.clone());
        async move {
            let req = Request::get(&path)
                .header(header::COOKIE, cookie)
                .body(Body::empty())
                .unwrap();
            let (status, _, body) = send(&app, req).await;
            assert_eq!(status, StatusCode::OK, "{path}: {body}");
            body
        }
    };
    let jobs = page("/kickoff/jobs".into()).await;
    assert!(
        jobs.contains(&format!(r#"href="/kickoff/jobs/{id}""#)),
        "{jobs}"
    );
    let csrf = jobs
        .split(r#"<meta name="csrf-token" content=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    for path in [
        "",
        "/jobs",
        "/jobs/new",
        &format!("/jobs/{id}"),
        "/failures",
        "/timers",
        "/history",
        "/calls",
        "/alerts",
        "/queues",
        "/schedules",
        "/schedules/new",
        "/questions",
        "/questions/new",
        "/workflows",
        "/audit",
        "/users",
        "/webhooks",
        "/account",
    ] {
        let html = page(format!("{BASE}{path}")).await;
        let outside: Vec<_> = paths_in(&html)
            .into_iter()
            .filter(|p| p != BASE && !p.starts_with("/kickoff/"))
            .collect();
        assert!(
            outside.is_empty(),
            "{BASE}{path} links outside the base: {outside:?}"
        );
        assert!(
            html.contains(r#"href="/kickoff/jobs""#),
            "{BASE}{path}: no nav"
        );
    }

    let req = Request::get("/kickoff/?range=24h")
        .body(Body::empty())
        .unwrap();
    let (status, location, _) = send(&app, req).await;
    assert_eq!(
        (status, location.as_deref()),
        (StatusCode::PERMANENT_REDIRECT, Some("/kickoff?range=24h"))
    );
    // A page that does not exist is the dashboard's, under the base.
    let req = Request::get("/kickoff/no-such-page")
        .header(header::COOKIE, &cookie)
        .body(Body::empty())
        .unwrap();
    let (_, _, missing) = send(&app, req).await;
    assert!(missing.contains("Page not found"), "{missing}");
    assert!(missing.contains("/kickoff/pkg/kickoff.js"), "{missing}");
    // The site's files may be kept by the browser, as at the root; the pages may not.
    for (path, kept) in [("/kickoff/pkg/kickoff.css", true), ("/kickoff/jobs", false)] {
        let req = Request::get(path)
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .unwrap();
        let res = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
        let no_store = res
            .headers()
            .get(header::CACHE_CONTROL)
            .is_some_and(|v| v.to_str().unwrap().contains("no-store"));
        assert_eq!(no_store, !kept, "{path}");
    }

    // The hydrated dashboard's server functions answer under the base, and their plain form
    // posts go back under it.
    let req = Request::post("/kickoff/_console/job_action")
        .header(header::COOKIE, &cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("id={id}&action=cancel&csrf={csrf}")))
        .unwrap();
    let (status, _, body) = send(&app, req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let req = Request::get(format!("/kickoff/api/v1/jobs/{id}"))
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    let (_, _, body) = send(&app, req).await;
    assert!(body.contains(r#""state":"cancelled""#), "{body}");
    let req = Request::builder()
        .method(Method::POST)
        .uri("/kickoff/_console/logout")
        .header(header::COOKIE, &cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "text/html")
        .body(Body::from(format!("csrf={csrf}")))
        .unwrap();
    let (status, location, _) = send(&app, req).await;
    assert_eq!(
        (status, location.as_deref()),
        (StatusCode::FOUND, Some("/kickoff/login"))
    );
}

/// The application's sign-in of these tests: its header `x-game-user: <name> <role>`.
struct HeaderSignIn;

impl Authenticate for HeaderSignIn {
    fn caller<'a>(&'a self, request: &'a Parts) -> BoxFuture<'a, Option<Caller>> {
        Box::pin(async move {
            let value = request.headers.get("x-game-user")?.to_str().ok()?;
            let (name, role) = value.split_once(' ')?;
            Some(Caller {
                name: name.to_string(),
                role: role.parse().ok()?,
            })
        })
    }

    fn sign_in_url(&self, next: &str) -> Option<String> {
        let next: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
        Some(format!("/sign-in?next={next}"))
    }
}

/// A GET or POST of `path` as `user` (`None`: no one signed in): status, `Location`, body.
async fn as_user(
    app: &axum::Router,
    user: Option<&str>,
    method: Method,
    path: &str,
    form: Option<String>,
) -> (StatusCode, Option<String>, String) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(user) = user {
        req = req.header("x-game-user", user);
    }
    let req = match form {
        Some(form) => req
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form)),
        None => req.body(Body::empty()),
    };
    send(app, req.unwrap()).await
}

fn csrf_of(page: &str) -> String {
    page.split(r#"<meta name="csrf-token" content=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page carries its CSRF token")
        .to_string()
}

#[tokio::test]
async fn behind_the_applications_own_sign_in_its_callers_act_in_the_role_it_says() {
    let db = test_db().await;
    let app = app_under_signed_in_by(&db.pool, TOKEN, BASE, Some(Arc::new(HeaderSignIn)));
    let req = Request::post("/kickoff/api/v1/jobs")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            json!({"kind": "noop", "schedule_in_ms": 600_000}).to_string(),
        ))
        .unwrap();
    let (status, _, body) = send(&app, req).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["job"]["id"]
        .as_i64()
        .unwrap();
    let cancel = |csrf: &str| Some(format!("id={id}&action=cancel&csrf={csrf}"));

    // No one signed in: a page goes to the application's sign-in, and back; the rest is 401.
    let (status, location, _) =
        as_user(&app, None, Method::GET, "/kickoff/jobs?state=failed", None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        location.as_deref(),
        Some("/sign-in?next=%2Fkickoff%2Fjobs%3Fstate%3Dfailed")
    );
    let (status, _, _) = as_user(
        &app,
        None,
        Method::POST,
        "/kickoff/_console/jobs",
        Some(String::new()),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Kickoff's own sign-in is not a way in.
    let (status, _, _) = as_user(
        &app,
        None,
        Method::POST,
        "/kickoff/_console/login",
        Some("name=admin&password=whatever".into()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, location, _) = as_user(
        &app,
        Some("alice operator"),
        Method::GET,
        "/kickoff/login",
        None,
    )
    .await;
    assert_eq!(
        (status, location.as_deref()),
        (StatusCode::SEE_OTHER, Some("/kickoff"))
    );

    // An operator the application vouches for reads and acts, with a token of their own; they
    // are not offered Kickoff's sign-out.
    let (status, _, page) = as_user(
        &app,
        Some("alice operator"),
        Method::GET,
        "/kickoff/jobs",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains(r#"<meta name="kickoff-user" content="alice""#),
        "{page}"
    );
    assert!(page.contains(r#"<meta name="kickoff-signed-in-by" content="application""#));
    assert!(!page.contains("Sign out"), "{page}");
    let alice = csrf_of(&page);
    let (_, _, bobs_page) =
        as_user(&app, Some("bob viewer"), Method::GET, "/kickoff/jobs", None).await;
    let bob = csrf_of(&bobs_page);
    assert_ne!(alice, bob);
    // Without her token, or with another's, a form of hers is refused.
    for csrf in ["", bob.as_str()] {
        let (status, _, _) = as_user(
            &app,
            Some("alice operator"),
            Method::POST,
            "/kickoff/_console/job_action",
            cancel(csrf),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{csrf}");
    }
    // A viewer may not act.
    let (status, _, _) = as_user(
        &app,
        Some("bob viewer"),
        Method::POST,
        "/kickoff/_console/job_action",
        cancel(&bob),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Nor may alice once the application says she is a viewer now.
    let (status, _, _) = as_user(
        &app,
        Some("alice viewer"),
        Method::POST,
        "/kickoff/_console/job_action",
        cancel(&alice),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, body) = as_user(
        &app,
        Some("alice operator"),
        Method::POST,
        "/kickoff/_console/job_action",
        cancel(&alice),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (state, actor): (String, String) = sqlx::query_as(
        "SELECT (SELECT state::text FROM jobs WHERE id = $1), \
                (SELECT actor FROM audit_log WHERE action LIKE '%cancel%' ORDER BY id DESC LIMIT 1)",
    )
    .bind(id)
    .fetch_one(db.pool.pool())
    .await
    .unwrap();
    assert_eq!((state.as_str(), actor.as_str()), ("cancelled", "alice"));

    // The application's callers are accounts here, made with the role it said, and no password.
    let users: Vec<(String, String)> = sqlx::query_as("SELECT name, role FROM users ORDER BY name")
        .fetch_all(db.pool.pool())
        .await
        .unwrap();
    assert_eq!(
        users,
        [
            ("alice".into(), "operator".into()),
            ("bob".into(), "viewer".into())
        ]
    );
    let login = Accounts::new(db.pool.clone())
        .authenticate(
            "alice",
            "!signed in by the application",
            "127.0.0.1".parse().unwrap(),
        )
        .await;
    assert!(login.is_err(), "{login:?}");
    // Their account page offers no token or password: they have no password here.
    let (status, _, account) = as_user(
        &app,
        Some("alice operator"),
        Method::GET,
        "/kickoff/account",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(account.contains("has no password"), "{account}");
    assert!(!account.contains("Change your password"), "{account}");

    // No password can be given to them here.
    let accounts = Accounts::new(db.pool.clone());
    let alice_id: i64 = sqlx::query_scalar("SELECT id FROM users WHERE name = 'alice'")
        .fetch_one(db.pool.pool())
        .await
        .unwrap();
    let reset = accounts
        .set_password(alice_id, "correct horse battery staple")
        .await;
    assert!(
        matches!(&reset, Err(kickoff::accounts::AccountError::Conflict(m)) if m.contains("no password here")),
        "{reset:?}"
    );

    // A name that cannot be an account's, a name written otherwise than its account's, and the
    // name of an account with a password of its own here are refused, and said why.
    accounts
        .create("carol", "correct horse battery staple", Role::Viewer)
        .await
        .unwrap();
    for (user, why) in [
        ("al!ce operator", "cannot be a Kickoff account"),
        ("Alice operator", "lowercase"),
        ("carol admin", "an account with a password here"),
    ] {
        let (status, _, body) = as_user(&app, Some(user), Method::GET, "/kickoff/jobs", None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{user}");
        assert!(body.contains(why), "{user}: {body}");
    }
    let carol: String = sqlx::query_scalar("SELECT role FROM users WHERE name = 'carol'")
        .fetch_one(db.pool.pool())
        .await
        .unwrap();
    assert_eq!(carol, "viewer");

    // A post from another site's form is refused, whoever's cookie it carries; a read as well.
    for (name, value) in [
        ("origin", "http://elsewhere.example"),
        ("sec-fetch-site", "cross-site"),
    ] {
        for function in ["job_action", "jobs"] {
            let req = Request::post(format!("/kickoff/_console/{function}"))
                .header("x-game-user", "alice operator")
                .header(header::HOST, "games.example")
                .header(name, value)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(cancel(&alice).unwrap()))
                .unwrap();
            let (status, _, _) = send(&app, req).await;
            assert_eq!(
                status,
                StatusCode::FORBIDDEN,
                "{function} with {name}: {value}"
            );
        }
    }
}
