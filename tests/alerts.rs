//! Alerts (issue 17): each condition fires once when it starts to hold and resolves once when it
//! stops, with one notification each (a signed-able webhook call) against a loopback receiver;
//! a second evaluator (another leader) neither fires again nor resolves twice; rules are checked
//! field by field, managed by admins only, and incidents acknowledged once.

mod common;

use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use common::dashboard::{dashboard_as, TOKEN};
use common::receiver::Receiver;
use common::{test_db, wait_for, TestDb};
use kickoff::accounts::Role;
use kickoff::alerts::{Alerts, Evaluator, RuleSpec};
use kickoff::engine::{Engine, EngineConfig};

struct Rig {
    db: TestDb,
    receiver: Receiver,
    engine: Engine,
    alerts: Alerts,
    evaluator: Evaluator,
}

/// An engine that runs only the `webhooks` queue (the notifications), calling the receiver; the
/// jobs a test parks in other queues stay where they are.
async fn rig() -> Rig {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![receiver.addr.to_string()]),
        EngineConfig {
            queues: vec![("webhooks".into(), 4)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let alerts = Alerts::new(db.pool.clone(), engine.client());
    let evaluator = Evaluator::new(db.pool.clone(), engine.client(), "webhooks");
    Rig {
        db,
        receiver,
        engine,
        alerts,
        evaluator,
    }
}

impl Rig {
    async fn rule(&self, spec: Value) -> i64 {
        let mut spec: RuleSpec = serde_json::from_value(spec).unwrap();
        spec.notify_url = Some(self.receiver.url("/alerts"));
        let mut conn = self.db.pool.acquire().await.unwrap();
        self.alerts
            .create_rule_with(&mut conn, spec, Some("test"))
            .await
            .unwrap()
            .id
    }

    async fn sql(&self, statement: &str) {
        sqlx::query(statement)
            .execute(&self.db.pool)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }

    /// One evaluation: the subjects fired and resolved.
    async fn evaluate(&self) -> (Vec<String>, Vec<String>) {
        let report = self.evaluator.run_once().await.unwrap();
        (
            report.fired.into_iter().map(|i| i.subject).collect(),
            report.resolved.into_iter().map(|i| i.subject).collect(),
        )
    }

    /// The notifications the receiver got (once each: a repeated delivery has the same id), once
    /// every notification job inserted so far has completed.
    async fn notifications(&self, expected: usize) -> Vec<Value> {
        wait_for(
            "the notifications to arrive",
            Duration::from_secs(20),
            || async {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM jobs WHERE kind = 'webhook' AND state <> 'completed'",
                )
                .fetch_one(&self.db.pool)
                .await
                .unwrap();
                waiting == 0 && self.distinct().len() >= expected
            },
        )
        .await;
        self.distinct()
    }

    fn distinct(&self) -> Vec<Value> {
        let mut seen = std::collections::BTreeMap::new();
        for call in self.receiver.calls_to("/alerts") {
            seen.entry(call.header("webhook-id").to_string())
                .or_insert_with(|| serde_json::from_slice::<Value>(&call.body).unwrap());
        }
        seen.into_values().collect()
    }
}

/// The rule fires for `subject` once `make` ran, not again, and resolves once `unmake` ran; the
/// receiver gets one `alert.fired` and one `alert.resolved`.
async fn fires_once_and_resolves_once(spec: Value, subject: &str, make: &[&str], unmake: &[&str]) {
    let rig = rig().await;
    rig.rule(spec).await;
    assert_eq!(rig.evaluate().await, (vec![], vec![]), "nothing holds yet");
    for s in make {
        rig.sql(s).await;
    }
    assert_eq!(
        rig.evaluate().await,
        (vec![subject.to_string()], vec![]),
        "it fires"
    );
    assert_eq!(rig.evaluate().await, (vec![], vec![]), "once");
    // Another leader's evaluator finds the open incident: no second firing.
    let other = Evaluator::new(rig.db.pool.clone(), rig.engine.client(), "webhooks");
    assert_eq!(other.run_once().await.unwrap().fired.len(), 0);
    for s in unmake {
        rig.sql(s).await;
    }
    assert_eq!(
        rig.evaluate().await,
        (vec![], vec![subject.to_string()]),
        "it resolves"
    );
    assert_eq!(other.run_once().await.unwrap().resolved.len(), 0, "once");
    let got = rig.notifications(2).await;
    assert_eq!(got.len(), 2, "{got:?}");
    let types: Vec<&str> = got.iter().map(|n| n["type"].as_str().unwrap()).collect();
    assert!(
        types.contains(&"alert.fired") && types.contains(&"alert.resolved"),
        "{types:?}"
    );
    for n in &got {
        assert_eq!(n["data"]["subject"], subject, "{n}");
    }
    rig.engine.stop().await;
}

const PARKED_JOB: &str = "INSERT INTO jobs (id, queue, kind, state, scheduled_at)
    VALUES (9001, 'parked', 'noop', 'available', now())";

#[tokio::test]
async fn a_discarded_job_fires_and_its_retry_resolves() {
    fires_once_and_resolves_once(
        json!({ "name": "discards", "condition": "job_discarded", "queue": "parked" }),
        "job 9001",
        &[
            PARKED_JOB,
            "UPDATE jobs SET state = 'discarded', finalized_at = now(), attempt = 1,
                 errors = '[{\"attempt\":1,\"at\":\"2026-12-02T10:00:00Z\",\"node\":null,\"message\":\"boom\"}]'
             WHERE id = 9001",
        ],
        &["UPDATE jobs SET state = 'available', finalized_at = NULL WHERE id = 9001"],
    )
    .await;
}

#[tokio::test]
async fn a_question_open_after_game_time_fires_and_its_lock_resolves() {
    fires_once_and_resolves_once(
        json!({ "name": "open", "condition": "question_open", "threshold_ms": 500 }),
        "question 7",
        &["INSERT INTO questions (id, game, prompt, choices, game_time)
           VALUES (7, 'Bears vs Wolves', 'Who scores first?', '{Bears,Wolves}', now() - interval '2 s')"],
        &["UPDATE questions SET status = 'locked', locked_at = now() WHERE id = 7"],
    )
    .await;
}

#[tokio::test]
async fn a_lock_not_started_after_game_time_fires_and_the_lock_resolves() {
    fires_once_and_resolves_once(
        json!({ "name": "late", "condition": "late_lock", "threshold_ms": 500, "game": "Bears vs Wolves" }),
        "question 7",
        &[
            "INSERT INTO jobs (id, queue, kind, state, scheduled_at, args)
             VALUES (9001, 'parked', 'lock_question', 'available', now() - interval '2 s', '{\"question_id\":7}')",
            "INSERT INTO questions (id, game, prompt, choices, game_time, lock_job_id)
             VALUES (7, 'Bears vs Wolves', 'Who scores first?', '{Bears,Wolves}', now() - interval '2 s', 9001)",
            // Another game's late question is out of the rule's scope.
            "INSERT INTO questions (id, game, prompt, choices, game_time)
             VALUES (8, 'Lions vs Owls', 'Who scores first?', '{Lions,Owls}', now() - interval '2 s')",
        ],
        &["UPDATE questions SET status = 'locked', locked_at = now() WHERE id = 7"],
    )
    .await;
}

#[tokio::test]
async fn a_lock_that_started_late_fires_and_resolves_once_even_when_already_locked() {
    let rig = rig().await;
    rig.rule(json!({ "name": "late", "condition": "late_lock", "threshold_ms": 1000 }))
        .await;
    // Its lock started 3 s after game time and the question is locked by the time we look.
    rig.sql(
        "INSERT INTO jobs (id, queue, kind, state, attempt, scheduled_at, attempted_at, finalized_at, args)
         VALUES (9001, 'parked', 'lock_question', 'completed', 1, now(), now(), now(), '{\"question_id\":7}'),
                (9002, 'parked', 'lock_question', 'completed', 1, now(), now(), now(), '{\"question_id\":8}')",
    )
    .await;
    rig.sql(
        "INSERT INTO questions (id, game, prompt, choices, game_time, lock_job_id, status, locked_at)
         VALUES (7, 'g', 'p', '{a,b}', now() - interval '10 s', 9001, 'locked', now() - interval '7 s'),
                (8, 'g', 'p', '{a,b}', now() - interval '10 s', 9002, 'locked', now() - interval '9.9 s')",
    )
    .await;
    // Question 8's lock started on time: no incident.
    rig.sql(
        "UPDATE jobs j SET attempted_at = q.game_time + CASE q.id WHEN 7 THEN interval '3 s' ELSE interval '10 ms' END,
                          finalized_at = q.locked_at
         FROM questions q WHERE q.lock_job_id = j.id",
    )
    .await;
    let (fired, resolved) = rig.evaluate().await;
    assert_eq!(fired, vec!["question 7".to_string()]);
    assert_eq!(resolved, vec!["question 7".to_string()]);
    assert_eq!(
        rig.evaluate().await,
        (vec![], vec![]),
        "a late lock fires once, ever"
    );
    let got = rig.notifications(2).await;
    let fired = got.iter().find(|n| n["type"] == "alert.fired").unwrap();
    let summary = fired["data"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("its lock started 3000 ms after game time"),
        "{summary}"
    );
    rig.engine.stop().await;
}

#[tokio::test]
async fn a_backlog_fires_after_its_time_and_resolves_when_it_drains() {
    let rig = rig().await;
    rig.rule(
        json!({ "name": "backlog", "condition": "queue_backlog", "queue": "parked",
                     "threshold_n": 1, "for_secs": 1 }),
    )
    .await;
    rig.sql(PARKED_JOB).await;
    rig.sql(
        "INSERT INTO jobs (id, queue, kind, state) VALUES (9002, 'parked', 'noop', 'available')",
    )
    .await;
    assert_eq!(
        rig.evaluate().await,
        (vec![], vec![]),
        "not for long enough yet"
    );
    // A second later, by the database's reckoning: the pending subject is moved back in time.
    rig.sql("UPDATE alert_pending SET since = since - interval '1.1 s'")
        .await;
    assert_eq!(
        rig.evaluate().await,
        (vec!["queue parked".to_string()], vec![])
    );
    rig.sql("DELETE FROM jobs WHERE id = 9002").await;
    assert_eq!(
        rig.evaluate().await,
        (vec![], vec!["queue parked".to_string()])
    );
    assert_eq!(rig.notifications(2).await.len(), 2);
    rig.engine.stop().await;
}

#[tokio::test]
async fn a_failure_rate_fires_and_resolves() {
    fires_once_and_resolves_once(
        json!({ "name": "failing", "condition": "failure_rate", "queue": "parked", "percent": 30,
                "threshold_n": 10 }),
        "queue parked",
        &[
            "INSERT INTO job_stats_minute (minute, queue, completed, failed)
           VALUES (date_trunc('minute', now()), 'parked', 6, 4)",
        ],
        &["UPDATE job_stats_minute SET failed = 1 WHERE queue = 'parked'"],
    )
    .await;
}

#[tokio::test]
async fn a_lost_node_fires_and_resolves_when_it_beats_again() {
    fires_once_and_resolves_once(
        json!({ "name": "nodes", "condition": "node_lost", "threshold_ms": 10000 }),
        "node ghost-1",
        &["INSERT INTO nodes (id, hostname, pid, heartbeat_at)
           VALUES ('ghost-1', 'ghost', 1, now() - interval '1 min')"],
        &["UPDATE nodes SET heartbeat_at = now() WHERE id = 'ghost-1'"],
    )
    .await;
}

#[tokio::test]
async fn overdue_jobs_fire_and_resolve_when_started() {
    fires_once_and_resolves_once(
        json!({ "name": "overdue", "condition": "overdue", "queue": "parked", "threshold_ms": 30000 }),
        "queue parked",
        &["INSERT INTO jobs (id, queue, kind, state, scheduled_at)
           VALUES (9001, 'parked', 'noop', 'available', now() - interval '2 min')"],
        &["UPDATE jobs SET state = 'completed', finalized_at = now() WHERE id = 9001"],
    )
    .await;
}

#[tokio::test]
async fn one_queues_overdue_backlog_does_not_hide_anothers() {
    // 3,000 older overdue jobs in `big` before the one of `small` (the engine's timer stages the
    // scheduled half soon): a read of the oldest overdue rows alone would see only `big`; `small`
    // is found through its count and the probe of its priority.
    let rig = rig().await;
    rig.rule(json!({ "name": "overdue", "condition": "overdue", "threshold_ms": 30000 }))
        .await;
    rig.sql(
        "INSERT INTO jobs (queue, kind, state, scheduled_at)
         SELECT 'big', 'noop', s, now() - interval '2 hours' + make_interval(secs => i)
         FROM generate_series(1, 1500) AS i,
              unnest(ARRAY['scheduled', 'available']::job_state[]) AS s",
    )
    .await;
    rig.sql(
        "INSERT INTO jobs (queue, kind, state, scheduled_at, priority)
         VALUES ('small', 'noop', 'available', now() - interval '2 min', 7)",
    )
    .await;
    let (mut fired, resolved) = rig.evaluate().await;
    fired.sort();
    assert_eq!(
        (fired, resolved),
        (
            vec!["queue big".to_string(), "queue small".to_string()],
            vec![]
        )
    );
    // Still holding for both: nothing resolves, nothing fires again.
    assert_eq!(rig.evaluate().await, (vec![], vec![]));
    rig.engine.stop().await;
}

#[tokio::test]
async fn a_slack_rule_sends_text() {
    let rig = rig().await;
    rig.rule(json!({ "name": "slack", "condition": "node_lost", "payload": "slack" }))
        .await;
    rig.sql(
        "INSERT INTO nodes (id, hostname, pid, heartbeat_at)
         VALUES ('ghost-1', 'ghost', 1, now() - interval '1 min')",
    )
    .await;
    rig.evaluate().await;
    let got = rig.notifications(1).await;
    let text = got[0]["text"].as_str().unwrap();
    assert!(
        text.contains("Kickoff alert *slack* fired: node ghost-1"),
        "{text}"
    );
    assert_eq!(got[0].as_object().unwrap().len(), 1, "only text");
    rig.engine.stop().await;
}

#[tokio::test]
async fn rules_are_checked_and_managed_by_admins_and_incidents_acknowledged_once() {
    let d = dashboard_as(Role::Admin).await;
    // Refused with a reason, nothing written.
    for (bad, word) in [
        (
            json!({ "name": "x", "condition": "queue_backlog" }),
            "threshold_n",
        ),
        (
            json!({ "name": "x", "condition": "node_lost", "game": "g" }),
            "game",
        ),
        (
            json!({ "name": "x", "condition": "late_lock", "percent": 5 }),
            "percent",
        ),
        (
            json!({ "name": "x", "condition": "sometimes" }),
            "condition",
        ),
        (json!({ "name": "", "condition": "node_lost" }), "name"),
        (
            json!({ "name": "x", "condition": "node_lost", "notify_url": "https://evil.example/hook" }),
            "KICKOFF_WEBHOOK_ALLOWED_HOSTS",
        ),
        (
            json!({ "name": "x", "condition": "node_lost", "colour": "red" }),
            "colour",
        ),
    ] {
        let (status, body) = d
            .api_as(TOKEN, Method::POST, "/alert-rules", bad.clone())
            .await;
        assert!(
            status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::BAD_REQUEST,
            "{bad}: {status} {body}"
        );
        assert!(body.contains(word), "{bad}: {body}");
    }
    let made = d
        .api(
            Method::POST,
            "/alert-rules",
            json!({ "name": "nodes", "condition": "node_lost",
                    "notify_url": "https://hooks.example.com/services/T0/B0/secret", "payload": "slack" }),
        )
        .await;
    assert_eq!(made["threshold_ms"], 30000);
    assert_eq!(made["words"], "a node's heartbeat is older than 30000 ms");
    let (status, body) = d
        .api_as(
            TOKEN,
            Method::POST,
            "/alert-rules",
            json!({ "name": "nodes", "condition": "node_lost" }),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // The audit names the rule's route, never its URL.
    let audit: String =
        sqlx::query_scalar("SELECT string_agg(coalesce(target, ''), ' ') FROM audit_log")
            .fetch_one(&d.pool)
            .await
            .unwrap();
    assert!(!audit.contains("secret"), "{audit}");

    // An operator reads incidents, acknowledges once; the rules are an admin's.
    let op = dashboard_as(Role::Operator).await;
    let (status, _) = op
        .api_as(TOKEN, Method::GET, "/alerts?state=firing", Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK);
    sqlx::query(
        "INSERT INTO nodes (id, hostname, pid, heartbeat_at) VALUES ('ghost-1', 'ghost', 1, now() - interval '1 min')",
    )
    .execute(&d.pool)
    .await
    .unwrap();
    let client = kickoff::engine::Client::new(
        d.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(vec!["hooks.example.com".into()])),
    );
    let report = Evaluator::new(d.pool.clone(), client, "webhooks")
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.fired.len(), 1);
    let id = report.fired[0].id;
    let page = d
        .api(Method::GET, "/alerts?state=firing", Value::Null)
        .await;
    assert_eq!(page["incidents"][0]["subject"], "node ghost-1");
    let (status, text) = d.server_fn("acknowledge_alert", &format!("id={id}")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (status, text) = d.server_fn("acknowledge_alert", &format!("id={id}")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    assert!(text.contains("acknowledged already by ops"), "{text}");
    let (status, text) = d.server_fn("alerts", "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let page: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(page["firing"][0]["acknowledged_by"], "ops");
    assert_eq!(
        page["rules"][0]["notifies"], "hooks.example.com",
        "the host only"
    );
    assert!(!text.contains("secret"));
    // The notification was inserted with the incident.
    let notifications: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE kind = 'webhook' AND meta ->> 'alert_event' = 'fired'",
    )
    .fetch_one(&d.pool)
    .await
    .unwrap();
    assert_eq!(notifications, 1);
    // Counted in /metrics.
    let (status, metrics) =
        common::rest::send(&d.app, Method::GET, "/metrics", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        metrics.contains("kickoff_alerts_firing{rule=\"nodes\",condition=\"node_lost\"} 1"),
        "{metrics}"
    );
    let (status, page) = d.page("/alerts").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("node ghost-1"), "{page}");

    // Switched off, the rule stops watching: its incident resolves, and nothing fires again.
    let rule = made["id"].as_i64().unwrap();
    let off = d
        .api(
            Method::PATCH,
            &format!("/alert-rules/{rule}"),
            json!({ "enabled": false }),
        )
        .await;
    assert_eq!(off["enabled"], false);
    let page = d
        .api(Method::GET, "/alerts?state=firing", Value::Null)
        .await;
    assert_eq!(page["incidents"], json!([]));
    let client = kickoff::engine::Client::new(
        d.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(vec!["hooks.example.com".into()])),
    );
    let again = Evaluator::new(d.pool.clone(), client, "webhooks")
        .run_once()
        .await
        .unwrap();
    assert!(again.fired.is_empty() && again.resolved.is_empty());
    let gone = d
        .api(Method::DELETE, &format!("/alert-rules/{rule}"), Value::Null)
        .await;
    assert_eq!(gone["name"], "nodes");
    let (status, _) = d
        .api_as(
            TOKEN,
            Method::DELETE,
            &format!("/alert-rules/{rule}"),
            Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn operators_and_viewers_cannot_manage_rules() {
    let op = dashboard_as(Role::Operator).await;
    let (status, text) = op
        .server_fn(
            "create_alert_rule",
            "rule[name]=x&rule[condition]=node_lost",
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    let viewer = dashboard_as(Role::Viewer).await;
    let (status, text) = viewer.server_fn("acknowledge_alert", "id=1").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    let (status, text) = viewer.server_fn("alerts", "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
}
