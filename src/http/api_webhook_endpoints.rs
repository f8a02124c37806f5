//! `/api/v1/webhook-endpoints`: admins make, list, change, rotate and delete the endpoints whose
//! calls are signed and may be allowed (see `crate::webhooks`). A secret is in the answer that
//! made it, and nowhere else: not in a list, an audit entry or a log line; a default header's
//! value is in no answer at all.

use std::collections::BTreeMap;
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
use crate::webhooks::{EndpointRow, EndpointSettings, NewSecret};

/// Two default headers of one name in different cases: no schema states it.
fn refuse_twice(headers: Option<&BTreeMap<String, String>>) -> Result<(), AppError> {
    match headers.and_then(crate::webhooks::headers::twice_in_any_case) {
        None => Ok(()),
        Some(name) => Err(AppError::Unprocessable {
            code: "inconsistent",
            message: format!("headers: `{name}` is given twice (in another case)"),
        }),
    }
}

/// A new endpoint.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::schema_rules::TrueNeedsTrue("private_network", "allow_calls"))]
pub struct CreateEndpoint {
    /// `http://` or `https://` and a host, at most 2,000 characters: webhook calls whose URL
    /// starts with it are signed with the endpoint's secret (the longest matching prefix wins).
    #[schemars(length(min = 1, max = 2000), regex(pattern = crate::webhooks::service::PREFIX_PATTERN))]
    #[schemars(extend("x-message" = "url_prefix: an http:// or https:// URL with a host, at most 2000 characters, without spaces, user info or fragment"))]
    pub url_prefix: String,
    /// Headers sent with every call under the endpoint, beneath the job's own (a job's header of
    /// the same name wins): at most 20, values at most 4,096 bytes, not `Host`, the hop-by-hop
    /// headers or the `webhook-*` ones. Sealed in the database; only the names are shown again.
    #[serde(default)]
    #[schemars(schema_with = "crate::webhooks::headers::defaults_schema")]
    pub headers: Option<BTreeMap<String, String>>,
    /// Webhook jobs may call URLs under the prefix. Default: false (the endpoint only signs).
    #[serde(default)]
    pub allow_calls: Option<bool>,
    /// With `allow_calls`: the host may resolve to a private, loopback or link-local address
    /// (as `private:` in `KICKOFF_WEBHOOK_ALLOWED_HOSTS`). Default: false.
    #[serde(default)]
    pub private_network: Option<bool>,
    /// The methods the default headers go with: a webhook job under the prefix with another
    /// method is refused (422) while the endpoint has default headers. 1 to 5 of GET, POST, PUT,
    /// PATCH, DELETE. Default: POST.
    #[serde(default)]
    #[schemars(length(min = 1, max = 5))]
    pub header_methods: Option<Vec<HttpMethod>>,
    /// The workflows (by name, `game`) whose live runs the partner may send signals to, signed
    /// with this endpoint's secret (`POST /api/v1/inbound/{endpoint}/signals`). At most 20.
    /// Default: none (it sends no signal).
    #[serde(default)]
    #[schemars(length(max = 20), inner(length(min = 1, max = 128), regex(pattern = crate::schema_rules::NOT_BLANK)))]
    pub signal_workflows: Option<Vec<String>>,
}

/// A method a webhook call may use.
#[derive(schemars::JsonSchema, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl HttpMethod {
    fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
        }
    }
}

fn methods(given: &Option<Vec<HttpMethod>>) -> Option<Vec<String>> {
    given
        .as_ref()
        .map(|m| m.iter().map(|m| m.as_str().to_string()).collect())
}

/// A change of an endpoint: what is left out stays.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateEndpoint {
    /// Replaces all the default headers (`{}`: none); the limits of [`CreateEndpoint::headers`].
    #[serde(default)]
    #[schemars(schema_with = "crate::webhooks::headers::defaults_schema")]
    pub headers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub allow_calls: Option<bool>,
    /// Only with `allow_calls` (the endpoint's, after this change).
    #[serde(default)]
    pub private_network: Option<bool>,
    /// Replaces the methods the default headers go with; as [`CreateEndpoint::header_methods`].
    #[serde(default)]
    #[schemars(length(min = 1, max = 5))]
    pub header_methods: Option<Vec<HttpMethod>>,
    /// Replaces the workflows the partner may signal (`[]`: none); as
    /// [`CreateEndpoint::signal_workflows`].
    #[serde(default)]
    #[schemars(length(max = 20), inner(length(min = 1, max = 128), regex(pattern = crate::schema_rules::NOT_BLANK)))]
    pub signal_workflows: Option<Vec<String>>,
}

/// A rotation.
#[derive(schemars::JsonSchema, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RotateEndpoint {
    /// How long the current secret keeps signing beside the new one, 0 to 604,800 (7 days).
    /// Default: 86,400 (a day).
    #[schemars(range(max = 604_800))]
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
    refuse_twice(body.headers.as_ref())?;
    let made = audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(
                state
                    .endpoints
                    .create_with(
                        conn,
                        &body.url_prefix,
                        &EndpointSettings {
                            headers: body.headers.clone(),
                            allow_calls: body.allow_calls,
                            private_network: body.private_network,
                            header_methods: methods(&body.header_methods),
                            signal_workflows: body.signal_workflows.clone(),
                        },
                        Some(&caller.actor),
                    )
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

pub async fn update(
    State(state): State<AppState>,
    audit: Audit,
    Extension(caller): Extension<ApiCaller>,
    EndpointIdPath(id): EndpointIdPath,
    ApiJson(body): ApiJson<UpdateEndpoint>,
) -> Result<Audited<Json<EndpointRow>>, AppError> {
    admin(&caller)?;
    refuse_twice(body.headers.as_ref())?;
    let change = EndpointSettings {
        header_methods: methods(&body.header_methods),
        headers: body.headers,
        allow_calls: body.allow_calls,
        private_network: body.private_network,
        signal_workflows: body.signal_workflows,
    };
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(state.endpoints.update_with(conn, id, &change).await?))
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
