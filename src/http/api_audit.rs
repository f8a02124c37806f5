//! Audit entries for the REST API's state-changing calls, refused ones included, named after the
//! token's owner (the bootstrap token as `api-token`, an admin). Reads are not recorded, nor are
//! players' predictions (the game's traffic, not an operator's actions), nor calls without a valid
//! token (no one to name).
//!
//! A handler that changes the database takes an [`Audit`] and does its change in
//! [`Audit::run`]: the entry commits with the change, or the change is undone and the call is
//! answered 503 (`not_recorded`). The layer ([`record`]) records the calls that did not (their
//! refusals, mostly) after the answer.

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::auth::ApiCaller;
use super::error::AppError;
use super::session::client_address;
use super::state::AppState;
use crate::audit::{AuditEntry, Auditor, Work};

/// What the layer knows of a call before its handler runs, for the handler's entry.
#[derive(Debug, Clone)]
struct Draft {
    method: Method,
    route: String,
    path: String,
    address: std::net::IpAddr,
}

impl Draft {
    fn entry(&self, caller: &ApiCaller, result: Result<(), String>) -> AuditEntry {
        let target = match caller.token_id {
            Some(id) => format!("/api/v1{} (token {id})", self.path),
            None => format!("/api/v1{}", self.path),
        };
        AuditEntry {
            actor: caller.actor.clone(),
            role: caller.role.as_str().to_string(),
            action: format!("api.{} {}", self.method, self.route),
            target: Some(target),
            filter: None,
            count: None,
            address: Some(self.address),
            result,
        }
    }
}

/// Marks an answer whose entry is written already.
#[derive(Debug, Clone, Copy)]
struct Recorded;

/// An answer whose audit entry committed with its change.
pub struct Audited<T>(pub T);

impl<T: IntoResponse> IntoResponse for Audited<T> {
    fn into_response(self) -> Response {
        let mut res = self.0.into_response();
        res.extensions_mut().insert(Recorded);
        res
    }
}

/// The count of an action's entry when it changes one thing: none.
pub fn uncounted<T>(_: &T) -> Option<i64> {
    None
}

/// A state-changing call's audit entry, to write with its change.
pub struct Audit {
    auditor: Auditor,
    entry: AuditEntry,
}

impl FromRequestParts<AppState> for Audit {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AppError> {
        let draft = parts.extensions.get::<Draft>();
        let caller = parts.extensions.get::<ApiCaller>();
        let (Some(draft), Some(caller)) = (draft, caller) else {
            return Err(AppError::Internal(
                "an audited route outside the audit and token layers".into(),
            ));
        };
        Ok(Audit {
            auditor: state.auditor.clone(),
            entry: draft.entry(caller, Ok(())),
        })
    }
}

impl Audit {
    /// The entry keeps what a bulk action was applied to (its ids or its filter).
    pub fn applied_to(mut self, what: Value) -> Self {
        self.entry.filter = Some(what);
        self
    }

    /// An entry of this call for a second action it does (`action` its name): a shift records the
    /// questions it moves apart from the jobs.
    pub fn also(&self, action: &str) -> Audit {
        Audit {
            auditor: self.auditor.clone(),
            entry: AuditEntry {
                action: action.to_string(),
                ..self.entry.clone()
            },
        }
    }

    /// [`Audit::run`], the entry completed by `note` from the result before it is written (see
    /// [`Auditor::run_noting`]).
    pub async fn run_noting<T>(
        self,
        note: impl FnOnce(&T, &mut AuditEntry),
        action: impl AsyncFnOnce(&mut Work) -> Result<T, AppError>,
    ) -> Result<Audited<T>, AppError> {
        self.auditor
            .run_noting(self.entry, note, action)
            .await
            .map(Audited)
    }

    /// The entry, for an operation that records its own outcomes (see `crate::operations`):
    /// answer its result with [`recorded`].
    pub fn into_entry(self) -> AuditEntry {
        self.entry
    }

    /// Runs `action` and commits its change with the entry (see [`Auditor::run`]); `count`: how
    /// many jobs it changed, if it says.
    pub async fn run<T>(
        self,
        count: impl FnOnce(&T) -> Option<i64>,
        action: impl AsyncFnOnce(&mut Work) -> Result<T, AppError>,
    ) -> Result<Audited<T>, AppError> {
        self.auditor
            .run(self.entry, count, action)
            .await
            .map(Audited)
    }
}

/// The answer of an operation that recorded its outcome, a refusal's included (see
/// `crate::operations`): the layer records nothing more.
pub fn recorded<T: IntoResponse>(done: Result<T, AppError>) -> Response {
    match done {
        Ok(t) => Audited(t).into_response(),
        Err(e) => Audited(e).into_response(),
    }
}

/// How an audit entry words a refusal of the API.
pub fn worded(e: &AppError) -> String {
    e.to_string()
}

/// The route players post predictions to: not recorded.
const PREDICTIONS_ROUTE: &str = "/questions/{id}/predictions";
/// The most of a request's path kept in an entry's target (the column holds 2000 characters; a
/// path can be longer, and an entry that cannot be written is a change that leaves no trace).
const TARGET_PATH_CHARS: usize = 500;

/// The route a request matched, as the API table spells it (`/jobs/{id}/cancel`), so that every
/// spelling of a path (`/jobs/+00042`) is recorded under its route, with a bounded name.
/// A server under a base (`AppState::with_base`) matched it too: it is not the route's.
fn route_of(req: &Request, base: &str) -> Option<String> {
    let matched = req.extensions().get::<MatchedPath>()?.as_str();
    let matched = matched.strip_prefix(base).unwrap_or(matched);
    Some(
        matched
            .strip_prefix("/api/v1")
            .unwrap_or(matched)
            .to_string(),
    )
}

/// `path`, cut to [`TARGET_PATH_CHARS`] characters.
fn bounded(path: &str) -> String {
    match path.char_indices().nth(TARGET_PATH_CHARS) {
        Some((cut, _)) => format!("{}…", &path[..cut]),
        None => path.to_string(),
    }
}

pub async fn record(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let route = route_of(&req, &state.base);
    if method == Method::GET
        || method == Method::HEAD
        || route.as_deref() == Some(PREDICTIONS_ROUTE)
    {
        return next.run(req).await;
    }
    let draft = Draft {
        method,
        route: route.unwrap_or_else(|| "(no route)".into()),
        path: bounded(&path),
        address: client_address(req.extensions()),
    };
    let mut req = req;
    req.extensions_mut().insert(draft.clone());
    let res = next.run(req).await;
    if res.extensions().get::<Recorded>().is_some() {
        return res;
    }
    let Some(caller) = res.extensions().get::<ApiCaller>() else {
        return res;
    };
    let status = res.status();
    let result = if status.is_success() {
        // A change made outside `Audit::run` (none should be): recorded after the fact.
        tracing::warn!(action = %draft.route, "an API change was not audited with its transaction");
        Ok(())
    } else {
        Err(format!("HTTP {}", status.as_u16()))
    };
    state.auditor.record(draft.entry(caller, result)).await;
    res
}

#[cfg(test)]
mod tests {
    use super::bounded;

    #[test]
    fn a_long_path_is_cut_to_fit_its_column() {
        assert_eq!(bounded("/jobs/42"), "/jobs/42");
        let long = format!("/jobs/+{}42", "0".repeat(3000));
        assert_eq!(bounded(&long).chars().count(), super::TARGET_PATH_CHARS + 1);
    }
}
