//! Kickoff behind Debian's PgBouncer in transaction mode (`KICKOFF_DATABASE_POOL_MODE=transaction`;
//! see `db`). Each test starts a PgBouncer of its own in front of the test cluster. The
//! engine, API, schedules, limits and questions suites also run whole through one: scripts/test
//! runs them again with `KICKOFF_TEST_POOL_MODE=transaction`.

use std::process::Command;
use std::time::Duration;

use futures_util::future::join_all;
use kickoff::engine::store::jobs as job_store;
use kickoff::engine::{Db, JobId, JobState, PoolMode};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::ConnectOptions;

use crate::common::pooler::PgBouncer;
use crate::common::server::Server;
use crate::common::{empty_db, test_db, wait_for};

/// `clients` pools of one connection each through `bouncer`, made as `mode` says.
async fn clients(
    direct: &PgConnectOptions,
    bouncer: &PgBouncer,
    mode: PoolMode,
    n: usize,
) -> Vec<Db> {
    let mut pools = Vec::new();
    for _ in 0..n {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(mode.connect_options(bouncer.in_front_of(direct)));
        pools.push(Db::new(pool, mode));
    }
    pools
}

/// What each client's statements gave: a few statements with parameters, one binding a type
/// declared by name (`job_state`), from every client at once.
async fn run_statements(pools: &[Db]) -> Vec<Result<(), sqlx::Error>> {
    join_all(pools.iter().enumerate().map(|(i, pool)| async move {
        for round in 0..5 {
            let n: i64 = sqlx::query_scalar("SELECT $1::bigint + $2::bigint")
                .bind(i as i64)
                .bind(round as i64)
                .fetch_one(pool)
                .await?;
            assert_eq!(n, (i + round) as i64);
            sqlx::query("SELECT count(*) FROM jobs WHERE state = $1")
                .bind(JobState::Available)
                .fetch_one(pool)
                .await?;
        }
        Ok(())
    }))
    .await
}

/// The control: sqlx's defaults (named statements, prepared and run in two round trips) break
/// behind this pooler, as they would in production, so the suites run through it can tell.
/// The same statements through a `Db` in transaction mode all succeed.
#[tokio::test]
async fn statements_that_break_a_plain_pool_behind_the_pooler_succeed_in_transaction_mode() {
    let db = test_db().await;
    let direct: PgConnectOptions = db.direct_url.parse().unwrap();
    let bouncer = PgBouncer::start(&direct).await;

    // A plain pool, save for the startup parameter PgBouncer 1.18 refuses outright.
    let plain: Vec<Db> = (0..16)
        .map(|_| {
            Db::from(
                PgPoolOptions::new()
                    .max_connections(1)
                    .connect_lazy_with(bouncer.in_front_of(&direct).extra_float_digits(None)),
            )
        })
        .collect();
    let broken = run_statements(&plain)
        .await
        .into_iter()
        .filter(Result::is_err)
        .count();
    assert!(
        broken > 0,
        "every plain client got through: the pooler does not expose sessions"
    );

    let pooled = clients(&direct, &bouncer, PoolMode::Transaction, 16).await;
    let failed: Vec<_> = run_statements(&pooled)
        .await
        .into_iter()
        .filter_map(Result::err)
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}

/// Each of the engine's pools keeps its settings behind the pooler (`SET LOCAL` in each of its
/// transactions), and one transaction's settings do not leak into the next client's.
#[tokio::test]
async fn each_pools_settings_hold_behind_the_pooler_and_end_with_its_transactions() {
    let db = test_db().await;
    let direct: PgConnectOptions = db.direct_url.parse().unwrap();
    let bouncer = PgBouncer::start(&direct).await;
    let base = clients(&direct, &bouncer, PoolMode::Transaction, 1)
        .await
        .remove(0);
    let bookkeeping = base.beside(
        "bookkeeping",
        &[("lock_timeout", "1234ms".to_string())],
        PgPoolOptions::new().max_connections(2),
    );
    let web = base.beside(
        "web",
        &[("statement_timeout", "100".to_string())],
        PgPoolOptions::new().max_connections(2),
    );
    for _ in 0..6 {
        let set: String = sqlx::query_scalar("SELECT current_setting('lock_timeout')")
            .fetch_one(&bookkeeping)
            .await
            .unwrap();
        assert_eq!(set, "1234ms");
        let plain: String = sqlx::query_scalar("SELECT current_setting('lock_timeout')")
            .fetch_one(&base)
            .await
            .unwrap();
        assert_eq!(plain, "0", "a pool's setting outlived its transaction");
    }
    let cut = sqlx::query("SELECT pg_sleep(2)")
        .execute(&web)
        .await
        .unwrap_err();
    assert_eq!(
        cut.as_database_error().and_then(|e| e.code()).as_deref(),
        Some("57014"),
        "{cut}"
    );
    // A transaction of the web pool (several statements) holds its setting throughout.
    let mut tx = web.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    let timeout: String = sqlx::query_scalar("SELECT current_setting('statement_timeout')")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(timeout, "100ms");
    tx.commit().await.unwrap();
}

/// A fresh database behind the pooler: `kickoff serve` in transaction mode refuses to start
/// while migrations are missing and it has no direct connection, saying what to set; with
/// `KICKOFF_LISTEN_DATABASE_URL` it migrates through it, listens on it and runs a job inserted
/// through the API at once; a second node without it polls, says so once, and runs jobs too.
#[tokio::test]
async fn a_server_behind_the_pooler_migrates_and_listens_directly_or_polls_without() {
    let direct = empty_db("pooled").await;
    let bouncer = PgBouncer::start(&direct).await;
    let pooled_url = bouncer.in_front_of(&direct).to_url_lossy().to_string();
    let direct_url = direct.to_url_lossy().to_string();
    let base = [
        ("DATABASE_URL", pooled_url.clone()),
        ("KICKOFF_DATABASE_POOL_MODE", "transaction".to_string()),
        ("LEPTOS_SITE_ADDR", "127.0.0.1:0".to_string()),
    ];

    let refused = tokio::task::spawn_blocking({
        let base = base.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_kickoff"))
                .arg("serve")
                .envs(base)
                .env("KICKOFF_API_TOKEN", crate::common::server::TOKEN)
                .env("KICKOFF_SECRET_KEY", crate::common::server::SECRET_KEY)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        said.contains("cannot run through a transaction pooler")
            && said.contains("KICKOFF_LISTEN_DATABASE_URL"),
        "{said}"
    );

    let mut envs: Vec<(&str, String)> = base.to_vec();
    envs.push(("KICKOFF_LISTEN_DATABASE_URL", direct_url.clone()));
    let listening = Server::start(&envs);
    let db = Db::from(
        PgPoolOptions::new()
            .connect_with(direct.clone())
            .await
            .unwrap(),
    );
    runs_a_job(&listening, &db).await;
    assert!(
        !listening.logged().contains("no LISTEN"),
        "{}",
        listening.logged()
    );
    listening.terminate();

    let polling = Server::start(&base);
    runs_a_job(&polling, &db).await;
    assert_eq!(
        polling.logged().matches("no LISTEN").count(),
        1,
        "{}",
        polling.logged()
    );
    polling.terminate();
}

/// Posts a job to `server`'s API and waits for it to complete, read on `db`.
async fn runs_a_job(server: &Server, db: &Db) {
    let job = server.post_job(json!({ "kind": "noop" })).await;
    let id = JobId(job["job"]["id"].as_i64().unwrap());
    wait_for(
        "the job posted to complete",
        Duration::from_secs(10),
        || async {
            job_store::job_get(db, id)
                .await
                .unwrap()
                .is_some_and(|j| j.state == JobState::Completed)
        },
    )
    .await;
}

/// A node that cannot LISTEN (behind the pooler, no direct URL) starts a job inserted through its
/// own client at once, not at its next poll: the client tells its engine when the insert has
/// committed, beside the notification (see `announcer`). Its polls here are a minute apart; the
/// first job may be taken by the node's first look at the table, the second only by being told.
#[tokio::test]
async fn a_node_that_polls_starts_a_job_inserted_through_its_own_client_at_once() {
    let db = test_db().await;
    let direct: PgConnectOptions = db.direct_url.parse().unwrap();
    let bouncer = PgBouncer::start(&direct).await;
    let pool = Db::new(
        PgPoolOptions::new()
            .max_connections(5)
            .connect_lazy_with(PoolMode::Transaction.connect_options(bouncer.in_front_of(&direct))),
        PoolMode::Transaction,
    );
    let config = kickoff::engine::EngineConfig {
        backstop_poll: Duration::from_secs(60),
        poll_only_interval: Duration::from_secs(60),
        ..Default::default()
    };
    let workers = kickoff::workers::builtin(Vec::new());
    let engine = kickoff::engine::Engine::start(pool, workers, config)
        .await
        .unwrap();
    let read = Db::from(PgPoolOptions::new().connect_with(direct).await.unwrap());
    for _ in 0..2 {
        let inserted = engine
            .client()
            .insert(&kickoff::engine::NewJob::new("noop", json!({})))
            .await
            .unwrap();
        wait_for(
            "a job inserted through the node's own client to complete",
            Duration::from_secs(10),
            || async {
                job_store::job_get(&read, inserted.job.id)
                    .await
                    .unwrap()
                    .is_some_and(|j| j.state == JobState::Completed)
            },
        )
        .await;
    }
    engine.stop().await;
}
