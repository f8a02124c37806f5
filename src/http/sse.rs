//! Server-Sent Events of job state changes, fed by the engine's `kickoff_events` notifications, so a
//! change made on any node reaches every browser.

use std::convert::Infallible;
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
    let stream = stream.take_until(state.shutdown.clone().cancelled_owned());
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
