//! REST calls to the whole application in-process (tower `oneshot`): real routing, extractors,
//! authentication and database, without a socket.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// One call: `token` as the bearer (if any), `body` (bytes, content type) if any. Returns the
/// status and the body as text.
pub async fn send(
    app: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<(Vec<u8>, &str)>,
) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = match body {
        Some((bytes, content_type)) => {
            req = req.header(header::CONTENT_TYPE, content_type);
            Body::from(bytes)
        }
        None => Body::empty(),
    };
    let res = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// [`send`] with a JSON body (if any); the answer's body as JSON (`Null` when it is not JSON).
pub async fn call(
    app: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    let body = body.map(|b| (b.to_string().into_bytes(), "application/json"));
    let (status, text) = send(app, method, path, token, body).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}
