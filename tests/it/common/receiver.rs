//! A loopback webhook receiver for the tests: it keeps every request it gets and answers by path.
//!
//! - `/fail-once`: 500 to its first call, then 200;
//! - `/status/N`: status N, the body `answered N`, and the headers `x-receiver: kickoff-tests` and
//!   `set-cookie: session=s3cr3t`;
//! - `/echo/N`: status N, the request's headers echoed in the body (`name: value` lines) and
//!   each as a response header `x-echo-NAME` (a careless partner's error page);
//! - `/slow/MS`: 200 after MS milliseconds;
//! - a path given an answer ([`Receiver::answer`]): that answer, until told another;
//! - anything else: 200 `ok`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// One request as the receiver got it.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: axum::http::Method,
    /// When it came.
    pub at: std::time::Instant,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Call {
    /// A header's value; panics when it is absent.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in {self:?}"))
            .to_str()
            .unwrap()
    }
}

#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Call>>>, Answers);

/// The answers set by path: status, body and a `Retry-After`.
type Answers = Arc<Mutex<HashMap<String, (u16, String, Option<u64>)>>>;

pub struct Receiver {
    pub addr: SocketAddr,
    calls: Calls,
}

impl Receiver {
    /// Listens on a free loopback port until the test ends.
    pub async fn start() -> Receiver {
        let calls = Calls::default();
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(calls.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { addr, calls }
    }

    /// Answers `path` with `status` and `body` from now on (a partner's API whose answer
    /// changes).
    pub fn answer(&self, path: &str, status: u16, body: &str) {
        self.answer_after(path, status, body, None);
    }

    /// [`Receiver::answer`] with `Retry-After: <secs>` when given.
    pub fn answer_after(&self, path: &str, status: u16, body: &str, retry_after: Option<u64>) {
        self.calls
            .1
            .lock()
            .unwrap()
            .insert(path.to_string(), (status, body.to_string(), retry_after));
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request so far, in the order received.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.0.lock().unwrap().clone()
    }

    pub fn calls_to(&self, path: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.path == path)
            .collect()
    }
}

async fn answer(
    State(calls): State<Calls>,
    method: axum::http::Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let echoed: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let before = {
        let mut calls = calls.0.lock().unwrap();
        let before = calls.iter().filter(|c| c.path == path).count();
        calls.push(Call {
            method,
            at: std::time::Instant::now(),
            path: path.clone(),
            headers,
            body,
        });
        before
    };
    let set = calls.1.lock().unwrap().get(&path).cloned();
    if let Some((status, body, retry_after)) = set {
        let status = StatusCode::from_u16(status).unwrap();
        let mut res = (status, [("content-type", "application/json")], body).into_response();
        if let Some(secs) = retry_after {
            res.headers_mut()
                .insert("retry-after", secs.to_string().parse().unwrap());
        }
        return res;
    }
    if path == "/fail-once" && before == 0 {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    if let Some(code) = path.strip_prefix("/status/") {
        let status = StatusCode::from_u16(code.parse().unwrap()).unwrap();
        return (
            status,
            [
                ("x-receiver", "kickoff-tests"),
                ("set-cookie", "session=s3cr3t"),
            ],
            format!("answered {code}"),
        )
            .into_response();
    }
    if let Some(code) = path.strip_prefix("/echo/") {
        let status = StatusCode::from_u16(code.parse().unwrap()).unwrap();
        let body: String = echoed.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
        let mut res = (status, body).into_response();
        for (k, v) in &echoed {
            if let (Ok(name), Ok(value)) = (
                axum::http::HeaderName::from_bytes(format!("x-echo-{k}").as_bytes()),
                axum::http::HeaderValue::from_str(v),
            ) {
                res.headers_mut().insert(name, value);
            }
        }
        return res;
    }
    if let Some(ms) = path.strip_prefix("/slow/") {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
    }
    "ok".into_response()
}
