//! Audit entries for the REST API's state-changing calls, refused ones included, named after the
//! token's owner (the bootstrap token as `api-token`, an admin). Reads are not recorded, nor are
//! players' predictions (the game's traffic, not an operator's actions), nor calls without a valid
//! token (no one to name).

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use super::auth::ApiCaller;
use super::session::client_address;
use super::state::AppState;
use crate::audit::AuditEntry;

/// What a handler adds to its call's entry (as a response extension): a bulk action's filter (or
/// ids) and how many jobs it changed.
#[derive(Debug, Clone, Default)]
pub struct AuditDetail {
    pub filter: Option<serde_json::Value>,
    pub count: Option<i64>,
}

/// The route players post predictions to: not recorded.
const PREDICTIONS_ROUTE: &str = "/questions/{id}/predictions";
/// The most of a request's path kept in an entry's target (the column holds 2000 characters; a
/// path can be longer, and an entry that cannot be written is a change that leaves no trace).
const TARGET_PATH_CHARS: usize = 500;

/// The route a request matched, as the API table spells it (`/jobs/{id}/cancel`), so that every
/// spelling of a path (`/jobs/+00042`) is recorded under its route, with a bounded name.
fn route_of(req: &Request) -> Option<String> {
    let matched = req.extensions().get::<MatchedPath>()?.as_str();
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
    let route = route_of(&req);
    if method == Method::GET
        || method == Method::HEAD
        || route.as_deref() == Some(PREDICTIONS_ROUTE)
    {
        return next.run(req).await;
    }
    let address = client_address(req.extensions());
    let res = next.run(req).await;
    let Some(caller) = res.extensions().get::<ApiCaller>().cloned() else {
        return res;
    };
    let status = res.status();
    let detail = res
        .extensions()
        .get::<AuditDetail>()
        .cloned()
        .unwrap_or_default();
    let path = bounded(&path);
    let target = match caller.token_id {
        Some(id) => format!("/api/v1{path} (token {id})"),
        None => format!("/api/v1{path}"),
    };
    let route = route.unwrap_or_else(|| "(no route)".into());
    state
        .auditor
        .record(AuditEntry {
            actor: caller.actor,
            role: caller.role.as_str().to_string(),
            action: format!("api.{method} {route}"),
            target: Some(target),
            filter: detail.filter,
            count: detail.count,
            address: Some(address),
            result: if status.is_success() {
                Ok(())
            } else {
                Err(format!("HTTP {}", status.as_u16()))
            },
        })
        .await;
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
