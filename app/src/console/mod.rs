//! The port between the dashboard and the server: the data the UI shows, the server functions
//! that fetch it or act, and the traits the server implements (behind the `ssr` feature), one
//! module an area of the dashboard, each with its DTOs, its trait and its server functions.
//! `Console` is their sum: the one object the server implements; [`provide`] puts it in the
//! context as each area's trait, which that area's server functions find there (`port.rs`), so
//! no area depends on the others' traits.
//!
//! Times travel as milliseconds since the epoch; every page's data carries the database clock
//! (`now_ms`) it was read at, so countdowns and "2 s late" are measured against the database, not
//! against the browser's or the server's own clock.
//!
//! A server function's struct argument whose fields are all absent (an unfiltered list) is encoded
//! as nothing at all: `#[server(default)]` lets the server read that as the default instead of
//! refusing it as a missing field. Every such argument carries it.

pub mod accounts;
pub mod alerts;
pub mod audit;
pub mod history;
pub mod jobs;
pub mod overview;
mod port;
pub mod questions;
pub mod queues;
pub mod schedules;
pub mod webhooks;
pub mod workflows;

#[cfg(feature = "ssr")]
pub use port::Refusal;
pub use port::{nonempty, query_string};

/// What the server provides to the dashboard: every area's trait, as one object (the server
/// functions find it in the Leptos context as `Arc<dyn Console>`).
#[cfg(feature = "ssr")]
pub trait Console:
    overview::OverviewConsole
    + jobs::JobsConsole
    + queues::QueuesConsole
    + schedules::SchedulesConsole
    + questions::QuestionsConsole
    + accounts::AccountsConsole
    + audit::AuditConsole
    + webhooks::WebhooksConsole
    + alerts::AlertsConsole
    + history::HistoryConsole
    + workflows::WorkflowsConsole
{
}

#[cfg(feature = "ssr")]
impl<T> Console for T where
    T: overview::OverviewConsole
        + jobs::JobsConsole
        + queues::QueuesConsole
        + schedules::SchedulesConsole
        + questions::QuestionsConsole
        + accounts::AccountsConsole
        + audit::AuditConsole
        + webhooks::WebhooksConsole
        + alerts::AlertsConsole
        + history::HistoryConsole
        + workflows::WorkflowsConsole
{
}

/// Puts `console` in the Leptos context as each area's trait, where the areas' server functions
/// find it (call it in the context of every dashboard request).
#[cfg(feature = "ssr")]
pub fn provide<C: Console>(console: std::sync::Arc<C>) {
    use leptos::prelude::provide_context;
    use std::sync::Arc;
    provide_context::<Arc<dyn overview::OverviewConsole>>(console.clone());
    provide_context::<Arc<dyn jobs::JobsConsole>>(console.clone());
    provide_context::<Arc<dyn queues::QueuesConsole>>(console.clone());
    provide_context::<Arc<dyn schedules::SchedulesConsole>>(console.clone());
    provide_context::<Arc<dyn questions::QuestionsConsole>>(console.clone());
    provide_context::<Arc<dyn accounts::AccountsConsole>>(console.clone());
    provide_context::<Arc<dyn audit::AuditConsole>>(console.clone());
    provide_context::<Arc<dyn webhooks::WebhooksConsole>>(console.clone());
    provide_context::<Arc<dyn alerts::AlertsConsole>>(console.clone());
    provide_context::<Arc<dyn history::HistoryConsole>>(console.clone());
    provide_context::<Arc<dyn workflows::WorkflowsConsole>>(console);
}
