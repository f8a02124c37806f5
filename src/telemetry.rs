//! Traces: exported over OTLP/HTTP (JSON) when `KICKOFF_OTLP_ENDPOINT` is set, and the W3C
//! `traceparent` that ties one trace together across the process boundaries: the API call that
//! inserted a job (its `traceparent` header continues), the wait until its attempt, the attempt,
//! and the webhook call it makes (its `traceparent` header carries the trace on to the partner).
//!
//! The job keeps the `traceparent` it was inserted under in `meta.traceparent` (an insert may give
//! one itself). Without an exporter nothing is recorded here, and a webhook hands the job's own
//! `traceparent` on unchanged, so the partner's spans still join the caller's trace.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Where a job keeps the trace it continues: `meta.traceparent`.
pub const META_TRACEPARENT: &str = "traceparent";

/// The tracer's name (its instrumentation scope).
const SCOPE: &str = "kickoff";

/// The exporter's provider: flushes what is buffered when shut down.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Exports what is still buffered (a stopping server's last spans).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "the last traces could not be exported");
        }
    }
}

/// The `tracing` layer that exports spans to `endpoint` (the collector's base URL, as
/// `OTEL_EXPORTER_OTLP_ENDPOINT` names it: traces go to `<endpoint>/v1/traces`), and its provider.
/// Needs the Tokio runtime (the exporter sends with it).
pub fn layer<S>(
    endpoint: &str,
) -> Result<
    (
        tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
        Telemetry,
    ),
    String,
>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(url)
        .with_http_client(Http::new()?)
        .build()
        .map_err(|e| format!("KICKOFF_OTLP_ENDPOINT: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(SCOPE)
                .build(),
        )
        .build();
    let tracer = provider.tracer(SCOPE);
    opentelemetry::global::set_tracer_provider(provider.clone());
    Ok((
        tracing_opentelemetry::layer().with_tracer(tracer),
        Telemetry { provider },
    ))
}

/// The exporter's HTTP client: the server's reqwest, run on the Tokio runtime (the batch
/// processor exports from a thread of its own, outside it).
#[derive(Debug)]
struct Http {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl Http {
    fn new() -> Result<Http, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "traces need the Tokio runtime".to_string())?;
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Http { client, runtime })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Http {
    async fn send_bytes(
        &self,
        request: axum::http::Request<bytes::Bytes>,
    ) -> Result<axum::http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let mut req = client
                .request(parts.method, parts.uri.to_string())
                .body(body);
            for (name, value) in &parts.headers {
                req = req.header(name, value);
            }
            let res = req.send().await?;
            let status = res.status();
            let body = res.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let (status, body) = sent.await??;
        let mut res = axum::http::Response::new(body);
        *res.status_mut() = status;
        Ok(res)
    }
}

/// Whether `text` is a W3C `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, its trace and
/// parent ids not all zeros.
pub fn is_traceparent(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    matches!(parts[..], [v, t, p, f] if v == "00" && hex(t, 32) && hex(p, 16) && hex(f, 2)
        && t.bytes().any(|b| b != b'0') && p.bytes().any(|b| b != b'0'))
}

/// The context a `traceparent` names (empty when it is not one).
pub fn context_of(traceparent: &str) -> Context {
    let carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    TraceContextPropagator::new().extract(&carrier)
}

/// The `traceparent` naming `cx`'s span, if it names a recorded one.
fn traceparent_of_context(cx: &Context) -> Option<String> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    carrier.remove("traceparent")
}

/// Makes `span` (just created, not entered yet) a child of the trace `traceparent` names.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(tp) = traceparent.filter(|t| is_traceparent(t)) {
        // Refused only when no exporter is set (no layer): then there is nothing to continue.
        let _ = span.set_parent(context_of(tp));
    }
}

/// The `traceparent` to hand on from inside `span`: its own when traces are exported, else
/// `fallback` (the trace the job continues) unchanged.
pub fn hand_on(span: &tracing::Span, fallback: Option<&str>) -> Option<String> {
    traceparent_of_context(&span.context())
        .or_else(|| fallback.filter(|t| is_traceparent(t)).map(String::from))
}

/// The `traceparent` of the span the caller is in, when traces are exported and it is recorded:
/// what a job inserted there continues.
pub fn current_traceparent() -> Option<String> {
    traceparent_of_context(&tracing::Span::current().context())
}

/// Records the time a job waited, from `since` (inserted, or due if later) to its attempt's
/// start, as a span of the trace `traceparent` names: the gap between the API call and the
/// attempt shows as what it was. Nothing without an exporter.
pub fn record_wait(traceparent: Option<&str>, since: SystemTime, until: SystemTime, job: i64) {
    let Some(tp) = traceparent.filter(|t| is_traceparent(t)) else {
        return;
    };
    let tracer = opentelemetry::global::tracer(SCOPE);
    let mut span = tracer
        .span_builder("job.wait")
        .with_start_time(since)
        .with_attributes([KeyValue::new("job.id", job)])
        .start_with_context(&tracer, &context_of(tp));
    opentelemetry::trace::Span::end_with_timestamp(&mut span, until);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_read_as_the_w3c_says() {
        assert!(is_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(!is_traceparent(bad), "{bad}");
        }
        let cx = context_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(
            traceparent_of_context(&cx).as_deref(),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
    }
}
