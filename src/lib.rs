//! Kickoff: a durable PostgreSQL job scheduler with an operator dashboard.
//!
//! What an application uses:
//!
//! - [`embed::Kickoff`]: Kickoff inside a Rust application: the engine on its pool with its own
//!   job kinds, the dashboard and the REST API as a router under a path of its own (see
//!   `docs/embedding.md`);
//! - [`engine`]: the scheduler alone: [`engine::Engine`], its [`engine::Client`] (inserts, also in
//!   the application's transaction with [`engine::Client::insert_with`]), the [`engine::Worker`]
//!   trait a job kind implements, [`engine::NewJob`], workflows ([`engine::workflow`]);
//! - [`workers`]: Kickoff's own kinds (a webhook call, a question's lock, ...), to register beside
//!   the application's;
//! - [`questions`]: a prediction game's questions and their lock jobs;
//! - [`http`]: the router ([`http::router`]) and the application's own sign-in in front of the
//!   dashboard ([`http::app_auth`]);
//! - [`server::serve`]: the whole server, as `kickoff serve` runs it.
//!
//! The modules not listed in these docs are the server's own (its commands, tools and parts) and
//! public only for its integration tests: nothing in them is promised to stay.
#![forbid(unsafe_code)]

pub mod accounts;
#[doc(hidden)]
pub mod alerts;
#[doc(hidden)]
pub mod audit;
#[doc(hidden)]
pub mod bench;
#[doc(hidden)]
pub mod chaos;
#[doc(hidden)]
pub mod cli;
pub mod config;
#[doc(hidden)]
pub mod config_file;
#[doc(hidden)]
pub mod data_dir;
#[doc(hidden)]
pub mod db;
#[doc(hidden)]
pub mod demo;
pub mod embed;
pub mod engine;
pub mod http;
#[doc(hidden)]
pub mod logging;
#[doc(hidden)]
pub mod operations;
#[doc(hidden)]
pub mod postgres;
pub mod questions;
#[doc(hidden)]
pub mod rate;
#[doc(hidden)]
pub mod schema_rules;
pub mod server;
#[doc(hidden)]
pub mod supervisor;
#[doc(hidden)]
pub mod telemetry;
pub mod webhooks;
pub mod workers;
