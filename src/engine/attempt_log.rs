//! What one attempt leaves behind besides its outcome: the output its handler recorded
//! ([`crate::engine::JobContext::record`]) and the log lines it wrote, kept with the attempt's
//! record in `job_attempts`.
//!
//! Log lines are the `tracing` events inside the attempt's span (the handler's own and the
//! engine's), caught by [`CaptureLayer`]: the executor attaches an [`AttemptRecorder`] to the span
//! it runs the attempt in, and the layer appends each event within it to that recorder. Nothing is
//! caught where the layer is not installed (the server installs it in `logging`; a program that
//! embeds the engine adds it to its own subscriber). The layer sees the events its filter lets
//! through, INFO and above in the server whatever `RUST_LOG` says about stderr.
//!
//! Both are bounded: an output over [`MAX_OUTPUT_BYTES`] is refused, and past [`MAX_LOG_LINES`]
//! lines or [`MAX_LOG_BYTES`] bytes the lines are counted, not kept (the record says how many).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::store::jobs::AttemptEnd;

/// The largest output a handler may record, as JSON text.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// The most log lines kept per attempt.
pub const MAX_LOG_LINES: usize = 200;
/// The most bytes of log messages kept per attempt.
pub const MAX_LOG_BYTES: usize = 64 * 1024;
/// The longest one kept line's message; a longer one is cut.
const MAX_LINE_CHARS: usize = 4096;

/// One kept log line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogLine {
    pub at: DateTime<Utc>,
    pub level: &'static str,
    pub target: String,
    /// The message, then the event's other fields as `name=value`.
    pub message: String,
}

/// Why an output was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputRefused {
    #[error("the output is {0} bytes of JSON; at most {MAX_OUTPUT_BYTES} are kept")]
    TooLarge(usize),
    #[error("the output cannot be written as JSON: {0}")]
    NotJson(String),
}

#[derive(Default)]
struct Kept {
    lines: Vec<LogLine>,
    bytes: usize,
    dropped: u32,
}

/// The output and log lines of one running attempt, and when it started.
pub struct AttemptRecorder {
    /// When the handler started, by the database's clock (the node's estimate of it).
    pub started_at: DateTime<Utc>,
    started: std::time::Instant,
    output: Mutex<Option<String>>,
    kept: Mutex<Kept>,
    /// Bumped by each line and output; `shown` is its value at the last [`Self::changed`].
    changes: AtomicU64,
    shown: AtomicU64,
}

impl AttemptRecorder {
    pub fn new(started_at: DateTime<Utc>) -> Arc<Self> {
        Arc::new(AttemptRecorder {
            started_at,
            started: std::time::Instant::now(),
            output: Mutex::new(None),
            kept: Mutex::new(Kept::default()),
            changes: AtomicU64::new(0),
            shown: AtomicU64::new(0),
        })
    }

    /// Keeps `value` as the attempt's output (replacing an earlier one), or refuses it.
    pub fn record(&self, value: &impl Serialize) -> Result<(), OutputRefused> {
        let text =
            serde_json::to_string(value).map_err(|e| OutputRefused::NotJson(e.to_string()))?;
        if text.len() > MAX_OUTPUT_BYTES {
            return Err(OutputRefused::TooLarge(text.len()));
        }
        // JSON text cannot hold a NUL byte raw, but `\u0000` is refused by jsonb too.
        if text.contains("\\u0000") {
            return Err(OutputRefused::NotJson("it holds a NUL character".into()));
        }
        *self.output.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
        self.changes.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Appends a line, or counts it once the bounds are reached.
    pub fn push(&self, mut line: LogLine) {
        if line.message.chars().count() > MAX_LINE_CHARS {
            line.message = line
                .message
                .chars()
                .take(MAX_LINE_CHARS)
                .collect::<String>()
                + "…";
        }
        // Postgres text and jsonb cannot hold NUL.
        if line.message.contains('\0') {
            line.message = line.message.replace('\0', "\u{FFFD}");
        }
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let size = line.message.len() + line.target.len();
        if kept.lines.len() >= MAX_LOG_LINES || kept.bytes + size > MAX_LOG_BYTES {
            kept.dropped = kept.dropped.saturating_add(1);
        } else {
            kept.bytes += size;
            kept.lines.push(line);
        }
        // Counted once the line is in: a snapshot that sees the count sees the line.
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// The record of the attempt as it ends now: its start, how long it ran, its output and the
    /// lines caught so far.
    pub fn end(&self) -> AttemptEnd {
        let output = self
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let logs = (!kept.lines.is_empty() || kept.dropped > 0)
            .then(|| serde_json::to_string(&kept.lines).unwrap_or_else(|_| "[]".into()));
        AttemptEnd {
            started_at: Some(self.started_at),
            duration: Some(self.started.elapsed()),
            output,
            logs,
            logs_dropped: kept.dropped.min(i32::MAX as u32) as i32,
        }
    }

    /// The attempt so far ([`Self::end`]), if it has run `min_age` or longer and logged or
    /// recorded something since the last time this answered: what its job's page shows while it
    /// runs.
    pub fn changed(&self, min_age: std::time::Duration) -> Option<AttemptEnd> {
        if self.started.elapsed() < min_age {
            return None;
        }
        let now = self.changes.load(Ordering::Acquire);
        (self.shown.swap(now, Ordering::AcqRel) != now).then(|| self.end())
    }

    /// Makes the layer send the events inside `span` here. False when no [`CaptureLayer`]'s
    /// registry holds the span (not installed, or the span is disabled).
    pub fn attach(self: &Arc<Self>, span: &tracing::Span) -> bool {
        span.with_subscriber(|(id, dispatch)| {
            dispatch
                .downcast_ref::<tracing_subscriber::Registry>()
                .and_then(|registry| registry.span(id))
                .map(|s| s.extensions_mut().insert(self.clone()))
                .is_some()
        })
        .unwrap_or(false)
    }
}

/// The `tracing` layer that catches the events inside attempts (see the module doc).
pub struct CaptureLayer;

impl<S> Layer<S> for CaptureLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(scope) = ctx.event_scope(event) else {
            return;
        };
        for span in scope {
            let recorder = span.extensions().get::<Arc<AttemptRecorder>>().cloned();
            if let Some(recorder) = recorder {
                let mut message = Message::default();
                event.record(&mut message);
                let meta = event.metadata();
                recorder.push(LogLine {
                    at: Utc::now(),
                    level: meta.level().as_str(),
                    target: meta.target().to_string(),
                    message: message.0,
                });
                return;
            }
        }
    }
}

/// An event's message first, then its other fields as `name=value`.
#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            let _ = write!(self.0, " {}={}", field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            let _ = write!(self.0, " {}={:?}", field.name(), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn events_inside_an_attempt_span_are_kept_and_bounded() {
        let subscriber = tracing_subscriber::registry().with(CaptureLayer);
        tracing::subscriber::with_default(subscriber, || {
            let recorder = AttemptRecorder::new(Utc::now());
            let span = tracing::info_span!("attempt");
            assert!(recorder.attach(&span));
            tracing::info!("outside");
            span.in_scope(|| {
                tracing::info!(n = 7, "inside");
                tracing::info_span!("nested").in_scope(|| tracing::warn!("deeper"));
                for i in 0..1000 {
                    tracing::info!(i, "many");
                }
            });
            let end = recorder.end();
            let lines: Vec<serde_json::Value> =
                serde_json::from_str(end.logs.as_deref().unwrap()).unwrap();
            assert_eq!(lines.len(), MAX_LOG_LINES);
            assert_eq!(lines[0]["message"], "inside n=7");
            assert_eq!(lines[1]["message"], "deeper");
            assert_eq!(lines[1]["level"], "WARN");
            assert_eq!(end.logs_dropped as usize, 1002 - MAX_LOG_LINES);
        });
    }

    #[test]
    fn an_output_past_the_bound_is_refused_and_the_earlier_one_kept() {
        let recorder = AttemptRecorder::new(Utc::now());
        recorder.record(&serde_json::json!({"frozen": 12})).unwrap();
        let big = "x".repeat(MAX_OUTPUT_BYTES);
        assert!(matches!(
            recorder.record(&big),
            Err(OutputRefused::TooLarge(n)) if n == MAX_OUTPUT_BYTES + 2
        ));
        assert_eq!(recorder.end().output.as_deref(), Some(r#"{"frozen":12}"#));
        assert!(recorder.end().logs.is_none());
    }

    #[test]
    fn a_running_attempt_shows_what_changed_once_it_ran_long_enough() {
        let recorder = AttemptRecorder::new(Utc::now());
        assert!(
            recorder.changed(std::time::Duration::ZERO).is_none(),
            "nothing yet"
        );
        recorder.push(LogLine {
            at: Utc::now(),
            level: "INFO",
            target: "t".into(),
            message: "one".into(),
        });
        assert!(
            recorder
                .changed(std::time::Duration::from_secs(60))
                .is_none(),
            "too young"
        );
        let so_far = recorder.changed(std::time::Duration::ZERO).unwrap();
        assert!(so_far.logs.unwrap().contains("one"));
        assert!(
            recorder.changed(std::time::Duration::ZERO).is_none(),
            "shown already"
        );
        recorder.record(&serde_json::json!({"n": 1})).unwrap();
        assert_eq!(
            recorder
                .changed(std::time::Duration::ZERO)
                .unwrap()
                .output
                .as_deref(),
            Some(r#"{"n":1}"#)
        );
    }
}
