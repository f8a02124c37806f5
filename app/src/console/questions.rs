//! Game questions: the list, one question with its predictions and lock job, creating one and
//! moving its game time.

// The client's stub of `create_question` that `#[server]` writes for the hydrated build takes the
// form's nine fields as arguments, and does not carry the function's own `allow`.
#![cfg_attr(feature = "hydrate", allow(clippy::too_many_arguments))]

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::port::{fail, Refusal};

/// The server's implementation of this area (see `port::console`).
#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn QuestionsConsole>, ServerFnError> {
    super::port::console()
}
#[cfg(feature = "ssr")]
use crate::local_time::instant_ms;

use super::jobs::JobRow;

/// One game question in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionRow {
    pub id: i64,
    pub game: String,
    pub prompt: String,
    pub status: String,
    pub game_ms: i64,
    pub lock_job_id: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionsPage {
    pub now_ms: i64,
    pub rows: Vec<QuestionRow>,
}

/// A question with its predictions per choice and its lock job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionDetail {
    pub now_ms: i64,
    pub question: QuestionRow,
    pub correct_choice: Option<String>,
    pub locked_ms: Option<i64>,
    /// `(choice, predictions, correct)` for every choice.
    pub choices: Vec<(String, i64, i64)>,
    pub predictions: i64,
    pub lock_job: Option<JobRow>,
    /// How late after its due time (the game time) the lock's attempt started, in ms, and on
    /// which node: from the record of the lock job's completed attempt.
    pub lock_late_ms: Option<f64>,
    pub lock_node: Option<String>,
    /// Predictions refused because the question had locked (or its game time had passed).
    pub refused_predictions: i64,
}

/// What the server provides to the question pages.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait QuestionsConsole: Send + Sync + 'static {
    async fn questions(&self) -> Result<QuestionsPage, Refusal>;
    async fn question(&self, id: i64) -> Result<QuestionDetail, Refusal>;
    /// `workflow`: start the game's workflow with the question (its `notify_url`, if any).
    async fn create_question(
        &self,
        game: String,
        prompt: String,
        choices: Vec<String>,
        game_ms: i64,
        workflow: Option<GameWorkflowForm>,
    ) -> Result<i64, Refusal>;
    async fn move_question(&self, id: i64, game_ms: i64) -> Result<(), Refusal>;
}

#[server(prefix = "/_console", endpoint = "questions")]
pub async fn list_questions() -> Result<QuestionsPage, ServerFnError> {
    console()?.questions().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "question")]
pub async fn get_question(id: i64) -> Result<QuestionDetail, ServerFnError> {
    console()?.question(id).await.map_err(fail)
}

/// The game's workflow a new question starts: where its players are told how they did, and
/// where the final result is asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GameWorkflowForm {
    pub notify_url: Option<String>,
    pub result_url: Option<String>,
}

/// Creates a question; `choices` one per line; `workflow` checked: the game's workflow started
/// with it (`notify_url`, blank: no notify step; `result_url`, blank: no poll step).
#[server(prefix = "/_console", endpoint = "create_question")]
#[allow(clippy::too_many_arguments)]
pub async fn create_question(
    csrf: Option<String>,
    game: String,
    prompt: String,
    choices: String,
    game_time: String,
    zone: Option<String>,
    which: Option<String>,
    workflow: Option<String>,
    notify_url: Option<String>,
    result_url: Option<String>,
) -> Result<i64, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let game_ms = instant_ms(&game_time, zone.as_deref(), which.as_deref()).map_err(fail)?;
    let choices = choices
        .lines()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect();
    let workflow = workflow
        .filter(|w| !w.is_empty())
        .map(|_| GameWorkflowForm {
            notify_url: notify_url.filter(|u| !u.trim().is_empty()),
            result_url: result_url.filter(|u| !u.trim().is_empty()),
        });
    console()?
        .create_question(game, prompt, choices, game_ms, workflow)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "move_question")]
pub async fn move_question(
    csrf: Option<String>,
    id: i64,
    game_time: String,
    zone: Option<String>,
    which: Option<String>,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let game_ms = instant_ms(&game_time, zone.as_deref(), which.as_deref()).map_err(fail)?;
    console()?.move_question(id, game_ms).await.map_err(fail)
}
