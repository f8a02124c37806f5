//! The notifier: one LISTEN connection per node, dispatching the database's notifications.
//!
//! - `kickoff_due` (from the jobs triggers): available rows wake the queue's producer; scheduled or
//!   retryable rows tell the timer of a due time that may be earlier than the one it knows.
//! - `kickoff_events` (from the jobs and predictions triggers): forwarded to local subscribers (the
//!   live dashboard).
//! - `kickoff_control` (from the client): stop attempts of cancelled jobs, reload queue settings.
//!
//! Notifications sent while the connection is down are lost. So after every reconnect, and only
//! once `LISTEN` is in force again, the node looks at the table: the queue settings are read
//! again and every producer and the timer are woken. Waking them any earlier (before the LISTEN)
//! would leave a gap in which a notification is neither received nor covered by that look. The
//! backstop poll covers the rest.
//!
//! The listener has a connection of its own (its own one-connection pool), so that handlers
//! holding every pooled connection cannot keep it from reconnecting.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::PgPool;

use crate::db::Db;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::control::{self, Control};
use super::node::{Attempts, TimerSignal};
use super::queue_settings::QueueSettingsSync;
use super::queue_state::Queues;
use crate::db::with_role;

pub const CHANNEL_DUE: &str = "kickoff_due";
pub const CHANNEL_EVENTS: &str = "kickoff_events";

#[derive(Deserialize)]
struct Due {
    queue: String,
    state: String,
    at_ms: i64,
}

const CHANNELS: [&str; 3] = [CHANNEL_DUE, CHANNEL_EVENTS, control::CHANNEL];
/// The wait between reconnect attempts.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// Whom the notifier tells what it hears.
pub struct Listeners {
    pub queues: Arc<Queues>,
    pub timer: Arc<TimerSignal>,
    pub attempts: Arc<Attempts>,
    /// Reads queue settings when a notification says they changed (and after a reconnect).
    pub settings: QueueSettingsSync,
    /// Where `kickoff_events` go (the live dashboard's subscribers).
    pub events: broadcast::Sender<String>,
}

pub struct Notifier {
    to: Listeners,
    pool: PgPool,
    /// `None` while reconnecting.
    listener: Option<PgListener>,
}

impl Notifier {
    /// Listens on a connection of its own, opened with the options of `pool`, or those of
    /// `url` when given (a direct connection beside a transaction pooler).
    pub async fn connect(pool: &Db, url: Option<&str>, to: Listeners) -> Result<Self, sqlx::Error> {
        let options = match url {
            Some(url) => with_role(url.parse::<PgConnectOptions>()?, "listener"),
            None => with_role((*pool.pool().connect_options()).clone(), "listener"),
        };
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options);
        let listener = listen(&pool).await?;
        Ok(Notifier {
            to,
            pool,
            listener: Some(listener),
        })
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let Some(listener) = self.listener.as_mut() else {
                if !self.reconnect(&shutdown).await {
                    break;
                }
                self.catch_up().await;
                continue;
            };
            let next = tokio::select! {
                _ = shutdown.cancelled() => break,
                n = listener.try_recv() => n,
            };
            match next {
                Ok(Some(n)) => self.dispatch(n.channel(), n.payload()).await,
                Ok(None) => {
                    // The listener reconnected and re-issued its LISTEN before returning.
                    tracing::warn!(
                        "notification connection lost and re-established; re-checking the table"
                    );
                    self.catch_up().await;
                }
                Err(e) => {
                    // Its own reconnect failed, or something else broke: make a new listener of
                    // our own (the old one would reconnect silently inside its next `try_recv`,
                    // and nothing would then look at the table).
                    tracing::warn!(error = %e, "notification listener failed; reconnecting");
                    // Its connection goes back first: the listener's pool has room for one.
                    self.listener = None;
                }
            }
        }
        self.listener = None;
        // A stalled connection must not hold up the node's stop.
        let _ = tokio::time::timeout(Duration::from_secs(2), self.pool.close()).await;
    }

    /// Makes a new listener, trying until it listens (true) or the node stops (false).
    async fn reconnect(&mut self, shutdown: &CancellationToken) -> bool {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = tokio::time::sleep(RECONNECT_PAUSE) => {}
            }
            match listen(&self.pool).await {
                Ok(listener) => {
                    self.listener = Some(listener);
                    return true;
                }
                Err(e) => tracing::warn!(error = %e, "reconnecting the listener failed; retrying"),
            }
        }
    }

    /// What may have been missed while the listener was down: the queue settings, and any due job
    /// (every producer and the timer look at the table).
    async fn catch_up(&self) {
        if let Err(e) = self.to.settings.run_once().await {
            tracing::warn!(error = %e, "reloading queue settings failed; the backstop poll retries");
        }
        self.to.queues.wake_all();
        self.to.timer.refresh();
    }

    async fn dispatch(&self, channel: &str, payload: &str) {
        let to = &self.to;
        match channel {
            CHANNEL_DUE => {
                let Ok(due) = serde_json::from_str::<Due>(payload) else {
                    return;
                };
                tell_due(&to.queues, &to.timer, &due.queue, &due.state, due.at_ms);
            }
            CHANNEL_EVENTS => {
                let _ = to.events.send(payload.to_string());
            }
            control::CHANNEL => {
                for message in Control::parse(payload) {
                    match message {
                        Control::StopClaims(claims) => to.attempts.stop_claims(&claims),
                        Control::StopJobs(ids) => to.attempts.stop_jobs(&ids),
                        Control::QueueChanged(name) => to.settings.reload(&name).await,
                        Control::KindsChanged => to.settings.reload_kinds().await,
                    }
                }
            }
            _ => {}
        }
    }
}

/// What a due notification tells a node (and what this process's own writes tell its engine at
/// once: see `announcer`): an available job wakes its queue's producer; a scheduled or retryable
/// one tells the timer of a due time that may be earlier than the one it knows.
pub fn tell_due(queues: &Queues, timer: &TimerSignal, queue: &str, state: &str, at_ms: i64) {
    if state == "available" {
        queues.wake(queue);
    } else {
        timer.hint(at_ms);
    }
}

/// A new listener on `pool`, listening on every channel.
async fn listen(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen_all(CHANNELS).await?;
    Ok(listener)
}
