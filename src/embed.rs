//! Kickoff inside a Rust application: the engine in the application's tokio runtime, on its
//! database, running its own job kinds beside Kickoff's; the dashboard and the REST API as a
//! router under a path of its own (`/kickoff`), merged into the application's.
//!
//! ```no_run
//! # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use kickoff::embed::{Kickoff, Options};
//! use kickoff::engine::{Db, PoolMode};
//!
//! let db = Db::new(pool, PoolMode::Direct);
//! let mut workers = kickoff::workers::builtin(Vec::new());
//! // workers.register(YourWorker);
//! let kickoff = Kickoff::start(db, workers, Options::new("/kickoff")).await?;
//! let app = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "your game" }))
//!     .merge(kickoff.router());
//! // ... serve `app`; a job inserted in your transaction:
//! // kickoff.client().insert_with(&mut tx, &job).await?;
//! kickoff.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! A server (`kickoff serve`) and an embedded Kickoff are the same engine and the same router,
//! built by the same functions: several of each may share one database.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::accounts::bootstrap_token::BootstrapToken;
use crate::accounts::Accounts;
use crate::db::Db;
use crate::engine::{Client, Engine, EngineConfig, Workers};
use crate::http::app_auth::Authenticate;
use crate::http::state::{AppState, StateParts};
use crate::questions::QuestionService;
use crate::server::StartError;
use crate::supervisor::{Supervisor, STOP_GRACE};
use crate::webhooks::SecretKey;

/// How an embedded Kickoff runs, beside its database and its workers.
pub struct Options {
    /// The engine's settings (its queues, its node id, ...).
    pub engine: EngineConfig,
    /// The path the dashboard and the API answer under (`/kickoff`; empty: the site's root).
    pub base: String,
    /// Where the built dashboard is (its WebAssembly, script and stylesheet: `target/site`).
    pub site_root: PathBuf,
    /// The REST API's bootstrap token; none: only the accounts' own tokens are taken.
    pub api_token: Option<String>,
    /// The key sealing the webhook endpoints' secrets (the same on every node of the database);
    /// none: one made for this process, so endpoints made now do not sign after a restart.
    pub secret_key: Option<SecretKey>,
    /// With no operator account yet, the password of a first admin `admin` made at the start.
    pub admin_password: Option<String>,
    /// The application's own sign-in in front of the dashboard (who calls, in which role),
    /// instead of Kickoff's accounts: see [`crate::http::app_auth`]. Give every node the same
    /// `secret_key`: the forms' tokens are made with it.
    pub authenticate: Option<Arc<dyn Authenticate>>,
    /// The dashboard's and the API's connections, and the longest statement of one.
    pub web_pool: u32,
    pub web_statement_timeout: Duration,
    /// How often the alerts are evaluated, and the queue their notifications go to.
    pub alert_interval: Duration,
    pub alert_queue: String,
    /// How long finished jobs and past incidents are kept.
    pub retention: Duration,
}

impl Options {
    /// The defaults of `kickoff serve`, under `base`.
    pub fn new(base: &str) -> Options {
        Options {
            engine: EngineConfig::default(),
            base: base.to_string(),
            site_root: PathBuf::from("target/site"),
            api_token: None,
            secret_key: None,
            admin_password: None,
            authenticate: None,
            web_pool: 10,
            web_statement_timeout: Duration::from_secs(30),
            alert_interval: Duration::from_secs(15),
            alert_queue: "default".to_string(),
            retention: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Kickoff running inside an application: its engine and its web side.
pub struct Kickoff {
    engine: Engine,
    state: AppState,
    web: Db,
    tasks: Supervisor,
}

impl Kickoff {
    /// Migrates `db` to Kickoff's schema (beside the application's own tables), starts the engine
    /// with `workers` (Kickoff's built-in kinds and the application's) and the web side's
    /// background work. Stop it with [`Kickoff::stop`].
    pub async fn start(db: Db, workers: Workers, options: Options) -> Result<Kickoff, StartError> {
        if options.authenticate.is_some() && options.secret_key.is_none() {
            return Err(StartError::Config(
                "the application's sign-in (`Options::authenticate`) needs `Options::secret_key`, the \
                 same on every node: the forms' tokens are made with it"
                    .into(),
            ));
        }
        crate::engine::schema::migrate(&db).await?;
        let key = Arc::new(
            options
                .secret_key
                .unwrap_or_else(|| SecretKey::generate().0),
        );
        crate::server::bind_sealed_values(&db, &key).await?;
        let engine = Engine::start(db.clone(), workers, options.engine).await?;
        let web = crate::server::web_pool(
            &db,
            options.web_pool,
            options.web_statement_timeout.as_millis() as u64,
        );
        let accounts = Accounts::new(web.clone());
        if let Some(password) = &options.admin_password {
            accounts
                .ensure_first_admin(Some(password))
                .await
                .map_err(|e| StartError::Config(format!("the first admin's password: {e}")))?;
        }
        let api_token = Arc::new(match &options.api_token {
            Some(token) => BootstrapToken::fixed(token),
            None => BootstrapToken::off(),
        });
        let state = AppState::new(StateParts {
            shutdown: tokio_util::sync::CancellationToken::new(),
            client: engine.client().with_pool(web.clone()),
            accounts,
            secure_cookies: false,
            pool: web.clone(),
            events: engine.events(),
            api_token,
            node_id: Arc::from(engine.node_id()),
            metrics: engine.metrics(),
            leptos_options: leptos::config::LeptosOptions::builder()
                .output_name("kickoff")
                .site_root(options.site_root.to_string_lossy().to_string())
                .site_pkg_dir("pkg")
                .build(),
        })
        .with_webhook_key(key.clone())
        .with_base(&options.base)
        .map_err(StartError::Config)?;
        let state = match options.authenticate {
            Some(hook) => state.with_app_auth(hook, key),
            None => state,
        };
        let mut tasks = Supervisor::new();
        crate::server::spawn_web_tasks(
            &mut tasks,
            &web,
            &engine,
            options.alert_queue,
            options.alert_interval,
            options.retention,
        );
        Ok(Kickoff {
            engine,
            state,
            web,
            tasks,
        })
    }

    /// The engine's client: inserts (in the application's transaction with
    /// [`Client::insert_with`]), cancels, reads.
    pub fn client(&self) -> Client {
        self.engine.client()
    }

    /// Questions and their lock jobs (in the application's transaction with
    /// [`QuestionService::create_with`]).
    pub fn questions(&self) -> QuestionService {
        QuestionService::new(self.engine.client())
    }

    /// The dashboard, the REST API and the probes under the base, to merge into the
    /// application's router.
    pub fn router(&self) -> axum::Router {
        crate::http::router(self.state.clone())
    }

    /// Ends the dashboard's live streams (before a graceful stop of the application's server,
    /// which would wait on them).
    pub fn end_streams(&self) {
        self.state.shutdown.cancel();
    }

    /// Stops the web side's work and the engine (running jobs finish within the engine's grace),
    /// and closes the web side's connections; the application's pool stays open.
    pub async fn stop(self) {
        self.state.shutdown.cancel();
        tokio::join!(
            self.tasks.stop(STOP_GRACE),
            self.state.auditor.finish_walks(STOP_GRACE)
        );
        self.engine.stop().await;
        self.web.close().await;
    }
}
