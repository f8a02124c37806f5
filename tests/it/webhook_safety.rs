//! The `webhook` job kind against real endpoints: where a call may connect (a host name that
//! resolves to a non-public address is refused unless the operator marked it), redirects, bodies,
//! proxies. DNS cannot be faked here, so `localhost` (127.0.0.1 from /etc/hosts) plays the
//! allowlisted host name that turned out to point inside.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::common::{state_of, test_db, wait_for, TestDb};
use kickoff::engine::{Engine, EngineConfig, Job, JobState, NewJob};

/// The requests an endpoint received, by path (or the whole target for a proxy's absolute form).
#[derive(Clone, Default)]
struct Hits(Arc<Mutex<Vec<String>>>);

impl Hits {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A body that never ends: whoever reads it all never finishes.
fn endless() -> Body {
    Body::from_stream(futures_util::stream::repeat_with(|| {
        Ok::<_, std::convert::Infallible>(vec![b'x'; 16 * 1024])
    }))
}

async fn respond(State(hits): State<Hits>, uri: Uri) -> Response {
    let before = {
        let mut hits = hits.0.lock().unwrap();
        let before = hits.iter().filter(|h| **h == uri.to_string()).count();
        hits.push(uri.to_string());
        before
    };
    match uri.path() {
        "/busy-once" if before == 0 => {
            (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "2")]).into_response()
        }
        "/down-once" if before == 0 => {
            let at = chrono::Utc::now() + chrono::Duration::seconds(2);
            let date = at.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
            (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", date)]).into_response()
        }
        "/busy-no-header" if before == 0 => StatusCode::TOO_MANY_REQUESTS.into_response(),
        "/redirect" => (StatusCode::TEMPORARY_REDIRECT, [("location", "/hook")]).into_response(),
        "/fail-endless" => (StatusCode::INTERNAL_SERVER_ERROR, endless()).into_response(),
        "/ok-endless" => (StatusCode::OK, endless()).into_response(),
        _ => "ok".into_response(),
    }
}

/// An HTTP endpoint on 127.0.0.1 recording what it receives.
async fn endpoint() -> (SocketAddr, Hits) {
    let hits = Hits::default();
    let app = axum::Router::new()
        .fallback(respond)
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, hits)
}

async fn engine(db: &TestDb, allowed_hosts: &[String]) -> Engine {
    let config = EngineConfig {
        queues: vec![("default".into(), 4)],
        ..EngineConfig::default()
    };
    Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(allowed_hosts.to_vec()),
        config,
    )
    .await
    .unwrap()
}

/// Inserts a webhook job for `url` and waits for it to reach `want`.
async fn call(db: &TestDb, engine: &Engine, url: &str, max_attempts: i32, want: JobState) -> Job {
    let job = engine
        .client()
        .insert(&NewJob::new("webhook", json!({ "url": url })).with_max_attempts(max_attempts))
        .await
        .expect("the allowlist admits the host at insert time")
        .job;
    wait_for(
        &format!("webhook job to be {want:?}"),
        Duration::from_secs(20),
        || async { state_of(&db.pool, job.id).await == want },
    )
    .await;
    engine.client().get(job.id).await.unwrap()
}

#[tokio::test]
async fn an_allowlisted_ip_literal_is_called_even_on_loopback() {
    let db = test_db().await;
    let (addr, hits) = endpoint().await;
    let engine = engine(&db, &[addr.to_string()]).await;
    let job = call(
        &db,
        &engine,
        &format!("http://{addr}/hook"),
        3,
        JobState::Completed,
    )
    .await;
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    assert_eq!(hits.all(), vec!["/hook"]);
    engine.stop().await;
}

#[tokio::test]
async fn a_host_name_resolving_to_loopback_is_refused_as_fatal() {
    let db = test_db().await;
    let (addr, hits) = endpoint().await;
    let port = addr.port();
    let engine = engine(&db, &[format!("localhost:{port}")]).await;
    // Plenty of attempts left: the refusal must not be retried.
    let url = format!("http://localhost:{port}/hook");
    let job = call(&db, &engine, &url, 5, JobState::Discarded).await;
    assert_eq!((job.attempt, job.errors.len()), (1, 1), "{:?}", job.errors);
    let message = &job.errors[0].message;
    assert!(
        message.contains("webhook host localhost resolves to ")
            && message.contains(", a loopback address: refused"),
        "{message}"
    );
    assert!(
        hits.all().is_empty(),
        "the endpoint was called: {:?}",
        hits.all()
    );
    engine.stop().await;
}

#[tokio::test]
async fn a_host_name_marked_private_may_resolve_to_loopback() {
    let db = test_db().await;
    let (addr, hits) = endpoint().await;
    let port = addr.port();
    let engine = engine(&db, &[format!("private:localhost:{port}")]).await;
    let url = format!("http://localhost:{port}/hook");
    let job = call(&db, &engine, &url, 3, JobState::Completed).await;
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    assert_eq!(hits.all(), vec!["/hook"]);
    engine.stop().await;
}

#[tokio::test]
async fn a_private_mark_covers_only_the_entry_it_is_on() {
    let db = test_db().await;
    let (addr, hits) = endpoint().await;
    let port = addr.port();
    // The mark is on another port's entry: this port's entry is a plain one.
    let allowed = [
        format!("localhost:{port}"),
        "private:localhost:1".to_string(),
    ];
    let engine = engine(&db, &allowed).await;
    let url = format!("http://localhost:{port}/hook");
    let job = call(&db, &engine, &url, 3, JobState::Discarded).await;
    assert!(
        job.errors[0].message.contains("refused"),
        "{:?}",
        job.errors
    );
    assert!(hits.all().is_empty());
    engine.stop().await;
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let db = test_db().await;
    let (addr, hits) = endpoint().await;
    let engine = engine(&db, &[addr.to_string()]).await;
    let url = format!("http://{addr}/redirect");
    let job = call(&db, &engine, &url, 1, JobState::Discarded).await;
    assert!(
        job.errors[0].message.starts_with("HTTP 307"),
        "{:?}",
        job.errors
    );
    assert_eq!(hits.all(), vec!["/redirect"]);
    engine.stop().await;
}

#[tokio::test]
async fn a_failed_response_keeps_only_the_start_of_an_endless_body() {
    let db = test_db().await;
    let (addr, _hits) = endpoint().await;
    let engine = engine(&db, &[addr.to_string()]).await;
    let url = format!("http://{addr}/fail-endless");
    let job = call(&db, &engine, &url, 1, JobState::Discarded).await;
    let message = &job.errors[0].message;
    let prefix = "HTTP 500 Internal Server Error: ";
    assert!(message.starts_with(prefix), "{message}");
    assert_eq!(message[prefix.len()..], "x".repeat(500));
    engine.stop().await;
}

#[tokio::test]
async fn a_successful_response_body_is_not_read() {
    let db = test_db().await;
    let (addr, _hits) = endpoint().await;
    let engine = engine(&db, &[addr.to_string()]).await;
    // Reading this body would never finish (and would time the attempt out).
    let url = format!("http://{addr}/ok-endless");
    let job = call(&db, &engine, &url, 1, JobState::Completed).await;
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    engine.stop().await;
}

#[tokio::test]
async fn proxy_settings_from_the_environment_are_ignored() {
    // A proxy resolves the host itself, after our check. nextest runs each test in a process of
    // its own, so this environment reaches no other test.
    let (proxy, proxy_hits) = endpoint().await;
    for var in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        std::env::set_var(var, format!("http://{proxy}"));
    }
    let db = test_db().await;
    let (addr, hits) = endpoint().await;
    let engine = engine(&db, &[addr.to_string()]).await;
    call(
        &db,
        &engine,
        &format!("http://{addr}/hook"),
        1,
        JobState::Completed,
    )
    .await;
    assert_eq!(hits.all(), vec!["/hook"]);
    assert!(proxy_hits.all().is_empty(), "{:?}", proxy_hits.all());
    engine.stop().await;
}

/// Hits of `path` and the database instants of the job's calls, as the receiver saw them.
async fn snoozed_call(path: &str) -> (Job, Vec<String>, Duration) {
    let db = test_db().await;
    let (addr, hits) = endpoint().await;
    let engine = engine(&db, &[addr.to_string()]).await;
    let started = std::time::Instant::now();
    let job = call(
        &db,
        &engine,
        &format!("http://{addr}{path}"),
        5,
        JobState::Completed,
    )
    .await;
    let took = started.elapsed();
    engine.stop().await;
    (job, hits.all(), took)
}

#[tokio::test]
async fn a_receiver_answering_429_with_retry_after_is_called_again_then_without_spending_an_attempt(
) {
    let (job, hits, took) = snoozed_call("/busy-once").await;
    assert_eq!(hits, ["/busy-once", "/busy-once"]);
    // The second call came after the two seconds asked for, not after a backoff.
    assert!(
        took >= Duration::from_millis(1_900) && took < Duration::from_secs(6),
        "{took:?}"
    );
    assert_eq!(job.attempt, 1, "the snooze spent an attempt");
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    assert_eq!(job.meta["snoozes"], 1);
}

#[tokio::test]
async fn a_503_with_an_http_date_in_retry_after_waits_until_that_date() {
    let (job, hits, took) = snoozed_call("/down-once").await;
    assert_eq!(hits, ["/down-once", "/down-once"]);
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert_eq!((job.attempt, job.meta["snoozes"].as_u64()), (1, Some(1)));
}

#[tokio::test]
async fn a_429_without_retry_after_is_an_ordinary_failure() {
    let (job, hits, _) = snoozed_call("/busy-no-header").await;
    assert_eq!(hits, ["/busy-no-header", "/busy-no-header"]);
    assert_eq!(job.attempt, 2);
    assert!(
        job.errors[0].message.starts_with("HTTP 429"),
        "{:?}",
        job.errors
    );
}
