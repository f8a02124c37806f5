//! Server-Sent Events of job state changes, fed by the engine's `kickoff_events` notifications, so a
//! change made on any node reaches every browser.
//!
//! Invariants:
//! - At most [`StreamLimits::max_open`] streams are open on a node; one more is answered 503.
//! - A stream lives only as long as what opened it: every [`StreamLimits::recheck`] it checks its
//!   session (signed out, expired, password changed, account disabled) or its API token (revoked,
//!   owner disabled, bootstrap token rotated), and ends when that no longer holds.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{Stream, StreamExt};
use tokio_stream::wrappers::{errors::BroadcastStreamRecvError, BroadcastStream};

use super::auth::ApiCaller;
use super::error::AppError;
use super::session::{self, Operator};
use super::state::{AppState, StreamLimits};

pub async fn events(
    State(state): State<AppState>,
    holder: Holder,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, AppError> {
    // Counted while the stream lives: the guard rides in the stream and drops with it.
    let open = OpenStream::try_new(state.sse_clients.clone(), state.streams.max_open).ok_or_else(
        || {
            AppError::Busy(format!(
                "this node serves {} live streams already; try again shortly",
                state.streams.max_open
            ))
        },
    )?;
    let stream = BroadcastStream::new(state.events.subscribe()).map(|msg| {
        Ok(match msg {
            Ok(payload) => Event::default().event("jobs").data(payload),
            // The client fell behind: tell it to refresh whatever it shows.
            Err(BroadcastStreamRecvError::Lagged(n)) => Event::default()
                .event("lagged")
                .data(format!("{{\"missed\":{n}}}")),
        })
    });
    let ended = holder.gone(state.clone(), state.streams);
    let stream = stream
        .take_until(state.shutdown.clone().cancelled_owned())
        .take_until(ended)
        .map(move |event| {
            let _ = &open;
            event
        });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// What opened a stream: a dashboard session, or an API token.
pub enum Holder {
    Session {
        id: Option<tower_sessions::session::Id>,
        user_id: i64,
        epoch: i32,
    },
    Token(String),
}

/// Rechecks in a row that may fail (the database unreachable) before a stream ends: while the
/// database is away nobody can sign out or be disabled, and its events stop anyway; a client
/// whose stream ends reconnects, and its new stream is checked from the start.
const UNKNOWN_RECHECKS: u32 = 6;

impl Holder {
    /// Resolves once the session or token no longer holds (checked every `limits.recheck`), or
    /// once [`UNKNOWN_RECHECKS`] checks in a row could not tell.
    async fn gone(self, state: AppState, limits: StreamLimits) {
        let mut unknown = 0;
        loop {
            tokio::time::sleep(limits.recheck).await;
            let holds = match &self {
                Holder::Session { id, user_id, epoch } => match id {
                    Some(id) => session::still_signed_in(&state, *id, *user_id, *epoch).await,
                    None => Some(false),
                },
                Holder::Token(token) if state.api_token.matches(token) => Some(true),
                Holder::Token(token) => match state.accounts.authenticate_token(token).await {
                    Ok(owner) => Some(owner.is_some()),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not recheck a stream's token");
                        None
                    }
                },
            };
            match holds {
                Some(true) => unknown = 0,
                Some(false) => return,
                None => {
                    unknown += 1;
                    if unknown >= UNKNOWN_RECHECKS {
                        return;
                    }
                }
            }
        }
    }
}

impl FromRequestParts<AppState> for Holder {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> Result<Self, AppError> {
        if let Some(op) = parts.extensions.get::<Operator>() {
            let id = parts
                .extensions
                .get::<tower_sessions::Session>()
                .and_then(tower_sessions::Session::id);
            return Ok(Holder::Session {
                id,
                user_id: op.user.id,
                epoch: op.user.session_epoch,
            });
        }
        if parts.extensions.get::<ApiCaller>().is_some() {
            let token = super::auth::bearer(&parts.headers).ok_or(AppError::Unauthorized)?;
            return Ok(Holder::Token(token.to_string()));
        }
        Err(AppError::Unauthorized)
    }
}

/// Counts an open stream from its creation until it is dropped (the client went away, the server
/// stops, or what opened it ended).
struct OpenStream(Arc<AtomicUsize>);

impl OpenStream {
    /// A place among at most `max` open streams, if one is free.
    fn try_new(count: Arc<AtomicUsize>, max: usize) -> Option<Self> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        Some(OpenStream(count))
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
