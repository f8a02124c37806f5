//! A signed-in dashboard for tests: the whole router in-process (tower `oneshot`) on a fresh
//! database, a user of a chosen role signed in through the login server function, and helpers to
//! call pages, server functions and the REST API as the browser and scripts do.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::test_db;
use kickoff::accounts::{Accounts, Role};

pub const TOKEN: &str = "console-test-token";

pub struct Dashboard {
    pub app: Router,
    pub pool: kickoff::engine::Db,
    /// The signed-in session's cookie and CSRF token.
    pub cookie: String,
    pub csrf: String,
}

pub const PASSWORD: &str = "correct horse battery staple";

pub async fn dashboard() -> Dashboard {
    dashboard_as(Role::Operator).await
}

pub async fn dashboard_as(role: Role) -> Dashboard {
    let db = test_db().await;
    let app = super::app(&db.pool, TOKEN);
    Accounts::new(db.pool.clone())
        .create("ops", PASSWORD, role)
        .await
        .unwrap();
    let (cookie, csrf) = sign_in(&app, "ops", PASSWORD, None).await;
    Dashboard {
        app,
        pool: db.pool,
        cookie,
        csrf,
    }
}

/// Signs in through the login server function; returns the session cookie and the CSRF token the
/// pages then carry.
pub async fn sign_in(
    app: &Router,
    name: &str,
    password: &str,
    cookie: Option<&str>,
) -> (String, String) {
    let mut req = Request::post("/_console/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        req = req.header(header::COOKIE, c);
    }
    let res = app
        .clone()
        .oneshot(
            req.body(Body::from(format!(
                "name={name}&password={}",
                password.replace(' ', "+")
            )))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK, "sign-in refused");
    let cookie = session_cookie(&res).expect("a session cookie");
    let page = app
        .clone()
        .oneshot(
            Request::get("/")
                .header(header::COOKIE, &cookie)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let html = String::from_utf8(
        page.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    let csrf = html
        .split("<meta name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page carries the CSRF token")
        .to_string();
    (cookie, csrf)
}

pub fn session_cookie(res: &axum::response::Response) -> Option<String> {
    res.headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("kickoff_session="))
        .map(|v| v.split(';').next().unwrap().to_string())
}

/// Calls a server function as the hydrated dashboard of the session `cookie` does (a urlencoded
/// POST with the form's CSRF field).
pub async fn server_fn_as(
    app: &Router,
    cookie: &str,
    csrf: &str,
    name: &str,
    form: &str,
) -> (StatusCode, String) {
    let req = Request::post(format!("/_console/{name}"))
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("{form}&csrf={csrf}")))
        .unwrap();
    let (status, _, body) = send(app, req).await;
    (status, body)
}

/// A GET of `path` with the session `cookie`: the status and the body.
pub async fn get_as(app: &Router, cookie: &str, path: &str) -> (StatusCode, String) {
    let req = Request::get(path)
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = send(app, req).await;
    (status, body)
}

pub async fn send(app: &Router, req: Request<Body>) -> (StatusCode, Option<String>, String) {
    let (status, location, body, _) = send_for_session(app, req).await;
    (status, location, body)
}

/// [`send`], with the session cookie the response sets, if it sets one.
pub async fn send_for_session(
    app: &Router,
    req: Request<Body>,
) -> (StatusCode, Option<String>, String, Option<String>) {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let location = res
        .headers()
        .get(header::LOCATION)
        .map(|l| l.to_str().unwrap().to_string());
    let cookie = session_cookie(&res);
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        location,
        String::from_utf8_lossy(&bytes).into_owned(),
        cookie,
    )
}

impl Dashboard {
    pub async fn send(&self, mut req: Request<Body>) -> (StatusCode, Option<String>, String) {
        req.headers_mut()
            .insert(header::COOKIE, self.cookie.parse().unwrap());
        send(&self.app, req).await
    }

    /// The whole response to a signed-in GET of `path` (headers included).
    pub async fn get(&self, path: &str) -> axum::response::Response {
        self.app
            .clone()
            .oneshot(
                Request::get(path)
                    .header(header::COOKIE, &self.cookie)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap()
    }

    pub async fn page(&self, path: &str) -> (StatusCode, String) {
        let req = Request::get(path).body(Body::empty()).unwrap();
        let (status, _, body) = self.send(req).await;
        (status, body)
    }

    /// Calls a server function as the hydrated dashboard does (a urlencoded POST with the form's
    /// CSRF field).
    pub async fn server_fn(&self, name: &str, form: &str) -> (StatusCode, String) {
        server_fn_as(&self.app, &self.cookie, &self.csrf, name, form).await
    }

    /// Calls the REST API with the bootstrap token; the call must succeed.
    pub async fn api(&self, method: Method, path: &str, body: Value) -> Value {
        let (status, body) = self.api_as(TOKEN, method, path, body).await;
        assert!(status.is_success(), "{status}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// Calls the REST API with the bearer token `token`.
    pub async fn api_as(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Value,
    ) -> (StatusCode, String) {
        let body = Some((body.to_string().into_bytes(), "application/json"));
        super::rest::send(
            &self.app,
            method,
            &format!("/api/v1{path}"),
            Some(token),
            body,
        )
        .await
    }

    pub async fn new_job(&self, body: Value) -> i64 {
        self.api(Method::POST, "/jobs", body).await["job"]["id"]
            .as_i64()
            .unwrap()
    }

    pub async fn state_of(&self, id: i64) -> String {
        sqlx::query_scalar("SELECT state::text FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    pub async fn job_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM jobs")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}
