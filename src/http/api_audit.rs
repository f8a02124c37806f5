//! Audit entries for the REST API's state-changing calls, refused ones included, named after the
//! token's owner (the bootstrap token as `api-token`, an admin). Reads are not recorded, nor are
//! players' predictions (the game's traffic, not an operator's actions), nor calls without a valid
//! token (no one to name).

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use super::auth::ApiCaller;
use super::session::client_address;
use super::state::AppState;
use crate::audit::AuditEntry;

/// The route of a path, ids replaced (`/jobs/42/cancel` → `/jobs/{id}/cancel`), so entries of one
/// kind share an action name.
fn route_of(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
                "{id}"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

pub async fn record(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    if method == Method::GET || method == Method::HEAD || path.ends_with("/predictions") {
        return next.run(req).await;
    }
    let address = client_address(req.extensions());
    let res = next.run(req).await;
    let Some(caller) = res.extensions().get::<ApiCaller>().cloned() else {
        return res;
    };
    let status = res.status();
    let target = match caller.token_id {
        Some(id) => format!("/api/v1{path} (token {id})"),
        None => format!("/api/v1{path}"),
    };
    state
        .auditor
        .record(AuditEntry {
            actor: caller.actor,
            role: caller.role.as_str().to_string(),
            action: format!("api.{method} {}", route_of(&path)),
            target: Some(target),
            filter: None,
            count: None,
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
    use super::route_of;

    #[test]
    fn ids_become_placeholders() {
        assert_eq!(route_of("/jobs/42/cancel"), "/jobs/{id}/cancel");
        assert_eq!(route_of("/queues/default/pause"), "/queues/default/pause");
        assert_eq!(route_of("/jobs"), "/jobs");
    }
}
