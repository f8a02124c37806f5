//! Webhook endpoints (admins): the URL prefixes whose calls are signed, making one (its secret
//! is shown once), rotating a secret, deleting an endpoint.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::{console, fail, Refusal};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointInfo {
    pub id: i64,
    pub url_prefix: String,
    pub created_ms: i64,
    pub created_by: Option<String>,
    pub rotated_ms: Option<i64>,
    /// Until when the previous secret signs too.
    pub previous_until_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointsPage {
    pub now_ms: i64,
    pub endpoints: Vec<EndpointInfo>,
}

/// A secret just made (by a new endpoint or a rotation): shown once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEndpointSecret {
    pub id: i64,
    pub url_prefix: String,
    pub secret: String,
}

/// What the server provides to the webhook endpoints page.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait WebhooksConsole: Send + Sync + 'static {
    async fn endpoints(&self) -> Result<EndpointsPage, Refusal>;
    async fn create_endpoint(&self, url_prefix: String) -> Result<NewEndpointSecret, Refusal>;
    /// `overlap_hours`: how long the current secret keeps signing beside the new one.
    async fn rotate_endpoint(
        &self,
        id: i64,
        overlap_hours: String,
    ) -> Result<NewEndpointSecret, Refusal>;
    async fn delete_endpoint(&self, id: i64) -> Result<(), Refusal>;
}

#[server(prefix = "/_console", endpoint = "webhook_endpoints")]
pub async fn get_endpoints() -> Result<EndpointsPage, ServerFnError> {
    console()?.endpoints().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "create_endpoint")]
pub async fn create_endpoint(
    csrf: Option<String>,
    url_prefix: String,
) -> Result<NewEndpointSecret, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.create_endpoint(url_prefix).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "rotate_endpoint")]
pub async fn rotate_endpoint(
    csrf: Option<String>,
    id: i64,
    overlap_hours: String,
) -> Result<NewEndpointSecret, ServerFnError> {
    let _ = csrf;
    console()?
        .rotate_endpoint(id, overlap_hours)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "delete_endpoint")]
pub async fn delete_endpoint(csrf: Option<String>, id: i64) -> Result<(), ServerFnError> {
    let _ = csrf;
    console()?.delete_endpoint(id).await.map_err(fail)
}
