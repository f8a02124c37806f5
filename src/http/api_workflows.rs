//! `/api/v1/workflows`: workflow runs (see `engine::workflow`, docs/workflows.md). Operators
//! insert them, readers list and read them; an insert is audited with its outcome.
//!
//! A run's view shows its counters and its steps' states and jobs, never their args or outputs:
//! those are a job's data, shown (as the caller may see them) on the step's job.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::api_audit::{uncounted, Audit, Audited};
use super::api_jobs::creator;
use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::{ApiJson, ApiQuery, IdPath};
use super::state::AppState;
use crate::engine::schedules::JobTemplate;
use crate::engine::workflow::{OnDepFailure, RunRow, StepRow, Workflow, MAX_DEPS, MAX_STEPS};
use crate::engine::workflow_actions::RetryMode;
use crate::engine::NewJob;
use crate::schema_rules::NO_NUL;

/// A run to insert: named steps, each the job it becomes and the steps it waits for.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateWorkflow {
    /// The workflow's name (`game`): 1 to 128 characters.
    #[schemars(length(min = 1, max = 128), regex(pattern = NO_NUL))]
    pub name: String,
    /// Unique among the live runs (`game:8812`): 1 to 255 characters. A run whose key a live run
    /// holds is not inserted: the answer is that run, 200 with `existing`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255), regex(pattern = NO_NUL))]
    pub key: Option<String>,
    /// 1 to 200 steps, each waiting only for steps before it in this list (else 422
    /// `inconsistent`), with names unique in the run.
    #[schemars(length(min = 1, max = MAX_STEPS))]
    pub steps: Vec<CreateStep>,
}

/// A step: its name, the job it becomes once its dependencies allow (due then), and them.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateStep {
    /// 1 to 128 characters, unique in the run.
    #[schemars(length(min = 1, max = 128), regex(pattern = NO_NUL))]
    pub name: String,
    pub job: JobTemplate,
    /// The steps it waits for (at most 50), each named once and declared before it.
    #[serde(default)]
    #[schemars(length(max = MAX_DEPS))]
    pub after: Vec<Dependency>,
}

/// A step waited for, and what its failing (or being cancelled) does to the step waiting.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    #[schemars(length(min = 1, max = 128), regex(pattern = NO_NUL))]
    pub step: String,
    #[serde(default)]
    pub on_failure: OnFailure,
}

/// What a dependency that failed or was cancelled does to the step waiting for it: `fail` (it
/// fails without running), `skip` (it is skipped, the steps after it go on), `skip_following`
/// (it and every step after it are skipped), `run` (it runs anyway).
#[derive(schemars::JsonSchema, Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    #[default]
    Fail,
    Skip,
    SkipFollowing,
    Run,
}

impl From<OnFailure> for OnDepFailure {
    fn from(o: OnFailure) -> Self {
        match o {
            OnFailure::Fail => OnDepFailure::Fail,
            OnFailure::Skip => OnDepFailure::Skip,
            OnFailure::SkipFollowing => OnDepFailure::SkipFollowing,
            OnFailure::Run => OnDepFailure::Run,
        }
    }
}

impl CreateWorkflow {
    fn into_workflow(self, created_by: &str) -> Workflow {
        let mut workflow = Workflow::new(self.name);
        workflow.key = self.key;
        workflow.created_by = Some(created_by.to_string());
        for step in self.steps {
            let t = step.job;
            let job = NewJob::new(t.kind, t.args)
                .with_queue(t.queue)
                .with_priority(t.priority)
                .with_max_attempts(t.max_attempts)
                .with_tags(t.tags)
                .with_meta(t.meta)
                .created_by(created_by);
            workflow = workflow.step(step.name, job);
            for dep in step.after {
                workflow = workflow.after_or(dep.step, dep.on_failure.into());
            }
        }
        workflow
    }
}

/// A run: its state and its steps counted by state (`blocked` wait for dependencies, `ready`
/// have a job that has not settled).
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct RunView {
    pub id: i64,
    pub name: String,
    pub key: Option<String>,
    /// `running`, `completed`, `failed` (a step failed or was cancelled) or `cancelled`.
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub created_by: Option<String>,
    pub steps: i32,
    pub blocked: i32,
    pub ready: i32,
    pub completed: i32,
    pub failed: i32,
    pub skipped: i32,
    pub cancelled: i32,
    /// The run this one runs again from one of its steps (`POST /workflows/{id}/rerun`).
    pub rerun_of: Option<i64>,
}

impl From<RunRow> for RunView {
    fn from(r: RunRow) -> Self {
        RunView {
            id: r.id,
            name: r.name,
            key: r.key,
            state: r.state,
            created_at: r.created_at,
            finished_at: r.finished_at,
            created_by: r.created_by,
            steps: r.steps,
            blocked: r.blocked,
            ready: r.ready,
            completed: r.completed,
            failed: r.failed,
            skipped: r.skipped,
            cancelled: r.cancelled,
            rerun_of: r.rerun_of,
        }
    }
}

/// A step: its state, what it still waits for, and its job once it has one.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct StepView {
    pub name: String,
    /// `blocked`, `ready`, `completed`, `failed`, `skipped` or `cancelled`.
    pub state: String,
    /// Dependencies not yet settled in a way that lets it run.
    pub deps_left: i32,
    pub kind: String,
    pub queue: String,
    /// Its job (`/api/v1/jobs/{id}`), once it was made.
    pub job_id: Option<i64>,
    pub finished_at: Option<DateTime<Utc>>,
    /// In a rerun, the step of the run it reruns whose completion (job and output) this one
    /// keeps; absent for a step that ran in this run.
    pub kept_from: Option<i64>,
}

impl From<StepRow> for StepView {
    fn from(s: StepRow) -> Self {
        StepView {
            name: s.name,
            state: s.state,
            deps_left: s.deps_left,
            kind: s.kind,
            queue: s.queue,
            job_id: s.job_id.map(|j| j.0),
            finished_at: s.finished_at,
            kept_from: s.kept_from,
        }
    }
}

/// A run with its steps, in the order they were declared.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct RunDetail {
    pub run: RunView,
    pub steps: Vec<StepView>,
    /// The insert found a live run holding the key and wrote nothing (false but for inserts).
    pub existing: bool,
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    ApiJson(body): ApiJson<CreateWorkflow>,
) -> Result<impl IntoResponse, AppError> {
    let workflow = body.into_workflow(creator(&caller));
    let client = &state.client;
    let Audited(inserted) = audit
        .run(uncounted, async |work| {
            Ok(client
                .insert_workflow_with(work.conn().await?, &workflow)
                .await?)
        })
        .await?;
    let steps = client.workflow_steps(inserted.run.id).await?;
    let status = if inserted.existing {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(Audited((
        status,
        Json(RunDetail {
            run: inserted.run.into(),
            steps: steps.into_iter().map(Into::into).collect(),
            existing: inserted.existing,
        }),
    )))
}

pub async fn get(
    State(state): State<AppState>,
    IdPath(id): IdPath,
) -> Result<Json<RunDetail>, AppError> {
    let run = state.client.workflow_run(id).await?;
    let steps = state.client.workflow_steps(id).await?;
    Ok(Json(RunDetail {
        run: run.into(),
        steps: steps.into_iter().map(Into::into).collect(),
        existing: false,
    }))
}

/// A run and its steps as the answer of an action on it.
async fn detail_of(state: &AppState, run: RunRow) -> Result<RunDetail, AppError> {
    let steps = state.client.workflow_steps(run.id).await?;
    Ok(RunDetail {
        run: run.into(),
        steps: steps.into_iter().map(Into::into).collect(),
        existing: false,
    })
}

pub async fn cancel(
    State(state): State<AppState>,
    audit: Audit,
    IdPath(id): IdPath,
) -> Result<impl IntoResponse, AppError> {
    let client = &state.client;
    let Audited(run) = audit
        .run(uncounted, async |work| {
            Ok(client.cancel_workflow_with(work.conn().await?, id).await?)
        })
        .await?;
    Ok(Audited(Json(detail_of(&state, run).await?)))
}

/// Which steps of a run a retry runs again.
#[derive(schemars::JsonSchema, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryWorkflow {
    /// `failed` (the default: the steps that failed, were cancelled or skipped; never a completed
    /// one), `failed_and_following` (those and every step after them, completed ones included),
    /// `all` (every step; none may be running).
    #[serde(default)]
    pub mode: Retry,
}

/// Which steps a retry runs again (`engine::workflow_actions::RetryMode`).
#[derive(schemars::JsonSchema, Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Retry {
    #[default]
    Failed,
    FailedAndFollowing,
    All,
}

impl From<Retry> for RetryMode {
    fn from(r: Retry) -> Self {
        match r {
            Retry::Failed => RetryMode::Failed,
            Retry::FailedAndFollowing => RetryMode::FailedAndFollowing,
            Retry::All => RetryMode::All,
        }
    }
}

pub async fn retry(
    State(state): State<AppState>,
    audit: Audit,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<RetryWorkflow>,
) -> Result<impl IntoResponse, AppError> {
    let client = &state.client;
    let Audited(run) = audit
        .run(uncounted, async |work| {
            Ok(client
                .retry_workflow_with(work.conn().await?, id, body.mode.into())
                .await?)
        })
        .await?;
    Ok(Audited(Json(detail_of(&state, run).await?)))
}

/// The step to skip.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkipStep {
    /// A step of the run, blocked or ready (its job is cancelled).
    #[schemars(length(min = 1, max = 128), regex(pattern = NO_NUL))]
    pub step: String,
}

pub async fn skip(
    State(state): State<AppState>,
    audit: Audit,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<SkipStep>,
) -> Result<impl IntoResponse, AppError> {
    let client = &state.client;
    let Audited(run) = audit
        .run(uncounted, async |work| {
            Ok(client
                .skip_workflow_step_with(work.conn().await?, id, &body.step)
                .await?)
        })
        .await?;
    Ok(Audited(Json(detail_of(&state, run).await?)))
}

/// The step a rerun starts from.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerunWorkflow {
    /// A step of the run: it, every step that did not complete and every step after either run
    /// again in the new run; the others keep their completion and output.
    #[schemars(length(min = 1, max = 128), regex(pattern = NO_NUL))]
    pub from: String,
}

pub async fn rerun(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<RerunWorkflow>,
) -> Result<impl IntoResponse, AppError> {
    let client = &state.client;
    let by = creator(&caller);
    let Audited(run) = audit
        .run(uncounted, async |work| {
            Ok(client
                .rerun_workflow_with(work.conn().await?, id, &body.from, Some(by))
                .await?)
        })
        .await?;
    Ok(Audited((
        StatusCode::CREATED,
        Json(detail_of(&state, run).await?),
    )))
}

/// A page of runs, newest first.
#[derive(schemars::JsonSchema, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only runs in this state.
    pub state: Option<RunState>,
    /// Runs with an id below this (the previous page's `next_before`).
    #[schemars(range(min = 1))]
    pub before: Option<i64>,
    /// 1 to 200; 50 when absent.
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<i64>,
}

#[derive(schemars::JsonSchema, Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl RunState {
    fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }
}

#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct RunPage {
    pub runs: Vec<RunView>,
    /// The next page's `before`, when there may be more.
    pub next_before: Option<i64>,
}

pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListParams>,
) -> Result<Json<RunPage>, AppError> {
    let limit = q.limit.unwrap_or(50);
    let runs = state
        .client
        .workflow_runs(q.state.map(RunState::as_str), q.before, limit)
        .await?;
    let next_before = (runs.len() as i64 == limit)
        .then(|| runs.last().map(|r| r.id))
        .flatten();
    Ok(Json(RunPage {
        runs: runs.into_iter().map(Into::into).collect(),
        next_before,
    }))
}
