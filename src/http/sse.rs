//! Server-Sent Events of job state changes, fed by the engine's `kickoff_events` notifications, so a
//! change made on any node reaches every browser.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{Stream, StreamExt};
use tokio_stream::wrappers::{errors::BroadcastStreamRecvError, BroadcastStream};

use super::state::AppState;

pub async fn events(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = BroadcastStream::new(state.events.subscribe()).map(|msg| {
        Ok(match msg {
            Ok(payload) => Event::default().event("jobs").data(payload),
            // The client fell behind: tell it to refresh whatever it shows.
            Err(BroadcastStreamRecvError::Lagged(n)) => Event::default()
                .event("lagged")
                .data(format!("{{\"missed\":{n}}}")),
        })
    });
    // Counted while the stream lives: the guard rides in the stream and drops with it.
    let open = OpenStream::new(state.sse_clients.clone());
    let stream = stream
        .take_until(state.shutdown.clone().cancelled_owned())
        .map(move |event| {
            let _ = &open;
            event
        });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// Counts an open stream from its creation until it is dropped (the client went away, or the
/// server stops).
struct OpenStream(Arc<AtomicUsize>);

impl OpenStream {
    fn new(count: Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        OpenStream(count)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
