//! Kickoff: a durable PostgreSQL job scheduler with an operator dashboard.
//!
//! The engine (`engine`) is a library usable by any Rust service; the server (`server`) adds the
//! embedded PostgreSQL (`postgres`), the built-in job kinds (`workers`), the REST API and the Leptos
//! dashboard (`http`).
#![forbid(unsafe_code)]

pub mod accounts;
pub mod alerts;
pub mod audit;
pub mod bench;
pub mod chaos;
pub mod cli;
pub mod config;
pub mod config_file;
pub mod data_dir;
pub mod db;
pub mod demo;
pub mod embed;
pub mod engine;
pub mod http;
pub mod logging;
pub mod operations;
pub mod postgres;
pub mod questions;
pub mod rate;
pub mod schema_rules;
pub mod server;
pub mod supervisor;
pub mod telemetry;
pub mod webhooks;
pub mod workers;
