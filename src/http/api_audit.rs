//! Audit entries for the REST API's state-changing calls (the bootstrap token acts as an admin).
//! Reads are not recorded, nor are players' predictions: those are the game's traffic, not an
//! operator's actions.

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

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
    let status = res.status();
    state
        .auditor
        .record(AuditEntry {
            actor: "api-token".into(),
            role: "admin".into(),
            action: format!("api.{method} {}", route_of(&path)),
            target: Some(format!("/api/v1{path}")),
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
