//! The attempts' records and their history: `GET /api/v1/jobs/{id}/attempts` (each attempt's due
//! time, start, lateness, node, duration, outcome, output and log lines) and
//! `GET /api/v1/stats/history` (the rollups as series: counts per outcome, lateness p50 and p99
//! and its histogram, durations), the same series the dashboard's charts draw.

use axum::extract::State;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::{ApiQuery, JobIdPath};
use super::state::AppState;
use crate::engine::history::{
    by_series, late_quantile, AttemptRecord, HistoryGroup, HistoryPoint, LATE_BOUNDS_MS,
};
use crate::engine::HistoryQuery;

/// One attempt that ended.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct AttemptView {
    pub attempt: i32,
    pub node: String,
    /// When the attempt was due (the job's `scheduled_at` when it was claimed).
    pub due_at: DateTime<Utc>,
    /// When its handler started, by the database's clock.
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// `started_at` minus `due_at`.
    pub late_ms: f64,
    pub duration_ms: f64,
    /// `completed`, `failed` (to be retried), `discarded`, `cancelled`, `snoozed`, or `lost`
    /// (its node's lease expired).
    pub outcome: String,
    pub error: Option<String>,
    /// What the handler recorded (at most 64 KB of JSON).
    pub output: Option<Value>,
    /// The attempt's log lines: `{at, level, target, message}`, at most 200 lines or 64 KB.
    pub logs: Vec<Value>,
    /// Lines left out past that bound.
    pub logs_dropped: i32,
}

impl From<AttemptRecord> for AttemptView {
    fn from(r: AttemptRecord) -> Self {
        AttemptView {
            attempt: r.attempt,
            node: r.node,
            due_at: r.due_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            late_ms: r.late_ms,
            duration_ms: r.duration_ms,
            outcome: r.outcome,
            error: r.error,
            output: r.output,
            logs: match r.logs {
                Some(Value::Array(lines)) => lines,
                _ => Vec::new(),
            },
            logs_dropped: r.logs_dropped,
        }
    }
}

/// The records of a job's attempts that ended, oldest first; 404 for an unknown job. A caller
/// who does not see the job's secrets (see `engine::sight`) sees them hidden in the records' errors,
/// outputs and log lines too.
pub async fn attempts(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    JobIdPath(id): JobIdPath,
) -> Result<Json<Vec<AttemptView>>, AppError> {
    let job = state.client.get(id).await?;
    let records = state.client.attempts(id).await?;
    let records = super::api_jobs::sight(&caller, state.client.workers()).attempts(&job, records);
    Ok(Json(records.into_iter().map(AttemptView::from).collect()))
}

/// How the series are split.
#[derive(schemars::JsonSchema, Debug, Clone, Copy, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupParam {
    Queue,
    Kind,
}

/// The query of `GET /api/v1/stats/history`.
#[derive(schemars::JsonSchema, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryParams {
    /// Only this queue's attempts.
    #[schemars(regex(pattern = crate::schema_rules::NO_NUL))]
    #[schemars(extend("x-message" = "queue: must not contain NUL characters"))]
    pub queue: Option<String>,
    /// Only this kind's attempts.
    #[schemars(regex(pattern = crate::schema_rules::NO_NUL))]
    #[schemars(extend("x-message" = "kind: must not contain NUL characters"))]
    pub kind: Option<String>,
    /// Only the runs of the schedule of this name (404 when there is none).
    #[schemars(regex(pattern = crate::schema_rules::NO_NUL))]
    #[schemars(extend("x-message" = "schedule: must not contain NUL characters"))]
    pub schedule: Option<String>,
    /// RFC 3339; default: an hour before `to`.
    pub from: Option<DateTime<Utc>>,
    /// RFC 3339, excluded; default: now.
    pub to: Option<DateTime<Utc>>,
    /// Seconds per point, a whole number of minutes; default 60, or 3600 when `from` is over a
    /// day back (minutes are kept for 24 hours, hours for the retention). At most 1,500 points
    /// and 400 days.
    #[schemars(range(min = 60, max = 86400), extend("multipleOf" = 60))]
    pub step: Option<u64>,
    /// `queue` or `kind`: one series per queue or kind; absent: one series of everything.
    pub group: Option<GroupParam>,
}

/// One step of a series.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct PointView {
    /// The step's start.
    pub at: DateTime<Utc>,
    pub completed: i64,
    pub failed: i64,
    pub discarded: i64,
    pub cancelled: i64,
    pub snoozed: i64,
    pub lost: i64,
    /// The lateness under which half of the step's attempts started (ms), read from the
    /// histogram; absent when none ended.
    pub late_p50_ms: Option<f64>,
    pub late_p99_ms: Option<f64>,
    /// The lateness histogram: counts per bucket of `late_bounds_ms`.
    pub late_buckets: Vec<i64>,
    pub duration_avg_ms: Option<f64>,
    pub duration_max_ms: Option<f64>,
}

impl From<&HistoryPoint> for PointView {
    fn from(p: &HistoryPoint) -> Self {
        let n = p.attempts();
        PointView {
            at: p.at,
            completed: p.completed,
            failed: p.failed,
            discarded: p.discarded,
            cancelled: p.cancelled,
            snoozed: p.snoozed,
            lost: p.lost,
            late_p50_ms: late_quantile(&p.late_buckets, 0.5),
            late_p99_ms: late_quantile(&p.late_buckets, 0.99),
            late_buckets: p.late_buckets.clone(),
            duration_avg_ms: (n > 0).then(|| p.duration_sum_ms / n as f64),
            duration_max_ms: (n > 0).then_some(p.duration_max_ms),
        }
    }
}

/// One series.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct SeriesView {
    /// The queue or kind it counts; empty when not grouped.
    pub name: String,
    pub points: Vec<PointView>,
}

/// The answer of `GET /api/v1/stats/history`.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct HistoryView {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub step: u64,
    /// The histogram's bucket bounds in ms: bucket 0 counts attempts under the first, bucket
    /// `k` those from bound `k - 1` up to bound `k`, the last those at or past the last.
    pub late_bounds_ms: Vec<f64>,
    /// Every series with an attempt in the range (one, possibly all zeros, when not grouped).
    pub series: Vec<SeriesView>,
}

/// The query `params` ask, with its defaults, at `now`; 404 for an unknown schedule.
pub async fn history_query(
    state: &AppState,
    params: HistoryParams,
    now: DateTime<Utc>,
) -> Result<HistoryQuery, AppError> {
    let filter = state
        .client
        .history_filter(params.queue, params.kind, params.schedule.as_deref())
        .await?;
    let to = params.to.unwrap_or(now);
    let from = params.from.unwrap_or(to - chrono::Duration::hours(1));
    let step = params
        .step
        .unwrap_or(if now - from > chrono::Duration::days(1) {
            3600
        } else {
            60
        });
    Ok(HistoryQuery {
        filter,
        group: match params.group {
            None => HistoryGroup::All,
            Some(GroupParam::Queue) => HistoryGroup::Queue,
            Some(GroupParam::Kind) => HistoryGroup::Kind,
        },
        from,
        to,
        step: std::time::Duration::from_secs(step),
    })
}

/// The history of the attempts the query selects; 422 for a range or step the rollups cannot
/// answer (a range backwards or over 400 days, a step not a whole number of minutes or over a
/// day, over 1,500 points, minute steps before the last day).
pub async fn history(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<HistoryParams>,
) -> Result<Json<HistoryView>, AppError> {
    let now = state.client.db_now().await?;
    let q = history_query(&state, params, now).await?;
    let points = state.client.history(&q).await?;
    Ok(Json(HistoryView {
        from: q.from,
        to: q.to,
        step: q.step.as_secs(),
        late_bounds_ms: LATE_BOUNDS_MS.to_vec(),
        series: by_series(points)
            .into_iter()
            .map(|(name, steps)| SeriesView {
                name,
                points: steps.iter().map(PointView::from).collect(),
            })
            .collect(),
    }))
}
