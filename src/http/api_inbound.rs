//! `/api/v1/inbound/{endpoint}/signals`: a partner's signed call (Standard Webhooks) sends a
//! signal to a live workflow run, by the run's key (`game:8812`), for the workflows its
//! endpoint names (`signal_workflows`). No bearer token: the signature, with the endpoint's
//! secret, is the caller's proof ([`verified`] checks it before anything is read); the call is
//! then audited as `endpoint:<id>`, an operator, like any change. A replay within the
//! signature's tolerance is answered with the signal that stands.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api_audit::{uncounted, Audit, Audited};
use super::auth::ApiCaller;
use super::body_limits::MAX_BODY_BYTES;
use super::error::AppError;
use super::extract::{ApiJson, EndpointIdPath};
use super::state::AppState;
use crate::accounts::{Role, TokenScope};
use crate::schema_rules::NO_NUL;
use crate::webhooks::inbound::Signed;

/// The workflows the verified endpoint may signal.
#[derive(Debug, Clone)]
pub struct Partner {
    pub endpoint: i64,
    pub workflows: Vec<String>,
}

/// Who a verified call is, in the audit log and on the signal it sends.
pub fn partner_actor(endpoint: i64) -> String {
    format!("endpoint:{endpoint}")
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Lets through a call signed with its endpoint's secret, as that partner (the body read once,
/// up to the API's limit, and handed on as it came); answers 401 `unsigned` otherwise.
pub async fn verified(
    State(state): State<AppState>,
    EndpointIdPath(endpoint): EndpointIdPath,
    req: Request,
    next: Next,
) -> Result<Response, AppError> {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| AppError::PayloadTooLarge)?;
    let signed = Signed {
        id: header(&parts.headers, "webhook-id"),
        timestamp: header(&parts.headers, "webhook-timestamp"),
        signature: header(&parts.headers, "webhook-signature"),
        body: &bytes,
    };
    let workflows = state.endpoints.inbound(endpoint, &signed).await?;
    let caller = ApiCaller {
        actor: partner_actor(endpoint),
        role: Role::Operator,
        scope: TokenScope::Write,
        token_id: None,
    };
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(caller.clone());
    req.extensions_mut().insert(Partner {
        endpoint,
        workflows,
    });
    let mut res = next.run(req).await;
    // For the audit layer outside, which records refusals too.
    res.extensions_mut().insert(caller);
    Ok(res)
}

/// A partner's signal.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboundSignal {
    /// The key of the live run to signal (`game:8812`), a run of one of the workflows the
    /// endpoint may signal (`signal_workflows`).
    #[schemars(length(min = 1, max = 255), regex(pattern = NO_NUL))]
    pub key: String,
    /// The signal's name (`final`): the first of a name stands.
    #[schemars(length(min = 1, max = 128), regex(pattern = NO_NUL))]
    pub name: String,
    /// What the steps waiting for it read; `null` when absent. At most 64 KiB.
    #[serde(default)]
    #[schemars(with = "crate::schema_rules::JsonWithoutNul")]
    pub payload: Value,
}

/// What a partner learns: which run took its signal, and whether this call's was the one
/// stored. Nothing else of the run.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct InboundAnswer {
    pub run: i64,
    pub name: String,
    /// When the signal that stands came.
    pub received_at: DateTime<Utc>,
    /// A signal of that name came first and stands (this one changed nothing).
    pub existing: bool,
}

pub async fn signal(
    State(state): State<AppState>,
    Extension(partner): Extension<Partner>,
    audit: Audit,
    ApiJson(body): ApiJson<InboundSignal>,
) -> Result<impl IntoResponse, AppError> {
    let client = &state.client;
    let source = partner_actor(partner.endpoint);
    let Audited((run, signal, stored)) = audit
        .run(uncounted, async |work| {
            Ok(client
                .signal_workflow_key_with(
                    work.conn().await?,
                    &body.key,
                    &partner.workflows,
                    &body.name,
                    &body.payload,
                    &source,
                )
                .await?)
        })
        .await?;
    let status = if stored {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(Audited((
        status,
        Json(InboundAnswer {
            run: run.id,
            name: signal.name,
            received_at: signal.received_at,
            existing: !stored,
        }),
    )))
}
