//! An action and its audit entry commit together: when the entry cannot be written (here a
//! trigger on `audit_log` refuses every insert, as a full disk or a broken constraint would),
//! the action is undone and answered 503 `not_recorded`, through the REST API and the dashboard
//! alike; once the log takes entries again, the same action is done and recorded.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::{dashboard_as, sign_in, Dashboard, PASSWORD, TOKEN};
use crate::common::{audit_log_refuses, audit_log_works};
use kickoff::accounts::{Accounts, Role, TokenScope};

async fn count(d: &Dashboard, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&d.pool).await.unwrap()
}

/// What a test compares before and after the refused calls: every job's state and due time,
/// the queues' settings, the questions, the users, the tokens.
async fn snapshot(d: &Dashboard) -> Value {
    sqlx::query_scalar(
        "SELECT jsonb_build_object(
           'jobs', (SELECT jsonb_agg(jsonb_build_array(id, state, scheduled_at, priority, args, tags)
                             ORDER BY id) FROM jobs),
           'queues', (SELECT jsonb_agg(to_jsonb(q) ORDER BY name) FROM queues q),
           'questions', (SELECT jsonb_agg(jsonb_build_array(id, status, game_time) ORDER BY id)
                         FROM questions),
           'users', (SELECT jsonb_agg(jsonb_build_array(name, role, disabled, password_hash)
                                ORDER BY name) FROM users),
           'tokens', (SELECT jsonb_agg(jsonb_build_array(id, revoked_at) ORDER BY id)
                      FROM api_tokens),
           'schedules', (SELECT jsonb_agg(jsonb_build_array(name, paused, cron, version,
                                                            runs_enqueued) ORDER BY name)
                         FROM schedules),
           'paused_kinds', (SELECT jsonb_agg(kind ORDER BY kind) FROM kind_pauses),
           'webhook_endpoints', (SELECT jsonb_agg(jsonb_build_array(id, url_prefix, secret,
                                                                    previous_secret, headers,
                                                                    allow_calls, signal_workflows)
                                                        ORDER BY id)
                                 FROM webhook_endpoints),
           'alert_rules', (SELECT jsonb_agg(jsonb_build_array(id, name, enabled) ORDER BY id)
                           FROM alert_rules),
           'workflow_runs', (SELECT jsonb_agg(jsonb_build_array(id, state, blocked, ready,
                                                                cancelled, times) ORDER BY id)
                             FROM workflow_runs),
           'workflow_signals', (SELECT count(*) FROM workflow_signals),
           'workflow_steps', (SELECT jsonb_agg(jsonb_build_array(id, state, job_id) ORDER BY id)
                              FROM workflow_steps),
           'alert_incidents', (SELECT jsonb_agg(jsonb_build_array(id, resolved_at,
                                                                  acknowledged_by) ORDER BY id)
                               FROM alert_incidents))",
    )
    .fetch_one(&d.pool)
    .await
    .unwrap()
}

fn game_time() -> String {
    (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339()
}

#[tokio::test]
async fn an_action_whose_audit_entry_cannot_be_written_is_not_done() {
    let d = dashboard_as(Role::Admin).await;
    let job = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    let other = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    let finished = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000}))
        .await;
    d.api(Method::POST, &format!("/jobs/{finished}/cancel"), json!({}))
        .await;
    d.api(Method::POST, "/queues/paused/pause", json!({})).await;
    for _ in 0..3 {
        d.new_job(json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"batch": "b"}}))
            .await;
    }
    let question = d
        .api(
            Method::POST,
            "/questions",
            json!({"game": "Bears vs Wolves", "prompt": "First goal?",
                   "choices": ["Bears", "Wolves"], "game_time": game_time()}),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    // A game under way: its question may be settled.
    let started = d
        .api(
            Method::POST,
            "/questions",
            json!({"game": "Owls vs Hawks", "prompt": "Winner?",
                   "choices": ["Owls", "Hawks"], "game_time": game_time()}),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    sqlx::query("UPDATE questions SET game_time = now() - interval '1 minute' WHERE id = $1")
        .bind(started)
        .execute(&d.pool)
        .await
        .unwrap();
    // A paused schedule (the leader inserts no runs of it meanwhile) and a paused kind.
    d.api(
        Method::POST,
        "/schedules",
        json!({"name": "nightly", "cron": "0 3 * * *", "time_zone": "Europe/London",
               "paused": true, "job": {"kind": "noop"}}),
    )
    .await;
    d.api(Method::POST, "/kinds/webhook/pause", json!({})).await;
    // A partner that may signal the game runs, signing with its secret.
    let made = d
        .api(
            Method::POST,
            "/webhook-endpoints",
            json!({"url_prefix": "https://partner.example/", "signal_workflows": ["game"]}),
        )
        .await;
    let endpoint = made["endpoint"]["id"].as_i64().unwrap();
    let partner_secret = {
        use base64::Engine as _;
        let whsec = made["secret"].as_str().unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(whsec.strip_prefix("whsec_").unwrap())
            .unwrap()
    };
    let rule = d
        .api(
            Method::POST,
            "/alert-rules",
            json!({"name": "nodes", "condition": "node_lost"}),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let incident: i64 = sqlx::query_scalar(
        "INSERT INTO alert_incidents (rule_id, subject, summary)
         VALUES ($1, 'node ghost', 'node ghost has not beaten') RETURNING id",
    )
    .bind(rule)
    .fetch_one(&d.pool)
    .await
    .unwrap();
    // A run waiting on a queue no node runs: one to cancel.
    let run = d
        .api(
            Method::POST,
            "/workflows",
            json!({"name": "game", "key": "game:audit", "times": {"kickoff_at": game_time()}, "steps": [
                {"name": "held", "job": {"kind": "noop", "queue": "nobody"}},
                {"name": "next", "job": {"kind": "noop"}, "after": [{"step": "held"}]}]}),
        )
        .await["run"]["id"]
        .as_i64()
        .unwrap();
    // A run whose one step's job was cancelled: failed, to retry and to run again.
    let failed = d
        .api(
            Method::POST,
            "/workflows",
            json!({"name": "game", "steps": [
                {"name": "one", "job": {"kind": "noop", "queue": "nobody"}}]}),
        )
        .await;
    let failed_run = failed["run"]["id"].as_i64().unwrap();
    let one_job = failed["steps"][0]["job_id"].as_i64().unwrap();
    d.api(Method::POST, &format!("/jobs/{one_job}/cancel"), json!({}))
        .await;
    let (_, preview) = d.server_fn("bulk_preview", "query[args]=batch%3Db").await;
    let max_id = serde_json::from_str::<Value>(&preview).unwrap()["max_id"]
        .as_i64()
        .unwrap();
    let accounts = Accounts::new(d.pool.clone());
    let eve = accounts
        .create("eve", PASSWORD, Role::Operator)
        .await
        .unwrap();
    let (token, _) = accounts
        .create_token(&eve, "eve's", TokenScope::Read)
        .await
        .unwrap();
    let eve = eve.id;
    let entries = count(&d, "SELECT count(*) FROM audit_log").await;
    let before = snapshot(&d).await;

    audit_log_refuses(&d.pool, "true").await;
    // (route, path, body): every state-changing route of the API but the players' predictions.
    let api_calls = [
        ("POST /jobs", "/jobs".to_string(), json!({"kind": "noop"})),
        (
            "POST /jobs/{id}/cancel",
            format!("/jobs/{job}/cancel"),
            json!({}),
        ),
        (
            "POST /jobs/{id}/retry",
            format!("/jobs/{finished}/retry"),
            json!({}),
        ),
        (
            "POST /jobs/{id}/run-now",
            format!("/jobs/{job}/run-now"),
            json!({}),
        ),
        (
            "POST /jobs/{id}/reschedule",
            format!("/jobs/{job}/reschedule"),
            json!({"scheduled_at": game_time()}),
        ),
        ("DELETE /jobs/{id}", format!("/jobs/{job}"), json!({})),
        (
            "PATCH /jobs/{id}",
            format!("/jobs/{job}"),
            json!({"priority": 4, "args_patch": {"n": 1}}),
        ),
        (
            "POST /jobs/edit",
            "/jobs/edit".to_string(),
            json!({"ids": [job, other], "edit": {"priority": 4}}),
        ),
        (
            "POST /jobs/edit",
            "/jobs/edit".to_string(),
            json!({"filter": {"args": {"batch": "b"}, "max_id": max_id}, "edit": {"tags": ["t"]}}),
        ),
        (
            "POST /jobs/shift",
            "/jobs/shift".to_string(),
            json!({"filter": {"args": {"batch": "b"}, "max_id": max_id}, "by_ms": 60_000}),
        ),
        (
            "POST /jobs/shift",
            "/jobs/shift".to_string(),
            json!({"filter": {"args": {"batch": "b"}, "max_id": max_id}, "by_ms": 60_000,
                   "game": "Bears vs Wolves"}),
        ),
        (
            "POST /jobs/bulk",
            "/jobs/bulk".to_string(),
            json!({"action": "cancel", "ids": [job, other]}),
        ),
        (
            "POST /jobs/bulk",
            "/jobs/bulk".to_string(),
            json!({"action": "cancel", "filter": {"args": {"batch": "b"}}}),
        ),
        (
            "POST /queues/{name}/pause",
            "/queues/default/pause".to_string(),
            json!({}),
        ),
        (
            "POST /queues/{name}/resume",
            "/queues/paused/resume".to_string(),
            json!({}),
        ),
        (
            "PATCH /queues/{name}",
            "/queues/default".to_string(),
            json!({"concurrency": 3}),
        ),
        (
            "POST /questions",
            "/questions".to_string(),
            json!({"game": "G", "prompt": "P?", "choices": ["a", "b"], "game_time": game_time()}),
        ),
        (
            "PATCH /questions/{id}",
            format!("/questions/{question}"),
            json!({"game_time": game_time()}),
        ),
        (
            "POST /questions/{id}/settle",
            format!("/questions/{started}/settle"),
            json!({"correct_choice": "Owls"}),
        ),
        (
            "DELETE /questions/{id}",
            format!("/questions/{question}"),
            json!({}),
        ),
        (
            "POST /schedules",
            "/schedules".to_string(),
            json!({"name": "hourly", "cron": "0 * * * *", "job": {"kind": "noop"}}),
        ),
        (
            "PATCH /schedules/{name}",
            "/schedules/nightly".to_string(),
            json!({"cron": "0 4 * * *"}),
        ),
        (
            "POST /schedules/{name}/pause",
            "/schedules/nightly/pause".to_string(),
            json!({}),
        ),
        (
            "POST /schedules/{name}/resume",
            "/schedules/nightly/resume".to_string(),
            json!({}),
        ),
        (
            "POST /schedules/{name}/trigger",
            "/schedules/nightly/trigger".to_string(),
            json!({}),
        ),
        (
            "DELETE /schedules/{name}",
            "/schedules/nightly".to_string(),
            json!({}),
        ),
        (
            "POST /kinds/{kind}/pause",
            "/kinds/noop/pause".to_string(),
            json!({}),
        ),
        (
            "POST /kinds/{kind}/resume",
            "/kinds/webhook/resume".to_string(),
            json!({}),
        ),
        (
            "PATCH /queues/{name}",
            "/queues/default".to_string(),
            json!({"rate": "10/s", "per": "host", "global_concurrency": 5}),
        ),
        (
            "POST /webhook-endpoints",
            "/webhook-endpoints".to_string(),
            json!({"url_prefix": "https://other.example/"}),
        ),
        (
            "POST /webhook-endpoints/{id}/rotate",
            format!("/webhook-endpoints/{endpoint}/rotate"),
            json!({}),
        ),
        (
            "PATCH /webhook-endpoints/{id}",
            format!("/webhook-endpoints/{endpoint}"),
            json!({"allow_calls": true, "headers": {"Authorization": "Bearer x"}}),
        ),
        (
            "DELETE /webhook-endpoints/{id}",
            format!("/webhook-endpoints/{endpoint}"),
            json!({}),
        ),
        (
            "POST /alert-rules",
            "/alert-rules".to_string(),
            json!({"name": "backlog", "condition": "queue_backlog", "threshold_n": 5}),
        ),
        (
            "PATCH /alert-rules/{id}",
            format!("/alert-rules/{rule}"),
            json!({"enabled": false}),
        ),
        (
            "DELETE /alert-rules/{id}",
            format!("/alert-rules/{rule}"),
            json!({}),
        ),
        (
            "POST /alerts/{id}/acknowledge",
            format!("/alerts/{incident}/acknowledge"),
            json!({}),
        ),
        (
            "POST /workflows",
            "/workflows".to_string(),
            json!({"name": "game", "steps": [{"name": "a", "job": {"kind": "noop"}}]}),
        ),
        (
            "POST /workflows/{id}/cancel",
            format!("/workflows/{run}/cancel"),
            json!({}),
        ),
        (
            "POST /workflows/{id}/retry",
            format!("/workflows/{failed_run}/retry"),
            json!({}),
        ),
        (
            "POST /workflows/{id}/skip",
            format!("/workflows/{run}/skip"),
            json!({"step": "held"}),
        ),
        (
            "POST /workflows/{id}/signals",
            format!("/workflows/{run}/signals"),
            json!({"name": "final", "payload": {"home": 2}}),
        ),
        (
            "POST /games/{game}/workflow",
            "/games/Bears%20vs%20Wolves/workflow".to_string(),
            json!({}),
        ),
        (
            "POST /inbound/{endpoint}/signals",
            format!("/inbound/{endpoint}/signals"),
            json!({"key": "game:audit", "name": "final"}),
        ),
        (
            "POST /workflows/{id}/times",
            format!("/workflows/{run}/times"),
            json!({"times": {"kickoff_at": game_time()}}),
        ),
        (
            "POST /workflows/{id}/rerun",
            format!("/workflows/{failed_run}/rerun"),
            json!({"from": "one"}),
        ),
    ];
    let routes: std::collections::BTreeSet<String> = kickoff::http::openapi::endpoints()
        .iter()
        .filter(|e| e.method != "get" && !e.path.ends_with("/predictions"))
        .map(|e| format!("{} {}", e.method.to_uppercase(), e.path))
        .collect();
    let tried: std::collections::BTreeSet<String> =
        api_calls.iter().map(|c| c.0.to_string()).collect();
    assert_eq!(tried, routes, "every state-changing route is tried");
    for (route, path, body) in api_calls {
        let method: Method = route.split(' ').next().unwrap().parse().unwrap();
        let (status, answer) = if route.starts_with("POST /inbound/") {
            signed(&d.app, &path, &partner_secret, &body).await
        } else {
            d.api_as(TOKEN, method.clone(), &path, body).await
        };
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{method} {path}: {answer}"
        );
        let code: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(code["error"]["code"], "not_recorded", "{method} {path}");
        assert_eq!(
            snapshot(&d).await,
            before,
            "{method} {path} changed something"
        );
    }

    let console_calls = [
        ("job_action", format!("id={job}&action=cancel")),
        ("job_action", format!("id={job}&action=delete")),
        ("clone_job", format!("id={job}")),
        (
            "bulk",
            format!("action=cancel&query[args]=batch%3Db&query[max_id]={max_id}"),
        ),
        ("bulk", format!("action=cancel&ids={job},{other}")),
        (
            "bulk",
            format!(
                "action=shift&query[args]=batch%3Db&query[max_id]={max_id}&change[by]=1m\
                 &change[game]=Bears%20vs%20Wolves"
            ),
        ),
        ("bulk", format!("action=edit&ids={job}&change[priority]=4")),
        (
            "edit_job",
            format!(
                "id={job}&input[args]=%7B%7D&input[args_shown]=%7B%7D&input[priority]=4\
                 &input[queue]=default&input[max_attempts]=20&input[tags]="
            ),
        ),
        ("queue_action", "name=default&action=pause".to_string()),
        (
            "queue_action",
            "name=default&action=limits&rate=5%2Fs&global=2".to_string(),
        ),
        ("kind_action", "kind=noop&action=pause".to_string()),
        (
            "workflow_action",
            format!("id={run}&action=skip&detail=held"),
        ),
        ("workflow_action", format!("id={failed_run}&action=retry")),
        ("schedule_action", "name=nightly&action=trigger".to_string()),
        ("kind_action", "kind=webhook&action=resume".to_string()),
        (
            "create_user",
            format!(
                "name=bob&role=operator&password={}",
                "a%20long%20enough%20pass"
            ),
        ),
        ("update_user", format!("id={eve}&action=role&role=viewer")),
        ("update_user", format!("id={eve}&action=disable")),
        (
            "update_user",
            format!("id={eve}&action=password&password=another%20long%20password"),
        ),
        ("revoke_token", format!("id={}", token.id)),
        (
            "create_alert_rule",
            "rule[name]=lost&rule[condition]=node_lost".to_string(),
        ),
        ("set_alert_rule", format!("id={rule}&enabled=false")),
        ("delete_alert_rule", format!("id={rule}")),
        ("acknowledge_alert", format!("id={incident}")),
        (
            "change_password",
            format!(
                "current={}&new=another+long+password",
                PASSWORD.replace(' ', "+")
            ),
        ),
        (
            "create_token",
            format!("name=t&scope=read&password={}", PASSWORD.replace(' ', "+")),
        ),
    ];
    for (name, form) in &console_calls {
        let (status, answer) = d.server_fn(name, form).await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{name} {form}: {answer}"
        );
        assert!(answer.contains("audit log"), "{name}: {answer}");
        assert_eq!(
            snapshot(&d).await,
            before,
            "{name} {form} changed something"
        );
    }
    // A sign-in the log cannot record starts no session.
    let res = crate::common::dashboard::send(
        &d.app,
        axum::http::Request::post("/_console/login")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(format!(
                "name=ops&password={}",
                PASSWORD.replace(' ', "+")
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(res.0, StatusCode::SERVICE_UNAVAILABLE, "{}", res.2);
    assert_eq!(
        count(&d, "SELECT count(*) FROM audit_log").await,
        entries,
        "no entry was written"
    );

    // Once the log takes entries again, the same actions are done and recorded with them.
    audit_log_works(&d.pool).await;
    let (status, _) = d
        .api_as(
            TOKEN,
            Method::POST,
            &format!("/jobs/{job}/cancel"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(d.state_of(job).await, "cancelled");
    let (status, body) = d
        .server_fn(
            "bulk",
            &format!("action=cancel&query[args]=batch%3Db&query[max_id]={max_id}"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let recorded: Vec<(String, Option<i64>, String)> = sqlx::query_as(
        "SELECT action, count, result FROM audit_log WHERE id > (SELECT max(id) - 2 FROM audit_log)
         ORDER BY id",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    assert_eq!(
        recorded,
        [
            (
                "api.POST /jobs/{id}/cancel".to_string(),
                None,
                "ok".to_string()
            ),
            ("jobs.bulk_cancel".to_string(), Some(3), "ok".to_string()),
        ],
        "one entry each, with the change"
    );
    sign_in(&d.app, "ops", PASSWORD, None).await;
}

#[tokio::test]
async fn a_bulk_action_in_batches_commits_its_first_and_last_batch_with_an_entry() {
    let d = dashboard_as(Role::Admin).await;
    let jobs = kickoff::engine::bulk::BULK_BATCH as usize + 500;
    sqlx::query(
        "INSERT INTO jobs (queue, kind, args, state, scheduled_at)
         SELECT 'default', 'noop', '{\"batch\": \"big\"}', 'scheduled', now() + interval '1 hour'
         FROM generate_series(1, $1)",
    )
    .bind(jobs as i64)
    .execute(&d.pool)
    .await
    .unwrap();
    let cancelled = "SELECT count(*) FROM jobs WHERE state = 'cancelled'";
    let bulk = json!({"action": "cancel", "filter": {"args": {"batch": "big"}}});
    let entries = |d: &Dashboard| {
        let pool = d.pool.clone();
        async move {
            sqlx::query_as::<_, (Option<i64>, String)>(
                "SELECT count, result FROM audit_log WHERE action = 'api.POST /jobs/bulk' ORDER BY id",
            )
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };

    // The log takes the first batch's entry but not the last's: the first batch stays done (its
    // entry says the action started), the last is undone, the caller hears it, and the end is
    // recorded with how far it got.
    audit_log_refuses(&d.pool, "NEW.result = 'ok'").await;
    let (status, answer) = d
        .api_as(TOKEN, Method::POST, "/jobs/bulk", bulk.clone())
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(
        count(&d, cancelled).await,
        kickoff::engine::bulk::BULK_BATCH,
        "only the first batch"
    );
    let stopped = (
        Some(kickoff::engine::bulk::BULK_BATCH),
        "stopped after 1000 changed: the action was not done: the audit log could not record it; \
         try again"
            .to_string(),
    );
    assert_eq!(
        entries(&d).await,
        [(None, "started".to_string()), stopped.clone()]
    );
    audit_log_works(&d.pool).await;

    // Whole again: the same action walks both batches again (the first changes nothing now) and
    // cancels the rest; its first batch commits with `started`, its last with the count.
    let (status, answer) = d.api_as(TOKEN, Method::POST, "/jobs/bulk", bulk).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(count(&d, cancelled).await, jobs as i64);
    let started = (None, "started".to_string());
    assert_eq!(
        entries(&d).await,
        [
            started.clone(),
            stopped,
            started,
            (Some(500), "ok".to_string())
        ]
    );
}

/// A partner's call: `body` to `path` (under `/api/v1`), signed with the endpoint's raw `secret`.
async fn signed(
    app: &axum::Router,
    path: &str,
    secret: &[u8],
    body: &Value,
) -> (StatusCode, String) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let text = body.to_string();
    let at = chrono::Utc::now().timestamp();
    let signature = kickoff::webhooks::signing::sign(secret, "msg_audit", at, text.as_bytes());
    let req = axum::http::Request::post(format!("/api/v1{path}"))
        .header("content-type", "application/json")
        .header("webhook-id", "msg_audit")
        .header("webhook-timestamp", at.to_string())
        .header("webhook-signature", signature)
        .body(axum::body::Body::from(text))
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}
