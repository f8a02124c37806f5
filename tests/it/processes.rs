//! What only processes show: a server killed with SIGKILL and restarted loses nothing; several
//! servers on one database never run a job twice; the embedded PostgreSQL keeps data across a crash.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::{json, Value};

use crate::common::server::{Server, TOKEN};
use crate::common::{test_db, wait_for};
use kickoff::engine::store::jobs as job_store;
use kickoff::engine::{JobState, NewJob};

async fn count_in(pool: &kickoff::engine::Db, state: JobState) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = $1")
        .bind(state)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_server_killed_with_sigkill_loses_no_job_after_restart() {
    let db = test_db().await;
    let envs = [("DATABASE_URL", db.url.clone())];
    let server = Server::start(&envs);
    // 40 jobs that take 3 s (10 of them executing when the kill comes) and 20 due in 2 s.
    let mut jobs: Vec<NewJob> = (0..40)
        .map(|_| NewJob::new("noop", json!({ "sleep_ms": 3000 })))
        .collect();
    jobs.extend((0..20).map(|_| NewJob::new("noop", json!({})).after(Duration::from_secs(2))));
    job_store::job_insert_many(
        &db.pool,
        &jobs,
        &[],
        job_store::InsertRules::trusted(&["noop"]),
    )
    .await
    .unwrap();
    wait_for("jobs to be executing", Duration::from_secs(10), || async {
        count_in(&db.pool, JobState::Executing).await == 10
    })
    .await;
    server.kill9();
    assert_eq!(
        count_in(&db.pool, JobState::Executing).await,
        10,
        "the dead node's jobs stay claimed"
    );

    let server = Server::start(&envs);
    wait_for(
        "every job to complete after the restart",
        Duration::from_secs(90),
        || async { count_in(&db.pool, JobState::Completed).await == 60 },
    )
    .await;
    let rescued: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE attempt = 2")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rescued, 10, "the 10 interrupted attempts ran again, once");
    server.terminate();
}

/// One delivery's start and end.
type Delivery = (std::time::Instant, std::time::Instant);

/// Receives webhook calls and records, per job, each delivery.
#[derive(Clone, Default)]
struct Receiver {
    calls: Arc<Mutex<HashMap<i64, Vec<Delivery>>>>,
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap) -> &'static str {
    let id: i64 = headers["x-kickoff-job-id"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let start = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    r.calls
        .lock()
        .unwrap()
        .entry(id)
        .or_default()
        .push((start, std::time::Instant::now()));
    "ok"
}

#[tokio::test]
async fn three_servers_on_one_database_deliver_each_webhook_once() {
    let db = test_db().await;
    let receiver = Receiver::default();
    let app = axum::Router::new()
        .route("/hook", post(receive))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let envs = [
        ("DATABASE_URL", db.url.clone()),
        ("KICKOFF_WEBHOOK_ALLOWED_HOSTS", hook.to_string()),
        ("KICKOFF_QUEUES", "webhooks:5".to_string()),
    ];
    let servers: Vec<Server> = (0..3).map(|_| Server::start(&envs)).collect();
    // Inserted through the three servers' APIs, half of them due in a second.
    for i in 0..300 {
        let mut body = json!({
            "kind": "webhook",
            "queue": "webhooks",
            "args": { "url": format!("http://{hook}/hook"), "body": { "i": i } },
        });
        if i % 2 == 0 {
            body["schedule_in_ms"] = json!(1000);
        }
        servers[i % 3].post_job(body).await;
    }
    wait_for("300 deliveries", Duration::from_secs(60), || async {
        count_in(&db.pool, JobState::Completed).await == 300
    })
    .await;
    let calls = receiver.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 300);
    let twice: Vec<_> = calls
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(id, _)| *id)
        .collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let nodes: i64 = sqlx::query_scalar("SELECT count(DISTINCT attempted_by) FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        nodes >= 2,
        "the work was shared between the servers (ran on {nodes})"
    );
    for s in servers {
        s.terminate();
    }
}

#[tokio::test]
async fn the_bootstrap_token_is_shown_once_kept_private_rotated_live_and_can_be_off() {
    use reqwest::StatusCode;
    use std::os::unix::fs::PermissionsExt;
    let db = test_db().await;
    let dir = temp_data_dir();
    // An empty KICKOFF_API_TOKEN means the data directory's token.
    let envs = [
        ("DATABASE_URL", db.url.clone()),
        ("KICKOFF_DATA_DIR", dir.to_string_lossy().to_string()),
        ("KICKOFF_API_TOKEN", String::new()),
    ];
    let server = Server::start(&envs);
    let printed = server.printed();
    let first = printed
        .lines()
        .find(|l| l.starts_with("API token (shown this once"))
        .and_then(|l| l.rsplit(": ").next())
        .unwrap_or_else(|| panic!("a new token is shown: {printed}"))
        .to_string();
    let file = dir.join("api-token");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), first);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the token's file is private");
    assert_eq!(server.status_with(&first).await, StatusCode::OK);
    server.terminate();

    let server = Server::start(&envs);
    let printed = server.printed();
    assert!(!printed.contains(&first), "shown once only: {printed}");
    assert!(printed.contains("API token: kept in"), "{printed}");
    assert_eq!(server.status_with(&first).await, StatusCode::OK);
    let rotated = Command::new(env!("CARGO_BIN_EXE_kickoff"))
        .args(["token", "rotate"])
        .env("KICKOFF_DATA_DIR", &dir)
        .env_remove("KICKOFF_API_TOKEN")
        .output()
        .unwrap();
    assert!(
        rotated.status.success(),
        "{}",
        String::from_utf8_lossy(&rotated.stderr)
    );
    let second = String::from_utf8(rotated.stdout)
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(second.len(), 48, "{second}");
    wait_for(
        "the running server to take the new token",
        Duration::from_secs(5),
        || {
            let (server, second) = (&server, &second);
            async move { server.status_with(second).await == StatusCode::OK }
        },
    )
    .await;
    assert_eq!(
        server.status_with(&first).await,
        StatusCode::UNAUTHORIZED,
        "the old token is dead"
    );
    server.terminate();

    let off = [
        envs[0].clone(),
        envs[1].clone(),
        ("KICKOFF_API_TOKEN", "off".to_string()),
    ];
    let server = Server::start(&off);
    assert!(
        server.printed().contains("The bootstrap API token is off"),
        "{}",
        server.printed()
    );
    assert_eq!(server.status_with(&second).await, StatusCode::UNAUTHORIZED);
    assert_eq!(server.status_with("off").await, StatusCode::UNAUTHORIZED);
    server.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn slow_web_requests_get_503_and_leave_the_job_handlers_their_connections() {
    use kickoff::accounts::{Accounts, Role, TokenScope};
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let user = accounts
        .create("ops", "correct horse battery", Role::Operator)
        .await
        .unwrap();
    let (_, token) = accounts
        .create_token(&user, "slow", TokenScope::Read)
        .await
        .unwrap();
    // A handler pool of 3 and a web pool of 2: without a pool of its own, eight stuck requests
    // would hold every connection the handlers have.
    let envs = [
        ("DATABASE_URL", db.url.clone()),
        ("KICKOFF_DB_POOL", "3".to_string()),
        ("KICKOFF_WEB_POOL", "2".to_string()),
        ("KICKOFF_WEB_STATEMENT_TIMEOUT_MS", "500".to_string()),
    ];
    let server = Server::start(&envs);
    // Every user-token check reads api_tokens: held locked, each request's statement waits.
    let mut lock = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE api_tokens IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let url = format!("http://{}/api/v1/jobs?limit=1", server.addr);
            let token = token.clone();
            tokio::spawn(async move {
                reqwest::Client::new()
                    .get(url)
                    .bearer_auth(token)
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        })
        .collect();
    // Meanwhile a job due now runs at once on the handlers' own connections.
    job_store::job_insert_many(
        &db.pool,
        &[NewJob::new("noop", json!({}))],
        &[],
        job_store::InsertRules::trusted(&["noop"]),
    )
    .await
    .unwrap();
    wait_for(
        "the job to complete while the web side is stuck",
        Duration::from_secs(3),
        || async { count_in(&db.pool, JobState::Completed).await == 1 },
    )
    .await;
    for call in calls {
        let status = tokio::time::timeout(Duration::from_secs(6), call)
            .await
            .expect("a request stuck on the lock was never answered")
            .unwrap();
        assert_eq!(status, reqwest::StatusCode::SERVICE_UNAVAILABLE);
    }
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the stuck requests were answered after {:?}",
        started.elapsed()
    );
    lock.rollback().await.unwrap();
    server.terminate();
}

fn temp_data_dir() -> PathBuf {
    // Under /tmp: the postgres system user must be able to reach it when tests run as root.
    let dir = Path::new("/tmp").join(format!("kickoff-embedded-test-{:016x}", fastrand::u64(..)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Also: `kickoff demo` (and every command on the database) runs beside the server that holds the
/// embedded cluster, on that cluster, instead of refusing a data directory "in use"; the server
/// shows what the demo wrote. One cluster for both: an embedded start costs an `initdb`.
#[tokio::test]
async fn the_embedded_database_keeps_jobs_across_a_crash_and_a_demo_fills_it_beside_the_server() {
    let dir = temp_data_dir();
    let envs = [("KICKOFF_DATA_DIR", dir.to_string_lossy().to_string())];
    let server = Server::start(&envs);
    let job = server
        .post_job(json!({ "kind": "noop", "schedule_in_ms": 3000 }))
        .await;
    let id = job["job"]["id"].as_i64().unwrap();
    // A crash: the server dies, its PostgreSQL keeps running (an orphan) or dies with it.
    server.kill9();
    let server = Server::start(&envs);
    let client = reqwest::Client::new();
    wait_for(
        "the job to complete after the crash",
        Duration::from_secs(30),
        || {
            let client = client.clone();
            let url = format!("http://{}/api/v1/jobs/{id}", server.addr);
            async move {
                let res = client.get(url).bearer_auth(TOKEN).send().await.unwrap();
                let v: Value = res.json().await.unwrap();
                v["state"] == "completed"
            }
        },
    )
    .await;

    let demo = Command::new(env!("CARGO_BIN_EXE_kickoff"))
        .arg("demo")
        .env_remove("DATABASE_URL")
        .env("KICKOFF_DATA_DIR", &dir)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kickoff demo");
    assert!(
        demo.status.success(),
        "kickoff demo beside the running server: {}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let questions: Value = client
        .get(format!("http://{}/api/v1/questions?limit=500", server.addr))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let games = questions.as_array().map(Vec::len).unwrap_or(0);
    assert!(
        games >= 32,
        "the server shows the demo's 32 games: {questions}"
    );
    let answered = questions
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["correct_choice"].is_string())
        .count();
    assert_eq!(
        answered, 4,
        "the demo's played games, answered: {questions}"
    );
    // The demo left the server's cluster running: the server still answers from it.
    let res = client
        .get(format!("http://{}/api/v1/jobs/{id}", server.addr))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::OK);

    server.terminate();
    // The graceful stop stopped the cluster too.
    assert!(
        !dir.join("pg/postmaster.pid").exists(),
        "PostgreSQL stopped with the server"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_question_locks_at_once_after_a_server_killed_before_game_time_restarts() {
    let db = test_db().await;
    let envs = [("DATABASE_URL", db.url.clone())];
    let server = Server::start(&envs);
    let game_time = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let res = reqwest::Client::new()
        .post(format!("http://{}/api/v1/questions", server.addr))
        .bearer_auth(TOKEN)
        .json(&json!({
            "game": "Lions vs Tigers", "prompt": "Who scores first?",
            "choices": ["Lions", "Tigers"], "game_time": game_time,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::CREATED);
    let id = res.json::<Value>().await.unwrap()["id"].as_i64().unwrap();
    server.kill9();
    let status = || async {
        sqlx::query_scalar::<_, String>("SELECT status::text FROM questions WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    wait_for(
        "game time to pass with no server",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, bool>(
                "SELECT clock_timestamp() > $1 + interval '500 milliseconds'",
            )
            .bind(game_time)
            .fetch_one(&db.pool)
            .await
            .unwrap()
        },
    )
    .await;
    assert_eq!(
        status().await,
        "open",
        "nothing locked it while no server ran"
    );
    let server = Server::start(&envs);
    wait_for(
        "the overdue lock to fire after the restart",
        Duration::from_secs(10),
        || async { status().await == "locked" },
    )
    .await;
    server.terminate();
}

#[tokio::test]
async fn migrate_stops_the_embedded_database_before_it_exits() {
    let dir = temp_data_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_kickoff"))
        .arg("migrate")
        .env_remove("DATABASE_URL")
        .env("KICKOFF_DATA_DIR", &dir)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kickoff migrate");
    assert!(
        out.status.success(),
        "kickoff migrate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left_running = dir.join("pg/postmaster.pid").exists();
    if left_running {
        let _ = Command::new(env!("CARGO_BIN_EXE_kickoff"))
            .args(["postgres", "stop", "--dir"])
            .arg(&dir)
            .output();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        !left_running,
        "kickoff migrate returned with the embedded PostgreSQL still running"
    );
}

#[tokio::test]
async fn a_node_whose_clock_runs_ahead_prunes_by_the_database_clock() {
    // Debian's libfaketime (installed by scripts/bootstrap.sh) moves the node's wall clock.
    let faketime = kickoff::chaos::faketime_library().expect("libfaketime");
    let db = test_db().await;
    // Finished an hour ago (kept for a day) and three days ago (due for pruning), by the
    // database's clock.
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO jobs (kind, state, finalized_at)
         VALUES ('noop', 'completed', now() - interval '1 hour'),
                ('noop', 'completed', now() - interval '3 days')
         RETURNING id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let (recent, old) = (ids[0], ids[1]);
    // The node's wall clock is two days ahead (its monotonic clock, which timers use, is not).
    let _server = Server::start(&[
        ("DATABASE_URL", db.url.clone()),
        ("KICKOFF_RETENTION_HOURS", "24".into()),
        ("LD_PRELOAD", faketime),
        ("FAKETIME", "+2d".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
    ]);
    let exists = |id: i64| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    wait_for(
        "the pruner's first run",
        Duration::from_secs(30),
        || async { !exists(old).await },
    )
    .await;
    assert!(
        exists(recent).await,
        "a job finished an hour ago was pruned: the pruner went by the node's clock"
    );
}

/// Rolling upgrades: a node of this release starts on a database a newer release migrated with
/// expand-only changes (its migrations unknown here), and refuses, saying why, one whose schema
/// a newer release contracted past what this one knows. Before, any unknown migration stopped
/// it ("previously applied but is missing"): an old node that restarted during a rolling
/// upgrade could not come back.
#[tokio::test]
async fn a_node_runs_on_a_schema_a_newer_release_expanded_and_refuses_one_it_contracted() {
    let db = crate::common::test_db().await;
    let newer: i64 = 99_990_101_000_000;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES ($1, 'a newer release', true, '\\x00', 0)",
    )
    .bind(newer)
    .execute(&db.pool)
    .await
    .unwrap();
    let migrate = || {
        Command::new(env!("CARGO_BIN_EXE_kickoff"))
            .arg("migrate")
            .env("DATABASE_URL", &db.url)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run kickoff migrate")
    };
    let out = migrate();
    assert!(
        out.status.success(),
        "an expanded schema refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    sqlx::query("UPDATE kickoff_schema SET oldest_migration = $1")
        .bind(newer)
        .execute(&db.pool)
        .await
        .unwrap();
    let out = migrate();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a contracted schema accepted");
    assert!(
        said.contains(&newer.to_string()) && said.contains("newer release"),
        "{said}"
    );

    // A migration it does not know that is older than its own newest is no newer release's:
    // another application's database, refused as before.
    sqlx::query("UPDATE kickoff_schema SET oldest_migration = 0")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (20200101000000, 'another application', true, '\\x00', 0)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let out = migrate();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a foreign migration accepted");
    assert!(said.contains("20200101000000"), "{said}");
}

/// A stop sent while the server starts is kept and honoured once it is up: exit 0, never the
/// signal's default action. Before, SIGTERM was registered by a task spawned after the server
/// printed that it listens, so a stop sent then (a test stopping a server right after its first
/// job, on a busy machine) could kill it: "graceful stop exits 0, got signal: 15". Here the
/// server is held in its start (its read of the schema waits on a lock this test holds) while
/// the signal is sent.
#[tokio::test]
async fn a_stop_sent_while_the_server_starts_stops_it_gracefully_once_up() {
    let db = crate::common::test_db().await;
    let name = format!("stop-test-{:08x}", fastrand::u32(..));
    let separator = if db.url.contains('?') { '&' } else { '?' };
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE kickoff_schema IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let dir = temp_data_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kickoff"))
        .arg("serve")
        .env(
            "DATABASE_URL",
            format!("{}{separator}application_name={name}", db.url),
        )
        .env("LEPTOS_SITE_ADDR", "127.0.0.1:0")
        .env("KICKOFF_DATA_DIR", &dir)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start kickoff serve");
    crate::common::wait_for(
        "the server to wait on the schema's lock",
        Duration::from_secs(20),
        || async {
            sqlx::query_scalar::<_, bool>(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                                WHERE application_name LIKE $1 AND wait_event_type = 'Lock')",
            )
            .bind(format!("{name}%"))
            .fetch_one(&db.pool)
            .await
            .unwrap()
        },
    )
    .await;
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    holder.rollback().await.unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "a stop during the start: {status}");
}
