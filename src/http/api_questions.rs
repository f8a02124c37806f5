//! `/api/v1/questions`: game questions and predictions.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::api_audit::{uncounted, Audit, Audited};
use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::{ApiJson, ApiQuery, IdPath};
use super::state::AppState;
use crate::questions::service::{
    NewQuestion, QuestionDetail, MAX_CHOICES, MAX_CHOICE_CHARS, MAX_PLAYER_CHARS,
};
use crate::questions::store::{Prediction, Question};
use crate::questions::{QuestionError, QuestionStatus};
use crate::schema_rules::{NOT_BLANK, TRIMMED};

impl From<QuestionError> for AppError {
    fn from(e: QuestionError) -> Self {
        match e {
            QuestionError::Invalid { .. } => AppError::invalid(e.to_string()),
            QuestionError::NotFound(_) => AppError::NotFound(e.to_string()),
            QuestionError::UnknownChoice(_) => AppError::Unprocessable {
                code: "unknown_choice",
                message: e.to_string(),
            },
            QuestionError::PredictionsClosed => AppError::Conflict {
                code: "predictions_closed",
                message: e.to_string(),
            },
            QuestionError::Conflict(m) => AppError::conflict(m),
            QuestionError::Client(e) => e.into(),
            QuestionError::Database(e) => e.into(),
        }
    }
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateQuestion {
    /// The game it is about: 1 to 200 characters, not blank.
    #[schemars(length(min = 1, max = 200), regex(pattern = NOT_BLANK))]
    pub game: String,
    /// 1 to 500 characters, not blank.
    #[schemars(length(min = 1, max = 500), regex(pattern = NOT_BLANK))]
    pub prompt: String,
    /// 2 to 20 different choices of 1 to 100 characters without outer spaces.
    #[schemars(length(min = 2, max = MAX_CHOICES), extend("uniqueItems" = true))]
    #[schemars(inner(length(min = 1, max = MAX_CHOICE_CHARS), regex(pattern = TRIMMED)))]
    pub choices: Vec<String>,
    /// In the future, at most 730 days ahead (else 422 `out_of_window`).
    pub game_time: DateTime<Utc>,
    /// Start the game's workflow with the question, in its transaction, with these settings
    /// (as `POST /games/{game}/workflow` takes them; `{}` for the defaults): a live run of the
    /// game is kept (its kickoff follows the game's earliest open question). Refused (422
    /// `args_refused` for a receiver webhooks may not call), the question is not created.
    #[serde(default)]
    pub workflow: Option<super::api_workflows::StartGame>,
}

/// A question made, and the game's run when `workflow` was given.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct CreatedQuestion {
    #[serde(flatten)]
    pub question: QuestionDetail,
    /// The game's run: `run` its id, `existing` when a live run of the game was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<GameRun>,
}

/// The game's run a question was created with.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct GameRun {
    pub run: i64,
    pub existing: bool,
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    ApiJson(body): ApiJson<CreateQuestion>,
) -> Result<impl IntoResponse, AppError> {
    let by = super::api_jobs::creator(&caller).to_string();
    let settings = body.workflow.map(super::api_workflows::StartGame::settings);
    let new = NewQuestion {
        game: &body.game,
        prompt: &body.prompt,
        choices: &body.choices,
        game_time: body.game_time,
    };
    audit
        .run(uncounted, async |work| {
            let (question, run) = state
                .questions
                .create_in_game_with(work.conn().await?, &new, settings.as_ref(), Some(&by))
                .await?;
            let workflow = run.map(|r| GameRun {
                run: r.run.id,
                existing: r.existing,
            });
            Ok((
                StatusCode::CREATED,
                Json(CreatedQuestion { question, workflow }),
            ))
        })
        .await
}

#[derive(schemars::JsonSchema, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// `open`, `locked` or `settled`; blank or absent: every question.
    #[schemars(regex(pattern = r"^\s*$|^\s*(open|locked|settled)\s*$"))]
    pub status: Option<String>,
    /// 1 to 500 (default 50).
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<i64>,
}

pub async fn list(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<Vec<Question>>, AppError> {
    let status = params
        .status
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse::<QuestionStatus>)
        .transpose()
        .map_err(AppError::invalid)?;
    Ok(Json(
        state
            .questions
            .list(status, params.limit.unwrap_or(100))
            .await?,
    ))
}

pub async fn get(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Json<QuestionDetail>, AppError> {
    Ok(Json(state.questions.get(id).await?))
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateQuestion {
    /// 1 to 500 characters, not blank.
    #[schemars(length(min = 1, max = 500), regex(pattern = NOT_BLANK))]
    pub prompt: Option<String>,
    /// 2 to 20 different choices of 1 to 100 characters without outer spaces, while nobody
    /// predicted (else 409).
    #[schemars(length(min = 2, max = MAX_CHOICES), extend("uniqueItems" = true))]
    #[schemars(inner(length(min = 1, max = MAX_CHOICE_CHARS), regex(pattern = TRIMMED)))]
    pub choices: Option<Vec<String>>,
    /// In the future, at most 730 days ahead (else 422 `out_of_window`), while the question is
    /// open (else 409).
    pub game_time: Option<DateTime<Utc>>,
}

pub async fn update(
    State(state): State<AppState>,
    audit: Audit,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<UpdateQuestion>,
) -> Result<Audited<Json<QuestionDetail>>, AppError> {
    audit
        .run(uncounted, async |work| {
            Ok(Json(
                state
                    .questions
                    .update_with(
                        work.conn().await?,
                        id,
                        body.prompt.as_deref(),
                        body.choices.as_deref(),
                        body.game_time,
                    )
                    .await?,
            ))
        })
        .await
}

pub async fn delete(
    State(state): State<AppState>,
    audit: Audit,
    IdPath(id): IdPath,
) -> Result<Audited<StatusCode>, AppError> {
    audit
        .run(uncounted, async |work| {
            state.questions.delete_with(work.conn().await?, id).await?;
            Ok(StatusCode::NO_CONTENT)
        })
        .await
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictBody {
    /// 1 to 100 characters, not blank.
    #[schemars(length(min = 1, max = MAX_PLAYER_CHARS), regex(pattern = NOT_BLANK))]
    pub player: String,
    /// One of the question's choices (else 422 `unknown_choice`).
    pub choice: String,
}

pub async fn predict(
    State(state): State<AppState>,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<PredictBody>,
) -> Result<(StatusCode, Json<Prediction>), AppError> {
    let p = state
        .questions
        .predict(id, &body.player, &body.choice)
        .await?;
    Ok((StatusCode::CREATED, Json(p)))
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleBody {
    pub correct_choice: String,
}

pub async fn settle(
    State(state): State<AppState>,
    audit: Audit,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<SettleBody>,
) -> Result<Audited<Json<QuestionDetail>>, AppError> {
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(
                state
                    .questions
                    .settle_with(conn, id, &body.correct_choice)
                    .await?,
            ))
        })
        .await
}
