//! Log output: human-readable text by default, JSON lines with `KICKOFF_LOG_FORMAT=json`; the level
//! from `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;

pub fn init(format: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    // Logs go to stderr: stdout carries what commands print for scripts (URLs, bench figures).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
