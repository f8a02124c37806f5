//! What every area of the port stands on: a refusal and how a server function answers it, the
//! area's implementation found in the Leptos context, and the query strings the pages build.

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

/// The server's implementation of an area's trait (`T`: `dyn JobsConsole`, …), which
/// `provide` (the port's `mod.rs`) put in the Leptos context.
#[cfg(feature = "ssr")]
pub(super) fn console<T: ?Sized + Send + Sync + 'static>(
) -> Result<std::sync::Arc<T>, ServerFnError> {
    use_context::<std::sync::Arc<T>>()
        .ok_or_else(|| ServerFnError::new("the console is not available"))
}

/// Turns a refusal into the server function's error, with its HTTP status (and `Retry-After`) on
/// the response (also on a server-rendered page whose data was refused: a missing job's page is a
/// 404).
///
/// A plain form post (no JavaScript: the browser accepts HTML) keeps the redirect back to the page
/// it came from, which then shows the job or queue as it is.
#[cfg(feature = "ssr")]
pub(super) fn fail(refusal: impl Into<Refusal>) -> ServerFnError {
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
