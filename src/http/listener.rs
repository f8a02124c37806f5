//! The HTTP listener: the accept loop, with the limits `axum::serve` does not set.
//!
//! Invariants:
//! - A client has [`Limits::header_read_timeout`] to send a request's headers, on a new connection
//!   and between the requests of a kept-alive one: a slow or idle client cannot hold a connection
//!   (and its file descriptor) for longer.
//! - At most [`Limits::max_connections`] connections are served at once; one more is answered
//!   `503` with `Retry-After` and the API's error shape, then closed.
//! - Each request carries its peer address (`ConnectInfo`), as `into_make_service_with_connect_info`
//!   would give it.
//! - On shutdown the listener stops accepting, kept-alive connections close after their current
//!   request, and the rest get `grace` to finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The listener's limits (`KICKOFF_MAX_CONNECTIONS`, [`HEADER_READ_TIMEOUT`]).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

/// How long a client has to send a request's headers (and how long a kept-alive connection may
/// sit idle): 10 s.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse_busy(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = app
            .clone()
            .map_request(move |mut req: axum::http::Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req
            });
        let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
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
            "connections still open after the grace period; closing them"
        );
    }
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
