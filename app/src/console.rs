//! The port between the dashboard and the server: the data the UI shows, the server functions
//! that fetch it, and the `Console` trait the server implements (behind the `ssr` feature).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// Job counts per state, in the order of a job's life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub states: Vec<(String, i64)>,
}

/// What the server provides to the dashboard.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait Console: Send + Sync + 'static {
    async fn overview(&self) -> Result<Overview, String>;
}

#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn Console>, ServerFnError> {
    use_context::<std::sync::Arc<dyn Console>>()
        .ok_or_else(|| ServerFnError::new("the console is not available"))
}

#[server(prefix = "/_console", endpoint = "overview")]
pub async fn get_overview() -> Result<Overview, ServerFnError> {
    console()?.overview().await.map_err(ServerFnError::new)
}
