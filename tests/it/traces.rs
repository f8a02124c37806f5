//! One trace from an API call to a partner: a server process exporting to a small OTLP receiver
//! (the tests' loopback receiver, reading `POST /v1/traces` as JSON), its spans and their parent
//! links; and without an exporter, the caller's `traceparent` handed on to the webhook unchanged.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::receiver::Receiver;
use crate::common::server::{Server, TOKEN};
use crate::common::{test_db, wait_for};

/// The caller's trace: its trace id, and the id of its span that made the call.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

async fn insert_webhook(server: &Server, hook: &Receiver) -> i64 {
    let res = reqwest::Client::new()
        .post(format!("http://{}/api/v1/jobs", server.addr))
        .bearer_auth(TOKEN)
        .header("traceparent", format!("00-{TRACE}-{CALLER_SPAN}-01"))
        .json(
            &json!({"kind": "webhook", "args": {"url": hook.url("/partner"), "body": {"goal": 1}},
                      "schedule_in_ms": 200}),
        )
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    let body: Value = res.json().await.unwrap();
    body["job"]["id"].as_i64().unwrap()
}

/// Every span the receiver got, by name.
fn spans(collector: &Receiver) -> Vec<Value> {
    collector
        .calls_to("/v1/traces")
        .iter()
        .flat_map(|c| {
            let body: Value = serde_json::from_slice(&c.body).unwrap();
            let mut found = Vec::new();
            for rs in body["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    found.extend(ss["spans"].as_array().into_iter().flatten().cloned());
                }
            }
            found
        })
        .collect()
}

fn named<'a>(spans: &'a [Value], name: &str) -> Option<&'a Value> {
    spans
        .iter()
        .find(|s| s["name"] == name && s["traceId"].as_str() == Some(TRACE))
}

#[tokio::test]
async fn one_trace_shows_the_api_call_the_wait_the_attempt_and_the_webhook() {
    let db = test_db().await;
    let collector = Receiver::start().await;
    let hook = Receiver::start().await;
    let server = Server::start(&[
        ("DATABASE_URL", db.url.clone()),
        (
            "KICKOFF_OTLP_ENDPOINT",
            format!("http://{}", collector.addr),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
        ("KICKOFF_WEBHOOK_ALLOWED_HOSTS", hook.addr.to_string()),
    ]);
    let id = insert_webhook(&server, &hook).await;
    wait_for("the partner's call", Duration::from_secs(20), || async {
        !hook.calls_to("/partner").is_empty()
    })
    .await;
    wait_for(
        "the spans of the trace",
        Duration::from_secs(20),
        || async {
            let all = spans(&collector);
            ["api", "job.wait", "attempt", "webhook.call"]
                .iter()
                .all(|n| named(&all, n).is_some())
        },
    )
    .await;
    let all = spans(&collector);
    let span = |name: &str| named(&all, name).unwrap().clone();
    let (api, wait, attempt, call) = (
        span("api"),
        span("job.wait"),
        span("attempt"),
        span("webhook.call"),
    );
    assert_eq!(
        api["parentSpanId"], CALLER_SPAN,
        "the call continues the caller's span"
    );
    assert_eq!(wait["parentSpanId"], api["spanId"], "{wait}");
    assert_eq!(attempt["parentSpanId"], api["spanId"], "{attempt}");
    assert_eq!(call["parentSpanId"], attempt["spanId"], "{call}");
    // The partner gets the call's span as its parent.
    let sent = hook.calls_to("/partner")[0]
        .header("traceparent")
        .to_string();
    assert_eq!(
        sent,
        format!("00-{TRACE}-{}-01", call["spanId"].as_str().unwrap())
    );
    // The job keeps the API call's span.
    let meta: Value = sqlx::query_scalar("SELECT meta FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        meta["traceparent"],
        format!("00-{TRACE}-{}-01", api["spanId"].as_str().unwrap())
    );
    // A job another domain inserts inside a traced call joins the call's trace too: a question's
    // lock job.
    let res = reqwest::Client::new()
        .post(format!("http://{}/api/v1/questions", server.addr))
        .bearer_auth(TOKEN)
        .header("traceparent", format!("00-{TRACE}-{CALLER_SPAN}-01"))
        .json(
            &json!({"game": "g", "prompt": "Who scores first?", "choices": ["a", "b"],
                      "game_time": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339()}),
        )
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    let lock: Value = sqlx::query_scalar("SELECT meta FROM jobs WHERE kind = 'lock_question'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let tp = lock["traceparent"].as_str().unwrap_or_default();
    assert!(tp.starts_with(&format!("00-{TRACE}-")), "{lock}");
    // The wait lasted from the insert to the attempt's start (200 ms or more).
    let ns = |s: &Value, k: &str| s[k].as_str().unwrap().parse::<u128>().unwrap();
    assert!(
        ns(&wait, "endTimeUnixNano") - ns(&wait, "startTimeUnixNano") >= 150_000_000,
        "{wait}"
    );
}

#[tokio::test]
async fn without_an_exporter_the_callers_traceparent_reaches_the_partner_unchanged() {
    let db = test_db().await;
    let hook = Receiver::start().await;
    let server = Server::start(&[
        ("DATABASE_URL", db.url.clone()),
        ("KICKOFF_WEBHOOK_ALLOWED_HOSTS", hook.addr.to_string()),
    ]);
    insert_webhook(&server, &hook).await;
    wait_for("the partner's call", Duration::from_secs(20), || async {
        !hook.calls_to("/partner").is_empty()
    })
    .await;
    assert_eq!(
        hook.calls_to("/partner")[0].header("traceparent"),
        format!("00-{TRACE}-{CALLER_SPAN}-01")
    );
    // A malformed one in meta is refused with its reason; a job without one sends none.
    let res = reqwest::Client::new()
        .post(format!("http://{}/api/v1/jobs", server.addr))
        .bearer_auth(TOKEN)
        .json(&json!({"kind": "noop", "meta": {"traceparent": "nope"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = (server.status_with("wrong").await, ());
    assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED);
}
