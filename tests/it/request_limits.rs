//! Request limits shared by every node (issue 16): an API token's calls per period, and the
//! sign-in attempts of one client address per period, with two server processes on one database.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use crate::common::server::{Server, TOKEN};
use crate::common::test_db;
use kickoff::accounts::{Accounts, Role, TokenScope};

const PASSWORD: &str = "a long enough password";

/// Waits, if need be, until the database clock is at least `margin` away from the end of the
/// current hour, so that a test's calls all fall in one window of an hourly limit.
async fn clear_of_the_hours_end(pool: &kickoff::engine::Db, margin: Duration) {
    let left: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM date_trunc('hour', now()) + interval '1 hour' - now())::float8",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    if left < margin.as_secs_f64() {
        tokio::time::sleep(Duration::from_secs_f64(left + 0.5)).await;
    }
}

async fn get_jobs(server: &Server, token: &str) -> Response {
    reqwest::Client::new()
        .get(format!("http://{}/api/v1/jobs?limit=1", server.addr))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

fn header(res: &Response, name: &str) -> Option<u64> {
    res.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

async fn job_count(pool: &kickoff::engine::Db) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_tokens_call_past_its_limit_gets_429_on_every_node_and_other_tokens_go_on() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let ops = accounts
        .create("ops", PASSWORD, Role::Operator)
        .await
        .unwrap();
    let (_, other) = accounts
        .create_token(&ops, "script", TokenScope::Write)
        .await
        .unwrap();
    let envs = [
        ("DATABASE_URL", db.url.clone()),
        ("KICKOFF_API_RATE_LIMIT", "6/h".to_string()),
    ];
    let a = Server::start(&envs);
    let b = Server::start(&envs);
    clear_of_the_hours_end(&db.pool, Duration::from_secs(60)).await;

    // Six calls of the bootstrap token, alternating between the nodes: each allowed, each
    // saying what is left of the one window both nodes count in.
    for n in 1..=6u64 {
        let node = if n % 2 == 1 { &a } else { &b };
        let res = get_jobs(node, TOKEN).await;
        assert_eq!(res.status(), StatusCode::OK, "call {n}");
        assert_eq!(header(&res, "ratelimit-limit"), Some(6), "call {n}");
        assert_eq!(header(&res, "ratelimit-remaining"), Some(6 - n), "call {n}");
        let reset = header(&res, "ratelimit-reset").unwrap();
        assert!((1..=3600).contains(&reset), "call {n}: reset {reset}");
    }

    // The seventh, a write, on either node: refused with the error shape and Retry-After, not
    // run, not audited.
    let audit_before: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    for node in [&a, &b] {
        let res = reqwest::Client::new()
            .post(format!("http://{}/api/v1/jobs", node.addr))
            .bearer_auth(TOKEN)
            .json(&json!({ "kind": "noop" }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry_after = header(&res, "retry-after").expect("a Retry-After header");
        assert!((1..=3600).contains(&retry_after), "{retry_after}");
        assert_eq!(header(&res, "ratelimit-remaining"), Some(0));
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["error"]["code"], "too_many_requests", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("6/h per token"), "{message}");
    }
    assert_eq!(job_count(&db.pool).await, 0, "a refused call runs nothing");
    let audit_after: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        audit_after, audit_before,
        "refused calls are not audited one by one"
    );

    // Another token has its own window, on both nodes.
    for (node, left) in [(&a, 5), (&b, 4)] {
        let res = get_jobs(node, &other).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(header(&res, "ratelimit-remaining"), Some(left));
    }

    // Counted in /metrics, by the node that refused.
    let metrics = reqwest::Client::new()
        .get(format!("http://{}/metrics", a.addr))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("kickoff_request_rate_limited_total{scope=\"token\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn without_a_limit_calls_carry_no_rate_headers() {
    let db = test_db().await;
    let server = Server::start(&[("DATABASE_URL", db.url.clone())]);
    for _ in 0..3 {
        let res = get_jobs(&server, TOKEN).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(header(&res, "ratelimit-limit"), None);
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM request_windows")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing is counted when the limit is off");
}

async fn sign_in(server: &Server, name: &str, password: &str) -> (StatusCode, Value, bool) {
    let res = reqwest::Client::new()
        .post(format!("http://{}/_console/login", server.addr))
        .header("accept", "application/json")
        .form(&[("name", name), ("password", password)])
        .send()
        .await
        .unwrap();
    let status = res.status();
    let signed_in = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .any(|c| c.to_str().unwrap().starts_with("kickoff_session="));
    let retry = header(&res, "retry-after");
    let text = res.text().await.unwrap();
    (
        status,
        json!({ "body": text, "retry_after": retry }),
        signed_in,
    )
}

#[tokio::test]
async fn sign_ins_past_an_addresss_limit_get_429_on_every_node_unchecked() {
    let db = test_db().await;
    Accounts::new(db.pool.clone())
        .create("ops", PASSWORD, Role::Operator)
        .await
        .unwrap();
    let envs = [
        ("DATABASE_URL", db.url.clone()),
        ("KICKOFF_SIGN_IN_RATE_LIMIT", "3/h".to_string()),
    ];
    let a = Server::start(&envs);
    let b = Server::start(&envs);
    clear_of_the_hours_end(&db.pool, Duration::from_secs(60)).await;

    // Two wrong passwords and a right one, across both nodes: each checked.
    let (status, answer, _) = sign_in(&a, "ops", "wrong password here").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    let (status, answer, _) = sign_in(&b, "ops", "wrong password here").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    let (status, answer, signed_in) = sign_in(&a, "ops", PASSWORD).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(signed_in);

    // The fourth from this address, right password or not, on either node: refused unchecked,
    // with Retry-After; no session, no failure counted, no audit entry.
    let failures_before: Option<i32> =
        sqlx::query_scalar("SELECT failures FROM login_failures WHERE scope = 'address'")
            .fetch_optional(&db.pool)
            .await
            .unwrap();
    let audit_before: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    for (node, password) in [(&b, PASSWORD), (&a, "wrong password here")] {
        let (status, answer, signed_in) = sign_in(node, "ops", password).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
        assert!(!signed_in);
        let retry = answer["retry_after"].as_u64().expect("Retry-After");
        assert!((1..=3600).contains(&retry), "{answer}");
        assert!(
            answer["body"]
                .as_str()
                .unwrap()
                .contains("too many sign-in attempts from this address"),
            "{answer}"
        );
    }
    let failures_after: Option<i32> =
        sqlx::query_scalar("SELECT failures FROM login_failures WHERE scope = 'address'")
            .fetch_optional(&db.pool)
            .await
            .unwrap();
    assert_eq!(failures_after, failures_before);
    let audit_after: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(audit_after, audit_before);

    // The API is not held by the address's sign-in limit.
    assert_eq!(get_jobs(&b, TOKEN).await.status(), StatusCode::OK);
}
