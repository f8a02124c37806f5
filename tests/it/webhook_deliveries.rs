//! The delivery record of webhook calls (issue 17): a row per call with when it started and how
//! late, where it connected, the status, the duration, the response's headers (no Set-Cookie
//! value) and the start of its body, or the error; for a 500, a time-out and a 200. Searchable by
//! status code through the API and the dashboard; shown on the job's page; gone with its job.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::{dashboard_as, Dashboard};
use crate::common::receiver::Receiver;
use crate::common::wait_for;
use kickoff::accounts::Role;
use kickoff::engine::{Engine, EngineConfig, JobId, NewJob};
use kickoff::webhooks::deliveries::{self, DeliveryRow};

struct Rig {
    d: Dashboard,
    receiver: Receiver,
    engine: Engine,
}

async fn rig(role: Role) -> Rig {
    let d = dashboard_as(role).await;
    let receiver = Receiver::start().await;
    let engine = Engine::start(
        d.pool.clone(),
        kickoff::workers::builtin(vec![receiver.addr.to_string()]),
        EngineConfig {
            queues: vec![("default".into(), 4)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    Rig {
        d,
        receiver,
        engine,
    }
}

impl Rig {
    /// Inserts a one-attempt webhook job calling `path` and waits for it to finish.
    async fn call(&self, path: &str, timeout_ms: u64) -> JobId {
        let job = self
            .engine
            .client()
            .insert(
                &NewJob::new(
                    "webhook",
                    json!({ "url": self.receiver.url(path), "body": { "n": 1 }, "timeout_ms": timeout_ms }),
                )
                .with_max_attempts(1),
            )
            .await
            .unwrap()
            .job;
        wait_for("the call to finish", Duration::from_secs(30), || async {
            matches!(
                self.d.state_of(job.id.0).await.as_str(),
                "completed" | "discarded"
            )
        })
        .await;
        job.id
    }

    async fn record(&self, id: JobId) -> Vec<DeliveryRow> {
        deliveries::of_job(&self.d.pool, id.0).await.unwrap()
    }
}

/// The job ids of the calls an API search finds, in the order answered.
async fn found(d: &Dashboard, query: &str) -> Vec<i64> {
    let page = d
        .api(
            Method::GET,
            &format!("/webhook-deliveries?{query}"),
            Value::Null,
        )
        .await;
    page["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["job_id"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_500_a_time_out_and_a_200_are_each_recorded_as_they_happened() {
    let rig = rig(Role::Operator).await;
    let here = rig.receiver.addr.to_string();

    let failed = rig.call("/status/500", 10_000).await;
    let [d] = &rig.record(failed).await[..] else {
        panic!("one call")
    };
    assert_eq!(d.attempt, 1);
    assert_eq!(d.status, Some(500));
    assert_eq!(d.address.as_deref(), Some(here.as_str()));
    assert_eq!(d.response_body.as_deref(), Some("answered 500"));
    let headers = &d.response_headers.as_ref().unwrap().0;
    assert_eq!(headers["x-receiver"], "kickoff-tests");
    assert_eq!(headers["set-cookie"], "(not kept)");
    assert!(d.error.as_deref().unwrap().starts_with("HTTP 500"), "{d:?}");
    // Started by the database clock, at most a few seconds after it was due (inserted now).
    assert!((0..5_000).contains(&d.late_ms), "{d:?}");
    assert!(d.duration_ms < 5_000, "{d:?}");

    let timed_out = rig.call("/slow/3000", 300).await;
    let [d] = &rig.record(timed_out).await[..] else {
        panic!("one call")
    };
    assert_eq!(d.status, None, "no answer");
    assert!(d.response_headers.is_none() && d.response_body.is_none());
    assert!(
        d.error
            .as_deref()
            .unwrap()
            .contains("timed out after 300 ms"),
        "{d:?}"
    );
    assert!((290..3_000).contains(&d.duration_ms), "{d:?}");
    assert_eq!(d.address.as_deref(), Some(here.as_str()));

    let ok = rig.call("/status/200", 10_000).await;
    let [d] = &rig.record(ok).await[..] else {
        panic!("one call")
    };
    assert_eq!(d.status, Some(200));
    assert_eq!(d.response_body.as_deref(), Some("answered 200"));
    assert_eq!(d.error, None);

    // No request header is kept: not the signature's, not a job's own.
    let raw: String = sqlx::query_scalar("SELECT json_agg(d)::text FROM webhook_deliveries d")
        .fetch_one(&rig.d.pool)
        .await
        .unwrap();
    assert!(
        !raw.contains("webhook-id") && !raw.contains("x-kickoff"),
        "{raw}"
    );
    assert!(
        !raw.contains("s3cr3t"),
        "a receiver's cookie was kept: {raw}"
    );

    // Searchable by status code through the API, newest first, by keyset pages.
    let d = &rig.d;
    assert_eq!(found(d, "status=500").await, vec![failed.0]);
    assert_eq!(found(d, "status=5xx").await, vec![failed.0]);
    assert_eq!(found(d, "status=none").await, vec![timed_out.0]);
    assert_eq!(found(d, "status=2xx").await, vec![ok.0]);
    assert_eq!(found(d, "").await, vec![ok.0, timed_out.0, failed.0]);
    assert_eq!(
        found(d, &format!("job_id={}", failed.0)).await,
        vec![failed.0]
    );
    let first = rig
        .d
        .api(Method::GET, "/webhook-deliveries?limit=2", Value::Null)
        .await;
    let before = first["next_before"].as_i64().unwrap();
    assert_eq!(found(d, &format!("before={before}")).await, vec![failed.0]);
    // A search that cannot mean anything is refused with a reason.
    for bad in [
        "status=abc",
        "status=50",
        "limit=0",
        "limit=501",
        "colour=red",
    ] {
        let (status, body) = rig
            .d
            .api_as(
                crate::common::dashboard::TOKEN,
                Method::GET,
                &format!("/webhook-deliveries?{bad}"),
                Value::Null,
            )
            .await;
        assert!(
            status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::BAD_REQUEST,
            "{bad}: {status} {body}"
        );
        assert!(body.contains("\"error\""), "{bad}: {body}");
    }

    // Kept with its job: deleting the job deletes its record.
    rig.engine.client().delete(failed).await.unwrap();
    assert!(rig.record(failed).await.is_empty());
    rig.engine.stop().await;
}

#[tokio::test]
async fn the_job_page_and_the_calls_page_show_the_record_to_a_viewer() {
    let rig = rig(Role::Viewer).await;
    let flaky = rig
        .engine
        .client()
        .insert(&NewJob::new(
            "webhook",
            json!({ "url": rig.receiver.url("/fail-once") }),
        ))
        .await
        .unwrap()
        .job;
    wait_for("the retry to complete", Duration::from_secs(60), || async {
        rig.d.state_of(flaky.id.0).await == "completed"
    })
    .await;
    rig.engine.stop().await;

    let (status, text) = rig.d.server_fn("job", &format!("id={}", flaky.id.0)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let detail: Value = serde_json::from_str(&text).unwrap();
    let calls = detail["deliveries"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{detail}");
    assert_eq!(calls[0]["attempt"], 1);
    assert_eq!(calls[0]["status"], 500);
    assert_eq!(calls[1]["attempt"], 2);
    assert_eq!(calls[1]["status"], 200);
    assert_eq!(calls[1]["body"], "ok");
    // The retry started after its backoff: later against the first call's start.
    assert!(calls[1]["started_ms"].as_i64() > calls[0]["started_ms"].as_i64());

    let (status, html) = rig.d.page(&format!("/jobs/{}", flaky.id.0)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("aria-label=\"Calls\""), "{html}");
    assert!(
        html.contains("HTTP 500") && html.contains("HTTP 200"),
        "{html}"
    );

    let (status, text) = rig.d.server_fn("webhook_calls", "query[status]=500").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let page: Value = serde_json::from_str(&text).unwrap();
    let rows = page["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{page}");
    assert_eq!(rows[0]["job_id"], flaky.id.0);
    let (status, text) = rig
        .d
        .server_fn("webhook_calls", "query[status]=teapot")
        .await;
    assert!(status.is_client_error(), "{status} {text}");
    let (status, html) = rig.d.page("/calls?status=5xx").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(&format!("/jobs/{}", flaky.id.0)), "{html}");
}
