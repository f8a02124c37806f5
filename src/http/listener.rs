//! The HTTP listener: the accept loop, with the limits `axum::serve` does not set.
//!
//! Invariants:
//! - A client has [`Limits::header_read_timeout`] to send a request's headers, on a new connection
//!   and between the requests of a kept-alive one: a slow or idle client cannot hold a connection
//!   (and its file descriptor) for longer.
//! - A request's whole body must arrive within [`Limits::body_read_timeout`] of its start (not
//!   reset as bytes trickle in); a later one is cut ([`BodyTimedOut`]) and answered 408. Nothing
//!   is read before its handler asks.
//! - At most [`Limits::max_connections`] connections are served at once; one more is answered
//!   `503` with `Retry-After` and the API's error shape, then closed; at most [`MAX_REFUSING`]
//!   such answers are under way at once (past them, a connection is closed unanswered).
//! - Each request carries its peer address (`ConnectInfo`), as `into_make_service_with_connect_info`
//!   would give it.
//! - On shutdown the listener stops accepting, kept-alive connections close after their current
//!   request, and the rest get `grace` to finish; those still open then are closed.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The listener's limits (`KICKOFF_MAX_CONNECTIONS`, [`HEADER_READ_TIMEOUT`],
/// [`BODY_READ_TIMEOUT`]).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub max_connections: usize,
}

/// Connections over the cap being answered 503 at once.
pub const MAX_REFUSING: usize = 64;

/// How long a client has to send a request's headers (and how long a kept-alive connection may
/// sit idle): 10 s.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client has to send a request's whole body, from when its headers arrived: 30 s
/// (1 MiB, the largest body read, at 35 KB/s). A body still arriving then is cut, and the request
/// is answered 408: a client sending a byte now and then cannot hold a connection and its handler.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A request body that fails with [`BodyTimedOut`] once its deadline passes. The deadline runs
/// from the request's start, and does not reset as bytes arrive (unlike a per-read timeout).
/// Nothing is read before the handler asks: the dashboard still checks the session first.
pub struct DeadlineBody<B> {
    body: B,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<B> DeadlineBody<B> {
    pub fn new(body: B, within: Duration) -> Self {
        DeadlineBody {
            body,
            deadline: Box::pin(tokio::time::sleep(within)),
        }
    }
}

/// The error of a body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s", BODY_READ_TIMEOUT.as_secs())]
pub struct BodyTimedOut;

impl<B> hyper::body::Body for DeadlineBody<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Whether `error` (or an error it wraps) is a body that did not arrive in time.
pub fn body_timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// File descriptors kept for everything but client connections (database pools, the embedded
/// cluster's pipes, log files, webhook calls).
const RESERVED_FDS: usize = 256;

/// `wanted`, lowered to what the process's open-file limit leaves for connections.
pub fn connection_cap(wanted: usize) -> usize {
    match open_file_limit() {
        Some(limit) => wanted.min(limit.saturating_sub(RESERVED_FDS).max(16)),
        None => wanted,
    }
}

/// The soft limit on open files, from procfs (no unsafe call needed).
fn open_file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Serves `app` on `listener` until `shutdown`, then drains for at most `grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut connections = JoinSet::new();
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // back off a moment rather than spin.
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Finished connections leave the set as new ones come.
        while connections.try_join_next().is_some() {}
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Ok(turn) = refusing.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    refuse_busy(stream).await;
                    drop(turn);
                });
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let body_read_timeout = limits.body_read_timeout;
        let service = app
            .clone()
            .map_request(move |req: axum::http::Request<Incoming>| {
                let mut req = req.map(|body| DeadlineBody::new(body, body_read_timeout));
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req
            });
        let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        connections.spawn(async move {
            // A client that goes away or times out ends its connection: nothing to report.
            let _ = conn.await;
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_secs = grace.as_secs(),
            open = connections.len(),
            "connections still open after the grace period; closing them"
        );
    }
    connections.shutdown().await;
}

/// The answer to a connection over the cap: a 503 in the API's error shape, then the close.
async fn refuse_busy(mut stream: TcpStream) {
    let body = r#"{"error":{"code":"unavailable","message":"the server has as many connections as it serves at once; try again shortly"}}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         cache-control: no-store\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    // Read what the client sent first (briefly): closing with unread data would reset the
    // connection before the client reads the answer.
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await;
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cap_leaves_room_under_the_open_file_limit() {
        let limit = super::open_file_limit().expect("procfs gives the open-file limit");
        assert!(super::connection_cap(usize::MAX) <= limit);
        assert_eq!(super::connection_cap(10), 10.min(limit));
    }
}
