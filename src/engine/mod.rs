//! The durable scheduler engine: every timed action is a row in the `jobs` table.
//!
//! Use [`Engine::start`] with a pool, a set of [`Workers`] and an [`EngineConfig`]; insert jobs with
//! the [`Client`] (also inside your own transaction, with [`Client::insert_with`]).

#[doc(hidden)]
pub mod alarm;
#[doc(hidden)]
pub mod announcer;
#[doc(hidden)]
pub mod attempt_hook;
#[doc(hidden)]
pub mod attempt_log;
pub mod bulk;
pub mod client;
#[doc(hidden)]
pub mod completer;
pub mod config;
#[doc(hidden)]
pub mod control;
pub mod editing;
#[doc(hidden)]
pub mod executor;
#[doc(hidden)]
pub mod heartbeat;
#[doc(hidden)]
pub mod history_cache;
pub mod job;
pub mod job_edit;
pub mod late_start;
pub mod leadership;
pub mod limits;
#[doc(hidden)]
pub mod maintenance;
pub mod metrics;
#[doc(hidden)]
pub mod node;
#[doc(hidden)]
pub mod notifier;
#[doc(hidden)]
pub mod producer;
pub mod queue_control;
pub mod queue_settings;
#[doc(hidden)]
pub mod queue_state;
pub mod reading;
#[doc(hidden)]
pub mod row_reading;
pub mod runtime;
pub mod schedules;
pub mod schema;
pub mod sight;
/// The engine's SQL. Application code goes through [`Client`] and the types re-exported here;
/// the store is public only for the integration tests of its guarded statements.
#[doc(hidden)]
pub mod store;
#[doc(hidden)]
pub mod timer;
pub mod validation;
pub mod worker;
pub mod workflow;
pub mod workflow_actions;

pub use crate::db::{Db, PoolMode};
/// The job filter's vocabulary (what a list, a count, an export and a bulk action match), for the
/// surfaces that parse and show it; the statements built from it stay in the store.
pub mod job_filter {
    pub use super::store::jobs::{
        error_text_checked, late_by_checked, parse_args_filter, parse_tags_filter, split_tags,
        tags_checked, FilterFields, JobSuggestions,
    };
}

/// The attempts' history as the surfaces ask for it and show it: its filters, groups, points and
/// lateness buckets, and one attempt's record.
pub mod history {
    pub use super::store::history::{
        by_series, late_quantile, AttemptRecord, HistoryFilter, HistoryGroup, HistoryPoint,
        LATE_BOUNDS_MS, LATE_BUCKETS,
    };
}

pub use bulk::{BulkAction, BulkBatch, BulkChange, BulkReport, BulkWalk};
pub use client::{Client, ClientError};
pub use config::EngineConfig;
pub use job::{Claim, ClaimToken, Inserted, Job, JobId, JobState, NewJob, OnConflict, Schedule};
pub use late_start::{LatePolicy, OnLate};
pub use reading::HistoryQuery;
pub use runtime::{Engine, EngineError};
pub use schema::MIGRATOR;
pub use store::errors::is_transient;
pub use store::history::AttemptRecord;
pub use store::jobs::JobFilter;
pub use store::kinds::KindPause;
pub use store::leader::LeaderRow;
pub use store::nodes::NodeRow;
pub use store::queues::{LimitUse, QueueRow};
pub use store::stats::ThroughputMinute;
pub use worker::{ArgsRefused, BoxFuture, JobContext, WorkError, Worker, Workers};
