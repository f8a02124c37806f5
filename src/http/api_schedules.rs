//! `/api/v1/schedules`: recurring jobs (see `engine::schedules`). Operators change them, readers
//! list them; every change is audited with its outcome.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api_audit::{uncounted, Audit, Audited};
use super::api_jobs::{creator, sight};
use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::{ApiJson, ApiQuery};
use super::state::AppState;
use crate::engine::schedules::rule;
use crate::engine::schedules::{
    Missed, Overlap, ScheduleError, ScheduleSpec, ScheduleView, Schedules, SlotPreview,
};
use crate::engine::{job, Job, JobId};
use crate::schema_rules::{AtMostOne, NO_NUL};

fn schedules(state: &AppState) -> Schedules {
    Schedules::new(state.client.clone())
}

impl From<ScheduleError> for AppError {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::Invalid { .. } => AppError::invalid(e.to_string()),
            ScheduleError::Cron(_) => AppError::Unprocessable {
                code: "invalid_cron",
                message: e.to_string(),
            },
            ScheduleError::NotFound(_) => AppError::NotFound(e.to_string()),
            ScheduleError::Conflict(m) => AppError::conflict(m),
            ScheduleError::Client(e) => e.into(),
            ScheduleError::Database(e) => e.into(),
        }
    }
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
) -> Result<Json<Vec<ScheduleView>>, AppError> {
    let sight = sight(&caller, state.client.workers());
    let views = schedules(&state).list().await?;
    Ok(Json(views.into_iter().map(|v| sight.schedule(v)).collect()))
}

pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>, AppError> {
    Ok(Json(
        sight(&caller, state.client.workers()).schedule(schedules(&state).get(&name).await?),
    ))
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    ApiJson(spec): ApiJson<ScheduleSpec>,
) -> Result<impl IntoResponse, AppError> {
    let s = schedules(&state);
    let row = audit
        .run(uncounted, async |work| {
            let row = s
                .create_with(work.conn().await?, &spec, Some(creator(&caller)), "api")
                .await?;
            Ok(row)
        })
        .await?;
    let view = s.view(row.0).await?;
    Ok(Audited((
        StatusCode::CREATED,
        Json(sight(&caller, state.client.workers()).schedule(view)),
    )))
}

/// A change of some of a schedule's settings; absent fields keep theirs. Giving `cron` drops
/// `every_ms` and the other way round.
#[derive(schemars::JsonSchema, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[schemars(transform = AtMostOne(&["cron", "every_ms"]))]
pub struct SchedulePatch {
    /// Not with `every_ms`, not blank; a syntax error is 422 `invalid_cron`.
    #[schemars(regex(pattern = crate::schema_rules::NOT_BLANK))]
    pub cron: Option<String>,
    /// 1,000 to 34,560,000,000 ms. Not with `cron`.
    #[schemars(range(min = rule::MIN_EVERY_MS, max = rule::MAX_EVERY_MS))]
    pub every_ms: Option<i64>,
    #[serde(default)]
    #[schemars(schema_with = "super::schema::zone_or_null")]
    pub time_zone: Option<String>,
    /// One of the kinds this server runs (the document's `enum`; a stored kind no longer run:
    /// 422 `unknown_kind`).
    #[schemars(regex(pattern = NO_NUL))]
    #[schemars(extend("x-kickoff-kinds" = true))]
    pub kind: Option<String>,
    /// Checked by the kind's worker (else 422 `args_refused`).
    #[serde(default)]
    #[schemars(schema_with = "super::schema::args_schema")]
    pub args: Option<Value>,
    #[schemars(regex(pattern = job::QUEUE_PATTERN))]
    pub queue: Option<String>,
    #[schemars(range(min = job::PRIORITY_MIN, max = job::PRIORITY_MAX))]
    pub priority: Option<i16>,
    #[schemars(range(min = job::MAX_ATTEMPTS_MIN, max = job::MAX_ATTEMPTS_MAX))]
    pub max_attempts: Option<i32>,
    #[serde(default)]
    #[schemars(schema_with = "super::schema::tags_schema")]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    #[schemars(schema_with = "super::schema::template_meta_or_null")]
    pub meta: Option<Value>,
    pub paused: Option<bool>,
    /// `null` removes the start.
    #[serde(default, deserialize_with = "super::extract::present")]
    #[schemars(regex(pattern = rule::INSTANT_PATTERN))]
    pub starts_at: Option<Option<DateTime<Utc>>>,
    /// `null` removes the end; after the start (else 422 `inconsistent`), not passed (else 422
    /// `out_of_window`).
    #[serde(default, deserialize_with = "super::extract::present")]
    #[schemars(regex(pattern = rule::INSTANT_PATTERN))]
    pub ends_at: Option<Option<DateTime<Utc>>>,
    pub overlap: Option<Overlap>,
    pub missed: Option<Missed>,
    #[schemars(range(min = 1, max = 1000))]
    pub missed_limit: Option<i32>,
}

impl SchedulePatch {
    /// `spec` with this patch applied (to the spec as the caller sees it: see
    /// `Operations::change_schedule_with`).
    pub fn apply(self, mut spec: ScheduleSpec) -> ScheduleSpec {
        if let Some(cron) = self.cron {
            spec.cron = Some(cron);
            spec.every_ms = None;
        }
        if let Some(ms) = self.every_ms {
            spec.every_ms = Some(ms);
            spec.cron = None;
        }
        let j = &mut spec.job;
        macro_rules! set {
            ($($field:ident => $target:expr),* $(,)?) => {$(
                if let Some(v) = self.$field { $target = v; }
            )*};
        }
        set!(kind => j.kind, args => j.args, queue => j.queue, priority => j.priority,
             max_attempts => j.max_attempts, tags => j.tags, meta => j.meta);
        set!(time_zone => spec.time_zone, paused => spec.paused, starts_at => spec.starts_at,
             ends_at => spec.ends_at, overlap => spec.overlap, missed => spec.missed,
             missed_limit => spec.missed_limit);
        spec
    }
}

pub async fn update(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    Path(name): Path<String>,
    ApiJson(patch): ApiJson<SchedulePatch>,
) -> Result<Audited<Json<ScheduleView>>, AppError> {
    let s = schedules(&state);
    let sight = sight(&caller, state.client.workers());
    let row = audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            let apply = |spec: &mut ScheduleSpec| {
                *spec = patch.apply(spec.clone());
                Ok::<_, AppError>(())
            };
            let ops = state.operations();
            ops.change_schedule_with(conn, &sight, &name, apply).await
        })
        .await?;
    let view = s.view(row.0).await?;
    Ok(Audited(Json(sight.schedule(view))))
}

pub async fn delete(
    State(state): State<AppState>,
    audit: Audit,
    Path(name): Path<String>,
) -> Result<Audited<StatusCode>, AppError> {
    let s = schedules(&state);
    audit
        .run(uncounted, async |work| {
            s.delete_with(work.conn().await?, &name).await?;
            Ok(StatusCode::NO_CONTENT)
        })
        .await
}

pub async fn pause(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    Path(name): Path<String>,
) -> Result<Audited<Json<ScheduleView>>, AppError> {
    set_paused(&state, &caller, audit, &name, true).await
}

pub async fn resume(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    Path(name): Path<String>,
) -> Result<Audited<Json<ScheduleView>>, AppError> {
    set_paused(&state, &caller, audit, &name, false).await
}

async fn set_paused(
    state: &AppState,
    caller: &ApiCaller,
    audit: Audit,
    name: &str,
    paused: bool,
) -> Result<Audited<Json<ScheduleView>>, AppError> {
    let s = schedules(state);
    let row = audit
        .run(uncounted, async |work| {
            Ok(s.set_paused_with(work.conn().await?, name, paused).await?)
        })
        .await?;
    let view = s.view(row.0).await?;
    Ok(Audited(Json(
        sight(caller, state.client.workers()).schedule(view),
    )))
}

/// Runs the schedule now, outside its slots: 201 with the job inserted.
pub async fn trigger(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    let s = schedules(&state);
    let sight = sight(&caller, state.client.workers());
    audit
        .run(uncounted, async |work| {
            let job = s
                .trigger_with(work.conn().await?, &name, Some(creator(&caller)))
                .await?;
            Ok((StatusCode::CREATED, Json(sight.job(job))))
        })
        .await
}

#[derive(schemars::JsonSchema, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PreviewParams {
    /// How many slots: 1 to 100 (default 10).
    #[schemars(range(min = 1, max = 100))]
    pub n: Option<usize>,
    /// The slots after this instant (default: now), e.g. to see a daylight-saving day.
    pub from: Option<DateTime<Utc>>,
}

#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct Preview {
    pub time_zone: String,
    pub rule_text: String,
    /// The next slots after now, each in UTC and in the schedule's zone.
    pub slots: Vec<SlotPreview>,
}

pub async fn preview(
    State(state): State<AppState>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<PreviewParams>,
) -> Result<Json<Preview>, AppError> {
    let n = params.n.unwrap_or(10);
    let (view, slots) = schedules(&state).upcoming(&name, n, params.from).await?;
    Ok(Json(Preview {
        time_zone: view.time_zone,
        rule_text: view.rule_text,
        slots,
    }))
}

#[derive(schemars::JsonSchema, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunsParams {
    /// Runs older than this job id (the previous page's `next_before`).
    pub before: Option<i64>,
    /// 1 to 500 (default 50).
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<i64>,
}

#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct RunPage {
    pub runs: Vec<Job>,
    pub next_before: Option<JobId>,
}

/// A schedule's runs (its jobs), newest first; triggered runs included.
pub async fn runs(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    Path(name): Path<String>,
    ApiQuery(params): ApiQuery<RunsParams>,
) -> Result<Json<RunPage>, AppError> {
    let limit = params.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(AppError::invalid("limit: must be between 1 and 500"));
    }
    let jobs = schedules(&state)
        .runs(&name, params.before.map(JobId), limit)
        .await?;
    let next_before = (jobs.len() as i64 == limit)
        .then(|| jobs.last().map(|j| j.id))
        .flatten();
    let sight = sight(&caller, state.client.workers());
    Ok(Json(RunPage {
        runs: jobs.into_iter().map(|j| sight.job(j)).collect(),
        next_before,
    }))
}
