//! The game domain: questions that must stop taking predictions exactly at game time.
//!
//! A question and its `lock_question` job are created in one transaction; the job (unique per
//! question, scheduled at `game_time`) locks the question in the same transaction that completes
//! it. The prediction write path never trusts the timer alone: it refuses predictions once
//! `game_time` has passed by the database clock, locked or not.

pub mod game_workflow;
pub mod jobs;
pub mod service;
pub mod store;

pub use service::{QuestionError, QuestionService};
pub use store::{Question, QuestionStatus};
