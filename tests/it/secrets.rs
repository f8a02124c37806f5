//! Who sees a job's secrets (webhook header values, args and meta fields named like secrets):
//! its creator and admins, acting with a credential that may change things; every other operator
//! sees them `[redacted]` like a viewer does, and cannot search for them. A clone keeps its
//! original's creator, so copying a job reveals nothing.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::{dashboard_as, Dashboard, PASSWORD, TOKEN};
use kickoff::accounts::{Accounts, Role, TokenScope};

const HEADER: &str = "Bearer s3cr3t-header";

/// A webhook job with a secret header and a secret field (and the unique key `key`), inserted
/// with `token`; what the API answered.
async fn insert_secret(d: &Dashboard, token: &str, key: &str) -> (StatusCode, Value) {
    let (status, body) = d
        .api_as(
            token,
            Method::POST,
            "/jobs",
            json!({"kind": "webhook", "schedule_in_ms": 600_000, "unique_key": key, "args": {
                "url": "https://hooks.example.com/scores",
                "headers": {"Authorization": HEADER},
                "body": {"game": 7, "partner_token": "s3cr3t-field"},
            }}),
        )
        .await;
    (status, serde_json::from_str(&body).unwrap())
}

async fn secret_job(d: &Dashboard, token: &str, key: &str) -> i64 {
    let (status, body) = insert_secret(d, token, key).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["job"]["id"].as_i64().unwrap()
}

/// A write token of a new user `name` with `role`.
async fn write_token(d: &Dashboard, name: &str, role: Role) -> String {
    let accounts = Accounts::new(d.pool.clone());
    let user = accounts.create(name, PASSWORD, role).await.unwrap();
    accounts
        .create_token(&user, "write", TokenScope::Write)
        .await
        .unwrap()
        .1
}

async fn get_job(d: &Dashboard, token: &str, id: i64) -> Value {
    let (status, body) = d
        .api_as(token, Method::GET, &format!("/jobs/{id}"), json!(null))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test]
async fn a_jobs_secrets_are_shown_to_its_creator_and_admins_only() {
    // `ops` (an operator) is signed in to the dashboard.
    let d = dashboard_as(Role::Operator).await;
    let accounts = Accounts::new(d.pool.clone());
    let ops = accounts.list().await.unwrap().remove(0);
    let ops_token = accounts
        .create_token(&ops, "write", TokenScope::Write)
        .await
        .unwrap()
        .1;
    let ana_token = write_token(&d, "ana", Role::Operator).await;
    let admin_token = write_token(&d, "root", Role::Admin).await;
    let mine = secret_job(&d, &ops_token, "mine").await;
    let anas = secret_job(&d, &ana_token, "anas").await;
    let bootstraps = secret_job(&d, TOKEN, "bootstraps").await;

    // Each job names its creator.
    for (id, creator) in [
        (mine, "ops"),
        (anas, "ana"),
        (bootstraps, "(bootstrap token)"),
    ] {
        assert_eq!(get_job(&d, &admin_token, id).await["created_by"], creator);
    }

    // The creator and admins (the bootstrap token is one) see the secrets whole.
    for (token, id) in [
        (&ops_token, mine),
        (&ana_token, anas),
        (&admin_token, anas),
        (&admin_token, bootstraps),
        (&TOKEN.to_string(), anas),
    ] {
        let job = get_job(&d, token, id).await;
        assert_eq!(job["args"]["headers"]["Authorization"], HEADER, "job {id}");
        assert_eq!(job["args"]["body"]["partner_token"], "s3cr3t-field");
    }
    // Another operator does not, in the API or in the dashboard.
    for (token, id) in [(&ops_token, anas), (&ana_token, bootstraps)] {
        let job = get_job(&d, token, id).await;
        assert_eq!(
            job["args"]["headers"]["Authorization"], "[redacted]",
            "job {id}"
        );
        assert_eq!(job["args"]["body"]["partner_token"], "[redacted]");
        assert_eq!(job["args"]["body"]["game"], 7, "the rest is shown");
    }
    // Nor in what an action answers: inserting with the job's unique key (the live job comes
    // back), rescheduling it, making it due now.
    let (status, same) = insert_secret(&d, &ops_token, "anas").await;
    assert_eq!(status, StatusCode::OK, "{same}");
    assert_eq!(same["existing"], true);
    assert_eq!(
        same["job"]["args"]["headers"]["Authorization"],
        "[redacted]"
    );
    let later = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    for (path, body) in [
        (
            format!("/jobs/{anas}/reschedule"),
            json!({"scheduled_at": later}),
        ),
        (format!("/jobs/{anas}/run-now"), json!({})),
        (format!("/jobs/{anas}/cancel"), json!({})),
        (format!("/jobs/{anas}/retry"), json!({})),
    ] {
        let (status, answer) = d.api_as(&ops_token, Method::POST, &path, body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        assert!(!answer.contains("s3cr3t"), "{path}: {answer}");
    }
    let (_, page) = d.page(&format!("/jobs/{anas}")).await;
    assert!(
        !page.contains("s3cr3t"),
        "another's secret on an operator's page"
    );
    assert!(page.contains("[redacted]"));
    let (_, page) = d.page(&format!("/jobs/{mine}")).await;
    assert!(
        page.contains("s3cr3t-header"),
        "the creator's own page shows it"
    );
    assert!(
        page.contains("<span data-created-by=\"\">ops<"),
        "the page says who created it"
    );
    let (_, list) = d.server_fn("jobs", "").await;
    let list: Value = serde_json::from_str(&list).unwrap();
    for row in list["rows"].as_array().unwrap() {
        let whole = row["args_preview"]
            .as_str()
            .unwrap()
            .contains("s3cr3t-field");
        assert_eq!(whole, row["id"] == mine, "{row}");
    }
    let (status, body) = d
        .api_as(&ops_token, Method::GET, "/jobs?kind=webhook", json!(null))
        .await;
    assert_eq!(status, StatusCode::OK);
    let listed: Value = serde_json::from_str(&body).unwrap();
    for job in listed["jobs"].as_array().unwrap() {
        let whole = job["args"]["headers"]["Authorization"] == HEADER;
        assert_eq!(whole, job["id"] == mine, "{job}");
    }

    // A copy keeps its original's creator: cloning does not reveal the secrets.
    let (status, clone) = d.server_fn("clone_job", &format!("id={anas}")).await;
    assert_eq!(status, StatusCode::OK, "{clone}");
    let clone: i64 = clone.trim().parse().unwrap();
    let copy = get_job(&d, &ops_token, clone).await;
    assert_eq!(copy["created_by"], "ana");
    assert_eq!(copy["args"]["headers"]["Authorization"], "[redacted]");

    // Only admins may search by a secret: a match (or a bulk count) would confirm a guess.
    let guess = "%7B%22headers%22%3A%7B%22Authorization%22%3A%22Bearer%20s3%22%7D%7D";
    for function in ["jobs", "bulk_preview"] {
        let (status, text) = d.server_fn(function, &format!("query[args]={guess}")).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{function}: {text}"
        );
    }
    let by_secret =
        json!({"action": "cancel", "filter": {"args": {"headers": {"Authorization": HEADER}}}});
    let state = d.state_of(anas).await;
    let (status, text) = d
        .api_as(&ops_token, Method::POST, "/jobs/bulk", by_secret.clone())
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert_eq!(d.state_of(anas).await, state, "nothing changed");
    let (status, text) = d
        .api_as(&admin_token, Method::POST, "/jobs/bulk", by_secret)
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    // The admin's filter is in the audit log; an operator reads it hidden.
    let (_, audit) = d.server_fn("audit", "").await;
    assert!(
        audit.contains("jobs/bulk") && !audit.contains("s3cr3t"),
        "{audit}"
    );

    // Nobody can pass for the bootstrap token as a job's creator.
    let refused = accounts
        .create("api-token", PASSWORD, Role::Operator)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("bootstrap"), "{refused}");
}

/// The schedule `partner-sync`, created with `token`: a webhook template with a secret header.
async fn partner_sync(d: &Dashboard, token: &str) {
    let (status, body) = d
        .api_as(
            token,
            Method::POST,
            "/schedules",
            json!({"name": "partner-sync", "cron": "0 3 * * *", "job": {"kind": "webhook", "args": {
                "url": "https://hooks.example.com/sync",
                "headers": {"Authorization": HEADER},
            }}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Issue 30, point 3: "run now" on an admin's schedule whose webhook template carries a secret
/// header: the run keeps the schedule's creator, so the operator who triggered it (through the
/// API or the dashboard) sees the header redacted, in the answer and in the job; who triggered it
/// is in the run's meta and the audit log.
#[tokio::test]
async fn a_triggered_run_keeps_its_schedules_creator_and_shows_no_secret_to_the_operator() {
    let d = dashboard_as(Role::Operator).await;
    let admin_token = write_token(&d, "root", Role::Admin).await;
    let ana_token = write_token(&d, "ana", Role::Operator).await;
    partner_sync(&d, &admin_token).await;

    let (status, body) = d
        .api_as(
            &ana_token,
            Method::POST,
            "/schedules/partner-sync/trigger",
            json!(null),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(!body.contains("s3cr3t"), "the trigger's answer: {body}");
    let job: Value = serde_json::from_str(&body).unwrap();
    let id = job["id"].as_i64().unwrap();
    let seen = get_job(&d, &ana_token, id).await;
    assert!(
        !seen.to_string().contains("s3cr3t"),
        "GET /jobs/{id}: {seen}"
    );
    assert_eq!(seen["created_by"], "root", "{seen}");
    assert_eq!(seen["meta"]["triggered_by"], "ana", "{seen}");
    // The admin still sees it whole.
    let whole = get_job(&d, &admin_token, id).await;
    assert_eq!(whole["args"]["headers"]["Authorization"], HEADER);

    // From the dashboard, signed in as `ops`.
    let (status, body) = d
        .server_fn("schedule_action", "name=partner-sync&action=trigger")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let ops_run: i64 = sqlx::query_scalar(
        "SELECT id FROM jobs WHERE meta ->> 'triggered_by' = 'ops' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&d.pool)
    .await
    .unwrap();
    let ops_token = write_token(&d, "ops2", Role::Operator).await;
    let seen = get_job(&d, &ops_token, ops_run).await;
    assert!(!seen.to_string().contains("s3cr3t"), "{seen}");
    assert_eq!(seen["created_by"], "root", "{seen}");
    let (triggers,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM audit_log WHERE action LIKE '%trigger%'
           AND actor IN ('ana', 'ops')",
    )
    .fetch_one(&d.pool)
    .await
    .unwrap();
    assert_eq!(triggers, 2, "each trigger is audited under who did it");
}

/// Issue 46, points 1 and 8: one rule of who sees a job's secrets, on every surface that shows
/// the job's data. A webhook job of `ana`'s carries its own credentials and calls a careless
/// partner that echoes every request header into its 500 (body and headers). Another operator and
/// a viewer read the job, its attempts, its delivery record, the lists, the export and every page
/// without the values; `ana` reads them whole. Once `ana` edits the credentials out of the job,
/// what the job held before stays hidden just the same.
#[tokio::test]
async fn a_jobs_own_secrets_are_hidden_on_every_surface_and_stay_hidden_after_an_edit() {
    use crate::common::dashboard::{get_as, sign_in};
    use crate::common::receiver::Receiver;
    use crate::common::wait_for;
    use kickoff::engine::{Engine, EngineConfig, NewJob};
    use std::time::Duration;

    const BEARER: &str = "Bearer s3cr3t-bearer-77";
    const KEY: &str = "s3cr3t-key-88";
    // A header whose name says nothing: its value is hidden as the job's, and only so.
    const PARTNER: &str = "p4rtn3r-v4lue-99";
    let d = dashboard_as(Role::Operator).await; // `ops`, signed in
    let accounts = Accounts::new(d.pool.clone());
    let ops = accounts.list().await.unwrap().remove(0);
    let ops_token = accounts
        .create_token(&ops, "write", TokenScope::Write)
        .await
        .unwrap()
        .1;
    let ana_token = write_token(&d, "ana", Role::Operator).await;
    let vic = accounts
        .create("vic", PASSWORD, Role::Viewer)
        .await
        .unwrap();
    let vic_token = accounts
        .create_token(&vic, "read", TokenScope::Read)
        .await
        .unwrap()
        .1;
    let (vic_cookie, _) = sign_in(&d.app, "vic", PASSWORD, None).await;

    let receiver = Receiver::start().await;
    let engine = Engine::start(
        d.pool.clone(),
        kickoff::workers::builtin(vec![receiver.addr.to_string()]),
        EngineConfig {
            queues: vec![("default".into(), 2)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let mut new = NewJob::new(
        "webhook",
        json!({"url": receiver.url("/echo/500"),
               "headers": {"Authorization": BEARER, "X-Api-Key": KEY, "X-Partner": PARTNER},
               "body": {"game": 7}}),
    )
    .with_max_attempts(3);
    new.created_by = Some("ana".into());
    let id = engine.client().insert(&new).await.unwrap().job.id.0;
    wait_for(
        "the first call to fail",
        Duration::from_secs(20),
        || async {
            d.state_of(id).await == "retryable"
                && !kickoff::webhooks::deliveries::of_job(&d.pool, id)
                    .await
                    .unwrap()
                    .is_empty()
        },
    )
    .await;
    engine.stop().await;
    assert_eq!(receiver.calls()[0].header("x-partner"), PARTNER);

    let api_paths = [
        format!("/jobs/{id}"),
        format!("/jobs/{id}/attempts"),
        format!("/webhook-deliveries?job_id={id}"),
        "/webhook-deliveries".to_string(),
        "/jobs".to_string(),
        "/jobs?state=retryable".to_string(),
        "/jobs/export?format=csv".to_string(),
        "/jobs/export?format=jsonl".to_string(),
    ];
    let pages = [
        format!("/jobs/{id}"),
        "/jobs".to_string(),
        "/failures".to_string(),
        "/timers".to_string(),
        "/calls".to_string(),
        "/".to_string(),
    ];
    let nothing_shows = |when: &'static str| {
        let d = &d;
        let (api_paths, pages) = (&api_paths, &pages);
        let (ops_token, vic_token, vic_cookie) = (&ops_token, &vic_token, &vic_cookie);
        async move {
            for token in [ops_token, vic_token] {
                for path in api_paths {
                    let (status, text) = d.api_as(token, Method::GET, path, json!(null)).await;
                    assert_eq!(status, StatusCode::OK, "{when}: {path}: {text}");
                    for secret in ["s3cr3t-bearer-77", KEY, PARTNER] {
                        assert!(
                            !text.contains(secret),
                            "{when}: {path} shows {secret}: {text}"
                        );
                    }
                }
            }
            for path in pages {
                for (who, body) in [
                    ("ops", d.page(path).await.1),
                    ("vic", get_as(&d.app, vic_cookie, path).await.1),
                ] {
                    for secret in ["s3cr3t-bearer-77", KEY, PARTNER] {
                        assert!(
                            !body.contains(secret),
                            "{when}: {who}'s {path} shows {secret}"
                        );
                    }
                }
            }
        }
    };
    nothing_shows("after the call").await;
    // Its creator sees what the partner answered, whole.
    let (_, text) = d
        .api_as(
            &ana_token,
            Method::GET,
            &format!("/webhook-deliveries?job_id={id}"),
            json!(null),
        )
        .await;
    assert!(text.contains(KEY), "{text}");

    // The credentials edited out of the job (the edit's use case, as `PATCH /jobs/{id}` runs it,
    // with the receiver allowed): what it held before stays hidden.
    let client = kickoff::engine::Client::new(
        d.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(vec![receiver.addr.to_string()])),
    );
    let edit = kickoff::engine::job_edit::JobEdit {
        args_patch: Some(json!({"headers": null})),
        ..Default::default()
    };
    let mut tx = d.pool.begin().await.unwrap();
    let edited = client
        .edit_with(&mut tx, kickoff::engine::JobId(id), &edit)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(edited.after.args.get("headers").is_none());
    nothing_shows("after the edit").await;
    // Its creator still sees what the partner answered.
    let (_, text) = d
        .api_as(
            &ana_token,
            Method::GET,
            &format!("/webhook-deliveries?job_id={id}"),
            json!(null),
        )
        .await;
    assert!(text.contains(KEY), "{text}");
}

/// Issue 46, point 2: an admin's error search is hidden from the audit log's readers wherever
/// the entry keeps it: a shift, a bulk edit and a bulk action each store their filter nested
/// under `filter`.
#[tokio::test]
async fn an_error_search_is_hidden_in_the_audit_log_at_any_depth() {
    use crate::common::dashboard::get_as;
    const SEARCH: &str = "sk_live_4fG7hunt";
    let d = dashboard_as(Role::Viewer).await; // `ops`, a viewer, signed in
    let admin_token = write_token(&d, "root", Role::Admin).await;
    let job = d
        .new_job(json!({"kind": "noop", "schedule_in_ms": 600_000, "args": {"g": 1}}))
        .await;
    let filter = json!({"error": SEARCH, "max_id": job});
    for (path, body) in [
        ("/jobs/shift", json!({"filter": filter, "by_ms": 60_000})),
        (
            "/jobs/edit",
            json!({"filter": filter, "edit": {"priority": 3}}),
        ),
        ("/jobs/bulk", json!({"filter": filter, "action": "cancel"})),
    ] {
        let (status, text) = d.api_as(&admin_token, Method::POST, path, body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {text}");
    }
    let stored: Vec<Value> =
        sqlx::query_scalar("SELECT filter FROM audit_log WHERE filter IS NOT NULL")
            .fetch_all(&d.pool)
            .await
            .unwrap();
    assert!(
        stored
            .iter()
            .filter(|f| f.to_string().contains(SEARCH))
            .count()
            >= 3,
        "the log keeps what the admin searched: {stored:?}"
    );
    let (_, page) = get_as(&d.app, &d.cookie, "/audit").await;
    assert!(page.contains("jobs/shift"), "{page}");
    assert!(!page.contains(SEARCH), "a viewer reads the admin's search");
    let (_, rows) = d.server_fn("audit", "").await;
    assert!(!rows.contains(SEARCH), "{rows}");
}

/// A change of an admin's schedule by an operator who sees its template's secret header
/// redacted: the args sent back as they were shown keep the stored secret (through the API as
/// through the dashboard), and args changed beside a secret the caller does not see are refused,
/// as a job's edit is (a new URL would receive the header).
#[tokio::test]
async fn a_schedule_changed_by_who_does_not_see_its_secrets_keeps_them() {
    let d = dashboard_as(Role::Operator).await;
    let admin_token = write_token(&d, "root", Role::Admin).await;
    let ana_token = write_token(&d, "ana", Role::Operator).await;
    partner_sync(&d, &admin_token).await;
    let stored_args = async || -> Value {
        sqlx::query_scalar("SELECT args FROM schedules WHERE name = 'partner-sync'")
            .fetch_one(&d.pool)
            .await
            .unwrap()
    };

    // The args as ana's GET showed them, sent back with another queue.
    let (status, body) = d
        .api_as(
            &ana_token,
            Method::GET,
            "/schedules/partner-sync",
            json!(null),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert!(!body.contains("s3cr3t"), "{body}");
    let (status, body) = d
        .api_as(
            &ana_token,
            Method::PATCH,
            "/schedules/partner-sync",
            json!({"args": shown["job"]["args"], "queue": "partners"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.contains("s3cr3t"), "{body}");
    let args = stored_args().await;
    assert_eq!(
        args["headers"]["Authorization"], HEADER,
        "the PATCH wrote what ana saw: {args}"
    );

    // Args changed beside the secret: refused, nothing written.
    let mut moved = shown["job"]["args"].clone();
    moved["url"] = json!("https://elsewhere.example.net/sync");
    let (status, body) = d
        .api_as(
            &ana_token,
            Method::PATCH,
            "/schedules/partner-sync",
            json!({"args": moved}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let args = stored_args().await;
    assert_eq!(args["url"], "https://hooks.example.com/sync", "{args}");
    assert_eq!(args["headers"]["Authorization"], HEADER, "{args}");

    // The admin changes them.
    let (status, body) = d
        .api_as(
            &admin_token,
            Method::PATCH,
            "/schedules/partner-sync",
            json!({"args": {"url": "https://hooks.example.com/v2", "headers": {"Authorization": HEADER}}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(stored_args().await["url"], "https://hooks.example.com/v2");
}
