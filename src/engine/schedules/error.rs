//! What a schedule's operations answer when they are refused, or the database fails under them.

use super::rule::CronError;
use crate::engine::client::ClientError;

/// A schedule's operation refused (invalid, not found, in conflict), or failing.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("cron: {0}")]
    Cron(CronError),
    #[error("schedule `{0}` not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Client(ClientError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl ScheduleError {
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        ScheduleError::Invalid {
            field,
            message: message.into(),
        }
    }
}

impl From<ClientError> for ScheduleError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Database(e) => ScheduleError::Database(e),
            other => ScheduleError::Client(other),
        }
    }
}
