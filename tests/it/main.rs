//! The integration tests, as one binary: one link of the library instead of one per file (on two
//! cores, 36 links of a debug build were minutes and gigabytes). Each module is one area (see
//! CONTRIBUTING.md); nextest runs every test in a process of its own all the same.
//!
//! One module's tests: `cargo nextest run -p kickoff --test it engine::`.

mod common;

mod accounts;
mod alert_processes;
mod alerts;
mod api;
mod api_fuzz;
mod api_schedules;
mod architecture;
mod attempt_records;
mod audit_all_or_nothing;
mod chaos;
mod cli;
mod config_file;
mod console;
mod console_queues;
mod console_schedules;
mod console_webhooks;
mod console_workflows;
mod dashboard_engine;
mod db_cancel;
mod embedded_app;
mod engine;
mod engine_interleavings;
mod fetch_ahead;
mod game_workflow;
mod history;
mod insert_notifications;
mod job_tools;
mod listener;
mod metrics;
mod mounted;
mod partner_signals;
mod pooler;
mod processes;
mod questions;
mod queue_limit_processes;
mod queue_limits;
mod read_replica;
mod request_limits;
mod reserved_meta;
mod rollups;
mod schedule_processes;
mod schedules;
mod secrets;
mod setup_link;
mod sql_actions;
mod sql_inserts;
mod streams;
mod traces;
mod unreadable_rows;
mod upgrade;
mod users_and_tokens;
mod webhook_deliveries;
mod webhook_endpoint_settings;
mod webhook_headers;
mod webhook_safety;
mod webhook_signatures;
mod workers_any_language;
mod workflow_actions;
mod workflow_map;
mod workflow_waits;
mod workflows;
