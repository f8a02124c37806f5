//! Operator sessions for the dashboard: tower-sessions with its PostgreSQL store (sessions survive
//! restarts and every node sees them), and the guard every dashboard request passes.
//!
//! The guard, in order:
//! 1. Open paths (the login and setup pages and their server functions, static files, probes, the
//!    REST API with its own bearer tokens) pass as they are.
//! 2. A request without a signed-in user is sent to `/login` (pages) or answered 401 (server
//!    functions, the live stream).
//! 3. A session past its absolute lifetime, or idle too long, or whose user was disabled or
//!    deleted or has had their password changed since, is ended the same way.
//! 4. A state-changing request (a POST other than the read-only server functions) must carry the session's CSRF token, as the `csrf` form
//!    field the dashboard's forms hold or as the `x-csrf-token` header: 403 otherwise. The session
//!    cookie is also `SameSite=Strict`, so a cross-site page cannot even send it.
//! 5. The signed-in user goes into the request's extensions as an [`Operator`]; server functions
//!    check its role for what they do.
//!
//! Idle expiry without a database write per request: the session records when it was last seen
//! and is saved again (pushing its expiry) only when that is older than `SEEN_RESOLUTION`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::accounts::session_store::PgSessionStore;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, Session, SessionManagerLayer};

use super::state::AppState;
use crate::accounts::{Role, User};

/// A session unused this long ends.
pub const IDLE_EXPIRY: Duration = Duration::from_secs(2 * 3600);
/// A session ends this long after its login, however busy.
pub const ABSOLUTE_EXPIRY: Duration = Duration::from_secs(24 * 3600);
/// How stale the "last seen" mark may get before a request saves the session again.
const SEEN_RESOLUTION: Duration = Duration::from_secs(60);
/// How often expired sessions are deleted.
const SWEEP_INTERVAL: Duration = Duration::from_secs(300);
/// The most of a form body read to find its CSRF token.
const MAX_FORM_BYTES: usize = super::body_limits::MAX_DASHBOARD_BODY_BYTES;

/// The session cookie's name.
pub const COOKIE: &str = "kickoff_session";

/// What a signed-in session holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SignedIn {
    user_id: i64,
    login_at: DateTime<Utc>,
    seen_at: DateTime<Utc>,
    csrf: String,
    /// The user's `session_epoch` at sign-in: a password change since ends the session.
    #[serde(default)]
    epoch: i32,
}

const SIGNED_IN: &str = "signed_in";

/// Server functions that only read: the hydrated pages call them without a form, so they carry no
/// token; they change nothing, and a cross-site page can neither send the `SameSite=Strict`
/// cookie nor read the answer. Every other post needs the token (a new server function is
/// protected until it is listed here).
const READ_ONLY_FUNCTIONS: [&str; 24] = [
    "/_console/account",
    "/_console/webhook_endpoints",
    "/_console/webhook_calls",
    "/_console/alerts",
    "/_console/audit",
    "/_console/users",
    "/_console/overview",
    "/_console/jobs",
    "/_console/job",
    "/_console/job_choices",
    "/_console/bulk_preview",
    "/_console/timers",
    "/_console/queues",
    "/_console/kinds",
    "/_console/questions",
    "/_console/question",
    "/_console/login_info",
    "/_console/schedules",
    "/_console/schedule",
    "/_console/schedule_kinds",
    "/_console/preview_rule",
    "/_console/history",
    "/_console/workflows",
    "/_console/workflow",
];

/// The signed-in user of a dashboard request (in the request's extensions).
#[derive(Debug, Clone)]
pub struct Operator {
    pub user: User,
    /// The session's CSRF token, for the forms the page renders.
    pub csrf: String,
    pub address: IpAddr,
}

impl Operator {
    pub fn may(&self, role: Role) -> bool {
        self.user.role >= role
    }

    /// What of the jobs' secrets this user sees (see [`crate::engine::sight`]), by the rules of
    /// the kinds `workers` run.
    pub fn sight<'a>(
        &'a self,
        workers: &'a crate::engine::Workers,
    ) -> crate::engine::sight::Sight<'a> {
        crate::engine::sight::Sight {
            name: &self.user.name,
            admin: self.may(Role::Admin),
            reader: !self.may(Role::Operator),
            workers,
        }
    }
}

/// The session layer. `secure`: the cookie is sent over HTTPS only (set it behind HTTPS). The
/// cookie is the base's (`AppState::base`): the rest of a site Kickoff is mounted in is not sent it.
pub fn layer(pool: crate::db::Db, secure: bool, base: &str) -> SessionManagerLayer<PgSessionStore> {
    // The table is made by the migrations (20261202000002_sessions.sql), not by the store.
    SessionManagerLayer::new(PgSessionStore::new(pool))
        .with_name(COOKIE)
        .with_path(if base.is_empty() { "/" } else { base }.to_string())
        .with_same_site(SameSite::Strict)
        .with_http_only(true)
        .with_secure(secure)
        .with_expiry(Expiry::OnInactivity(
            tower_sessions::cookie::time::Duration::seconds(IDLE_EXPIRY.as_secs() as i64),
        ))
}

/// Deletes expired sessions (and stale sign-in failure counters and request counts) now and then, until `shutdown`. Every node may run it: deleting what
/// another node deleted already is harmless.
pub async fn sweep_expired(pool: crate::db::Db, shutdown: CancellationToken) {
    use tower_sessions::ExpiredDeletion;
    let accounts = crate::accounts::Accounts::new(pool.clone());
    let store = PgSessionStore::new(pool);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_INTERVAL) => {}
        }
        if let Err(e) = store.delete_expired().await {
            tracing::warn!(error = %e, "could not delete expired sessions");
        }
        if let Err(e) = accounts.flush_lock_refusals().await {
            tracing::warn!(error = %e, "could not record the refusals of sign-in locks that are over");
        }
        if let Err(e) = accounts.prune_login_failures().await {
            tracing::warn!(error = %e, "could not delete old sign-in failure counters");
        }
        if let Err(e) = accounts.prune_request_windows().await {
            tracing::warn!(error = %e, "could not delete the request counts of windows that ended");
        }
    }
}

/// Whether the session `id` is still signed in as `user_id` at `epoch`: not signed out or expired,
/// the password unchanged since, the account enabled; `None` when the database cannot tell (the
/// stream that asks carries on, and asks again).
pub async fn still_signed_in(
    state: &super::state::AppState,
    id: tower_sessions::session::Id,
    user_id: i64,
    epoch: i32,
) -> Option<bool> {
    use tower_sessions::SessionStore;
    let record = match PgSessionStore::new(state.pool.clone()).load(&id).await {
        Ok(Some(record)) => record,
        Ok(None) => return Some(false),
        Err(e) => {
            tracing::warn!(error = %e, "could not recheck a stream's session");
            return None;
        }
    };
    let Some(signed_in) = record
        .data
        .get(SIGNED_IN)
        .and_then(|v| serde_json::from_value::<SignedIn>(v.clone()).ok())
    else {
        return Some(false);
    };
    let absolute = chrono::Duration::from_std(ABSOLUTE_EXPIRY).unwrap_or_default();
    if signed_in.user_id != user_id
        || signed_in.epoch != epoch
        || Utc::now() - signed_in.login_at > absolute
    {
        return Some(false);
    }
    match state.accounts.get(user_id).await {
        Ok(user) => Some(matches!(user, Some(u) if !u.disabled && u.session_epoch == epoch)),
        Err(e) => {
            tracing::warn!(error = %e, "could not recheck a stream's user");
            None
        }
    }
}

/// The client's address: the connection's peer, or whom a trusted proxy says it serves (see
/// [`super::client_address`]).
pub fn client_address(req_extensions: &axum::http::Extensions) -> IpAddr {
    if let Some(client) = req_extensions.get::<super::client_address::ClientAddress>() {
        return client.0;
    }
    req_extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// Paths that need no session.
pub(super) fn is_open(path: &str) -> bool {
    path == "/login"
        || path == "/_console/login"
        || path == "/_console/login_info"
        // The first admin's setup link: a 404 without the server's live code.
        || path == "/setup"
        || path == "/_console/setup"
        || path == "/_console/setup_check"
        || path.starts_with("/pkg/")
        || path.starts_with("/api/")
        || path == "/healthz"
        || path == "/readyz"
        || path == "/favicon.ico"
}

/// Starts a signed-in session for `user`: a new session id (the old one, which may have been
/// planted, stops working), a new CSRF token.
pub async fn sign_in(session: &Session, user: &User) -> Result<(), tower_sessions::session::Error> {
    session.cycle_id().await?;
    let now = Utc::now();
    let csrf = crate::accounts::secret::random_hex(24);
    session
        .insert(
            SIGNED_IN,
            SignedIn {
                user_id: user.id,
                login_at: now,
                seen_at: now,
                csrf,
                epoch: user.session_epoch,
            },
        )
        .await
}

/// Keeps the session signed in after its user's password changed (which ends their other
/// sessions): records the user's new epoch. The id and CSRF token stay, so the open page's forms
/// keep working.
pub async fn renew_epoch(
    session: &Session,
    user: &User,
) -> Result<(), tower_sessions::session::Error> {
    if let Some(mut signed_in) = session.get::<SignedIn>(SIGNED_IN).await? {
        signed_in.epoch = user.session_epoch;
        session.insert(SIGNED_IN, signed_in).await?;
    }
    Ok(())
}

/// Ends the session (logout): its row is deleted and the cookie cleared.
pub async fn sign_out(session: &Session) -> Result<(), tower_sessions::session::Error> {
    session.flush().await
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.to_string(),
    )
        .into_response()
}

/// A dashboard request's body, up to the dashboard's limit: 413 past it, 408 when it does not
/// arrive in time (see `listener`).
async fn read_body(body: Body) -> Result<axum::body::Bytes, Response> {
    axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|e| {
            if super::listener::body_timed_out(&e) {
                refuse(
                    StatusCode::REQUEST_TIMEOUT,
                    "the request body arrived too slowly",
                )
            } else {
                refuse(StatusCode::PAYLOAD_TOO_LARGE, "the request is too large")
            }
        })
}

/// Pages go to the login page (and back here after it); other requests get 401.
/// `next` is the path inside the dashboard; the login page is under its base.
fn sign_in_first(base: &str, path_and_query: &str, is_page: bool) -> Response {
    if is_page {
        let next: String = form_urlencoded::byte_serialize(path_and_query.as_bytes()).collect();
        Redirect::to(&format!("{base}/login?next={next}")).into_response()
    } else {
        refuse(StatusCode::UNAUTHORIZED, "sign in first")
    }
}

/// The guard of every dashboard request (see the module doc).
pub async fn require_operator(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if let Some(app_auth) = state.app_auth.clone() {
        return by_the_application(&state, &app_auth, req, next).await;
    }
    // The session layer is there whenever Kickoff's accounts are (`http::router`).
    let Some(session) = req.extensions().get::<Session>().cloned() else {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, "no session layer");
    };
    if is_open(&path) {
        return next.run(req).await;
    }
    let is_page =
        req.method() == Method::GET && path != "/events" && !path.starts_with("/_console/");
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or(path.clone());
    let signed_in = match session.get::<SignedIn>(SIGNED_IN).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "could not load a session");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "sessions are unavailable; try again",
            );
        }
    };
    let Some(mut signed_in) = signed_in else {
        return sign_in_first(&state.base, &path_and_query, is_page);
    };
    let now = Utc::now();
    let absolute = chrono::Duration::from_std(ABSOLUTE_EXPIRY).unwrap_or_default();
    let idle = chrono::Duration::from_std(IDLE_EXPIRY).unwrap_or_default();
    if now - signed_in.login_at > absolute || now - signed_in.seen_at > idle {
        let _ = sign_out(&session).await;
        return sign_in_first(&state.base, &path_and_query, is_page);
    }
    let user = match state.accounts.get(signed_in.user_id).await {
        Ok(Some(user)) if !user.disabled && user.session_epoch == signed_in.epoch => user,
        Ok(_) => {
            let _ = sign_out(&session).await;
            return sign_in_first(&state.base, &path_and_query, is_page);
        }
        Err(e) => {
            tracing::error!(error = %e, "could not load a session's user");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "the database is unreachable; try again",
            );
        }
    };
    if now - signed_in.seen_at > chrono::Duration::from_std(SEEN_RESOLUTION).unwrap_or_default() {
        signed_in.seen_at = now;
        if let Err(e) = session.insert(SIGNED_IN, signed_in.clone()).await {
            tracing::warn!(error = %e, "could not refresh a session");
        }
    }
    let (parts, body) = req.into_parts();
    let csrf = signed_in.csrf;
    admit(parts, body, user, csrf, false, &path, next).await
}

/// A request whose caller holds: its body read (now, not before), the CSRF token of a
/// state-changing request checked, the caller put in its extensions ([`Operator`] for the
/// server functions, `Me` for the pages).
async fn admit(
    mut parts: axum::http::request::Parts,
    body: Body,
    user: User,
    csrf: String,
    by_application: bool,
    path: &str,
    next: Next,
) -> Response {
    let bytes = match read_body(body).await {
        Ok(b) => b,
        Err(refusal) => return refusal,
    };
    // The application's cookie, unlike Kickoff's (`SameSite=Strict`), may come with another site's
    // form: every post of its callers, reads too, must come from the dashboard's own origin.
    if by_application && parts.method == Method::POST && !same_origin(&parts) {
        return refuse(
            StatusCode::FORBIDDEN,
            "a form of another site: posts come from the dashboard's own pages",
        );
    }
    if parts.method == Method::POST && !READ_ONLY_FUNCTIONS.contains(&path) {
        let presented = parts
            .headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .map(String::from)
            .or_else(|| form_field(&bytes, "csrf"));
        let valid = presented.is_some_and(|p| {
            crate::accounts::secret::constant_time_eq(p.as_bytes(), csrf.as_bytes())
        });
        if !valid {
            return refuse(
                StatusCode::FORBIDDEN,
                "the form is missing its security token: reload the page and try again",
            );
        }
    }
    let body = Body::from(bytes);
    let address = client_address(&parts.extensions);
    parts.extensions.insert(kickoff_app::console::accounts::Me {
        name: user.name.clone(),
        role: user.role.as_str().to_string(),
        csrf: csrf.clone(),
        by_application,
    });
    parts.extensions.insert(Operator {
        user,
        csrf,
        address,
    });
    next.run(Request::from_parts(parts, body)).await
}

/// The guard when the application Kickoff is mounted in signs its users in (see
/// [`super::app_auth`]): its hook says who calls; Kickoff's own sign-in, setup and sign-out are
/// not the way in (404; their pages go to the dashboard); the rest as for a session.
async fn by_the_application(
    state: &AppState,
    app_auth: &super::app_auth::AppAuth,
    req: Request,
    next: Next,
) -> Response {
    use super::app_auth::NoCaller;
    let path = req.uri().path().to_string();
    if path == "/login" || path == "/setup" {
        return Redirect::to(&kickoff_app::base::at(&state.base, "/")).into_response();
    }
    if matches!(
        path.as_str(),
        "/_console/login"
            | "/_console/login_info"
            | "/_console/logout"
            | "/_console/setup"
            | "/_console/setup_check"
    ) {
        return refuse(
            StatusCode::NOT_FOUND,
            "signed in by the application: Kickoff's own sign-in is off",
        );
    }
    if is_open(&path) {
        return next.run(req).await;
    }
    let is_page =
        req.method() == Method::GET && path != "/events" && !path.starts_with("/_console/");
    let (parts, body) = req.into_parts();
    let user = match app_auth.caller(&parts).await {
        Ok(user) => user,
        Err(NoCaller::SignedOut) => {
            // One leading `/`: `//elsewhere.example` would be another site to the sign-in.
            let asked = parts
                .uri
                .path_and_query()
                .map_or(path.as_str(), |p| p.as_str());
            let whole =
                kickoff_app::base::at(&state.base, &format!("/{}", asked.trim_start_matches('/')));
            return match app_auth.sign_in_url(&whole).filter(|_| is_page) {
                Some(url) => Redirect::to(&url).into_response(),
                None => refuse(StatusCode::UNAUTHORIZED, "sign in to the application first"),
            };
        }
        Err(NoCaller::Refused(why)) => return refuse(StatusCode::FORBIDDEN, &why),
        Err(NoCaller::Unavailable) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "the database is unreachable; try again",
            )
        }
    };
    let csrf = app_auth.csrf(&user);
    admit(parts, body, user, csrf, true, &path, next).await
}

/// A field of an `application/x-www-form-urlencoded` body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Security headers on every response. `Cache-Control: no-store` on everything but the static
/// files (a page or an answer may carry a token, a CSRF token or a job's secrets, which no shared
/// proxy or browser disk should keep); HSTS when the server is reached over HTTPS (secure cookies
/// on).
pub async fn security_headers(State(https): State<bool>, req: Request, next: Next) -> Response {
    let is_static = req.uri().path().starts_with("/pkg/");
    let mut res = next.run(req).await;
    let headers = res.headers_mut();
    if !is_static {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if https {
        headers.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    // A rendered page set its own policy, with its scripts' nonce; everything else gets the
    // policy without one (no inline script at all).
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        if let Ok(value) = HeaderValue::from_str(&kickoff_app::content_security_policy(None)) {
            headers.insert(header::CONTENT_SECURITY_POLICY, value);
        }
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    res
}

/// The login page's server function: checked for a same-origin request (it has no session token
/// yet), then the credentials.
pub fn same_origin(parts: &axum::http::request::Parts) -> bool {
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let origin_ok = match parts
        .headers
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
    {
        None => true,
        Some(origin) => {
            host.is_some_and(|h| origin.split_once("://").is_some_and(|(_, rest)| rest == h))
        }
    };
    let fetch_site_ok = parts
        .headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v == "same-origin" || v == "none");
    origin_ok && fetch_site_ok
}
