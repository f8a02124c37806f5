//! `/api/v1/jobs` beyond one action on one job: edit a waiting job (`PATCH /jobs/{id}`), count
//! what a filter matches (the confirmation), edit or move in time every waiting job it matches,
//! and export it as CSV or JSON lines, streamed.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use futures_util::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::api_audit::{recorded, worded, Audit, Audited};
use super::api_jobs::{sight, BulkFilter};
use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::{ApiJson, ApiQuery, JobIdPath};
use super::state::AppState;
use crate::engine::editing::Edited;
use crate::engine::job_edit::JobEdit;
use crate::engine::sight::{self, Sight};
use crate::engine::{BulkChange, BulkReport, ClientError, Job, JobFilter, JobId, Workers};
use crate::operations::{Selection, ShiftBy};
use crate::schema_rules::{ExactlyOne, InnerRequired, NOT_BLANK};

/// Edits a waiting job: `scheduled`, `available` or `retryable` (409 otherwise, and for a job a
/// question owns), checked by its kind's worker like an insert (422). The audit entry keeps the
/// fields that changed, before and after (secrets hidden).
pub async fn edit(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    JobIdPath(id): JobIdPath,
    ApiJson(body): ApiJson<JobEdit>,
) -> Result<Audited<Json<Job>>, AppError> {
    let sight = sight(&caller, state.client.workers());
    let done = audit
        .run_noting(
            |(edit, e): &(JobEdit, Edited), entry| {
                entry.filter = Some(edit_record(state.client.workers(), edit, e))
            },
            async |work| {
                let conn = work.conn().await?;
                state
                    .client
                    .edit_as_with(conn, id, &sight, |_| Ok::<_, AppError>(body))
                    .await
            },
        )
        .await?;
    let Audited((_, edited)) = done;
    Ok(Audited(Json(sight.job(edited.after))))
}

/// What an edit's audit entry keeps: the edit, and of the fields it changed their values before
/// and after, as a reader sees them (secrets hidden: the audit log is read by every role).
pub(crate) fn edit_record(workers: &Workers, edit: &JobEdit, e: &Edited) -> Value {
    let (before, after) = (
        sight::as_reader(workers, e.before.clone()),
        sight::as_reader(workers, e.after.clone()),
    );
    let fields = |j: &Job| {
        json!({"args": j.args, "queue": j.queue, "priority": j.priority,
               "max_attempts": j.max_attempts, "tags": j.tags, "meta": j.meta})
    };
    let (b, a) = (fields(&before), fields(&after));
    let mut was = serde_json::Map::new();
    let mut now = serde_json::Map::new();
    for (k, v) in b.as_object().into_iter().flatten() {
        if a[k] != *v {
            was.insert(k.clone(), v.clone());
            now.insert(k.clone(), a[k].clone());
        }
    }
    let mut shown = sight::as_reader_edit(workers, edit, Some(&e.before));
    shown["before"] = Value::Object(was);
    shown["after"] = Value::Object(now);
    shown
}

crate::http::api_jobs::job_filter_query! {
    /// The query of `GET /api/v1/jobs/count`: the filters of `GET /api/v1/jobs`.
    CountParams {}
}

/// How many jobs a filter matches now, and the snapshot to act on them.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct FilterCount {
    /// Matching jobs with an id at most `max_id`, counted up to 100,000.
    pub count: i64,
    /// The count stopped at 100,000.
    pub capped: bool,
    /// Give it as the filter's `max_id` to edit or move exactly these jobs: jobs inserted later
    /// are left alone. Absent when nothing matches.
    pub max_id: Option<JobId>,
}

/// Counts what a filter matches, with the newest matching job's id: the confirmation before an
/// edit or a move of every job it matches (give that id as their filter's `max_id`).
pub async fn count(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    ApiQuery(params): ApiQuery<CountParams>,
) -> Result<Json<FilterCount>, AppError> {
    let filter = params.to_filter()?;
    let sight = sight(&caller, state.client.workers());
    let c = state.operations().confirm(&sight, &filter).await?;
    Ok(Json(FilterCount {
        count: c.count,
        capped: c.capped,
        max_id: c.max_id,
    }))
}

/// A filter whose snapshot the caller confirmed (`max_id`, from `POST /api/v1/jobs/count`).
fn confirmed(filter: JobFilter) -> Result<JobFilter, AppError> {
    if filter.max_id.is_none() {
        return Err(AppError::invalid(
            "filter.max_id: confirm the count first (POST /api/v1/jobs/count answers it), so \
             that jobs inserted after it are left alone",
        ));
    }
    Ok(filter)
}

/// The body of `POST /api/v1/jobs/edit`: listed jobs (`ids`, at most 1,000) or every job matching
/// `filter` (with the `max_id` its count answered), and the edit.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[schemars(transform = ExactlyOne(&["ids", "filter"]))]
#[schemars(transform = InnerRequired("filter", "max_id"))]
pub struct EditManyBody {
    /// 1 to 1,000 ids. Not with `filter`.
    #[schemars(length(min = 1, max = crate::engine::bulk::MAX_BULK_IDS))]
    pub ids: Option<Vec<JobId>>,
    /// With the `max_id` its count answered. Not with `ids`.
    pub filter: Option<BulkFilter>,
    pub edit: JobEdit,
}

/// Edits listed waiting jobs or every waiting job matching a confirmed filter. Jobs that run,
/// ended or belong to a question are skipped; a job the edit would make invalid is left as it
/// was and counted in `refused`, with the first one's reason. Changing args or meta of every
/// matching job is an admin's (they may carry secrets the caller does not see).
pub async fn edit_many(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    ApiJson(body): ApiJson<EditManyBody>,
) -> Result<Response, AppError> {
    body.edit.check().map_err(ClientError::from)?;
    crate::engine::editing::check_meta_patch(&body.edit)?;
    let touches_args = body.edit.args.is_some()
        || body.edit.args_patch.is_some()
        || body.edit.meta_patch.is_some();
    let sight = sight(&caller, state.client.workers());
    if touches_args && !sight.may_search_secrets() {
        return Err(AppError::Forbidden(
            "only an admin's token can change the args or meta of many jobs at once (they may \
             carry secrets you do not see): PATCH each of your own jobs instead"
                .into(),
        ));
    }
    let record = json!({"edit": sight::as_reader_edit(state.client.workers(), &body.edit, None)});
    match (body.ids, body.filter) {
        (Some(ids), None) => {
            if ids.is_empty() {
                return Err(AppError::invalid("ids: 1 to 1,000 job ids"));
            }
            let mut applied = record;
            applied["ids"] = json!(ids);
            let entry = audit.applied_to(applied).into_entry();
            let change = BulkChange::Edit(body.edit);
            let done = state
                .operations()
                .bulk_ids(entry, change, &ids, worded)
                .await;
            Ok(recorded(done.map(Json)))
        }
        (None, Some(filter)) => {
            let mut applied = record;
            applied["filter"] = serde_json::to_value(&filter).unwrap_or_default();
            let filter = confirmed(JobFilter::try_from(filter).map_err(AppError::invalid)?)?;
            let entry = audit.applied_to(applied).into_entry();
            let change = BulkChange::Edit(body.edit);
            let done = state
                .operations()
                .bulk_filter(&sight, entry, change, &filter, worded)
                .await;
            Ok(recorded(done.map(Json)))
        }
        _ => Err(AppError::invalid("give either ids or filter (not both)")),
    }
}

/// The body of `POST /api/v1/jobs/shift`.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[schemars(transform = ExactlyOne(&["by_ms", "to"]))]
#[schemars(transform = InnerRequired("filter", "max_id"))]
pub struct ShiftBody {
    /// The jobs to move, with the `max_id` their count answered.
    pub filter: BulkFilter,
    /// Move them by this many ms (negative: earlier), at most 10 years either way. Not with
    /// `to`.
    #[schemars(range(min = -315_360_000_000i64, max = 315_360_000_000i64))]
    pub by_ms: Option<i64>,
    /// Move the earliest of them to this instant (RFC 3339), the others keeping their distance
    /// to it: at most 10 years from the earliest (else 422 `out_of_window`). Not with `by_ms`.
    pub to: Option<DateTime<Utc>>,
    /// The open questions of this game (their `game`, exactly) move by the same amount, their
    /// lock jobs with them. Questions whose lock job the filter matches move too.
    #[schemars(length(min = 1, max = 200), regex(pattern = NOT_BLANK))]
    pub game: Option<String>,
}

/// What a shift did.
#[derive(schemars::JsonSchema, Debug, Serialize)]
pub struct ShiftReport {
    /// How far the jobs moved, in ms.
    pub by_ms: i64,
    /// Jobs moved; jobs matched but left alone (not waiting, belonging to a question or to a
    /// workflow run's step — moved with it instead —, or taken out of the schedulable range: 24
    /// hours past to 10 years ahead).
    pub jobs: BulkReport,
    /// The questions moved (their game time and lock job).
    pub questions: Vec<i64>,
}

/// Moves every waiting job matching a confirmed filter by a duration or to a time, in batches
/// (a postponed game); the questions of its game, and those whose lock job the filter matches,
/// move with it, first and in one transaction (refused as a whole when one cannot move). Two
/// audit entries: `questions.shift` (when questions move) and the jobs' own.
pub async fn shift(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    ApiJson(body): ApiJson<ShiftBody>,
) -> Result<Response, AppError> {
    let mut applied = json!({"filter": body.filter});
    if let Some(game) = &body.game {
        applied["game"] = json!(game);
    }
    let filter = confirmed(JobFilter::try_from(body.filter).map_err(AppError::invalid)?)?;
    let by = match (body.by_ms, body.to) {
        (Some(ms), None) => ShiftBy::Ms(ms),
        (None, Some(to)) => ShiftBy::To(to),
        // The schema admits exactly one of them.
        _ => return Err(AppError::invalid("give either by_ms or to (not both)")),
    };
    let sight = sight(&caller, state.client.workers());
    let entry = audit.applied_to(applied).into_entry();
    let jobs = Selection::Filter(filter);
    let done = state
        .operations()
        .shift(&sight, entry, &jobs, by, body.game.as_deref(), worded)
        .await;
    Ok(recorded(done.map(|r| {
        Json(ShiftReport {
            by_ms: r.by_ms,
            jobs: r.jobs,
            questions: r.questions,
        })
    })))
}

/// The export's format.
#[derive(schemars::JsonSchema, Debug, Default, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormat {
    /// One header line, then one line per job: id, queue, kind, state, priority, attempt,
    /// max_attempts, scheduled_at, attempted_at, finalized_at, inserted_at, tags (JSON), args
    /// (JSON), last_error.
    #[default]
    Csv,
    /// One JSON object per line: the job as `GET /api/v1/jobs/{id}` answers it.
    Jsonl,
}

crate::http::api_jobs::job_filter_query! {
    /// The query of `GET /api/v1/jobs/export`: the filters of `GET /api/v1/jobs`, the format and
    /// the most rows.
    ExportParams {
        /// `csv` (the default) or `jsonl`.
        format: Option<ExportFormat>,
        /// The most rows the answer holds, 1 to 1,000,000 (default 100,000); its
        /// `Kickoff-Max-Rows` header states it. Newest first: a cut answer misses the oldest.
        #[schemars(range(min = 1, max = 1_000_000))]
        max_rows: Option<i64>,
    }
}

/// The default and largest `max_rows` of an export.
pub const EXPORT_DEFAULT_ROWS: i64 = 100_000;
pub const EXPORT_MAX_ROWS: i64 = 1_000_000;
/// Rows read per page of an export: what is in memory at a time.
const EXPORT_PAGE: i64 = 500;

/// The jobs a filter matches, newest first, as CSV or JSON lines, streamed a page of 500 at a time
/// (never the whole result in memory), at most `max_rows` (stated in `Kickoff-Max-Rows`).
pub async fn export(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    ApiQuery(params): ApiQuery<ExportParams>,
) -> Result<Response, AppError> {
    let filter = params.to_filter()?;
    let sight = sight(&caller, state.client.workers());
    sight.check_search(&filter).map_err(ClientError::from)?;
    let viewer = Viewer::of(&sight);
    let format = params.format.unwrap_or_default();
    stream_export(&state.client, viewer, filter, format, params.max_rows).await
}

/// Who reads an export, owned (the stream outlives the request's borrow): what of the jobs'
/// secrets they see.
#[derive(Debug, Clone)]
pub struct Viewer {
    name: String,
    admin: bool,
    reader: bool,
}

impl Viewer {
    pub fn of(sight: &Sight<'_>) -> Viewer {
        Viewer {
            name: sight.name.to_string(),
            admin: sight.admin,
            reader: sight.reader,
        }
    }

    fn sight<'a>(&'a self, workers: &'a crate::engine::Workers) -> Sight<'a> {
        Sight {
            name: &self.name,
            admin: self.admin,
            reader: self.reader,
            workers,
        }
    }
}

/// The export's answer: the first page is read before it starts (a failing read is an error
/// status, not a cut body), the others as the client reads.
pub async fn stream_export(
    client: &crate::engine::Client,
    viewer: Viewer,
    filter: JobFilter,
    format: ExportFormat,
    max_rows: Option<i64>,
) -> Result<Response, AppError> {
    let max_rows = max_rows.unwrap_or(EXPORT_DEFAULT_ROWS);
    if !(1..=EXPORT_MAX_ROWS).contains(&max_rows) {
        return Err(AppError::invalid("max_rows: must be between 1 and 1000000"));
    }
    let first = client.list(&filter, None, EXPORT_PAGE).await?;
    let header_line = match format {
        ExportFormat::Csv => csv_header(),
        ExportFormat::Jsonl => Vec::new(),
    };
    struct Walk {
        client: crate::engine::Client,
        viewer: Viewer,
        filter: JobFilter,
        page: Vec<Job>,
        left: usize,
        done: bool,
    }
    let walk = Walk {
        client: client.clone(),
        viewer,
        filter,
        page: first,
        left: max_rows as usize,
        done: false,
    };
    // Pages of rows as stored; only the rows the viewer sees matching count against `max_rows`
    // (a hidden match must not shorten the answer: it would tell one exists).
    let pages = stream::unfold(walk, move |mut w| async move {
        if w.done {
            return None;
        }
        let rows = std::mem::take(&mut w.page);
        let more = rows.len() as i64 == EXPORT_PAGE;
        let oldest = rows.last().map(|j| j.id);
        let mut shown = w
            .viewer
            .sight(w.client.workers())
            .jobs_matching(rows, &w.filter);
        shown.truncate(w.left);
        w.left -= shown.len();
        let bytes = match format {
            ExportFormat::Csv => csv_rows(&shown),
            ExportFormat::Jsonl => jsonl_rows(&shown),
        };
        if !more || w.left == 0 {
            w.done = true;
        } else {
            match w.client.list(&w.filter, oldest, EXPORT_PAGE).await {
                Ok(next) if !next.is_empty() => w.page = next,
                Ok(_) => w.done = true,
                Err(e) => {
                    // The status is sent: the body ends short (mid-stream error), and the log
                    // says why.
                    tracing::warn!(error = %e, "an export stopped: a page could not be read");
                    w.done = true;
                    return Some((Err(std::io::Error::other(e.to_string())), w));
                }
            }
        }
        Some((Ok::<_, std::io::Error>(bytes), w))
    });
    let body = stream::once(async move { Ok(header_line) }).chain(pages);
    let (content_type, extension) = match format {
        ExportFormat::Csv => ("text/csv; charset=utf-8", "csv"),
        ExportFormat::Jsonl => ("application/jsonl", "jsonl"),
    };
    let mut res = Body::from_stream(body).into_response();
    let headers = res.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"jobs.{extension}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    headers.insert("kickoff-max-rows", HeaderValue::from(max_rows));
    Ok(res)
}

const CSV_COLUMNS: [&str; 14] = [
    "id",
    "queue",
    "kind",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "scheduled_at",
    "attempted_at",
    "finalized_at",
    "inserted_at",
    "tags",
    "args",
    "last_error",
];

fn csv_header() -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(CSV_COLUMNS);
    w.into_inner().unwrap_or_default()
}

fn csv_rows(jobs: &[Job]) -> Vec<u8> {
    let time = |t: Option<DateTime<Utc>>| t.map(|t| t.to_rfc3339()).unwrap_or_default();
    let mut w = csv::Writer::from_writer(Vec::new());
    for j in jobs {
        let _ = w.write_record([
            j.id.0.to_string(),
            j.queue.clone(),
            j.kind.clone(),
            j.state.as_str().to_string(),
            j.priority.to_string(),
            j.attempt.to_string(),
            j.max_attempts.to_string(),
            j.scheduled_at.to_rfc3339(),
            time(j.attempted_at),
            time(j.finalized_at),
            j.inserted_at.to_rfc3339(),
            Value::from(j.tags.clone()).to_string(),
            j.args.to_string(),
            j.errors
                .last()
                .map(|e| e.message.clone())
                .unwrap_or_default(),
        ]);
    }
    w.into_inner().unwrap_or_default()
}

fn jsonl_rows(jobs: &[Job]) -> Vec<u8> {
    let mut out = Vec::new();
    for j in jobs {
        if serde_json::to_writer(&mut out, j).is_ok() {
            out.push(b'\n');
        }
    }
    out
}
