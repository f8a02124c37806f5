//! Limits and paused kinds with real processes: three `kickoff serve` nodes on one database,
//! configured by `KICKOFF_QUEUES` and steered through the REST API of any of them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::common::server::{Server, TOKEN};
use crate::common::test_db;
use kickoff::engine::{Client, NewJob};

const QUEUES: &str = "default:10,paced:10,rate=25/s,questions:10";

fn three(db_url: &str) -> Vec<Server> {
    let envs = [
        ("DATABASE_URL", db_url.to_string()),
        ("KICKOFF_QUEUES", QUEUES.to_string()),
    ];
    (0..3).map(|_| Server::start(&envs)).collect()
}

async fn insert(pool: &kickoff::engine::Db, queue: &str, n: usize) {
    let client = Client::new(
        pool.clone(),
        Arc::new(kickoff::workers::builtin(Vec::new())),
    );
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob::new("noop", json!({ "i": i })).with_queue(queue))
        .collect();
    client.insert_many(&jobs).await.unwrap();
}

async fn left(pool: &kickoff::engine::Db, queue: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE queue = $1 AND state <> 'completed'")
        .bind(queue)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn post(server: &Server, path: &str) -> serde_json::Value {
    let res = reqwest::Client::new()
        .post(format!("http://{}{path}", server.addr))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{path}: {}", res.status());
    res.json().await.unwrap()
}

#[tokio::test]
async fn a_rate_set_in_kickoff_queues_holds_across_three_processes() {
    let db = test_db().await;
    let servers = three(&db.url);
    insert(&db.pool, "paced", 250).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while left(&db.pool, "paced").await > 0 {
        assert!(std::time::Instant::now() < deadline, "paced jobs left");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for s in servers {
        s.terminate();
    }
    let seconds: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT floor(extract(epoch FROM attempted_at))::bigint, count(*),
                count(DISTINCT attempted_by)
         FROM jobs WHERE queue = 'paced' GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let full = &seconds[1..seconds.len() - 1];
    assert!(full.len() >= 8, "{seconds:?}");
    let off: Vec<_> = full.iter().filter(|s| s.1 != 25).collect();
    assert!(off.is_empty(), "seconds without exactly 25 starts: {off:?}");
    let attempts: i32 = sqlx::query_scalar("SELECT max(attempt) FROM jobs WHERE queue = 'paced'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, 1, "a held job spent an attempt");
    // The other queues of the same nodes are not limited.
    let limits: Vec<(String, Option<i32>)> =
        sqlx::query_as("SELECT name, rate_limit FROM queues ORDER BY name")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        limits,
        [
            ("default".to_string(), None),
            ("paced".to_string(), Some(25)),
            ("questions".to_string(), None)
        ]
    );
}

#[tokio::test]
async fn a_kind_paused_through_one_node_is_held_on_every_node_until_resumed_through_another() {
    let db = test_db().await;
    let servers = three(&db.url);
    let paused = post(&servers[0], "/api/v1/kinds/noop/pause").await;
    assert_eq!(paused["paused"], true, "{paused}");
    insert(&db.pool, "default", 60).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE attempted_at IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(started, 0, "a node ran a paused kind");
    post(&servers[2], "/api/v1/kinds/noop/resume").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while left(&db.pool, "default").await > 0 {
        assert!(std::time::Instant::now() < deadline, "resumed jobs left");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action LIKE 'api.POST /kinds/%' AND ok",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(audited, 2, "the pause and the resume are in the audit log");
    for s in servers {
        s.terminate();
    }
}
