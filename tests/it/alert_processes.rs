//! An alert fires once and resolves once across a leader kill: the leader that fired it is killed
//! with SIGKILL, the other server takes the lead, finds the incident open (no second firing) and
//! resolves it once the condition ends. Counted by distinct `webhook-id` at a loopback receiver
//! (a notification cut mid-flight is delivered again with the same id).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::receiver::Receiver;
use crate::common::server::{Server, TOKEN};
use crate::common::{test_db, wait_for};

/// The notifications received, once each, as (type, subject).
fn received(receiver: &Receiver) -> Vec<(String, String)> {
    let mut seen = BTreeMap::new();
    for call in receiver.calls_to("/alerts") {
        let body: Value = serde_json::from_slice(&call.body).unwrap();
        seen.insert(
            call.header("webhook-id").to_string(),
            (
                body["type"].as_str().unwrap_or("").to_string(),
                body["data"]["subject"].as_str().unwrap_or("").to_string(),
            ),
        );
    }
    seen.into_values().collect()
}

/// Proves the leader has evaluated every rule since now: a node silent for 4 minutes appears (the
/// pruner removes nodes silent for 5), the marker rule's notification for it arrives (the rules
/// are evaluated together, in one transaction), and every notification made so far is delivered.
async fn evaluated_since_now(pool: &kickoff::engine::Db, receiver: &Receiver, marker: &str) {
    sqlx::query(
        "INSERT INTO nodes (id, hostname, pid, heartbeat_at)
         VALUES ($1, 'ghost', 1, now() - interval '4 minutes')",
    )
    .bind(marker)
    .execute(pool)
    .await
    .unwrap();
    let subject = format!("node {marker}");
    wait_for("the marker to fire", Duration::from_secs(30), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE kind = 'webhook' AND state <> 'completed'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        waiting == 0 && received(receiver).iter().any(|(_, s)| *s == subject)
    })
    .await;
}

/// The notifications of the backlog rule, sorted.
fn backlog(receiver: &Receiver) -> Vec<(String, String)> {
    let mut got: Vec<_> = received(receiver)
        .into_iter()
        .filter(|(_, s)| s == "queue parked")
        .collect();
    got.sort();
    got
}

async fn leader(pool: &kickoff::engine::Db) -> Option<String> {
    sqlx::query_scalar("SELECT node_id FROM leader WHERE expires_at > now()")
        .fetch_optional(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_alert_fires_once_and_resolves_once_across_a_leader_kill() {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let envs = |node: &str| {
        vec![
            ("DATABASE_URL", db.url.clone()),
            ("KICKOFF_NODE_ID", node.to_string()),
            ("KICKOFF_QUEUES", "default:2,webhooks:2".to_string()),
            ("KICKOFF_WEBHOOK_ALLOWED_HOSTS", receiver.addr.to_string()),
        ]
    };
    let first = Server::start(&envs("first"));
    wait_for(
        "the first server to lead",
        Duration::from_secs(20),
        || async { leader(&db.pool).await.as_deref() == Some("first") },
    )
    .await;
    let second = Server::start(&envs("second"));
    let http = reqwest::Client::new();
    let made = http
        .post(format!("http://{}/api/v1/alert-rules", first.addr))
        .bearer_auth(TOKEN)
        .json(
            &json!({ "name": "parked backlog", "condition": "queue_backlog", "queue": "parked",
                       "threshold_n": 1, "for_secs": 0, "notify_url": receiver.url("/alerts") }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201, "{}", made.text().await.unwrap());
    // The marker: nodes silent for 3 minutes (the one killed here is not silent for that long).
    let marker = http
        .post(format!("http://{}/api/v1/alert-rules", first.addr))
        .bearer_auth(TOKEN)
        .json(
            &json!({ "name": "marker", "condition": "node_lost", "threshold_ms": 180_000,
                       "notify_url": receiver.url("/alerts") }),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(marker.status(), 201, "{}", marker.text().await.unwrap());
    let mut ids = Vec::new();
    for _ in 0..2 {
        let job = first
            .post_job(json!({ "kind": "noop", "queue": "parked" }))
            .await;
        ids.push(job["job"]["id"].as_i64().unwrap());
    }
    wait_for("the alert to fire", Duration::from_secs(30), || async {
        !received(&receiver).is_empty()
    })
    .await;

    first.kill9();
    wait_for(
        "the second server to lead",
        Duration::from_secs(30),
        || async { leader(&db.pool).await.as_deref() == Some("second") },
    )
    .await;
    // The new leader has evaluated while the condition still holds.
    evaluated_since_now(&db.pool, &receiver, "ghost-1").await;
    assert_eq!(
        backlog(&receiver),
        vec![("alert.fired".to_string(), "queue parked".to_string())],
        "fired once"
    );

    let res = http
        .delete(format!("http://{}/api/v1/jobs/{}", second.addr, ids[0]))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    wait_for("the alert to resolve", Duration::from_secs(30), || async {
        backlog(&receiver).len() >= 2
    })
    .await;
    evaluated_since_now(&db.pool, &receiver, "ghost-2").await;
    assert_eq!(
        backlog(&receiver),
        vec![
            ("alert.fired".to_string(), "queue parked".to_string()),
            ("alert.resolved".to_string(), "queue parked".to_string()),
        ]
    );
    let incidents: Vec<(String, bool)> = sqlx::query_as(
        "SELECT subject, resolved_at IS NOT NULL FROM alert_incidents i
                        JOIN alert_rules r ON r.id = i.rule_id WHERE r.name = 'parked backlog'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(incidents, vec![("queue parked".to_string(), true)]);
    drop(second);
}
