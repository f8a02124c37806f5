//! Job kinds (workers), kept apart from the engine, which knows only the `Worker` trait.

pub mod lock_question;
pub mod noop;
pub mod settle_question;
pub mod tally_store;
pub mod webhook;
mod webhook_address;

use crate::engine::Workers;

/// The workers every Kickoff server runs.
pub fn builtin(allowed_webhook_hosts: Vec<String>) -> Workers {
    let mut workers = Workers::new();
    workers
        .register(noop::NoopWorker)
        .register(lock_question::LockQuestionWorker)
        .register(settle_question::SettleQuestionWorker)
        .register(webhook::WebhookWorker::new(allowed_webhook_hosts));
    workers
}
