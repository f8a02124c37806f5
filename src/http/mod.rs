//! The HTTP surface: the REST API under `/api/v1`, health probes, and the Leptos dashboard.

pub mod api_alerts;
pub mod api_audit;
pub mod api_history;
pub mod api_inbound;
pub mod api_job_tools;
pub mod api_jobs;
pub mod api_questions;
pub mod api_queues;
pub mod api_schedules;
pub mod api_webhook_deliveries;
pub mod api_webhook_endpoints;
pub mod api_workflows;
pub mod app_auth;
pub mod auth;
pub mod body_limits;
pub mod client_address;
pub mod console;
pub mod error;
pub mod extract;
pub mod host_check;
pub mod listener;
pub mod metrics;
pub mod openapi;
pub mod reader;
pub mod rechecks;
pub mod schema;
pub mod session;
pub mod sse;
pub mod state;
pub mod traced;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{middleware, Json, Router};
use leptos_axum::{generate_route_list, LeptosRoutes};
use serde_json::json;

use self::body_limits::{MAX_BODY_BYTES, MAX_DASHBOARD_BODY_BYTES};
use self::error::AppError;
use self::state::AppState;

/// The REST API (authenticated by bearer token).
pub fn api_router(state: AppState) -> Router<AppState> {
    // Built from the table the OpenAPI document is generated from (see `openapi`).
    let (mut router, mut inbound) = (Router::new(), Router::new());
    for endpoint in openapi::endpoints() {
        if openapi::is_inbound(endpoint.path) {
            inbound = inbound.route(endpoint.path, (endpoint.route)());
        } else {
            router = router.route(endpoint.path, (endpoint.route)());
        }
    }
    // A partner's signed calls: the signature instead of the token, then the same audit.
    let inbound = inbound
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            api_inbound::verified,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            api_audit::record,
        ))
        .layer(middleware::from_fn(traced::traced));
    router
        .fallback(|| async { AppError::NotFound("no such endpoint".into()) })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // Outermost last: the audit layer sees the caller the token layer found (on the response).
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .layer(middleware::from_fn_with_state(state, api_audit::record))
        // Outermost: the call's span (continuing the caller's trace) holds everything inside.
        .layer(middleware::from_fn(traced::traced))
        .merge(inbound)
}

/// The whole application: API, probes, dashboard and static files, under the state's base path
/// (`AppState::with_base`; the site's root by default).
///
/// The dashboard (pages, server functions, its live stream, static files) sits behind the session
/// guard; the REST API has its own bearer tokens; the probes are open.
pub fn router(state: AppState) -> Router {
    let leptos_options = state.leptos_options.clone();
    let routes = generate_route_list(kickoff_app::App);
    let console = Arc::new(console::ServerConsole::new(
        state.client.clone(),
        state.questions.clone(),
        state.accounts.clone(),
        state.auditor.clone(),
        state.endpoints.clone(),
        state.alerts.clone(),
        state.reader.clone(),
    ));
    // What every render of the dashboard is given: its console and the base it is served under
    // (the not-found page's too).
    let context = {
        let base = state.base.to_string();
        move || {
            kickoff_app::console::provide(console.clone());
            leptos::prelude::provide_context(kickoff_app::base::BasePath(base.clone()));
        }
    };
    let dashboard = Router::new()
        // The dashboard's live stream (the API has its own, behind the token).
        .route("/events", get(sse::events))
        // The list's export links (the session's; the API's export takes a token).
        .route("/jobs/export", get(console::jobs::export))
        .leptos_routes_with_context(&state, routes, context.clone(), {
            let options = leptos_options.clone();
            move || kickoff_app::shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(context, kickoff_app::shell))
        // Innermost: only the pages' renderer sees the base put back.
        .layer(middleware::from_fn_with_state(
            state.base.clone(),
            pages_under_base,
        ))
        .layer(middleware::from_fn(console_input_errors))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            session::require_operator,
        ))
        // Kickoff's sessions, unless the application signs its users in: its own session layer
        // (tower-sessions too, perhaps) is then the one its hook reads.
        .layer(tower::util::option_layer(state.app_auth.is_none().then(
            || session::layer(state.pool.clone(), state.secure_cookies, &state.base),
        )))
        // Outermost: even the open sign-in function reads no more than this.
        .layer(middleware::from_fn(limit_dashboard_bodies));
    let app = Router::new()
        .nest("/api/v1", api_router(state.clone()))
        .route(
            "/metrics",
            get(metrics::metrics).layer(middleware::from_fn_with_state(
                state.clone(),
                auth::require_token,
            )),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(dashboard)
        .layer(middleware::from_fn_with_state(
            state.secure_cookies,
            session::security_headers,
        ))
        // Outermost: every layer inside sees the client's address.
        .layer(middleware::from_fn_with_state(
            state.trusted_proxies.clone(),
            client_address::resolve,
        ))
        .layer(middleware::from_fn_with_state(
            state.allowed_hosts.clone(),
            host_check::check,
        ))
        .with_state(state.clone());
    // Under a base, the whole of it (every layer sees the paths without the base, as at the root).
    match &*state.base {
        "" => app,
        // The nest answers the base itself (the overview), not the base and a `/`: sent there.
        base => {
            let to = base.to_string();
            Router::new().nest(base, app).route(
                &format!("{base}/"),
                get(move |RawQuery(query): RawQuery| async move {
                    axum::response::Redirect::permanent(&match query {
                        Some(query) => format!("{to}?{query}"),
                        None => to,
                    })
                }),
            )
        }
    }
}

/// A mounted dashboard's pages are rendered under its base (the router of the page is given it,
/// and matches the whole path), while the nest that mounted it took the base off the request:
/// put back for the pages, not for the server functions (found by their own path) or the files.
async fn pages_under_base(
    State(base): State<Arc<str>>,
    mut req: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    let path = req.uri().path();
    if !base.is_empty() && !path.starts_with("/_console/") && !path.starts_with("/pkg/") {
        let whole = kickoff_app::base::at(
            &base,
            req.uri().path_and_query().map_or(path, |p| p.as_str()),
        );
        let mut parts = req.uri().clone().into_parts();
        if let Ok(whole) = whole.parse() {
            parts.path_and_query = Some(whole);
            if let Ok(uri) = axum::http::Uri::from_parts(parts) {
                *req.uri_mut() = uri;
            }
        }
    }
    next.run(req).await
}

/// Reads a dashboard request's body up to [`MAX_DASHBOARD_BODY_BYTES`], answering 413 past it,
/// before anything else (the session store, the sign-in check) spends work on it.
async fn limit_dashboard_bodies(
    req: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    if req.method() == axum::http::Method::GET || req.method() == axum::http::Method::HEAD {
        return next.run(req).await;
    }
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request is larger than {MAX_DASHBOARD_BODY_BYTES} bytes"),
        )
            .into_response()
    };
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_DASHBOARD_BODY_BYTES as u64) {
        return too_large();
    }
    // Past the sign-in, the session guard reads the body (bounded the same way) only once the
    // session holds: an anonymous client cannot make the server wait on, or hold, a large body.
    if !session::is_open(req.uri().path()) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, MAX_DASHBOARD_BODY_BYTES).await {
        Ok(bytes) => {
            next.run(axum::extract::Request::from_parts(
                parts,
                axum::body::Body::from(bytes),
            ))
            .await
        }
        Err(e) if listener::body_timed_out(&e) => (
            StatusCode::REQUEST_TIMEOUT,
            "the request body arrived too slowly",
        )
            .into_response(),
        Err(_) => too_large(),
    }
}

/// The most a dashboard server function's error body is read to classify it.
const CONSOLE_ERROR_BYTES: usize = 64 * 1024;

/// A dashboard server function whose arguments do not parse (a hand-made request: the dashboard's
/// own forms always send well-formed ones) fails inside the server-function layer with a 500. It
/// is the client's mistake: answer 400. Refusals of the console itself already carry their status.
async fn console_input_errors(
    req: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    if !req.uri().path().starts_with("/_console/") {
        return next.run(req).await;
    }
    let res = next.run(req).await;
    if res.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let bytes = match axum::body::to_bytes(body, CONSOLE_ERROR_BYTES).await {
        Ok(b) => b,
        Err(_) => return (StatusCode::INTERNAL_SERVER_ERROR, "").into_response(),
    };
    // server_fn encodes its errors as `Variant|message`.
    let text = String::from_utf8_lossy(&bytes);
    let variant = text.split('|').next().unwrap_or("");
    if matches!(variant, "Args" | "Deserialization" | "MissingArg") {
        parts.status = StatusCode::BAD_REQUEST;
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Ready when the database answers. Unauthenticated, so it says only that: no node id, no error
/// text (the error goes to the log).
async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<serde_json::Value>) {
    match state.client.db_now().await {
        Ok(_) => (StatusCode::OK, Json(json!({ "ready": true }))),
        Err(e) => {
            tracing::warn!(error = %e, "not ready: the database does not answer");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "ready": false })),
            )
        }
    }
}
