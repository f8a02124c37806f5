//! Wires the server together: database (embedded or given), migrations, engine, HTTP, and a graceful
//! stop in the reverse order.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::accounts::bootstrap_token::{BootstrapToken, Opened};
use crate::accounts::SetupLink;
use crate::config::Config;
use crate::db::{Db, PoolMode};
use crate::engine::maintenance::count_folder::CountFolderConfig;
use crate::engine::maintenance::pruner::PrunerConfig;
use crate::engine::{Engine, EngineConfig};
use crate::http::{
    self,
    state::{AppState, StateParts},
};
use crate::postgres::{Durability, EmbeddedError, EmbeddedPostgres, DATABASE};
use crate::supervisor::{Supervisor, STOP_GRACE};
use crate::workers;

/// A failure that stops the server, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Embedded(#[from] crate::postgres::EmbeddedError),
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(sqlx::Error),
    #[error("migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(transparent)]
    Schema(#[from] crate::engine::schema::SchemaError),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error("configuration: {0}")]
    Config(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The database the server uses, and the embedded cluster behind it if any.
pub struct Database {
    pub pool: Db,
    pub embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Connects to `DATABASE_URL`, or starts the embedded cluster; then runs the migrations.
    pub async fn open(config: &Config) -> Result<Database, StartError> {
        let (url, embedded) = match &config.database_url {
            Some(url) => (url.clone(), None),
            None => {
                let dir = config.data_dir.clone();
                let pg = tokio::task::spawn_blocking(move || {
                    EmbeddedPostgres::start(&dir, Durability::Durable)
                })
                .await
                .map_err(|e| StartError::Config(e.to_string()))??;
                tracing::info!(port = pg.port(), data_dir = %config.data_dir.display(), "embedded PostgreSQL running");
                (pg.url_for(DATABASE), Some(pg))
            }
        };
        Database::migrated(&url, config, embedded).await
    }

    /// Connects to `url` and runs the migrations this release knows; a database a newer release
    /// migrated is run on if its schema allows it (`engine::schema`).
    async fn migrated(
        url: &str,
        config: &Config,
        embedded: Option<EmbeddedPostgres>,
    ) -> Result<Database, StartError> {
        let mode = config.database_pool_mode;
        if let (PoolMode::Transaction, Some(direct)) = (mode, &config.listen_database_url) {
            // The migrator's lock is a session's: it runs on a direct connection of its own.
            let direct = connect(direct, 1, PoolMode::Direct).await?;
            let migrated = crate::engine::schema::migrate(&direct).await;
            direct.close().await;
            migrated?;
        }
        let pool = connect(url, config.db_pool, mode).await?;
        crate::engine::schema::migrate(&pool).await?;
        Ok(Database { pool, embedded })
    }

    /// As [`Database::open`], for a command run beside a server: when a running server holds the
    /// embedded cluster's data directory, the command uses that server's cluster (and leaves it
    /// running) instead of refusing.
    pub async fn open_beside_server(config: &Config) -> Result<Database, StartError> {
        match Database::open(config).await {
            Err(StartError::Embedded(EmbeddedError::Locked(dir))) => {
                let (url, dir) = tokio::task::spawn_blocking(move || {
                    EmbeddedPostgres::running_url(&dir, DATABASE).map(|url| (url, dir))
                })
                .await
                .map_err(|e| StartError::Config(e.to_string()))??;
                let Some(url) = url else {
                    return Err(EmbeddedError::Locked(dir).into());
                };
                tracing::info!(
                    data_dir = %config.data_dir.display(),
                    "a running Kickoff process holds the data directory: using its PostgreSQL"
                );
                Database::migrated(&url, config, None).await
            }
            other => other,
        }
    }

    /// Closes the pool and stops the embedded cluster.
    pub async fn close(self) {
        self.pool.close().await;
        if let Some(pg) = self.embedded {
            if let Err(e) = tokio::task::spawn_blocking(move || pg.stop())
                .await
                .unwrap_or(Ok(()))
            {
                tracing::error!(error = %e, "stopping the embedded PostgreSQL failed");
            }
        }
    }
}

/// The dashboard's and the API's own pool, on the same database as `pool`: `max` connections,
/// each statement cut at `statement_timeout_ms`, a free connection waited for 2 s at most (then
/// 503). Named `<application_name>-web` in `pg_stat_activity`.
pub fn web_pool(pool: &Db, max: u32, statement_timeout_ms: u64) -> Db {
    pool.beside(
        "web",
        &[("statement_timeout", statement_timeout_ms.to_string())],
        PgPoolOptions::new()
            .max_connections(max)
            .min_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(2)),
    )
}

/// Opens a pool reaching the database as `mode` says, waiting up to 30 s for the server to
/// accept connections.
pub async fn connect(url: &str, max: u32, mode: PoolMode) -> Result<Db, StartError> {
    let options = mode.connect_options(
        url.parse::<PgConnectOptions>()
            .map_err(StartError::Connect)?,
    );
    let mut last = None;
    for _ in 0..60 {
        match PgPoolOptions::new()
            .max_connections(max)
            .min_connections(max.min(4))
            // A ping before every checkout costs a round trip on every request and job; a dead
            // connection fails its one query instead (and the pool replaces it).
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
        {
            Ok(pool) => return Ok(Db::new(pool, mode)),
            Err(e @ (sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut)) => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(StartError::Connect(e)),
        }
    }
    Err(StartError::Connect(
        last.unwrap_or(sqlx::Error::PoolTimedOut),
    ))
}

/// The engine settings from the server configuration.
pub fn engine_config(config: &Config) -> Result<EngineConfig, StartError> {
    let mut ec = EngineConfig {
        queues: config.queue_list().map_err(StartError::Config)?,
        queue_limits: config.queue_limits().map_err(StartError::Config)?,
        lease: Duration::from_millis(config.lease_ms),
        shutdown_grace: Duration::from_secs(config.shutdown_grace_secs),
        fetch_ahead: config.fetch_ahead as usize,
        claim_ahead: Duration::from_millis(config.claim_ahead_ms),
        pruner: PrunerConfig {
            retention: config.retention(),
            ..PrunerConfig::default()
        },
        count_folder: CountFolderConfig {
            history_retention: Duration::from_secs(config.history_retention_days * 24 * 3600),
            ..CountFolderConfig::default()
        },
        ..EngineConfig::default()
    };
    if let Some(id) = &config.node_id {
        ec.node_id = id.clone();
    }
    ec.listen_url = config.listen_database_url.clone();
    ec.poll_only_interval = Duration::from_millis(config.poll_interval_ms);
    ec.heartbeat = (ec.lease / 5).max(Duration::from_millis(100));
    ec.validate().map_err(StartError::Config)?;
    Ok(ec)
}

/// The bootstrap API token, and a line about it for the operator (the token itself only when it
/// was made now).
fn api_token(config: &Config) -> Result<BootstrapToken, StartError> {
    let (token, opened) = BootstrapToken::open(config.api_token.as_deref(), &config.data_dir)
        .map_err(|e| StartError::Config(e.to_string()))?;
    match opened {
        Opened::Off => println!("The bootstrap API token is off (KICKOFF_API_TOKEN=off)."),
        Opened::Configured => {}
        Opened::Created { token, path } => println!(
            "API token (shown this once; kept in {}, `kickoff token rotate` replaces it): {token}",
            path.display()
        ),
        Opened::Kept { path } => println!(
            "API token: kept in {} (shown when it was made; `kickoff token rotate` replaces it)",
            path.display()
        ),
    }
    Ok(token)
}

/// Seals again, bound to their endpoint, the endpoints' values sealed before binding (once, by
/// the first node of this version to start; see `webhooks::service::Endpoints::bind_sealed`).
pub(crate) async fn bind_sealed_values(
    pool: &crate::db::Db,
    key: &Arc<crate::webhooks::SecretKey>,
) -> Result<(), StartError> {
    let endpoints = crate::webhooks::service::Endpoints::new(pool.clone(), key.clone());
    let (bound, failed) = endpoints
        .bind_sealed()
        .await
        .map_err(|e| StartError::Config(format!("binding the endpoints' sealed values: {e}")))?;
    if bound > 0 {
        tracing::info!(
            bound,
            "webhook endpoints: sealed values bound to their endpoint"
        );
    }
    for (id, why) in failed {
        tracing::warn!(endpoint = id, error = %why, "webhook endpoints: an endpoint's sealed values do not open with this key; it signs nothing until its secret is rotated and its default headers are given again");
    }
    Ok(())
}

/// The key that seals the webhook endpoints' secrets, and a line about where it is kept.
fn secret_key(config: &Config) -> Result<crate::webhooks::SecretKey, StartError> {
    use crate::webhooks::key::{KeySource, KEY_FILE};
    let (key, source) =
        crate::webhooks::SecretKey::open(config.secret_key.as_deref(), &config.data_dir)
            .map_err(StartError::Config)?;
    let path = config.data_dir.join(KEY_FILE);
    match source {
        KeySource::Configured => {}
        KeySource::Created => println!(
            "Secret key (seals the webhook endpoints' secrets; other nodes on this database need the same KICKOFF_SECRET_KEY): made in {}",
            path.display()
        ),
        KeySource::Kept => {}
    }
    Ok(key)
}

/// Where the built site is: `LEPTOS_SITE_ROOT`, else `$CARGO_TARGET_DIR/site` (cargo-leptos's
/// output with a target dir outside the checkout), else `target/site`.
fn site_root(config: &Config) -> PathBuf {
    if let Some(root) = &config.site_root {
        return root.clone();
    }
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        let p = Path::new(&dir).join("site");
        if p.exists() {
            return p;
        }
    }
    PathBuf::from("target/site")
}

/// Runs the server until Ctrl-C or SIGTERM.
/// The queue alert notifications go to: `KICKOFF_ALERT_QUEUE`, else `webhooks` when this node
/// runs it, else its first queue.
fn engine_queue_for_notifications(config: &Config) -> String {
    if let Some(queue) = &config.alert_queue {
        return queue.clone();
    }
    let queues = config.queue_list().unwrap_or_default();
    if queues.iter().any(|(name, _)| name == "webhooks") {
        "webhooks".to_string()
    } else {
        queues
            .first()
            .map(|(name, _)| name.clone())
            .unwrap_or_else(|| "default".to_string())
    }
}

pub async fn serve(config: Config) -> Result<(), StartError> {
    // First: a stop asked for while the server starts is kept, and honoured once it is up.
    let stop_signals = StopSignals::install()?;
    // Settings checked before anything starts.
    let proxies = http::client_address::TrustedProxies::parse(&config.trusted_proxies)
        .map_err(StartError::Config)?;
    let request_limits = config.request_limits().map_err(StartError::Config)?;
    // Checked now; made from the bound address (its port may be chosen by the system) below.
    http::host_check::AllowedHosts::new(config.site_addr, &config.host_names)
        .map_err(StartError::Config)?;
    let db = Database::open(&config).await?;
    let token = Arc::new(api_token(&config)?);
    let engine_config = engine_config(&config)?;
    let key = Arc::new(secret_key(&config)?);
    bind_sealed_values(&db.pool, &key).await?;
    let workers = workers::builtin_signed(config.allowed_hosts(), key.clone());
    let engine = Engine::start(db.pool.clone(), workers, engine_config).await?;

    let site_root = site_root(&config);
    let leptos_options = leptos::config::LeptosOptions::builder()
        .output_name("kickoff")
        .site_root(site_root.to_string_lossy().to_string())
        .site_pkg_dir("pkg")
        .site_addr(config.site_addr)
        .build();
    let shutdown = tokio_util::sync::CancellationToken::new();
    // The web side's own connections: the engine's pools are not reachable from a request.
    let web = web_pool(&db.pool, config.web_pool, config.web_statement_timeout_ms);
    let accounts = crate::accounts::Accounts::new(web.clone()).with_request_limits(request_limits);
    // With no operator account (and no KICKOFF_ADMIN_PASSWORD), a one-time link to create the
    // first admin in the browser, printed below once the port is known.
    let setup_link = match accounts
        .ensure_first_admin(config.admin_password.as_deref())
        .await
    {
        Ok(Some(admin)) => {
            println!("Created the first operator account: {}", admin.name);
            SetupLink::none()
        }
        Ok(None) if accounts.count().await.is_ok_and(|n| n == 0) => SetupLink::generate(),
        Ok(None) => SetupLink::none(),
        Err(e) => return Err(StartError::Config(format!("KICKOFF_ADMIN_PASSWORD: {e}"))),
    };
    let accounts = accounts.with_setup_link(setup_link.clone());
    // Every background task of the server, stopped after HTTP and awaited before the pools close
    // (dropped on a failed start: its tasks are aborted with it).
    let mut tasks = Supervisor::new();
    tasks.spawn("bootstrap token watch", |stop| token.clone().watch(stop));
    let state = AppState::new(StateParts {
        shutdown: shutdown.clone(),
        client: engine.client().with_pool(web.clone()),
        accounts,
        secure_cookies: config.secure_cookies,
        pool: web.clone(),
        events: engine.events(),
        api_token: token.clone(),
        node_id: Arc::from(engine.node_id()),
        metrics: engine.metrics(),
        leptos_options,
    });
    let listener = tokio::net::TcpListener::bind(config.site_addr).await?;
    let local_addr = listener.local_addr()?;
    let hosts = http::host_check::AllowedHosts::new(local_addr, &config.host_names)
        .map_err(StartError::Config)?;
    tracing::info!(hosts = %hosts.describe(), "answering for");
    let state = match &config.read_database_url {
        Some(url) => {
            // The web side's settings (its statement timeout, its size) on the standby's pool.
            let base = connect(url, 1, config.database_pool_mode).await?;
            let replica = web_pool(&base, config.web_pool, config.web_statement_timeout_ms);
            base.close().await;
            state.with_reader(http::reader::Reader::replica(
                engine.client().with_pool(replica),
                Duration::from_millis(config.read_max_lag_ms),
            ))
        }
        None => state,
    };
    let state = state
        .with_webhook_key(key)
        .with_trusted_proxies(proxies)
        .with_allowed_hosts(hosts)
        .with_base(&config.base_path)
        .map_err(StartError::Config)?
        .with_stream_limits(http::state::StreamLimits {
            max_open: config.max_streams as usize,
            ..Default::default()
        });
    spawn_web_tasks(
        &mut tasks,
        &web,
        &engine,
        engine_queue_for_notifications(&config),
        Duration::from_millis(config.alert_interval_ms),
        config.retention(),
    );
    // Bulk walks outlive their requests: awaited once HTTP has stopped.
    let auditor = state.auditor.clone();
    let app = http::router(state);
    println!(
        "Kickoff listening on http://{local_addr}{}",
        config.base_path
    );
    // Only here, on this process's own output: the code is kept nowhere else.
    if let Some(url) = setup_link.url(local_addr, &config.base_path) {
        println!(
            "No operator account yet: open {url} to create the first admin (the link works once)."
        );
    }
    // A stop signal ends HTTP (gracefully); the tasks stop once it has.
    let http_stop = shutdown.clone();
    tasks.spawn("stop signals", |stop| async move {
        tokio::select! {
            _ = stop_signals.recv() => http_stop.cancel(),
            _ = stop.cancelled() => {}
        }
    });
    // Open event streams end with the shutdown token, so the graceful stop does not wait on them.
    // The peer address feeds the per-address sign-in throttle.
    let limits = http::listener::Limits {
        header_read_timeout: http::listener::HEADER_READ_TIMEOUT,
        body_read_timeout: http::listener::BODY_READ_TIMEOUT,
        max_connections: http::listener::connection_cap(config.max_connections as usize),
    };
    http::listener::serve(
        listener,
        app,
        limits,
        shutdown.clone(),
        Duration::from_secs(config.shutdown_grace_secs),
    )
    .await;
    tracing::info!("stopping: the background tasks, the engine, then the database");
    tokio::join!(tasks.stop(STOP_GRACE), auditor.finish_walks(STOP_GRACE));
    engine.stop().await;
    web.close().await;
    db.close().await;
    Ok(())
}

/// The web side's background work, on every node (the server's and an embedded Kickoff's):
/// expired sessions swept; on whichever node leads, the alerts evaluated (their notifications
/// inserted in `notify_queue`, every `alert_interval`; incidents kept `retention`) and rotated
/// endpoints' previous secrets dropped once their overlap ended.
pub(crate) fn spawn_web_tasks(
    tasks: &mut Supervisor,
    web: &Db,
    engine: &Engine,
    notify_queue: String,
    alert_interval: Duration,
    retention: Duration,
) {
    tasks.spawn("session sweep", |stop| {
        http::session::sweep_expired(web.clone(), stop)
    });
    let evaluator = crate::alerts::Evaluator::new(
        web.clone(),
        engine.client().with_pool(web.clone()),
        notify_queue,
    )
    .with_retention(retention);
    let leader = engine.leader_check();
    tasks.spawn("alert evaluator", |stop| {
        evaluator.run(alert_interval, leader, stop)
    });
    let leader = engine.leader_check();
    let web = web.clone();
    tasks.spawn("secret sweeper", |stop| {
        crate::webhooks::sweeper::SecretSweeper::new(web).run(
            crate::webhooks::sweeper::DEFAULT_INTERVAL,
            leader,
            stop,
        )
    });
}

/// SIGTERM and SIGINT, registered before the server connects to anything: one that comes while
/// it starts is kept (not the default action, which kills the process) and stops the server
/// gracefully as soon as it is up. Registered later, by the task that waits for them, a stop sent
/// right after the server said it listened could still kill it.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    async fn recv(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}
