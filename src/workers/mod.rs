//! Job kinds (workers), kept apart from the engine, which knows only the `Worker` trait.

pub mod game;
pub mod lock_question;
pub mod noop;
pub mod notify_players;
pub mod poll_result;
pub mod settle_question;
#[cfg(test)]
mod sight_tests;
pub mod tally_store;
pub mod webhook;
mod webhook_address;

use crate::engine::Workers;

/// [`builtin`], its webhook calls to endpoints signed with the secrets `key` opens (the server's).
pub fn builtin_signed(
    allowed_webhook_hosts: Vec<String>,
    key: std::sync::Arc<crate::webhooks::SecretKey>,
) -> Workers {
    let mut workers = Workers::new();
    workers
        .register(noop::NoopWorker)
        .register(lock_question::LockQuestionWorker)
        .register(settle_question::SettleQuestionWorker)
        .register(game::LockGameWorker)
        .register(game::SettleGameWorker)
        .register(game::LeaderboardWorker)
        .register(notify_players::NotifyPlayersWorker::new(
            webhook::WebhookWorker::new(allowed_webhook_hosts.clone())
                .with_signing_key(key.clone()),
        ))
        .register(poll_result::PollResultWorker::new(
            webhook::WebhookWorker::new(allowed_webhook_hosts.clone())
                .with_signing_key(key.clone()),
        ))
        .register(webhook::WebhookWorker::new(allowed_webhook_hosts).with_signing_key(key));
    workers
}

/// The workers every Kickoff server runs (its webhook calls unsigned: see [`builtin_signed`]).
pub fn builtin(allowed_webhook_hosts: Vec<String>) -> Workers {
    let mut workers = Workers::new();
    workers
        .register(noop::NoopWorker)
        .register(lock_question::LockQuestionWorker)
        .register(settle_question::SettleQuestionWorker)
        .register(game::LockGameWorker)
        .register(game::SettleGameWorker)
        .register(game::LeaderboardWorker)
        .register(notify_players::NotifyPlayersWorker::new(
            webhook::WebhookWorker::new(allowed_webhook_hosts.clone()),
        ))
        .register(poll_result::PollResultWorker::new(
            webhook::WebhookWorker::new(allowed_webhook_hosts.clone()),
        ))
        .register(webhook::WebhookWorker::new(allowed_webhook_hosts));
    workers
}
