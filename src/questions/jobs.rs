//! The contract of the question jobs: their kinds, queue, args and unique keys. The questions
//! service inserts them; the workers (`workers::lock_question`, `workers::settle_question`) run
//! them and read their args from here.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::{NewJob, OnConflict};

/// The queue of every question job.
pub const QUEUE: &str = "questions";
/// Closes a question at game time.
pub const LOCK_KIND: &str = "lock_question";
/// Scores a question's predictions once its answer is known.
pub const SETTLE_KIND: &str = "settle_question";

/// The args of both jobs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuestionArgs {
    #[serde(deserialize_with = "crate::engine::worker::whole_number")]
    pub question_id: i64,
}

/// Checks a question job's args at insert time.
pub fn validate_args(args: &Value) -> Result<(), String> {
    serde_json::from_value::<QuestionArgs>(args.clone())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The unique key of a question's lock job: one per question.
pub fn lock_key(question_id: i64) -> String {
    format!("{LOCK_KIND}:{question_id}")
}

/// The owner a question's jobs carry (`meta.owner`).
pub fn owner(question_id: i64) -> String {
    format!("question {question_id}")
}

/// The question an owner names, if it is a question.
pub fn question_of_owner(owner: &str) -> Option<i64> {
    owner.strip_prefix("question ")?.parse().ok()
}

/// The job that locks question `question_id` at `game_time` (kept if one exists). It belongs to
/// the question (`meta.owner`): an operator cannot cancel, reschedule or delete it by itself, since
/// the question's promise (locked at game time) rests on it; moving or deleting the question does.
pub fn lock_job(question_id: i64, game_time: DateTime<Utc>) -> NewJob {
    NewJob::new(LOCK_KIND, json!({ "question_id": question_id }))
        .with_meta(json!({ "owner": owner(question_id) }))
        .with_queue(QUEUE)
        .at(game_time)
        .with_unique_key(lock_key(question_id), OnConflict::Keep)
}

/// The job that settles question `question_id` now (one per question).
pub fn settle_job(question_id: i64) -> NewJob {
    NewJob::new(SETTLE_KIND, json!({ "question_id": question_id }))
        .with_queue(QUEUE)
        .with_unique_key(format!("{SETTLE_KIND}:{question_id}"), OnConflict::Keep)
}
