//! Test support: a fresh database per test in the test run's private PostgreSQL cluster, and
//! helpers to run engines and server processes against it.
#![allow(dead_code)]

use std::str::FromStr;
use std::time::Duration;

use kickoff::engine::Db;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

pub mod dashboard;
pub mod pooler;
pub mod proxy;
pub mod receiver;
pub mod rest;
pub mod server;

use kickoff::engine::{PoolMode, MIGRATOR};

/// A database of its own for one test, reached directly or, when the test run says so
/// (`KICKOFF_TEST_POOL_MODE=transaction`), through a PgBouncer in transaction mode of its own.
pub struct TestDb {
    pub pool: Db,
    /// How `pool` and `url` reach the database (a server process is given it as
    /// `KICKOFF_DATABASE_POOL_MODE`).
    pub mode: PoolMode,
    /// The database's URL as `pool` reaches it (through the pooler, if any).
    pub url: String,
    /// The database's URL on the cluster itself.
    pub direct_url: String,
    pub name: String,
    /// The test's PgBouncer, if any: it runs until the test's process ends.
    pub pooler: Option<std::sync::Arc<pooler::PgBouncer>>,
}

impl TestDb {
    /// Another pool of `max` connections reaching the database as [`TestDb::pool`] does (the
    /// connections of another node).
    pub async fn other_pool(&self, max: u32) -> Db {
        let options = self.mode.connect_options(self.url.parse().unwrap());
        let pool = PgPoolOptions::new()
            .max_connections(max)
            .connect_with(options)
            .await
            .unwrap();
        Db::new(pool, self.mode)
    }

    /// The pool mode the test run asks for.
    pub fn mode_asked() -> PoolMode {
        std::env::var("KICKOFF_TEST_POOL_MODE")
            .map(|m| m.parse().expect("KICKOFF_TEST_POOL_MODE"))
            .unwrap_or_default()
    }
}

fn admin_url() -> String {
    std::env::var("KICKOFF_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "KICKOFF_TEST_DATABASE_URL is not set: run the tests with scripts/test, which starts a \
             private PostgreSQL cluster, or point it at a server where the user may create databases"
        )
    })
}

fn migrations_fingerprint() -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for m in MIGRATOR.iter() {
        for b in m.checksum.iter() {
            h = (h ^ *b as u64).wrapping_mul(0x100000001b3);
        }
    }
    format!("{h:016x}")
}

/// Creates a fresh, migrated database (copied from a template made once per migration set).
/// The Python of the tests' virtual environment (the published Standard Webhooks library and
/// psycopg), which `scripts/bootstrap.sh --e2e` makes.
pub fn venv_python() -> std::process::Command {
    let cache = std::env::var("KICKOFF_CACHE")
        .unwrap_or_else(|_| format!("{}/.cache/kickoff", std::env::var("HOME").unwrap()));
    let python = format!("{cache}/tools/pyvenv/bin/python");
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} is missing: run scripts/bootstrap.sh --e2e (scripts/test does)"
    );
    std::process::Command::new(python)
}

pub async fn test_db() -> TestDb {
    let admin_opts = PgConnectOptions::from_str(&admin_url()).expect("KICKOFF_TEST_DATABASE_URL");
    let template = format!("kickoff_tpl_{}", migrations_fingerprint());
    let mut admin = admin_opts
        .connect()
        .await
        .expect("connect to the test cluster");
    // One process makes the template; the others wait on the lock and find it made.
    sqlx::query("SELECT pg_advisory_lock(7461726)")
        .execute(&mut admin)
        .await
        .unwrap();
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&template)
            .fetch_one(&mut admin)
            .await
            .unwrap();
    if !exists {
        sqlx::query(&format!("CREATE DATABASE {template}_tmp"))
            .execute(&mut admin)
            .await
            .ok();
        let mut conn = admin_opts
            .clone()
            .database(&format!("{template}_tmp"))
            .connect()
            .await
            .unwrap();
        MIGRATOR.run(&mut conn).await.expect("migrations");
        conn.close().await.unwrap();
        sqlx::query(&format!(
            "ALTER DATABASE {template}_tmp RENAME TO {template}"
        ))
        .execute(&mut admin)
        .await
        .unwrap();
    }
    sqlx::query("SELECT pg_advisory_unlock(7461726)")
        .execute(&mut admin)
        .await
        .unwrap();
    let name = format!("t_{:016x}", fastrand::u64(..));
    sqlx::query(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
        .execute(&mut admin)
        .await
        .expect("create test database");
    let direct = admin_opts.database(&name);
    let direct_url = direct.to_url_lossy().to_string();
    let mode = TestDb::mode_asked();
    let (pooler, opts) = match mode {
        PoolMode::Direct => (None, direct),
        PoolMode::Transaction => {
            let bouncer = pooler::PgBouncer::start(&direct).await;
            let through = bouncer.in_front_of(&direct);
            (Some(pooler::keep(bouncer)), through)
        }
    };
    let url = opts.to_url_lossy().to_string();
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .connect_with(mode.connect_options(opts))
        .await
        .unwrap();
    TestDb {
        pool: Db::new(pool, mode),
        mode,
        url,
        direct_url,
        name,
        pooler,
    }
}

/// A new database with nothing in it (no migration), for a test that lets a server make its
/// schema; its connect options.
pub async fn empty_db(prefix: &str) -> PgConnectOptions {
    let admin = PgConnectOptions::from_str(&admin_url()).expect("KICKOFF_TEST_DATABASE_URL");
    let name = format!("{prefix}_{:016x}", fastrand::u64(..));
    let mut conn = admin.connect().await.expect("connect to the test cluster");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    admin.database(&name)
}

/// Waits for `cond` to hold, polling every 20 ms, for at most `timeout`. Panics with `what`.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if cond().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The state of a job, read from the table.
pub async fn state_of(pool: &Db, id: kickoff::engine::JobId) -> kickoff::engine::JobState {
    kickoff::engine::store::jobs::job_get(pool, id)
        .await
        .unwrap()
        .expect("job exists")
        .state
}

/// The whole HTTP application (API, dashboard, server functions) on `pool`, with the built-in job
/// kinds, no engine running, and `token` as the API token.
pub fn app(pool: &Db, token: &str) -> axum::Router {
    app_with_metrics(
        pool,
        token,
        std::sync::Arc::new(kickoff::engine::metrics::Metrics::new()),
    )
}

/// [`app`], reporting an engine's metrics on `/metrics`.
pub fn app_with_metrics(
    pool: &Db,
    token: &str,
    metrics: std::sync::Arc<kickoff::engine::metrics::Metrics>,
) -> axum::Router {
    app_from(
        pool,
        token,
        metrics,
        kickoff::accounts::Accounts::new(pool.clone()),
    )
}

/// [`app`] of a server that started on a database with no user: its setup link's code is `code`.
pub fn app_with_setup_link(pool: &Db, token: &str, code: &str) -> axum::Router {
    let accounts = kickoff::accounts::Accounts::new(pool.clone())
        .with_setup_link(kickoff::accounts::SetupLink::with_code(code));
    app_from(
        pool,
        token,
        std::sync::Arc::new(kickoff::engine::metrics::Metrics::new()),
        accounts,
    )
}

/// [`app`] of a server behind HTTPS (`KICKOFF_SECURE_COOKIES` on).
pub fn app_over_https(pool: &Db, token: &str) -> axum::Router {
    let mut state = app_state(
        pool,
        token,
        std::sync::Arc::new(kickoff::engine::metrics::Metrics::new()),
        kickoff::accounts::Accounts::new(pool.clone()),
    );
    state.secure_cookies = true;
    kickoff::http::router(state)
}

/// [`app`] with its state changed by `change` first (the `with_…` settings of [`AppState`]).
///
/// [`AppState`]: kickoff::http::state::AppState
pub fn app_changed(
    pool: &Db,
    token: &str,
    change: impl FnOnce(kickoff::http::state::AppState) -> kickoff::http::state::AppState,
) -> axum::Router {
    let state = app_state(
        pool,
        token,
        std::sync::Arc::new(kickoff::engine::metrics::Metrics::new()),
        kickoff::accounts::Accounts::new(pool.clone()),
    );
    kickoff::http::router(change(state))
}

/// [`app`] behind the proxies `trusted` (`KICKOFF_TRUSTED_PROXIES`).
pub fn app_behind_proxies(pool: &Db, token: &str, trusted: &[&str]) -> axum::Router {
    let trusted: Vec<String> = trusted.iter().map(|t| t.to_string()).collect();
    let proxies = kickoff::http::client_address::TrustedProxies::parse(&trusted).unwrap();
    app_changed(pool, token, |s| s.with_trusted_proxies(proxies))
}

/// [`app`] with other limits on its live-update streams.
pub fn app_with_streams(
    pool: &Db,
    token: &str,
    limits: kickoff::http::state::StreamLimits,
) -> axum::Router {
    app_changed(pool, token, |s| s.with_stream_limits(limits))
}

/// [`app`] serving everything under `base` (`/kickoff`), merged into an application's own
/// router, which answers `/` itself.
pub fn app_under(pool: &Db, token: &str, base: &str) -> axum::Router {
    app_under_signed_in_by(pool, token, base, None)
}

/// [`app_under`], its dashboard behind the application's own sign-in `hook` when given.
pub fn app_under_signed_in_by(
    pool: &Db,
    token: &str,
    base: &str,
    hook: Option<std::sync::Arc<dyn kickoff::http::app_auth::Authenticate>>,
) -> axum::Router {
    let kickoff = app_changed(pool, token, |state| {
        let state = state.with_base(base).unwrap();
        match hook {
            Some(hook) => state.with_app_auth(
                hook,
                std::sync::Arc::new(kickoff::webhooks::SecretKey::generate().0),
            ),
            None => state,
        }
    });
    axum::Router::new()
        .route("/", axum::routing::get(|| async { "the game's own page" }))
        .merge(kickoff)
}

fn app_from(
    pool: &Db,
    token: &str,
    metrics: std::sync::Arc<kickoff::engine::metrics::Metrics>,
    accounts: kickoff::accounts::Accounts,
) -> axum::Router {
    kickoff::http::router(app_state(pool, token, metrics, accounts))
}

fn app_state(
    pool: &Db,
    token: &str,
    metrics: std::sync::Arc<kickoff::engine::metrics::Metrics>,
    accounts: kickoff::accounts::Accounts,
) -> kickoff::http::state::AppState {
    use kickoff::http::state::{AppState, StateParts};
    use std::sync::Arc;
    let workers = kickoff::workers::builtin(vec!["127.0.0.1:9".into(), "hooks.example.com".into()]);
    let (events, _) = tokio::sync::broadcast::channel(16);
    AppState::new(StateParts {
        client: kickoff::engine::Client::new(pool.clone(), Arc::new(workers)),
        accounts,
        secure_cookies: false,
        pool: pool.clone(),
        events,
        api_token: Arc::new(kickoff::accounts::bootstrap_token::BootstrapToken::fixed(
            token,
        )),
        node_id: Arc::from("test"),
        metrics,
        leptos_options: leptos::config::LeptosOptions::builder()
            .output_name("kickoff")
            .build(),
        shutdown: tokio_util::sync::CancellationToken::new(),
    })
}

/// A write token of a new operator account `ops` (not an admin).
pub async fn operator_token(pool: &Db) -> String {
    operator_token_of(pool, "ops", kickoff::accounts::TokenScope::Write).await
}

/// A token of `scope` of a new operator account `name`.
pub async fn operator_token_of(
    pool: &Db,
    name: &str,
    scope: kickoff::accounts::TokenScope,
) -> String {
    let accounts = kickoff::accounts::Accounts::new(pool.clone());
    let account = accounts
        .create(
            name,
            "a long enough password",
            kickoff::accounts::Role::Operator,
        )
        .await
        .unwrap();
    accounts
        .create_token(&account, "script", scope)
        .await
        .unwrap()
        .1
}

/// Makes every insert into `audit_log` for which `condition` (SQL over `NEW`) holds fail, as a
/// full disk or a broken constraint would, until [`audit_log_works`].
pub async fn audit_log_refuses(pool: &Db, condition: &str) {
    sqlx::raw_sql(&format!(
        "CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN IF {condition} THEN RAISE EXCEPTION 'the audit log is unavailable (test)';
                    END IF; RETURN NEW; END $$;
         CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log
           FOR EACH ROW EXECUTE FUNCTION refuse_audit();"
    ))
    .execute(pool)
    .await
    .unwrap();
}

/// Undoes [`audit_log_refuses`].
pub async fn audit_log_works(pool: &Db) {
    sqlx::raw_sql("DROP TRIGGER refuse_audit ON audit_log; DROP FUNCTION refuse_audit();")
        .execute(pool)
        .await
        .unwrap();
}
