//! The server's side of the dashboard's port (`kickoff_app::console::Console`).

use std::collections::BTreeMap;

use kickoff_app::console::{Console, Overview};

use crate::engine::{Client, JobState};

pub struct ServerConsole {
    client: Client,
}

impl ServerConsole {
    pub fn new(client: Client) -> Self {
        ServerConsole { client }
    }
}

#[async_trait::async_trait]
impl Console for ServerConsole {
    async fn overview(&self) -> Result<Overview, String> {
        let counts = self.client.counts().await.map_err(|e| {
            tracing::error!(error = %e, "overview failed");
            "the database is unreachable".to_string()
        })?;
        let mut states: BTreeMap<String, i64> = JobState::ALL
            .iter()
            .map(|s| (s.as_str().to_string(), 0))
            .collect();
        for (_, st, n) in counts {
            *states.entry(st.as_str().to_string()).or_default() += n;
        }
        Ok(Overview {
            states: JobState::ALL
                .iter()
                .map(|s| (s.as_str().to_string(), states[s.as_str()]))
                .collect(),
        })
    }
}
