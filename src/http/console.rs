//! The server's side of the dashboard's port (`kickoff_app::console::Console`).

use std::collections::BTreeMap;

use kickoff_app::console::{Console, JobRow, Overview, QuestionRow};

use crate::engine::store::jobs::JobFilter;
use crate::engine::{Client, ClientError, JobId, JobState};
use crate::questions::QuestionService;

/// How many rows a dashboard list shows.
const LIST_ROWS: i64 = 100;

pub struct ServerConsole {
    client: Client,
    questions: QuestionService,
}

impl ServerConsole {
    pub fn new(client: Client, questions: QuestionService) -> Self {
        ServerConsole { client, questions }
    }
}

/// Logs the cause and gives the browser a message without internals.
fn unavailable(e: impl std::fmt::Display) -> String {
    tracing::error!(error = %e, "dashboard query failed");
    "the database is unreachable; try again".to_string()
}

/// An operator's action refused: say why (a conflict or a missing job is the operator's to know).
fn action_error(e: ClientError) -> String {
    match e {
        ClientError::Database(e) => unavailable(e),
        other => other.to_string(),
    }
}

#[async_trait::async_trait]
impl Console for ServerConsole {
    async fn overview(&self) -> Result<Overview, String> {
        let counts = self.client.counts().await.map_err(unavailable)?;
        let mut states: BTreeMap<&'static str, i64> =
            JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        for (_, st, n) in counts {
            *states.entry(st.as_str()).or_default() += n;
        }
        Ok(Overview {
            states: JobState::ALL
                .iter()
                .map(|s| (s.as_str().to_string(), states[s.as_str()]))
                .collect(),
        })
    }

    async fn jobs(&self, state: Option<String>) -> Result<Vec<JobRow>, String> {
        // An unknown state in the address shows every job rather than an error page.
        let filter = JobFilter {
            state: state.and_then(|s| s.parse().ok()),
            ..JobFilter::default()
        };
        let jobs = self
            .client
            .list(&filter, None, LIST_ROWS)
            .await
            .map_err(unavailable)?;
        Ok(jobs
            .into_iter()
            .map(|j| JobRow {
                id: j.id.0,
                kind: j.kind,
                queue: j.queue,
                state: j.state.as_str().to_string(),
                attempt: j.attempt,
                max_attempts: j.max_attempts,
                scheduled_at: j.scheduled_at.to_rfc3339(),
                last_error: j.errors.last().map(|e| e.message.clone()),
            })
            .collect())
    }

    async fn cancel_job(&self, id: i64) -> Result<(), String> {
        self.client
            .cancel(JobId(id))
            .await
            .map(|_| ())
            .map_err(action_error)
    }

    async fn retry_job(&self, id: i64) -> Result<(), String> {
        self.client
            .retry(JobId(id))
            .await
            .map(|_| ())
            .map_err(action_error)
    }

    async fn questions(&self) -> Result<Vec<QuestionRow>, String> {
        let rows = self
            .questions
            .list(None, LIST_ROWS)
            .await
            .map_err(unavailable)?;
        Ok(rows
            .into_iter()
            .map(|q| QuestionRow {
                id: q.id,
                game: q.game,
                prompt: q.prompt,
                status: q.status.as_str().to_string(),
                game_time: q.game_time.to_rfc3339(),
                lock_job_id: q.lock_job_id.map(|id| id.0),
            })
            .collect())
    }
}
