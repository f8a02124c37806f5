//! Log output: human-readable text by default, JSON lines with `KICKOFF_LOG_FORMAT=json`; the level
//! from `RUST_LOG` (default `info`). Beside it, the capture of each attempt's log lines (INFO and
//! above, whatever `RUST_LOG` says of stderr) for its record: see `engine::attempt_log`.

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::engine::attempt_log::CaptureLayer;

pub fn init(format: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    // Logs go to stderr: stdout carries what commands print for scripts (URLs, bench figures).
    let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let stderr = if format == "json" {
        stderr.json().with_filter(filter).boxed()
    } else {
        stderr.with_filter(filter).boxed()
    };
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(CaptureLayer.with_filter(LevelFilter::INFO))
        .try_init();
}
