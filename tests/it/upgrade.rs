//! A rolling upgrade under load (docs/deployment.md, "Upgrading a fleet"): two nodes of the
//! previous landed release (scripts/previous-release, built by scripts/build-previous, given as
//! `KICKOFF_PREVIOUS_BIN`) run on a database they migrated; a node of this release starts and
//! migrates it; then the old nodes are replaced one at a time by nodes of this release. Jobs and
//! questions and workflow runs are posted to whichever nodes run, throughout. Nothing acknowledged
//! may be lost or left unfinished (a run started by an old node finishes on the new ones, with the
//! shape it was inserted with), no counting job's effect may happen twice or go missing, and every
//! question locks, at or after its game time.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use kickoff::engine::Db;
use serde_json::{json, Value};
use sqlx::ConnectOptions;
use tokio_util::sync::CancellationToken;

use crate::common::server::{Server, TOKEN};
use crate::common::{empty_db, wait_for};

const TALLY: &str = "upgrade";

fn previous_binary() -> PathBuf {
    let path = std::env::var("KICKOFF_PREVIOUS_BIN").unwrap_or_else(|_| {
        panic!(
            "KICKOFF_PREVIOUS_BIN is not set: run the tests with scripts/test, or set it to the \
             output of scripts/build-previous"
        )
    });
    PathBuf::from(path)
}

/// What the load posted and had acknowledged.
#[derive(Default)]
struct Posted {
    jobs: Vec<i64>,
    questions: Vec<i64>,
    runs: Vec<i64>,
    refused: usize,
}

/// Posts a counting job every 20 ms, a question due 0.5 to 2.5 s later every tenth time, and a
/// workflow run of three counting steps (a chain into a join) every seventh, to the nodes in
/// `addrs` in turn, until `stop`.
async fn load(addrs: Arc<Mutex<Vec<String>>>, posted: Arc<Mutex<Posted>>, stop: CancellationToken) {
    let http = reqwest::Client::new();
    let mut n = 0u64;
    while !stop.is_cancelled() {
        n += 1;
        let live = addrs.lock().unwrap().clone();
        let addr = &live[n as usize % live.len()];
        let (path, body) = if n.is_multiple_of(10) {
            let game = Utc::now() + chrono::Duration::milliseconds(500 + (n % 20) as i64 * 100);
            (
                "questions",
                json!({ "game": format!("Upgrade {n}"), "prompt": "Who scores first?",
                        "choices": ["Home", "Away"], "game_time": game.to_rfc3339() }),
            )
        } else if n.is_multiple_of(7) {
            let step = |name: &str, after: &[&str]| {
                json!({ "name": name, "job": { "kind": "noop", "args": { "tally": TALLY } },
                        "after": after.iter().map(|a| json!({ "step": a })).collect::<Vec<_>>() })
            };
            (
                "workflows",
                json!({ "name": "upgrade", "steps": [
                    step("a", &[]), step("b", &[]), step("join", &["a", "b"]) ] }),
            )
        } else {
            (
                "jobs",
                json!({ "kind": "noop", "args": { "tally": TALLY } }),
            )
        };
        let answer = http
            .post(format!("http://{addr}/api/v1/{path}"))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await;
        let value = match answer {
            Ok(res) if res.status().is_success() => res.json::<Value>().await.ok(),
            _ => None,
        };
        {
            let mut p = posted.lock().unwrap();
            match (path, value) {
                ("jobs", Some(v)) => p.jobs.push(v["job"]["id"].as_i64().unwrap()),
                ("workflows", Some(v)) => p.runs.push(v["run"]["id"].as_i64().unwrap()),
                (_, Some(v)) => p.questions.push(v["id"].as_i64().unwrap()),
                (_, None) => p.refused += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_upgraded_one_node_at_a_time_under_load_loses_and_doubles_nothing() {
    let previous = previous_binary();
    // An empty database: the previous release makes its schema, as it did in production.
    let direct = empty_db("upgrade").await;
    let url = direct.to_url_lossy().to_string();
    let envs = [
        ("DATABASE_URL", url.clone()),
        ("KICKOFF_QUEUES", "default:10,questions:10".to_string()),
    ];

    let old_a = Server::start_binary(&previous, &envs);
    let old_b = Server::start_binary(&previous, &envs);
    let db = Db::from(
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect_with(direct.clone())
            .await
            .unwrap(),
    );
    let migrations = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM _sqlx_migrations")
            .fetch_one(&db)
            .await
            .unwrap()
    };
    let before = migrations().await;

    let addrs = Arc::new(Mutex::new(vec![old_a.addr.clone(), old_b.addr.clone()]));
    let posted = Arc::new(Mutex::new(Posted::default()));
    let stop = CancellationToken::new();
    let loading = tokio::spawn(load(addrs.clone(), posted.clone(), stop.clone()));
    // Each phase runs under load until 50 more posts were acknowledged (and at least 1.5 s):
    // on a loaded machine a phase takes longer, never carries less load.
    let acknowledged = {
        let posted = posted.clone();
        move || {
            let p = posted.lock().unwrap();
            p.jobs.len() + p.questions.len()
        }
    };
    let settle = || {
        let acknowledged = acknowledged.clone();
        async move {
            let from = acknowledged();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            wait_for(
                "50 posts acknowledged in this phase",
                Duration::from_secs(60),
                || {
                    let acknowledged = acknowledged.clone();
                    async move { acknowledged() >= from + 50 }
                },
            )
            .await;
        }
    };
    settle().await;

    // A node of this release joins: it migrates the database the old ones run on.
    let new_c = Server::start(&envs);
    addrs.lock().unwrap().push(new_c.addr.clone());
    let after = migrations().await;
    assert!(
        after >= before,
        "{after} migrations after the upgrade, {before} before"
    );
    settle().await;
    // The old nodes go one at a time (a graceful stop hands their running jobs back), each
    // replaced by a node of this release.
    addrs.lock().unwrap().retain(|a| *a != old_a.addr);
    old_a.terminate();
    let new_a = Server::start(&envs);
    addrs.lock().unwrap().push(new_a.addr.clone());
    settle().await;
    addrs.lock().unwrap().retain(|a| *a != old_b.addr);
    old_b.terminate();
    let new_b = Server::start(&envs);
    addrs.lock().unwrap().push(new_b.addr.clone());
    settle().await;
    stop.cancel();
    loading.await.unwrap();

    let posted = std::mem::take(&mut *posted.lock().unwrap());
    assert!(
        posted.jobs.len() > 150,
        "only {} jobs acknowledged",
        posted.jobs.len()
    );
    assert!(
        posted.questions.len() > 15,
        "only {} questions",
        posted.questions.len()
    );
    assert!(posted.runs.len() > 15, "only {} runs", posted.runs.len());
    let last_game = Duration::from_millis(2500);
    wait_for(
        "every acknowledged job and workflow run to complete and every question to lock",
        Duration::from_secs(30) + last_game,
        || async {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM unnest($1::bigint[]) AS a(id)
                 LEFT JOIN jobs ON jobs.id = a.id
                 WHERE jobs.state IS DISTINCT FROM 'completed'",
            )
            .bind(&posted.jobs)
            .fetch_one(&db)
            .await
            .unwrap();
            let unlocked: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM questions WHERE id = ANY($1) AND status = 'open'",
            )
            .bind(&posted.questions)
            .fetch_one(&db)
            .await
            .unwrap();
            let runs_left: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM unnest($1::bigint[]) AS a(id)
                 LEFT JOIN workflow_runs r ON r.id = a.id
                 WHERE r.state IS DISTINCT FROM 'completed'",
            )
            .bind(&posted.runs)
            .fetch_one(&db)
            .await
            .unwrap();
            open == 0 && unlocked == 0 && runs_left == 0
        },
    )
    .await;
    let early: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM questions WHERE id = ANY($1) AND locked_at < game_time",
    )
    .bind(&posted.questions)
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(early, 0, "questions locked before their game time");
    let completed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE args->>'tally' = $1 AND state = 'completed'",
    )
    .bind(TALLY)
    .fetch_one(&db)
    .await
    .unwrap();
    let tally = kickoff::workers::tally_store::tally_get(&db, TALLY)
        .await
        .unwrap();
    assert_eq!(
        tally, completed,
        "counting jobs' effects: {tally} for {completed} completed"
    );
    for node in [new_c, new_a, new_b] {
        node.terminate();
    }
}
