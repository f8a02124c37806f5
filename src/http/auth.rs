//! Bearer-token authentication of the REST API.
//!
//! Two kinds of token are accepted:
//! - a user's API token (`ko_…`, made in the dashboard): looked up by its hash on every request, so
//!   a revoked token, or one whose owner was disabled, is refused at its very next request; it acts
//!   with its owner's role as it is now, within its scope (`read`: GET only);
//! - the bootstrap token (`KICKOFF_API_TOKEN`), which acts as an admin with write scope: for the
//!   first scripts, before anyone has signed in.
//!
//! A token's calls count against `KICKOFF_API_RATE_LIMIT` when it is set (see
//! `accounts::request_limit`): past it, 429 with `Retry-After`.
//!
//! The caller goes into the request's extensions as an [`ApiCaller`] (the audit log names it).

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::AppError;
use super::state::AppState;
use crate::accounts::{Role, Taken, TokenScope};

/// Who is calling the REST API.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiCaller {
    /// The token owner's name, or `api-token` for the bootstrap token.
    pub actor: String,
    pub role: Role,
    pub scope: TokenScope,
    /// The user token's id; `None` for the bootstrap token.
    pub token_id: Option<i64>,
}

pub use crate::accounts::BOOTSTRAP_ACTOR;

impl ApiCaller {
    /// 403 unless the caller is an admin; `what` says what only admins do ("manage alert rules").
    pub fn must_be_admin(&self, what: &str) -> Result<(), super::error::AppError> {
        if self.role < Role::Admin {
            return Err(super::error::AppError::Forbidden(format!(
                "{} is not an admin: only admins {what}",
                self.actor
            )));
        }
        Ok(())
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Lets the request through when it carries `Authorization: Bearer <token>` with a token allowed
/// to make it: 401 for no token or an unknown, revoked or disabled one; 403 for a read token
/// asked to change something, or an owner whose role may not act.
pub async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, AppError> {
    let presented = bearer(req.headers()).ok_or(AppError::Unauthorized)?;
    let caller = if state.api_token.matches(presented) {
        ApiCaller {
            actor: BOOTSTRAP_ACTOR.into(),
            role: Role::Admin,
            scope: TokenScope::Write,
            token_id: None,
        }
    } else {
        let owner = state
            .accounts
            .authenticate_token(presented)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "could not check an API token");
                AppError::Unavailable
            })?
            .ok_or(AppError::Unauthorized)?;
        ApiCaller {
            actor: owner.user_name,
            role: owner.role,
            scope: owner.scope,
            token_id: Some(owner.token_id),
        }
    };
    // Past its token's rate, a call is refused before anything else, unaudited (a flood would
    // write a row per call; the metric counts them).
    let taken = state
        .accounts
        .take_api_call(caller.token_id)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "could not count an API call against its token's limit");
            AppError::Unavailable
        })?;
    if let Some(taken) = taken.filter(|t| !t.allowed()) {
        let mut res = AppError::TooManyRequests {
            message: format!(
                "this token reached its limit of calls ({} per token, KICKOFF_API_RATE_LIMIT): try again in {} s",
                state
                    .accounts
                    .request_limits()
                    .per_token
                    .map_or_else(|| taken.limit.to_string(), |r| r.to_string()),
                taken.retry_after_secs()
            ),
            retry_after_secs: taken.retry_after_secs(),
        }
        .into_response();
        rate_limit_headers(&mut res, &taken);
        return Ok(res);
    }
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    let refusal = if reads {
        None
    } else if caller.scope < TokenScope::Write {
        Some(AppError::Forbidden(
            "this token may only read: make a write token to change things".into(),
        ))
    } else if caller.role < Role::Operator {
        Some(AppError::Forbidden(format!(
            "{} is a viewer: only an operator or admin may change things",
            caller.actor
        )))
    } else {
        None
    };
    // The caller also rides on the response, for the audit layer outside this one (which records
    // refused calls too).
    let mut res = match refusal {
        Some(refusal) => refusal.into_response(),
        None => {
            req.extensions_mut().insert(caller.clone());
            next.run(req).await
        }
    };
    res.extensions_mut().insert(caller);
    if let Some(taken) = &taken {
        rate_limit_headers(&mut res, taken);
    }
    Ok(res)
}

/// The `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` (seconds) headers of a call
/// counted against its token's limit.
fn rate_limit_headers(res: &mut Response, taken: &Taken) {
    let headers = res.headers_mut();
    for (name, value) in [
        ("ratelimit-limit", taken.limit as u64),
        ("ratelimit-remaining", taken.remaining() as u64),
        ("ratelimit-reset", taken.retry_after_secs()),
    ] {
        headers.insert(HeaderName::from_static(name), HeaderValue::from(value));
    }
}
