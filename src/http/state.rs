//! What every handler can reach.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crate::db::Db;
use tokio::sync::broadcast;

use crate::accounts::Accounts;
use crate::audit::Auditor;
use crate::engine::metrics::Metrics;
use crate::engine::Client;
use crate::questions::QuestionService;

#[derive(Clone)]
pub struct AppState {
    pub client: Client,
    pub questions: QuestionService,
    /// Operator accounts of the dashboard.
    pub accounts: Accounts,
    /// Where every operator and API action is recorded.
    pub auditor: Auditor,
    /// Session cookies only over HTTPS (`KICKOFF_SECURE_COOKIES`).
    pub secure_cookies: bool,
    pub pool: Db,
    /// State changes of jobs on every node (see `engine::notifier`).
    pub events: broadcast::Sender<String>,
    /// The bearer token of the REST API.
    pub api_token: Arc<crate::accounts::bootstrap_token::BootstrapToken>,
    pub node_id: Arc<str>,
    /// What the engine of this node measures (`/metrics`).
    pub metrics: Arc<Metrics>,
    /// Live-update streams open now (dashboard and API).
    pub sse_clients: Arc<AtomicUsize>,
    /// Of those, how many each user or token holds (see `sse::MAX_STREAMS_PER_HOLDER`).
    pub stream_holders: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    /// The latest answers of the streams' rechecks, shared by the streams of one session or
    /// token (see `rechecks::SharedRechecks`).
    pub stream_rechecks: Arc<super::rechecks::SharedRechecks>,
    /// The streams this node serves at once, and how often each checks that its session or
    /// token still holds (see `sse`).
    pub streams: StreamLimits,
    /// Proxies whose `X-Forwarded-For` names the client (`KICKOFF_TRUSTED_PROXIES`).
    pub trusted_proxies: Arc<super::client_address::TrustedProxies>,
    /// The `Host` names answered (`KICKOFF_ALLOWED_HOSTS`).
    pub allowed_hosts: Arc<super::host_check::AllowedHosts>,
    pub leptos_options: leptos::config::LeptosOptions,
    /// Cancelled when the server stops: long-lived responses (event streams) end with it.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Webhook endpoints, sealed with the server's secret key (see [`AppState::with_webhook_key`]).
    pub endpoints: crate::webhooks::Endpoints,
    /// Alert rules and incidents.
    pub alerts: crate::alerts::Alerts,
    /// Where the dashboard's lists, charts and counts are read (see [`super::reader`]).
    pub reader: super::reader::Reader,
    /// The application's own sign-in, when Kickoff is mounted in one that signs its users in
    /// (see [`super::app_auth`]); none: Kickoff's accounts and sessions.
    pub app_auth: Option<Arc<super::app_auth::AppAuth>>,
    /// The path everything is served under (see `kickoff_app::base`): empty at the site's root.
    pub base: Arc<str>,
    /// The kinds a caller may insert here: the document's and the request check's `kind` enum.
    pub kinds: ServerKinds,
}

/// The kinds of jobs a caller may insert on this server (its workers', less Kickoff's own), as
/// the API's document states them and its request check holds to them; then Kickoff's own kinds,
/// which the request check leaves to the engine's rules to refuse (they say why).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ServerKinds(pub Arc<[&'static str]>, pub Arc<[&'static str]>);

impl axum::extract::FromRef<AppState> for ServerKinds {
    fn from_ref(state: &AppState) -> Self {
        state.kinds.clone()
    }
}

/// What a server's [`AppState`] is made of; [`AppState::new`] derives the rest (the questions
/// service, the auditor, the stream count). The server, the page bench and the tests all build
/// their state this way.
pub struct StateParts {
    pub pool: Db,
    pub client: Client,
    pub accounts: Accounts,
    pub events: broadcast::Sender<String>,
    pub metrics: Arc<Metrics>,
    pub api_token: Arc<crate::accounts::bootstrap_token::BootstrapToken>,
    pub node_id: Arc<str>,
    pub secure_cookies: bool,
    pub leptos_options: leptos::config::LeptosOptions,
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl AppState {
    pub fn new(parts: StateParts) -> Self {
        AppState {
            kinds: ServerKinds(
                parts.client.workers().insertable_kinds().into(),
                parts.client.workers().own_kinds().into(),
            ),
            questions: QuestionService::new(parts.client.clone()),
            auditor: Auditor::new(parts.pool.clone()),
            sse_clients: Arc::default(),
            stream_holders: Arc::default(),
            stream_rechecks: Arc::default(),
            streams: StreamLimits::default(),
            trusted_proxies: Arc::default(),
            allowed_hosts: Arc::default(),
            base: Arc::from(""),
            app_auth: None,
            // A key of this process alone until the server gives its own (`with_webhook_key`).
            endpoints: crate::webhooks::Endpoints::new(
                parts.pool.clone(),
                Arc::new(crate::webhooks::SecretKey::generate().0),
            ),
            alerts: crate::alerts::Alerts::new(parts.pool.clone(), parts.client.clone()),
            reader: super::reader::Reader::primary(parts.client.clone()),
            client: parts.client,
            accounts: parts.accounts,
            secure_cookies: parts.secure_cookies,
            pool: parts.pool,
            events: parts.events,
            api_token: parts.api_token,
            node_id: parts.node_id,
            metrics: parts.metrics,
            leptos_options: parts.leptos_options,
            shutdown: parts.shutdown,
        }
    }
}

/// Limits of the live-update streams.
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    /// Streams open at once on this node (`KICKOFF_MAX_STREAMS`); one more is answered 503.
    pub max_open: usize,
    /// How often an open stream checks that its session or token still holds; it ends within
    /// this time (and at most half of it more: see `rechecks::SharedRechecks`) of a sign-out, a
    /// password change, a disabled account or a revoked token.
    pub recheck: std::time::Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            max_open: 2048,
            recheck: std::time::Duration::from_secs(5),
        }
    }
}

impl AppState {
    /// The use cases every surface shares, over this state's services.
    pub fn operations(&self) -> crate::operations::Operations<'_> {
        crate::operations::Operations::new(&self.client, &self.questions, &self.auditor)
    }

    /// This state reading the dashboard's lists, charts and counts through `reader`.
    pub fn with_reader(mut self, reader: super::reader::Reader) -> Self {
        self.reader = reader;
        self
    }

    /// This state behind `proxies`.
    pub fn with_trusted_proxies(mut self, proxies: super::client_address::TrustedProxies) -> Self {
        self.trusted_proxies = Arc::new(proxies);
        self
    }

    /// This state serving everything under `base` (`/kickoff`; checked:
    /// `kickoff_app::base::is_valid`). Its router ([`super::router`]) answers there, to be merged
    /// into an application's own.
    pub fn with_base(mut self, base: &str) -> Result<Self, String> {
        if !kickoff_app::base::is_valid(base) {
            return Err(format!(
                "the base path {base:?} is not `/` and path segments (letters, digits, `-`, `_`, `.`) without a trailing `/`"
            ));
        }
        self.base = Arc::from(base);
        Ok(self)
    }

    /// This state answering only for `hosts`.
    pub fn with_allowed_hosts(mut self, hosts: super::host_check::AllowedHosts) -> Self {
        self.allowed_hosts = Arc::new(hosts);
        self
    }

    /// This state sealing and opening the webhook endpoints' secrets with `key` (the one the
    /// engine's webhook worker signs with).
    pub fn with_webhook_key(mut self, key: Arc<crate::webhooks::SecretKey>) -> Self {
        self.endpoints = crate::webhooks::Endpoints::new(self.pool.clone(), key);
        self
    }

    /// This state's dashboard behind the application's own sign-in (`hook`) instead of
    /// Kickoff's accounts: see [`super::app_auth`]. `key` makes the callers' CSRF tokens. After
    /// [`AppState::with_base`].
    pub fn with_app_auth(
        mut self,
        hook: Arc<dyn super::app_auth::Authenticate>,
        key: Arc<crate::webhooks::SecretKey>,
    ) -> Self {
        self.app_auth = Some(Arc::new(super::app_auth::AppAuth::new(
            hook,
            self.accounts.clone(),
            key,
            &self.base,
        )));
        self
    }

    /// This state with other stream limits.
    pub fn with_stream_limits(mut self, streams: StreamLimits) -> Self {
        self.streams = streams;
        self
    }
}

impl axum::extract::FromRef<AppState> for leptos::config::LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}
