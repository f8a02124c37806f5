//! Bearer-token authentication of the REST API.
//!
//! Two kinds of token are accepted:
//! - a user's API token (`ko_…`, made in the dashboard): looked up by its hash on every request, so
//!   a revoked token, or one whose owner was disabled, is refused at its very next request; it acts
//!   with its owner's role as it is now, within its scope (`read`: GET only);
//! - the bootstrap token (`KICKOFF_API_TOKEN`), which acts as an admin with write scope: for the
//!   first scripts, before anyone has signed in.
//!
//! The caller goes into the request's extensions as an [`ApiCaller`] (the audit log names it).

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::AppError;
use super::state::AppState;
use crate::accounts::{Role, TokenScope};

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
    Ok(res)
}

// The comparison lives with the secrets (the setup link uses it too).
pub(crate) use crate::accounts::secret::constant_time_eq;
