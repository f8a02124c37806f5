//! `/api/v1/workflows`: workflow runs (see `engine::workflow`, docs/workflows.md). Operators
//! insert them, readers list and read them; an insert is audited with its outcome.
//!
//! A run's view shows its counters, its times, its steps' states, jobs, outputs and what each
//! waits for, and its signals with their sources and payloads: the outputs and payloads through
//! the rule of who sees a job's data (`engine::sight`, read by `Client::workflow_seen`). A step's
//! args are its job's, shown on the job.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use super::api_audit::{uncounted, Audit, Audited};
use super::api_jobs::{creator, sight};
use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::{ApiJson, ApiQuery, IdPath};
use super::state::AppState;
use crate::engine::schedules::JobTemplate;
use crate::engine::workflow::{
    Anchor, OnDepFailure, RunRow, StepRow, Workflow, MAX_DEPS, MAX_STEPS,
};
use crate::engine::workflow_actions::RetryMode;
use crate::engine::NewJob;
use crate::questions::game_workflow::GameWorkflowSettings;
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
    /// The run's named times (`{"kickoff_at": "2026-12-06T20:00:00Z"}`, at most 16, each
    /// within the jobs' window): its steps' timers and deadlines are anchored to them and move
    /// with them (`POST /workflows/{id}/times`).
    #[serde(default)]
    #[schemars(extend(
        "maxProperties" = 16,
        "propertyNames" = { "minLength": 1, "maxLength": 64, "pattern": NO_NUL }
    ))]
    pub times: BTreeMap<String, DateTime<Utc>>,
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
    /// A timer: its job is due at this time of the run's (plus an offset), not before.
    #[serde(default)]
    pub at: Option<TimeAnchor>,
    /// A signal of the run it waits for once its dependencies allow (one that came before is
    /// used), until `deadline` (required with it): then it fails.
    #[serde(default)]
    #[schemars(length(min = 1, max = 128), regex(pattern = NO_NUL))]
    pub signal: Option<String>,
    #[serde(default)]
    pub deadline: Option<TimeAnchor>,
    /// A map step: this many tasks (1 to 10,000), each a job of `job`'s kind and args that
    /// reads its index (`JobContext::task`), retried alone and resumed from the cursor it
    /// checkpointed; the step settles once every task settled (completed when all did).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10_000))]
    pub tasks: Option<u32>,
}

/// A time of the run's (one of its `times`, else 422 `inconsistent`) and an offset from it.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeAnchor {
    #[schemars(length(min = 1, max = 64), regex(pattern = NO_NUL))]
    pub time: String,
    /// Milliseconds after it (before it when negative); 0 when absent.
    #[serde(default)]
    #[schemars(range(min = -315_360_000_000_i64, max = 315_360_000_000_i64))]
    pub offset_ms: i64,
}

impl TimeAnchor {
    fn offset(&self) -> chrono::Duration {
        chrono::Duration::milliseconds(self.offset_ms)
    }
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
        workflow.times = self.times;
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
            if let Some(at) = step.at {
                workflow = workflow.at(&at.time, at.offset());
            }
            if let Some(last) = workflow.steps.last_mut() {
                last.tasks = step.tasks;
                last.signal = step.signal;
                last.deadline = step.deadline.map(|d| Anchor {
                    offset: d.offset(),
                    time: d.time,
                });
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
    /// Its named times.
    pub times: BTreeMap<String, DateTime<Utc>>,
    /// When one of its steps last changed state (its insert, a retry).
    pub progressed_at: DateTime<Utc>,
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
            times: serde_json::from_value(r.times).unwrap_or_default(),
            progressed_at: r.progressed_at,
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
    /// The signal it waits for (after its dependencies), if any, and until when once it waits.
    pub signal: Option<String>,
    pub deadline_at: Option<DateTime<Utc>>,
    /// When its job is due, while it waits for its time.
    pub due_at: Option<DateTime<Utc>>,
    /// What it waits for, in a sentence: its dependencies, its signal and deadline, its time;
    /// or why it failed without running (its deadline passed). Absent once it runs or settled.
    pub waits: Option<String>,
    /// Skipped by an operator (a retry of the failed leaves it skipped).
    pub skipped_by_hand: bool,
    /// What its completing attempt recorded (`JobContext::record`), read by the steps after it:
    /// as its job's attempts' outputs are shown to the caller (secrets hidden from those who
    /// do not see its job's).
    pub output: Option<Value>,
    /// A map step's progress: its tasks, those whose job completed, failed or was cancelled,
    /// and the items its tasks checkpointed as done. Absent for a step that is one job.
    pub tasks: Option<TasksView>,
}

/// A map step's tasks by outcome, and the items they did.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct TasksView {
    pub total: i32,
    pub completed: i32,
    pub failed: i32,
    pub cancelled: i32,
    pub items: i64,
}

impl StepView {
    fn of(s: StepRow, signals: &[String]) -> Self {
        let waits = s.wait(signals).map(|w| w.sentence());
        let tasks = s.tasks.map(|total| TasksView {
            total,
            completed: s.tasks_done,
            failed: s.tasks_failed,
            cancelled: s.tasks_cancelled,
            items: s.items,
        });
        StepView {
            tasks,
            waits,
            skipped_by_hand: s.skipped_by_hand,
            signal: s.signal,
            deadline_at: s.deadline_at,
            due_at: s.due_at,
            name: s.name,
            state: s.state,
            deps_left: s.deps_left,
            kind: s.kind,
            queue: s.queue,
            job_id: s.job_id.map(|j| j.0),
            finished_at: s.finished_at,
            kept_from: s.kept_from,
            output: s.output,
        }
    }
}

/// A signal a run received: its name, who sent it, when, and its payload (read by the steps
/// that wait for it, `JobContext::signal`).
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct SignalView {
    pub name: String,
    /// Who sent it: `api:<account or token>`, `console:<user>`, `endpoint:<id>` (a partner's
    /// signed call).
    pub source: String,
    pub received_at: DateTime<Utc>,
    /// What the steps waiting for it read: whole for admins and its sender, for the others with
    /// the fields named like a secret and the run's jobs' secrets it quotes hidden.
    pub payload: Value,
}

/// An attempt of a step's job, in a run's timeline (its output and log lines are on the job's
/// attempts, `GET /api/v1/jobs/{id}/attempts`).
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct StepAttempt {
    pub step: String,
    pub job_id: i64,
    pub attempt: i32,
    pub node: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// How long after its due time it started.
    pub late_ms: f64,
    pub duration_ms: f64,
    /// `completed`, `failed`, `discarded`, `cancelled`, `snoozed` or `lost`.
    pub outcome: String,
    /// As the caller may see it (a job's secrets hidden from those who do not see them).
    pub error: Option<String>,
}

/// A run with its steps, in the order they were declared, the signals it received, and the
/// timeline of its steps' attempts.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct RunDetail {
    pub run: RunView,
    pub steps: Vec<StepView>,
    pub signals: Vec<SignalView>,
    /// The attempts of its steps' jobs that ended, in the order they started: a retried step's
    /// earlier jobs' too (its newest 20 jobs), a map step's first 20 tasks'.
    pub attempts: Vec<StepAttempt>,
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
    inserted_answer(&state, &caller, inserted).await
}

pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    IdPath(id): IdPath,
) -> Result<Json<RunDetail>, AppError> {
    let run = state.client.workflow_run(id).await?;
    Ok(Json(detail_of(&state, &caller, run).await?))
}

/// The answer to an insert of a run: 201 with it, or 200 with the live run that holds its key
/// (`existing`).
async fn inserted_answer(
    state: &AppState,
    caller: &ApiCaller,
    inserted: crate::engine::workflow::RunInserted,
) -> Result<Audited<(StatusCode, Json<RunDetail>)>, AppError> {
    let status = if inserted.existing {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let mut detail = detail_of(state, caller, inserted.run).await?;
    detail.existing = inserted.existing;
    Ok(Audited((status, Json(detail))))
}

/// A run, its steps and its signals (as an answer, read after the change committed).
async fn detail_of(
    state: &AppState,
    caller: &ApiCaller,
    run: RunRow,
) -> Result<RunDetail, AppError> {
    let sight = sight(caller, state.client.workers());
    let seen = state.client.workflow_seen(&run, &sight).await?;
    let (steps, signals) = (seen.steps, seen.signals);
    let names: Vec<String> = signals.iter().map(|s| s.name.clone()).collect();
    Ok(RunDetail {
        run: run.into(),
        steps: steps.into_iter().map(|s| StepView::of(s, &names)).collect(),
        signals: signals
            .into_iter()
            .map(|s| SignalView {
                name: s.name,
                source: s.source,
                received_at: s.received_at,
                payload: s.payload,
            })
            .collect(),
        attempts: seen
            .attempts
            .into_iter()
            .map(|(step, r)| StepAttempt {
                step,
                job_id: r.job_id.0,
                attempt: r.attempt,
                node: r.node,
                started_at: r.started_at,
                finished_at: r.finished_at,
                late_ms: r.late_ms,
                duration_ms: r.duration_ms,
                outcome: r.outcome,
                error: r.error,
            })
            .collect(),
        existing: false,
    })
}

/// A signal to send a run.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendSignal {
    /// The signal's name (`final`): the first of a name stands.
    #[schemars(length(min = 1, max = 128), regex(pattern = NO_NUL))]
    pub name: String,
    /// What the steps waiting for it read (`JobContext::signal`); `null` when absent. At most
    /// 64 KiB.
    #[serde(default)]
    #[schemars(with = "crate::schema_rules::JsonWithoutNul")]
    pub payload: Value,
}

pub async fn signal(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<SendSignal>,
) -> Result<impl IntoResponse, AppError> {
    let client = &state.client;
    let source = format!("api:{}", creator(&caller));
    let Audited((_, stored)) = audit
        .run(uncounted, async |work| {
            Ok(client
                .signal_workflow_with(work.conn().await?, id, &body.name, &body.payload, &source)
                .await?)
        })
        .await?;
    let run = client.workflow_run(id).await?;
    let status = if stored {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut detail = detail_of(&state, &caller, run).await?;
    detail.existing = !stored;
    Ok(Audited((status, Json(detail))))
}

/// How a game's workflow starts (see `questions::game_workflow`).
#[derive(schemars::JsonSchema, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartGame {
    /// Where the `notify` step's calls go once the game is settled: webhook calls, each telling
    /// a page of players how they did (`{"type": "game.players", "game", "players": [{"player",
    /// "correct", "predicted"}]}`), which must pass `KICKOFF_WEBHOOK_ALLOWED_HOSTS` or an
    /// endpoint's `allow_calls` (else 422 `args_refused`); absent: the run has no `notify`
    /// step.
    #[serde(default)]
    #[schemars(length(max = 2048), regex(pattern = crate::schema_rules::NOTIFY_URL_PATTERN))]
    pub notify_url: Option<String>,
    /// How long after kickoff the settle waits for the final result, 60,000 to 172,800,000 ms
    /// (default 18,000,000: five hours).
    #[serde(default)]
    #[schemars(range(min = 60_000, max = 172_800_000))]
    pub deadline_ms: Option<i64>,
    /// The `notify` step's tasks, each a share of the players: 1 to 1,000 (default 4).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1_000))]
    pub notify_tasks: Option<u32>,
    /// Players in one call: 1 to 250 (default 100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 250))]
    pub notify_batch: Option<u32>,
    /// The partner's result API, for a partner that does not call us: the `poll` step asks it
    /// (`GET`, as a webhook call: `KICKOFF_WEBHOOK_ALLOWED_HOSTS` or an endpoint's `allow_calls`,
    /// else 422 `args_refused`; an endpoint's default headers carry its API key when its
    /// `header_methods` include `GET`) every
    /// `poll_every_ms` from the lock on, until it answers `{"final": true, "answers":
    /// {"<question id>": "<choice>"}}`, which becomes the `final` signal; absent: no `poll`
    /// step.
    #[serde(default)]
    #[schemars(length(max = 2048), regex(pattern = crate::schema_rules::NOTIFY_URL_PATTERN))]
    pub result_url: Option<String>,
    /// How often the result API is asked: 1,000 to 3,600,000 ms (default 30,000).
    #[serde(default)]
    #[schemars(range(min = 1_000, max = 3_600_000))]
    pub poll_every_ms: Option<u64>,
}

impl StartGame {
    /// The settings it asks for (a blank receiver: none).
    pub fn settings(self) -> GameWorkflowSettings {
        GameWorkflowSettings {
            notify_url: self.notify_url.filter(|u| !u.trim().is_empty()),
            deadline_ms: self.deadline_ms,
            notify_tasks: self.notify_tasks,
            notify_batch: self.notify_batch,
            result_url: self.result_url.filter(|u| !u.trim().is_empty()),
            poll_every_ms: self.poll_every_ms,
        }
    }
}

/// Starts game `game`'s workflow: lock at kickoff (the earliest game time of its open
/// questions), settle once the partner's `final` signal names the answers, notify, publish the
/// leaderboard.
pub async fn start_game(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    Path(game): Path<String>,
    ApiJson(body): ApiJson<StartGame>,
) -> Result<impl IntoResponse, AppError> {
    let settings = body.settings();
    let by = creator(&caller).to_string();
    let Audited(inserted) = audit
        .run(uncounted, async |work| {
            Ok(state
                .questions
                .start_game_workflow_with(work.conn().await?, &game, &settings, Some(&by))
                .await?)
        })
        .await?;
    inserted_answer(&state, &caller, inserted).await
}

/// The run's named times to move.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveTimes {
    /// New values of times the run has (`{"kickoff_at": "…"}`), 1 to 16, each within the jobs'
    /// window.
    #[schemars(extend(
        "minProperties" = 1,
        "maxProperties" = 16,
        "propertyNames" = { "minLength": 1, "maxLength": 64, "pattern": NO_NUL }
    ))]
    pub times: BTreeMap<String, DateTime<Utc>>,
}

pub async fn move_times(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<MoveTimes>,
) -> Result<impl IntoResponse, AppError> {
    let questions = &state.questions;
    let Audited(run) = audit
        .run(uncounted, async |work| {
            Ok(questions
                .move_workflow_times_with(work.conn().await?, id, &body.times)
                .await?)
        })
        .await?;
    Ok(Audited(Json(detail_of(&state, &caller, run).await?)))
}

pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    IdPath(id): IdPath,
) -> Result<impl IntoResponse, AppError> {
    let client = &state.client;
    let Audited(run) = audit
        .run(uncounted, async |work| {
            Ok(client.cancel_workflow_with(work.conn().await?, id).await?)
        })
        .await?;
    Ok(Audited(Json(detail_of(&state, &caller, run).await?)))
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
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<RetryWorkflow>,
) -> Result<impl IntoResponse, AppError> {
    let questions = &state.questions;
    let Audited(run) = audit
        .run(uncounted, async |work| {
            Ok(questions
                .retry_workflow_with(work.conn().await?, id, body.mode.into())
                .await?)
        })
        .await?;
    Ok(Audited(Json(detail_of(&state, &caller, run).await?)))
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
    Extension(caller): Extension<ApiCaller>,
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
    Ok(Audited(Json(detail_of(&state, &caller, run).await?)))
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
    let questions = &state.questions;
    let by = creator(&caller);
    let Audited(run) = audit
        .run(uncounted, async |work| {
            Ok(questions
                .rerun_workflow_with(work.conn().await?, id, &body.from, Some(by))
                .await?)
        })
        .await?;
    Ok(Audited((
        StatusCode::CREATED,
        Json(detail_of(&state, &caller, run).await?),
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
    /// Only running runs none of whose steps changed state for longer than this many ms (1 to
    /// 2,592,000,000: 30 days): those waiting for a partner, a paused queue, a timer.
    #[schemars(range(min = 1, max = 2_592_000_000i64))]
    pub waiting_ms: Option<i64>,
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
        .workflow_runs(
            q.state.map(RunState::as_str),
            q.before,
            limit,
            q.waiting_ms
                .map(|ms| std::time::Duration::from_millis(ms.max(0) as u64)),
        )
        .await?;
    let next_before = (runs.len() as i64 == limit)
        .then(|| runs.last().map(|r| r.id))
        .flatten();
    Ok(Json(RunPage {
        runs: runs.into_iter().map(Into::into).collect(),
        next_before,
    }))
}
