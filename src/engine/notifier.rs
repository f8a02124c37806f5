//! The notifier: one LISTEN connection per node, dispatching the database's notifications.
//!
//! - `kickoff_due` (from the jobs triggers): available rows wake the queue's producer; scheduled or
//!   retryable rows tell the timer of a due time that may be earlier than the one it knows.
//! - `kickoff_events` (from the jobs and predictions triggers): forwarded to local subscribers (the
//!   live dashboard).
//! - `kickoff_control` (from the client): stop attempts of cancelled jobs, reload queue settings.
//!
//! Notifications sent while the connection is down are lost: after a reconnect every producer and
//! the timer are woken to look at the table, and the backstop poll covers the rest.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use super::job::JobId;
use super::runtime::Shared;
use super::store::queues as queue_store;

pub const CHANNEL_DUE: &str = "kickoff_due";
pub const CHANNEL_EVENTS: &str = "kickoff_events";
pub const CHANNEL_CONTROL: &str = "kickoff_control";

#[derive(Deserialize)]
struct Due {
    queue: String,
    state: String,
    at_ms: i64,
}

#[derive(Deserialize)]
struct Control {
    #[serde(default)]
    cancel: Vec<JobId>,
    #[serde(default)]
    queue: Option<String>,
}

pub(crate) struct Notifier {
    shared: Arc<Shared>,
    listener: PgListener,
}

impl Notifier {
    pub async fn connect(shared: Arc<Shared>) -> Result<Self, sqlx::Error> {
        let mut listener = PgListener::connect_with(&shared.pool).await?;
        listener
            .listen_all([CHANNEL_DUE, CHANNEL_EVENTS, CHANNEL_CONTROL])
            .await?;
        Ok(Notifier { shared, listener })
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return,
                n = self.listener.try_recv() => n,
            };
            match next {
                Ok(Some(n)) => self.dispatch(n.channel(), n.payload()).await,
                Ok(None) => {
                    tracing::warn!(
                        "notification connection lost; reconnecting and re-checking the table"
                    );
                    self.wake_everything();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "notification listener failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                    self.wake_everything();
                }
            }
        }
    }

    fn wake_everything(&self) {
        self.shared.wake_all_queues();
        self.shared.timer_wake.notify_one();
    }

    async fn dispatch(&self, channel: &str, payload: &str) {
        let shared = &self.shared;
        match channel {
            CHANNEL_DUE => {
                let Ok(due) = serde_json::from_str::<Due>(payload) else {
                    return;
                };
                if due.state == "available" {
                    shared.wake_queue(&due.queue);
                } else {
                    shared.timer_hint_ms.fetch_min(due.at_ms, Ordering::AcqRel);
                    shared.timer_wake.notify_one();
                }
            }
            CHANNEL_EVENTS => {
                let _ = shared.events.send(payload.to_string());
            }
            CHANNEL_CONTROL => {
                let Ok(control) = serde_json::from_str::<Control>(payload) else {
                    return;
                };
                if !control.cancel.is_empty() {
                    shared.stop_attempts(&control.cancel);
                }
                if let Some(name) = control.queue {
                    if let Some(q) = shared.queues.get(&name) {
                        match queue_store::queue_get(&shared.pool, &name).await {
                            Ok(Some(row)) => q.apply(&row),
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!(queue = %name, error = %e, "reloading queue settings failed")
                            }
                        }
                        q.wake.notify_one();
                    }
                }
            }
            _ => {}
        }
    }
}
