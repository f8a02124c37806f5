//! Alerts (issue 17): each condition fires once when it starts to hold and resolves once when it
//! stops, with one notification each (a signed-able webhook call) against a loopback receiver;
//! a second evaluator (another leader) neither fires again nor resolves twice; rules are checked
//! field by field, managed by admins only, and incidents acknowledged once.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::{dashboard_as, TOKEN};
use crate::common::receiver::Receiver;
use crate::common::{test_db, wait_for, TestDb};
use kickoff::accounts::Role;
use kickoff::alerts::{Alerts, Evaluator, RuleSpec};
use kickoff::engine::{Engine, EngineConfig, NewJob};

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
    rig_with("webhooks").await
}

/// [`rig`], its evaluator inserting the notifications in `notify_queue` (`webhooks`: run by the
/// engine; another: parked, for a test to move them as the engine would). The receiver is allowed
/// as `127.0.0.1:PORT` and as `localhost:PORT`: a name that resolves to a loopback address
/// without `private:`, which the webhook worker refuses as fatal (an undeliverable
/// notification).
async fn rig_with(notify_queue: &str) -> Rig {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![
            receiver.addr.to_string(),
            format!("localhost:{}", receiver.addr.port()),
        ]),
        EngineConfig {
            queues: vec![("webhooks".into(), 4)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let alerts = Alerts::new(db.pool.clone(), engine.client());
    let evaluator = Evaluator::new(db.pool.clone(), engine.client(), notify_queue);
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
        self.rule_to(spec, &self.receiver.url("/alerts")).await
    }

    /// A rule whose notifications go to `url`.
    async fn rule_to(&self, spec: Value, url: &str) -> i64 {
        let mut spec: RuleSpec = serde_json::from_value(spec).unwrap();
        spec.notify_url = Some(url.to_string());
        let mut conn = self.db.pool.pool().acquire().await.unwrap();
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

    async fn count(&self, query: &str) -> i64 {
        sqlx::query_scalar(query)
            .fetch_one(&self.db.pool)
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"))
    }

    /// The bodies of the notification jobs inserted so far, oldest first.
    async fn notification_bodies(&self) -> Vec<Value> {
        sqlx::query_scalar("SELECT args -> 'body' FROM jobs WHERE kind = 'webhook' ORDER BY id")
            .fetch_all(&self.db.pool)
            .await
            .unwrap()
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

/// Job 9001 discarded after one attempt that failed with `boom`.
const DISCARD_PARKED_JOB: &str =
    "UPDATE jobs SET state = 'discarded', finalized_at = now(), attempt = 1,
    errors = '[{\"attempt\":1,\"at\":\"2026-12-02T10:00:00Z\",\"node\":null,\"message\":\"boom\"}]'
    WHERE id = 9001";

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
        crate::common::rest::send(&d.app, Method::GET, "/metrics", Some(TOKEN), None).await;
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

/// Issue 30: a `job_discarded` rule whose notification could not be delivered (a host that
/// resolves to a loopback address without `private:`) opened an incident for each discarded
/// notification, which notified again, forever: 29 incidents in 15 s from one discarded job. A
/// notification is never the subject of a rule; a job that only carries a notification's meta (as
/// any API caller may write it) is no notification.
#[tokio::test]
async fn an_undeliverable_notification_is_never_the_subject_of_a_rule() {
    let rig = rig().await;
    let port = rig.receiver.addr.port();
    rig.rule_to(
        json!({ "name": "discards", "condition": "job_discarded" }),
        &format!("http://localhost:{port}/alerts"),
    )
    .await;
    rig.sql(PARKED_JOB).await;
    rig.sql(DISCARD_PARKED_JOB).await;
    assert_eq!(rig.evaluate().await, (vec!["job 9001".to_string()], vec![]));
    for round in 0..3 {
        // The webhook worker refuses the loopback address as fatal: the notification is
        // discarded, as the issue saw it.
        wait_for(
            "the notification to be discarded",
            Duration::from_secs(20),
            || async {
                rig.count(
                    "SELECT count(*) FROM jobs WHERE kind = 'webhook' AND state <> 'discarded'",
                )
                .await
                    == 0
            },
        )
        .await;
        assert_eq!(
            rig.evaluate().await,
            (vec![], vec![]),
            "round {round}: a discarded notification fired the rule"
        );
    }
    assert_eq!(rig.count("SELECT count(*) FROM alert_incidents").await, 1);
    assert_eq!(
        rig.count("SELECT count(*) FROM jobs WHERE kind = 'webhook'")
            .await,
        1
    );
    assert!(rig.receiver.calls_to("/alerts").is_empty());

    // A job that carries a notification's meta without being one (the client refuses those keys;
    // plain SQL can still write them) still alerts when it is discarded.
    let forged: i64 = sqlx::query_scalar(
        r#"INSERT INTO jobs (queue, kind, args, meta, created_by, state)
           VALUES ('parked', 'noop', '{}', '{"alert_incident": 1, "alert_event": "fired"}', 'ops',
                   'available')
           RETURNING id"#,
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    rig.sql(&format!(
        "UPDATE jobs SET state = 'discarded', finalized_at = now(), attempt = 1 WHERE id = {forged}"
    ))
    .await;
    assert_eq!(
        rig.evaluate().await,
        (vec![format!("job {forged}")], vec![])
    );
    rig.engine.stop().await;
}

/// A failed attempt of each job in `notify` counted in this minute's statistics, as the engine's
/// count folder would.
const THREE_FAILED_IN_NOTIFY: &str =
    "INSERT INTO job_stats_minute (minute, queue, completed, failed)
    VALUES (date_trunc('minute', now()), 'notify', 0, 3)
    ON CONFLICT (minute, queue) DO UPDATE SET failed = job_stats_minute.failed + 3";

/// The queue-wide conditions do not count notifications either (waiting, overdue or failing
/// ones would keep their queue's incident firing and fire it again after it resolved, each
/// time with a notification of its own), while the queue's other jobs still count.
#[tokio::test]
async fn notifications_make_no_backlog_overdue_or_failure_rate() {
    let rig = rig_with("notify").await;
    rig.rule(json!({ "name": "nodes", "condition": "node_lost", "threshold_ms": 10000 }))
        .await;
    rig.rule(
        json!({ "name": "backlog", "condition": "queue_backlog", "queue": "notify",
                     "threshold_n": 2, "for_secs": 0 }),
    )
    .await;
    rig.rule(
        json!({ "name": "overdue", "condition": "overdue", "queue": "notify",
                     "threshold_ms": 30000 }),
    )
    .await;
    rig.rule(
        json!({ "name": "failing", "condition": "failure_rate", "queue": "notify",
                     "percent": 50, "threshold_n": 3 }),
    )
    .await;
    rig.sql(
        "INSERT INTO nodes (id, hostname, pid, heartbeat_at)
         SELECT 'ghost-' || i, 'ghost', i, now() - interval '1 min' FROM generate_series(1, 3) AS i",
    )
    .await;
    assert_eq!(rig.evaluate().await.0.len(), 3);
    // The three notifications wait in `notify`, due two minutes ago, each after a failed attempt.
    rig.sql(
        "UPDATE jobs SET scheduled_at = now() - interval '2 min', attempt = 1,
             errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'message', 'refused'))
         WHERE queue = 'notify'",
    )
    .await;
    rig.sql(THREE_FAILED_IN_NOTIFY).await;
    for _ in 0..2 {
        assert_eq!(
            rig.evaluate().await,
            (vec![], vec![]),
            "the notifications made a backlog, were overdue or failed"
        );
    }
    // Three jobs of the queue's own, in the same state: they count, and only they.
    rig.sql(
        "INSERT INTO jobs (queue, kind, state, scheduled_at, attempt, errors)
         SELECT 'notify', 'noop', 'available', now() - interval '2 min', 1,
                jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'message', 'boom'))
         FROM generate_series(1, 3)",
    )
    .await;
    rig.sql(THREE_FAILED_IN_NOTIFY).await;
    let report = rig.evaluator.run_once().await.unwrap();
    let mut fired: Vec<(String, String)> = report
        .fired
        .iter()
        .map(|i| (i.rule.clone(), i.summary.clone()))
        .collect();
    fired.sort();
    assert_eq!(fired.len(), 3, "{fired:?}");
    assert_eq!(
        fired[0],
        ("backlog".into(), "3 jobs available in queue notify".into())
    );
    assert!(
        fired[1].0 == "failing" && fired[1].1.starts_with("3 of 3 attempts failed"),
        "{fired:?}"
    );
    assert_eq!(fired[2].0, "overdue");
    rig.engine.stop().await;
}

/// Issue 30: N subjects made N notifications. Past ten per rule and evaluation, the rest go in one
/// digest ("and N more"), for the firings and for the resolutions alike.
#[tokio::test]
async fn a_burst_of_subjects_notifies_ten_then_one_digest() {
    let rig = rig_with("notify").await;
    rig.rule(json!({ "name": "discards", "condition": "job_discarded", "queue": "parked" }))
        .await;
    rig.sql(
        "INSERT INTO jobs (queue, kind, state, attempt, finalized_at)
         SELECT 'parked', 'noop', 'discarded', 1, now() FROM generate_series(1, 25)",
    )
    .await;
    assert_eq!(rig.evaluate().await.0.len(), 25);
    let bodies = rig.notification_bodies().await;
    assert_eq!(bodies.len(), 11, "ten notifications and a digest");
    assert!(bodies[..10].iter().all(|b| b["type"] == "alert.fired"));
    let digest = &bodies[10];
    assert_eq!(digest["type"], "alert.digest", "{digest}");
    assert_eq!(digest["data"]["event"], "fired", "{digest}");
    assert_eq!(digest["data"]["count"], 15, "{digest}");
    assert_eq!(digest["data"]["subjects"].as_array().unwrap().len(), 15);
    let summary = digest["data"]["summary"].as_str().unwrap();
    assert!(summary.starts_with("and 15 more: job "), "{summary}");

    rig.sql("UPDATE jobs SET state = 'available', finalized_at = NULL WHERE queue = 'parked'")
        .await;
    assert_eq!(rig.evaluate().await.1.len(), 25);
    let bodies = rig.notification_bodies().await;
    assert_eq!(bodies.len(), 22);
    assert!(bodies[11..21].iter().all(|b| b["type"] == "alert.resolved"));
    assert_eq!(bodies[21]["data"]["event"], "resolved");
    assert_eq!(bodies[21]["data"]["count"], 15);
    rig.engine.stop().await;
}

/// Review of issue 30: a burst beyond the 100 subjects a rule reads in one evaluation fires whole
/// over the next ones. Before, each evaluation read the newest 100 discarded jobs and left out those
/// whose incident was open: of 150 discarded at once, 50 never fired while the newest 100 stayed
/// discarded.
#[tokio::test]
async fn a_burst_past_one_evaluations_read_fires_whole_over_the_next_ones() {
    let rig = rig_with("notify").await;
    rig.rule(json!({ "name": "discards", "condition": "job_discarded", "queue": "parked" }))
        .await;
    rig.sql(
        "INSERT INTO jobs (queue, kind, state, attempt, finalized_at)
         SELECT 'parked', 'noop', 'discarded', 1, now() FROM generate_series(1, 150)",
    )
    .await;
    assert_eq!(rig.evaluate().await.0.len(), 100);
    assert_eq!(rig.evaluate().await.0.len(), 50, "the rest fires next");
    assert_eq!(rig.evaluate().await.0.len(), 0, "and once");
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM alert_incidents WHERE resolved_at IS NULL")
            .fetch_one(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(open, 150);
    rig.engine.stop().await;
}

/// Issue 30: `alert_incidents` was never pruned. The leader deletes resolved incidents once the
/// retention (the pruner's `KICKOFF_RETENTION_HOURS`, 24 h by default) passed; firing ones stay,
/// and the count of incidents a rule opened (a counter in `/metrics`) does not go down.
#[tokio::test]
async fn resolved_incidents_older_than_the_retention_are_pruned_by_the_leader() {
    let rig = rig_with("notify").await;
    rig.rule(json!({ "name": "nodes", "condition": "node_lost", "threshold_ms": 10000 }))
        .await;
    rig.sql(
        "INSERT INTO nodes (id, hostname, pid, heartbeat_at)
         SELECT 'ghost-' || i, 'ghost', i, now() - interval '1 min' FROM generate_series(1, 3) AS i",
    )
    .await;
    assert_eq!(rig.evaluate().await.0.len(), 3);
    rig.sql("UPDATE nodes SET heartbeat_at = now() WHERE id IN ('ghost-1', 'ghost-2')")
        .await;
    assert_eq!(rig.evaluate().await.1.len(), 2);
    // ghost-1's incident resolved 25 hours ago; ghost-3's has fired for 30 hours.
    rig.sql(
        "UPDATE alert_incidents SET fired_at = now() - interval '26 hours',
                                    resolved_at = now() - interval '25 hours'
         WHERE subject = 'node ghost-1'",
    )
    .await;
    rig.sql("UPDATE alert_incidents SET fired_at = now() - interval '30 hours' WHERE subject = 'node ghost-3'")
        .await;
    rig.evaluate().await;
    let left: Vec<String> =
        sqlx::query_scalar("SELECT subject FROM alert_incidents ORDER BY subject")
            .fetch_all(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(left, vec!["node ghost-2", "node ghost-3"]);
    assert_eq!(
        rig.alerts.counts().await.unwrap(),
        vec![("nodes".to_string(), "node_lost".to_string(), 1, 3)],
        "one firing, three ever opened"
    );
    // A rule deleted with a firing incident takes its incidents (and its counts) along.
    rig.sql("DELETE FROM alert_rules").await;
    assert_eq!(rig.count("SELECT count(*) FROM alert_incidents").await, 0);
    rig.engine.stop().await;
}

/// A late lock fires once per question, ever, as long as its question is within the day the rule
/// looks back: its resolved incident is the record of that, so it is kept for that day even when
/// the retention is shorter.
#[tokio::test]
async fn a_late_locks_resolved_incident_is_kept_while_its_question_could_fire_again() {
    let rig = rig_with("notify").await;
    let evaluator = Evaluator::new(rig.db.pool.clone(), rig.engine.client(), "notify")
        .with_retention(Duration::from_secs(3600));
    rig.rule(json!({ "name": "late", "condition": "late_lock", "threshold_ms": 1000 }))
        .await;
    rig.rule(json!({ "name": "nodes", "condition": "node_lost", "threshold_ms": 10000 }))
        .await;
    // Made three hours ago: it watches questions from four hours ago on.
    rig.sql("UPDATE alert_rules SET created_at = now() - interval '3 hours'")
        .await;
    // Question 7's lock started 3 s after game time, two hours ago; it is locked.
    rig.sql(
        "INSERT INTO jobs (id, queue, kind, state, attempt, scheduled_at, attempted_at, finalized_at, args)
         VALUES (9001, 'parked', 'lock_question', 'completed', 1, now(), now() - interval '2 hours',
                 now() - interval '2 hours', '{\"question_id\":7}')",
    )
    .await;
    rig.sql(
        "INSERT INTO questions (id, game, prompt, choices, game_time, lock_job_id, status, locked_at)
         VALUES (7, 'g', 'p', '{a,b}', now() - interval '2 hours 3 s', 9001, 'locked', now() - interval '2 hours')",
    )
    .await;
    rig.sql(
        "INSERT INTO nodes (id, hostname, pid, heartbeat_at) VALUES ('ghost-1', 'ghost', 1, now() - interval '1 min')",
    )
    .await;
    let report = evaluator.run_once().await.unwrap();
    assert_eq!((report.fired.len(), report.resolved.len()), (2, 1));
    rig.sql("UPDATE nodes SET heartbeat_at = now()").await;
    assert_eq!(evaluator.run_once().await.unwrap().resolved.len(), 1);
    rig.sql(
        "UPDATE alert_incidents SET fired_at = now() - interval '2 hours', resolved_at = now() - interval '2 hours'",
    )
    .await;
    let report = evaluator.run_once().await.unwrap();
    assert_eq!(report.pruned, 1, "the node's incident, past the hour");
    assert!(report.fired.is_empty(), "question 7 fired again");
    let left: Vec<String> = sqlx::query_scalar("SELECT subject FROM alert_incidents")
        .fetch_all(&rig.db.pool)
        .await
        .unwrap();
    assert_eq!(left, vec!["question 7"]);
    rig.engine.stop().await;
}

/// Issue 30: every evaluation read every open incident of every rule (a `job_discarded` rule
/// keeps one open per discarded job until the job goes). An evaluation checks a bounded page of a
/// rule's open incidents, the next page the next time, round and round.
#[tokio::test]
async fn an_evaluation_checks_a_bounded_page_of_open_incidents() {
    let rig = rig_with("notify").await;
    let rule = rig
        .rule(json!({ "name": "discards", "condition": "job_discarded", "queue": "parked" }))
        .await;
    // 1,200 incidents about discarded jobs since deleted: each resolves once checked.
    rig.sql(&format!(
        "INSERT INTO alert_incidents (rule_id, subject, summary)
         SELECT {rule}, 'job ' || i, 'gone' FROM generate_series(1, 1200) AS i"
    ))
    .await;
    let page = kickoff::alerts::evaluator::OPEN_INCIDENTS_PER_EVALUATION;
    assert_eq!(page, 500);
    let mut resolved = Vec::new();
    for expected in [500, 500, 200, 0] {
        let (_, r) = rig.evaluate().await;
        assert_eq!(r.len(), expected);
        resolved.extend(r);
    }
    resolved.sort();
    resolved.dedup();
    assert_eq!(resolved.len(), 1200);
    assert_eq!(
        rig.count("SELECT count(*) FROM jobs WHERE kind = 'webhook'")
            .await,
        33,
        "ten and a digest per evaluation"
    );
    rig.engine.stop().await;
}

/// Issue 30: a Slack text did not escape `&`, `<` and `>`, so a discarded job's error could ping
/// the channel (`<!channel>`) or disguise a link (`<https://evil|click>`).
#[tokio::test]
async fn a_slack_text_escapes_what_slack_reads_as_markup() {
    let rig = rig_with("notify").await;
    rig.rule(
        json!({ "name": "slack", "condition": "job_discarded", "queue": "parked",
                     "payload": "slack" }),
    )
    .await;
    rig.sql(PARKED_JOB).await;
    rig.sql(
        "UPDATE jobs SET state = 'discarded', finalized_at = now(), attempt = 1,
             errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(),
                 'message', '<!channel> see <https://evil.example|the fix> & more'))
         WHERE id = 9001",
    )
    .await;
    rig.evaluate().await;
    let bodies = rig.notification_bodies().await;
    let text = bodies[0]["text"].as_str().unwrap();
    assert!(
        text.ends_with(": &lt;!channel&gt; see &lt;https://evil.example|the fix&gt; &amp; more"),
        "{text}"
    );
    assert!(!text.contains('<') && !text.contains('>'), "{text}");
    rig.engine.stop().await;
}

/// Attempt records in queue `parked`: one 4 s late, one its policy skipped 3 s late, one 0.5 s
/// late (under the rules' threshold), and a notification's 9 s late (never counted).
const LATE_ATTEMPTS: &str = "INSERT INTO job_attempts (job_id, attempt, queue, kind, node, due_at,
        started_at, finished_at, duration_ms, outcome, error)
    VALUES (9001, 1, 'parked', 'noop', 'n', now() - interval '5 s', now() - interval '1 s', now(),
            1000, 'completed', NULL),
           (9002, 1, 'parked', 'noop', 'n', now() - interval '3 s', now(), now(), 0, 'cancelled',
            'started 3000.0 ms after its due time, past its limit of 2000 ms'),
           (9003, 1, 'parked', 'noop', 'n', now() - interval '0.5 s', now(), now(), 0,
            'completed', NULL),
           (9004, 1, 'parked', 'webhook', 'n', now() - interval '9 s', now(), now(), 0,
            'completed', NULL)";

#[tokio::test]
async fn late_starts_fire_per_queue_with_the_policys_skips_and_resolve_after_the_window() {
    let rig = rig().await;
    rig.rule(
        json!({ "name": "late", "condition": "late_start", "queue": "parked",
                     "threshold_ms": 2000 }),
    )
    .await;
    rig.rule(json!({ "name": "late noop", "condition": "late_start", "kind": "noop" }))
        .await;
    assert_eq!(rig.evaluate().await, (vec![], vec![]), "nothing holds yet");
    // Job 9004 is a notification: never a subject.
    rig.sql("INSERT INTO alert_notifications (job_id) VALUES (9004)")
        .await;
    rig.sql(LATE_ATTEMPTS).await;
    let report = rig.evaluator.run_once().await.unwrap();
    let fired: Vec<(String, String, String)> = report
        .fired
        .iter()
        .map(|i| (i.rule.clone(), i.subject.clone(), i.summary.clone()))
        .collect();
    // The 60 s default of the kind's rule sees none of them.
    assert_eq!(
        fired,
        [(
            "late".to_string(),
            "queue parked".to_string(),
            "2 attempt(s) in queue parked started more than 2000 ms after their due time in the \
             last 5 minutes, 1 of them skipped or discarded by their late-start policy"
                .to_string()
        )]
    );
    assert_eq!(rig.evaluate().await, (vec![], vec![]), "once");
    rig.sql("UPDATE job_attempts SET finished_at = now() - interval '6 minutes'")
        .await;
    assert_eq!(
        rig.evaluate().await,
        (vec![], vec!["queue parked".to_string()]),
        "resolved once the window holds none"
    );
    rig.engine.stop().await;
}

/// A late-start policy's discard, through the engine: the job-discarded rule sees the job, and
/// the late-start rule its queue, saying the policy discarded it; its call was never made.
#[tokio::test]
async fn a_late_start_policys_discard_fires_the_discarded_and_late_start_rules() {
    use kickoff::engine::{JobState, LatePolicy, OnLate};
    let rig = rig().await;
    rig.rule(json!({ "name": "discards", "condition": "job_discarded", "kind": "webhook" }))
        .await;
    rig.rule(
        json!({ "name": "late", "condition": "late_start", "queue": "webhooks",
                     "threshold_ms": 1000 }),
    )
    .await;
    let client = rig.engine.client();
    client.set_queue_paused("webhooks", true).await.unwrap();
    let job = NewJob::new("webhook", json!({ "url": rig.receiver.url("/late") }))
        .with_queue("webhooks")
        .with_late_policy(LatePolicy {
            after_ms: 1000,
            then: OnLate::Discard,
        });
    let job = client.insert(&job).await.unwrap().job;
    // Due 5 s ago, held by the pause meanwhile.
    rig.sql(&format!(
        "UPDATE jobs SET scheduled_at = now() - interval '5 s' WHERE id = {}",
        job.id
    ))
    .await;
    client.set_queue_paused("webhooks", false).await.unwrap();
    wait_for(
        "the policy to discard it",
        Duration::from_secs(10),
        || async { client.get(job.id).await.unwrap().state == JobState::Discarded },
    )
    .await;
    let report = rig.evaluator.run_once().await.unwrap();
    let mut fired: Vec<(String, String, String)> = report
        .fired
        .iter()
        .map(|i| (i.rule.clone(), i.subject.clone(), i.summary.clone()))
        .collect();
    fired.sort();
    assert_eq!(fired.len(), 2, "{fired:?}");
    assert_eq!(
        (fired[0].0.as_str(), fired[0].1.clone()),
        ("discards", format!("job {}", job.id))
    );
    assert!(
        fired[0].2.contains("past its limit of 1000 ms"),
        "{fired:?}"
    );
    assert_eq!(
        (fired[1].0.as_str(), fired[1].1.as_str()),
        ("late", "queue webhooks")
    );
    assert!(
        fired[1]
            .2
            .ends_with("1 of them skipped or discarded by their late-start policy"),
        "{fired:?}"
    );
    let deliveries = rig
        .count(&format!(
            "SELECT count(*) FROM webhook_deliveries WHERE job_id = {}",
            job.id
        ))
        .await;
    assert_eq!(deliveries, 0, "the late call was made");
    rig.engine.stop().await;
}

/// Issue 46: a `job_discarded` incident quotes the job's last error, and every role reads
/// incidents (a notification takes them outside): a webhook job whose partner echoed its header
/// into the error shows that value hidden there, as its page does for a reader.
#[tokio::test]
async fn a_discarded_jobs_incident_hides_the_secrets_its_error_quotes() {
    let rig = rig().await;
    rig.rule(json!({ "name": "discards", "condition": "job_discarded", "queue": "parked" }))
        .await;
    rig.sql(
        r#"INSERT INTO jobs (id, queue, kind, args, state, attempt, finalized_at, created_by, errors)
           VALUES (9002, 'parked', 'webhook',
                   '{"url": "https://hooks.example.com/x", "headers": {"X-Partner": "p4rtn3r-v4lue-99"}}',
                   'discarded', 1, now(), 'ana',
                   '[{"attempt": 1, "at": "2026-12-02T10:00:00Z", "node": null,
                      "message": "HTTP 500: x-partner: p4rtn3r-v4lue-99"}]')"#,
    )
    .await;
    let (fired, _) = rig.evaluate().await;
    assert_eq!(fired, ["job 9002"]);
    let summary: String =
        sqlx::query_scalar("SELECT summary FROM alert_incidents WHERE subject = 'job 9002'")
            .fetch_one(&rig.db.pool)
            .await
            .unwrap();
    assert!(summary.contains("HTTP 500"), "{summary}");
    assert!(!summary.contains("p4rtn3r"), "{summary}");
    let sent: Vec<String> =
        sqlx::query_scalar("SELECT args::text FROM jobs WHERE meta ? 'alert_incident'")
            .fetch_all(&rig.db.pool)
            .await
            .unwrap();
    assert_eq!(sent.len(), 1);
    assert!(!sent[0].contains("p4rtn3r"), "{sent:?}");
    rig.engine.stop().await;
}
