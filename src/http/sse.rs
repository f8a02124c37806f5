//! Server-Sent Events of job state changes, fed by the engine's `kickoff_events` notifications, so a
//! change made on any node reaches every browser.
//!
//! Invariants:
//! - At most [`StreamLimits::max_open`] streams are open on a node; one more is answered 503.
//! - A stream lives only as long as what opened it: every [`StreamLimits::recheck`] it checks its
//!   session (signed out, expired, password changed, account disabled) or its API token (revoked,
//!   owner disabled, bootstrap token rotated), and ends when that no longer holds. The streams of
//!   one session or token share an answer for a short while (`rechecks::SharedRechecks`): 5,000 streams
//!   of a few holders cost a few database reads a second, not a thousand.

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
    let open = OpenStream::try_new(&state, holder.key())?;
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
    Token {
        text: String,
        /// The user token's id; `None` for the bootstrap token.
        id: Option<i64>,
    },
    /// A caller of the application Kickoff is mounted in (see `app_auth`): rechecked by asking
    /// the application again with the request's address and headers.
    Application {
        user_id: i64,
        request: Box<axum::http::request::Parts>,
    },
}

/// Rechecks in a row that may fail (the database unreachable) before a stream ends: while the
/// database is away nobody can sign out or be disabled, and its events stop anyway; a client
/// whose stream ends reconnects, and its new stream is checked from the start.
const UNKNOWN_RECHECKS: u32 = 6;

impl Holder {
    /// The key of `rechecks::SharedRechecks` for this holder's answer (none for the bootstrap token,
    /// which is checked in memory).
    fn recheck_key(&self) -> Option<String> {
        match self {
            Holder::Session {
                id: Some(id),
                user_id,
                epoch,
            } => Some(format!("session {id} {user_id} {epoch}")),
            Holder::Session { id: None, .. } => None,
            Holder::Token { id: Some(id), .. } => Some(format!("token {id}")),
            Holder::Token { id: None, .. } => None,
            Holder::Application { .. } => None,
        }
    }

    /// Whether the session or token still holds (`None`: the database could not tell).
    async fn holds(&self, state: &AppState, recheck: Duration) -> Option<bool> {
        let key = self.recheck_key();
        if let Some(holds) = key
            .as_deref()
            .and_then(|k| state.stream_rechecks.get(k, recheck))
        {
            return Some(holds);
        }
        let asked = std::time::Instant::now();
        let holds = match self {
            Holder::Session { id, user_id, epoch } => match id {
                Some(id) => session::still_signed_in(state, *id, *user_id, *epoch).await,
                None => Some(false),
            },
            Holder::Application { request, user_id } => match &state.app_auth {
                Some(app_auth) => match app_auth.caller(request).await {
                    Ok(user) => Some(user.id == *user_id),
                    Err(super::app_auth::NoCaller::Unavailable) => None,
                    Err(_) => Some(false),
                },
                None => Some(false),
            },
            Holder::Token { text, .. } if state.api_token.matches(text) => Some(true),
            Holder::Token { text, .. } => match state.accounts.authenticate_token(text).await {
                Ok(owner) => Some(owner.is_some()),
                Err(e) => {
                    tracing::warn!(error = %e, "could not recheck a stream's token");
                    None
                }
            },
        };
        if let (Some(key), Some(answer)) = (key, holds) {
            state.stream_rechecks.put(key, answer, asked, recheck);
        }
        holds
    }

    /// Whose streams these are, for [`MAX_STREAMS_PER_HOLDER`]: a user's (all their sessions),
    /// or a token's.
    fn key(&self) -> String {
        match self {
            Holder::Session { user_id, .. } | Holder::Application { user_id, .. } => {
                format!("user {user_id}")
            }
            Holder::Token { id: Some(id), .. } => format!("token {id}"),
            Holder::Token { id: None, .. } => "bootstrap token".into(),
        }
    }

    /// Resolves once the session or token no longer holds (checked every `limits.recheck`), or
    /// once [`UNKNOWN_RECHECKS`] checks in a row could not tell.
    async fn gone(self, state: AppState, limits: StreamLimits) {
        let mut unknown = 0;
        loop {
            tokio::time::sleep(limits.recheck).await;
            match self.holds(&state, limits.recheck).await {
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

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        if let (Some(op), Some(_)) = (parts.extensions.get::<Operator>(), &state.app_auth) {
            // What the application's sign-in reads (the address, the headers), kept to ask again.
            let (mut request, ()) = axum::http::Request::builder()
                .uri(parts.uri.clone())
                .body(())
                .map_err(|e| AppError::Internal(e.to_string()))?
                .into_parts();
            request.headers = parts.headers.clone();
            // The client's address too, for a sign-in that reads it.
            if let Some(address) = parts
                .extensions
                .get::<super::client_address::ClientAddress>()
            {
                request.extensions.insert(*address);
            }
            if let Some(peer) = parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            {
                request.extensions.insert(*peer);
            }
            return Ok(Holder::Application {
                user_id: op.user.id,
                request: Box::new(request),
            });
        }
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
        if let Some(caller) = parts.extensions.get::<ApiCaller>() {
            let token = super::auth::bearer(&parts.headers).ok_or(AppError::Unauthorized)?;
            return Ok(Holder::Token {
                text: token.to_string(),
                id: caller.token_id,
            });
        }
        Err(AppError::Unauthorized)
    }
}

/// Streams one user (all their sessions) or one token may hold open on a node at once: enough
/// for many tabs, and far fewer than the node's cap, so that one account cannot take them all.
pub const MAX_STREAMS_PER_HOLDER: usize = 32;

/// Counts an open stream, on the node and for its holder, from its creation until it is dropped
/// (the client went away, the server stops, or what opened it ended).
struct OpenStream {
    count: Arc<AtomicUsize>,
    holders: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    key: String,
}

impl OpenStream {
    /// A place among the node's open streams and the holder's, if both have one free: 503
    /// otherwise.
    fn try_new(state: &AppState, key: String) -> Result<Self, AppError> {
        let mut holders = state
            .stream_holders
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if holders.get(&key).copied().unwrap_or(0) >= MAX_STREAMS_PER_HOLDER {
            return Err(AppError::Busy(format!(
                "{MAX_STREAMS_PER_HOLDER} live streams of this account are open on this node \
                 already: close some"
            )));
        }
        let max = state.streams.max_open;
        state
            .sse_clients
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| {
                AppError::Busy(format!(
                    "this node serves {max} live streams already; try again shortly"
                ))
            })?;
        *holders.entry(key.clone()).or_default() += 1;
        Ok(OpenStream {
            count: state.sse_clients.clone(),
            holders: state.stream_holders.clone(),
            key,
        })
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = holders.get_mut(&self.key) {
            *held -= 1;
            if *held == 0 {
                holders.remove(&self.key);
            }
        }
    }
}
