//! Log output: human-readable text by default, JSON lines with `KICKOFF_LOG_FORMAT=json`; the level
//! from `RUST_LOG` (default `info`). Beside it, the capture of each attempt's log lines (INFO and
//! above, whatever `RUST_LOG` says of stderr) for its record: see `engine::attempt_log`.

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::engine::attempt_log::CaptureLayer;

/// Installs the logs (and, with `otlp` set, the trace exporter: see `crate::telemetry`). The
/// exporter's provider is returned, to shut down (flush) when the process ends.
pub fn init(
    format: &str,
    otlp: Option<&str>,
) -> Result<Option<crate::telemetry::Telemetry>, String> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    // Logs go to stderr: stdout carries what commands print for scripts (URLs, bench figures).
    let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let stderr = if format == "json" {
        stderr.json().with_filter(filter).boxed()
    } else {
        stderr.with_filter(filter).boxed()
    };
    let (traces, telemetry) = match otlp.map(str::trim).filter(|e| !e.is_empty()) {
        Some(endpoint) => {
            let url = reqwest::Url::parse(endpoint)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https"))
                .ok_or_else(|| {
                    format!("KICKOFF_OTLP_ENDPOINT: `{endpoint}` is not an http(s) URL")
                })?;
            let (layer, telemetry) = crate::telemetry::layer(url.as_str())?;
            // Whatever RUST_LOG says of stderr: the spans of requests and attempts are INFO.
            (Some(layer.with_filter(LevelFilter::INFO)), Some(telemetry))
        }
        None => (None, None),
    };
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(CaptureLayer.with_filter(LevelFilter::INFO))
        .with(traces)
        .try_init();
    Ok(telemetry)
}
