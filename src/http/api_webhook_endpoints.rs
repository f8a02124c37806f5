//! `/api/v1/webhook-endpoints`: admins make, list, rotate and delete the endpoints whose calls are
//! signed (see `crate::webhooks`). A secret is in the answer that made it, and nowhere else:
//! not in a list, an audit entry or a log line.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;

use super::api_audit::{uncounted, Audit, Audited};
use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::{ApiJson, EndpointIdPath};
use super::state::AppState;
use crate::webhooks::service::DEFAULT_OVERLAP;
use crate::webhooks::{EndpointRow, NewSecret};

/// A new endpoint.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// `http://` or `https://` and a host, at most 2,048 characters: webhook calls whose URL
    /// starts with it are signed with the endpoint's secret (the longest matching prefix wins).
    pub url_prefix: String,
}

/// A rotation.
#[derive(schemars::JsonSchema, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RotateEndpoint {
    /// How long the current secret keeps signing beside the new one, 0 to 604,800 (7 days).
    /// Default: 86,400 (a day).
    pub overlap_secs: Option<u64>,
}

fn admin(caller: &ApiCaller) -> Result<(), AppError> {
    caller.must_be_admin("manage webhook endpoints")
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
) -> Result<Json<Vec<EndpointRow>>, AppError> {
    admin(&caller)?;
    Ok(Json(state.endpoints.list().await?))
}

pub async fn create(
    State(state): State<AppState>,
    audit: Audit,
    Extension(caller): Extension<ApiCaller>,
    ApiJson(body): ApiJson<CreateEndpoint>,
) -> Result<(StatusCode, Audited<Json<NewSecret>>), AppError> {
    admin(&caller)?;
    let made = audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(
                state
                    .endpoints
                    .create_with(conn, &body.url_prefix, Some(&caller.actor))
                    .await?,
            ))
        })
        .await?;
    Ok((StatusCode::CREATED, made))
}

pub async fn rotate(
    State(state): State<AppState>,
    audit: Audit,
    Extension(caller): Extension<ApiCaller>,
    EndpointIdPath(id): EndpointIdPath,
    ApiJson(body): ApiJson<RotateEndpoint>,
) -> Result<Audited<Json<NewSecret>>, AppError> {
    admin(&caller)?;
    let overlap = body
        .overlap_secs
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_OVERLAP);
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(state.endpoints.rotate_with(conn, id, overlap).await?))
        })
        .await
}

pub async fn delete(
    State(state): State<AppState>,
    audit: Audit,
    Extension(caller): Extension<ApiCaller>,
    EndpointIdPath(id): EndpointIdPath,
) -> Result<Audited<Json<EndpointRow>>, AppError> {
    admin(&caller)?;
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(state.endpoints.delete_with(conn, id).await?))
        })
        .await
}
