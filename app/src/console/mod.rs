//! The port between the dashboard and the server: the data the UI shows, the server functions
//! that fetch it or act, and the traits the server implements (behind the `ssr` feature), one
//! module an area of the dashboard, each with its DTOs, its trait and its server functions.
//! `Console` is their sum: the one object the server provides as context.
//!
//! Times travel as milliseconds since the epoch; every page's data carries the database clock
//! (`now_ms`) it was read at, so countdowns and "2 s late" are measured against the database, not
//! against the browser's or the server's own clock.
//!
//! A server function's struct argument whose fields are all absent (an unfiltered list) is encoded
//! as nothing at all: `#[server(default)]` lets the server read that as the default instead of
//! refusing it as a missing field. Every such argument carries it.

pub mod accounts;
pub mod alerts;
pub mod audit;
pub mod history;
pub mod jobs;
pub mod overview;
pub mod questions;
pub mod queues;
pub mod schedules;
pub mod webhooks;

#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// A query parameter's value, trimmed; `None` when absent or blank.
pub fn nonempty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Encodes pairs as a query string (`a=1&b=x%20y`).
pub fn query_string(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Why the server refused a dashboard request: the HTTP status of the server function's response
/// and a message for the operator. A client's mistake is never a 500. The server makes one from
/// each of its errors by the table its REST API answers with, so the two agree.
#[cfg(feature = "ssr")]
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
    /// When the client may try again, in seconds (a `Retry-After` header): a sign-in lock.
    pub retry_after_secs: Option<u64>,
}

#[cfg(feature = "ssr")]
impl Refusal {
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Refusal {
            status,
            message: message.into(),
            retry_after_secs: None,
        }
    }
    /// 422: the input is wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        Refusal::new(422, message)
    }
    /// 404: no such job, question or queue.
    pub fn not_found(message: impl Into<String>) -> Self {
        Refusal::new(404, message)
    }
    /// 409: the thing's state does not allow it.
    pub fn conflict(message: impl Into<String>) -> Self {
        Refusal::new(409, message)
    }
}

#[cfg(feature = "ssr")]
impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal::invalid(message)
    }
}

/// What the server provides to the dashboard: every area's trait, as one object (the server
/// functions find it in the Leptos context as `Arc<dyn Console>`).
#[cfg(feature = "ssr")]
pub trait Console:
    overview::OverviewConsole
    + jobs::JobsConsole
    + queues::QueuesConsole
    + schedules::SchedulesConsole
    + questions::QuestionsConsole
    + accounts::AccountsConsole
    + audit::AuditConsole
    + webhooks::WebhooksConsole
    + alerts::AlertsConsole
    + history::HistoryConsole
{
}

#[cfg(feature = "ssr")]
impl<T> Console for T where
    T: overview::OverviewConsole
        + jobs::JobsConsole
        + queues::QueuesConsole
        + schedules::SchedulesConsole
        + questions::QuestionsConsole
        + accounts::AccountsConsole
        + audit::AuditConsole
        + webhooks::WebhooksConsole
        + alerts::AlertsConsole
        + history::HistoryConsole
{
}

#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn Console>, ServerFnError> {
    use_context::<std::sync::Arc<dyn Console>>()
        .ok_or_else(|| ServerFnError::new("the console is not available"))
}

/// Turns a refusal into the server function's error, with its HTTP status (and `Retry-After`) on
/// the response (also on a server-rendered page whose data was refused: a missing job's page is a
/// 404).
///
/// A plain form post (no JavaScript: the browser accepts HTML) keeps the redirect back to the page
/// it came from, which then shows the job or queue as it is.
#[cfg(feature = "ssr")]
fn fail(refusal: impl Into<Refusal>) -> ServerFnError {
    let refusal = refusal.into();
    let response = use_context::<leptos_axum::ResponseOptions>();
    if let (Some(response), Some(secs)) = (&response, refusal.retry_after_secs) {
        response.insert_header(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
    }
    let form_post = use_context::<http::request::Parts>().is_some_and(|parts| {
        parts.method == http::Method::POST
            && parts
                .headers
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("text/html"))
    });
    if form_post {
        return ServerFnError::new(refusal.message);
    }
    if let Some(response) = response {
        if let Ok(status) = http::StatusCode::from_u16(refusal.status) {
            response.set_status(status);
        }
    }
    ServerFnError::new(refusal.message)
}
