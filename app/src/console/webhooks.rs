//! Webhook endpoints (admins): the URL prefixes whose calls are signed (and carry default headers,
//! and may be allowed), making one (its secret is shown once), changing one, rotating a secret,
//! deleting an endpoint. And the webhook calls made (the
//! delivery record), searched by status (everyone signed in).

// The client's stub of `update_endpoint` that `#[server]` writes for the hydrated build takes the
// form's eight fields as arguments, and does not carry the function's own `allow`.
#![cfg_attr(feature = "hydrate", allow(clippy::too_many_arguments))]

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn WebhooksConsole>, ServerFnError> {
    super::port::console()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointInfo {
    pub id: i64,
    pub url_prefix: String,
    pub created_ms: i64,
    pub created_by: Option<String>,
    pub rotated_ms: Option<i64>,
    /// Until when the previous secret signs too.
    pub previous_until_ms: Option<i64>,
    /// The default headers' names (their values are never shown).
    pub header_names: Vec<String>,
    /// Webhook jobs may call URLs under the prefix.
    pub allow_calls: bool,
    /// ... and its host may resolve to a private address.
    pub private_network: bool,
    /// The methods the default headers go with.
    #[serde(default)]
    pub header_methods: Vec<String>,
    /// The workflows whose live runs the partner may signal, signed.
    #[serde(default)]
    pub signal_workflows: Vec<String>,
}

/// An endpoint's settings as the form sends them: checkboxes, and default headers one per line
/// (`Name: value`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointForm {
    pub allow_calls: bool,
    pub private_network: bool,
    /// Empty: none (made), or the headers as they are (changed).
    pub headers: String,
    /// Changed: remove every default header.
    pub clear_headers: bool,
    /// The methods the default headers go with, comma-separated (`POST, PUT`); empty: POST
    /// (made), or as they are (changed).
    #[serde(default)]
    pub header_methods: String,
    /// The workflows the partner may signal, comma-separated; replaces them (empty: none).
    #[serde(default)]
    pub signal_workflows: String,
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

/// The calls page's search, from the address bar.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallsQuery {
    /// A status code (`500`), a class (`5xx`), or `none` (no answer).
    pub status: Option<String>,
    pub before: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallsPage {
    pub now_ms: i64,
    pub rows: Vec<crate::console::jobs::DeliveryRow>,
    pub next_before: Option<i64>,
}

/// What the server provides to the webhook endpoints page and the calls page.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait WebhooksConsole: Send + Sync + 'static {
    async fn endpoints(&self) -> Result<EndpointsPage, Refusal>;
    async fn create_endpoint(
        &self,
        url_prefix: String,
        form: EndpointForm,
    ) -> Result<NewEndpointSecret, Refusal>;
    async fn update_endpoint(&self, id: i64, form: EndpointForm) -> Result<(), Refusal>;
    /// `overlap_hours`: how long the current secret keeps signing beside the new one.
    async fn rotate_endpoint(
        &self,
        id: i64,
        overlap_hours: String,
    ) -> Result<NewEndpointSecret, Refusal>;
    async fn delete_endpoint(&self, id: i64) -> Result<(), Refusal>;
    /// The webhook calls made, newest first.
    async fn calls(&self, query: CallsQuery) -> Result<CallsPage, Refusal>;
}

#[server(prefix = "/_console", endpoint = "webhook_calls")]
pub async fn list_calls(#[server(default)] query: CallsQuery) -> Result<CallsPage, ServerFnError> {
    console()?.calls(query).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "webhook_endpoints")]
pub async fn get_endpoints() -> Result<EndpointsPage, ServerFnError> {
    console()?.endpoints().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "create_endpoint")]
pub async fn create_endpoint(
    csrf: Option<String>,
    url_prefix: String,
    #[server(default)] allow_calls: Option<String>,
    #[server(default)] private_network: Option<String>,
    #[server(default)] headers: Option<String>,
    #[server(default)] header_methods: Option<String>,
    #[server(default)] signal_workflows: Option<String>,
) -> Result<NewEndpointSecret, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let form = EndpointForm {
        allow_calls: allow_calls.is_some(),
        private_network: private_network.is_some(),
        headers: headers.unwrap_or_default(),
        clear_headers: false,
        header_methods: header_methods.unwrap_or_default(),
        signal_workflows: signal_workflows.unwrap_or_default(),
    };
    console()?
        .create_endpoint(url_prefix, form)
        .await
        .map_err(fail)
}

/// A checkbox left unticked is not in the form at all: each is optional.
#[allow(clippy::too_many_arguments)]
#[server(prefix = "/_console", endpoint = "update_endpoint")]
pub async fn update_endpoint(
    csrf: Option<String>,
    id: i64,
    #[server(default)] allow_calls: Option<String>,
    #[server(default)] private_network: Option<String>,
    #[server(default)] headers: Option<String>,
    #[server(default)] clear_headers: Option<String>,
    #[server(default)] header_methods: Option<String>,
    #[server(default)] signal_workflows: Option<String>,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    let form = EndpointForm {
        allow_calls: allow_calls.is_some(),
        private_network: private_network.is_some(),
        headers: headers.unwrap_or_default(),
        clear_headers: clear_headers.is_some(),
        header_methods: header_methods.unwrap_or_default(),
        signal_workflows: signal_workflows.unwrap_or_default(),
    };
    console()?.update_endpoint(id, form).await.map_err(fail)
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
