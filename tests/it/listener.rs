//! The HTTP listener over real TCP: a client that is slow to send its headers (or idles on a
//! kept-alive connection) is disconnected, and connections over the cap get a 503 and a close.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::common::dashboard::TOKEN;
use crate::common::{app, test_db, wait_for};
use kickoff::http::listener::{serve, Limits};

/// A listening server with `limits`; its address, and the token that stops it.
async fn server(limits: Limits) -> (std::net::SocketAddr, CancellationToken) {
    let db = test_db().await;
    let app = app(&db.pool, TOKEN);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(serve(
        listener,
        app,
        limits,
        stop.clone(),
        Duration::from_secs(1),
    ));
    (addr, stop)
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

/// A new connection that has sent one whole request; the first bytes of its answer.
async fn ask(addr: std::net::SocketAddr) -> (TcpStream, Vec<u8>) {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(HEALTHZ).await.unwrap();
    let mut buf = [0u8; 1024];
    let n = c.read(&mut buf).await.unwrap_or(0);
    (c, buf[..n].to_vec())
}

/// Reads until the server closes the connection (or `within` passes); what it sent.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let done = tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    done.ok()
        .map(|()| String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test]
async fn a_client_slow_with_its_headers_or_idle_is_disconnected() {
    let (addr, stop) = server(Limits {
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_secs(10),
        max_connections: 10,
    })
    .await;
    // Half a request line, then nothing.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    assert!(
        read_until_closed(&mut slow, Duration::from_secs(3))
            .await
            .is_some(),
        "a connection with half its headers stayed open"
    );
    // A whole request is answered; the connection kept alive after it is closed once idle.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    kept.write_all(HEALTHZ).await.unwrap();
    let answer = read_until_closed(&mut kept, Duration::from_secs(3))
        .await
        .expect("an idle kept-alive connection stayed open");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stop.cancel();
}

#[tokio::test]
async fn connections_over_the_cap_get_a_503_and_a_close() {
    let (addr, stop) = server(Limits {
        header_read_timeout: Duration::from_secs(10),
        body_read_timeout: Duration::from_secs(10),
        max_connections: 2,
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let (c, answer) = ask(addr).await;
        assert!(answer.starts_with(b"HTTP/1.1 200"));
        held.push(c);
    }
    let mut over = TcpStream::connect(addr).await.unwrap();
    over.write_all(HEALTHZ).await.unwrap();
    let answer = read_until_closed(&mut over, Duration::from_secs(3))
        .await
        .expect("the connection over the cap was not closed");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert!(answer.contains(r#""code":"unavailable""#), "{answer}");
    // One held connection closed: its place is free again.
    drop(held.pop());
    wait_for(
        "the freed place to go to a new connection",
        Duration::from_secs(3),
        || async { ask(addr).await.1.starts_with(b"HTTP/1.1 200") },
    )
    .await;
    stop.cancel();
}

/// Sends `head` and then the body one byte every 100 ms (for at most `bytes` bytes), reading the
/// answer as it comes; the answer, once the server closes or answers.
async fn trickle(addr: std::net::SocketAddr, head: String, bytes: usize) -> String {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..bytes {
        tokio::select! {
            read = c.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => { got.extend_from_slice(&buf[..n]); break; }
            },
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                if c.write_all(b" ").await.is_err() {
                    break;
                }
            }
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_body_that_trickles_in_is_cut_at_its_deadline_and_answered_408() {
    let (addr, stop) = server(Limits {
        header_read_timeout: Duration::from_secs(10),
        body_read_timeout: Duration::from_millis(700),
        max_connections: 10,
    })
    .await;
    // A byte every 100 ms: a timeout between reads would never fire; the deadline does.
    let api = trickle(
        addr,
        format!(
            "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        ),
        60,
    )
    .await;
    assert!(api.starts_with("HTTP/1.1 408"), "{api}");
    assert!(api.contains(r#""code":"request_timeout""#), "{api}");
    // The sign-in form (read before any session) and a signed-out dashboard post alike.
    let login = trickle(
        addr,
        "POST /_console/login HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
            .to_string(),
        60,
    )
    .await;
    assert!(login.starts_with("HTTP/1.1 408"), "{login}");
    stop.cancel();
}
