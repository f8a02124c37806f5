//! Each API call in a span of its own, continuing the caller's W3C trace (see `crate::telemetry`).

use axum::middleware;

/// The `traceparent` an API call came with (a valid W3C one), for the job it inserts.
#[derive(Debug, Clone, Default)]
pub struct IncomingTrace(pub Option<String>);

/// Each API call in a span of its own, a child of the trace its `traceparent` header names (see
/// `crate::telemetry`).
pub async fn traced(
    mut req: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    let incoming = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .filter(|t| crate::telemetry::is_traceparent(t))
        .map(String::from);
    let span = tracing::info_span!("api", method = %req.method(), path = %req.uri().path());
    crate::telemetry::continue_trace(&span, incoming.as_deref());
    req.extensions_mut().insert(IncomingTrace(incoming));
    tracing::Instrument::instrument(next.run(req), span).await
}
