//! `/api/v1/jobs`: insert, list, inspect and act on jobs.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::api_audit::{recorded, uncounted, worded, Audit, Audited};
use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::{ApiJson, ApiQuery, JobIdPath};
use super::state::AppState;
use crate::accounts::{Role, TokenScope};
use crate::engine::job::{DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE};
use crate::engine::job_filter::{
    error_text_checked, late_by_checked, tags_checked, JobSuggestions,
};
use crate::engine::late_start::META_LATE;
use crate::engine::sight::Sight;
use crate::engine::{job, JobFilter, LatePolicy, Workers};
use crate::engine::{BulkAction, ClientError, Job, JobId, JobState, NewJob, OnConflict, Schedule};
use crate::schema_rules::{AtMostOne, ExactlyOne, NO_NUL};

/// The body of `POST /api/v1/jobs`.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[schemars(transform = AtMostOne(&["scheduled_at", "schedule_in_ms"]))]
#[schemars(transform = LateOnce)]
pub struct CreateJob {
    /// One of the kinds this server runs (the document's `enum`: its workers', less those only
    /// Kickoff inserts).
    #[schemars(regex(pattern = NO_NUL))]
    #[schemars(extend("x-kickoff-kinds" = true))]
    pub kind: String,
    /// A JSON object; its kind's worker checks it (else 422 `args_refused`).
    #[serde(default)]
    #[schemars(schema_with = "super::schema::args_schema")]
    pub args: Option<Value>,
    /// 1 to 64 of a-z, 0-9, `_` and `-` (default `default`).
    #[schemars(regex(pattern = job::QUEUE_PATTERN))]
    #[schemars(extend("x-message" = "queue: must be 1 to 64 characters of a-z, 0-9, `_` and `-`"))]
    pub queue: Option<String>,
    /// Lower is claimed first: 0 is the highest (default 0).
    #[schemars(range(min = job::PRIORITY_MIN, max = job::PRIORITY_MAX))]
    pub priority: Option<i16>,
    /// Attempts before the job is discarded (default 20).
    #[schemars(range(min = job::MAX_ATTEMPTS_MIN, max = job::MAX_ATTEMPTS_MAX))]
    pub max_attempts: Option<i32>,
    /// 1 to 255 characters: one live job per key.
    #[schemars(length(min = 1, max = job::MAX_UNIQUE_KEY_CHARS), regex(pattern = NO_NUL))]
    pub unique_key: Option<String>,
    pub on_conflict: Option<OnConflict>,
    /// RFC 3339, at most a day in the past and 3,650 days ahead (else 422 `out_of_window`). Not
    /// with `schedule_in_ms`.
    pub scheduled_at: Option<DateTime<Utc>>,
    /// Due this many ms from now: 0 to 3,650 days. Not with `scheduled_at`.
    #[schemars(range(min = 0, max = job::MAX_SCHEDULE_IN_MS))]
    pub schedule_in_ms: Option<i64>,
    #[serde(default)]
    #[schemars(schema_with = "super::schema::tags_schema")]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    #[schemars(schema_with = "super::schema::meta_schema")]
    pub meta: Option<Value>,
    /// What to do with an attempt that would start more than `after_ms` after its due time:
    /// `run` it anyway (the default), `skip` it (the job is cancelled, saying how late) or
    /// `discard` it (the job-discarded alert rule sees it). Kept as `meta.late` (not with it).
    pub on_late: Option<LatePolicy>,
}

/// `on_late` or `meta.late`, not both.
struct LateOnce;

impl schemars::transform::Transform for LateOnce {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        let both = json!({
            "not": {
                "required": ["on_late", "meta"],
                "properties": {
                    "on_late": { "not": { "type": "null" } },
                    "meta": { "type": "object", "required": [META_LATE] },
                },
            },
            "x-message": "give either on_late or meta.late, not both",
        });
        crate::schema_rules::add_rules(schema, [both]);
    }
}

impl CreateJob {
    /// The job to insert. The rules between fields (one way to schedule, `on_late` or
    /// `meta.late`, a `traceparent`, `owner` reserved) are the schema's, checked as the body is
    /// read ([`super::extract::ApiJson`]).
    pub fn into_new_job(self) -> NewJob {
        let schedule = match (self.scheduled_at, self.schedule_in_ms) {
            (Some(at), _) => Schedule::At(at),
            (None, Some(ms)) => Schedule::In(std::time::Duration::from_millis(ms.max(0) as u64)),
            (None, None) => Schedule::Now,
        };
        let new = NewJob {
            kind: self.kind,
            args: self.args.unwrap_or_else(|| json!({})),
            queue: self.queue.unwrap_or_else(|| DEFAULT_QUEUE.to_string()),
            priority: self.priority.unwrap_or(DEFAULT_PRIORITY),
            max_attempts: self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            schedule,
            unique_key: self.unique_key,
            on_conflict: self.on_conflict.unwrap_or_default(),
            tags: self.tags.unwrap_or_default(),
            meta: self.meta.unwrap_or_else(|| json!({})),
            created_by: None,
        };
        match self.on_late {
            Some(policy) => new.with_late_policy(policy),
            None => new,
        }
    }
}

#[derive(schemars::JsonSchema, Serialize)]
pub struct InsertedBody {
    pub job: Job,
    pub existing: bool,
}

pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    trace: Option<Extension<super::traced::IncomingTrace>>,
    audit: Audit,
    ApiJson(body): ApiJson<CreateJob>,
) -> Result<impl IntoResponse, AppError> {
    let mut new = body.into_new_job().created_by(creator(&caller));
    // The job continues the call's trace: its span's when traces are exported, else the caller's.
    let incoming = trace.and_then(|Extension(t)| t.0);
    if let Some(tp) = crate::telemetry::hand_on(&tracing::Span::current(), incoming.as_deref()) {
        if let Some(meta) = new.meta.as_object_mut() {
            meta.entry(crate::telemetry::META_TRACEPARENT)
                .or_insert(Value::from(tp));
        }
    }
    let sight = sight(&caller, state.client.workers());
    let inserted = state
        .operations()
        .insert::<AppError>(audit.into_entry(), &new)
        .await?;
    let status = if inserted.existing {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(Audited((
        status,
        Json(InsertedBody {
            // The live job holding the unique key may be another's: shown as they may see it.
            job: sight.job(inserted.job),
            existing: inserted.existing,
        }),
    )))
}

/// A query string struct holding the job filters of `GET /api/v1/jobs` and its export, with the
/// fields given after them: the dashboard's filters, read by the same code
/// (`engine::job_filter::FilterFields`). Every filter given must hold. (A macro, not a flattened
/// struct: serde's `flatten` reads a query string's numbers as strings and drops
/// `deny_unknown_fields`.)
macro_rules! job_filter_query {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(schemars::JsonSchema, Debug, Default, ::serde::Deserialize, ::serde::Serialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// One state or several separated by commas (`retryable,discarded`); blank: any.
            #[schemars(regex(pattern = r"^\s*$|^\s*(available|scheduled|executing|retryable|completed|cancelled|discarded)\s*(,\s*(available|scheduled|executing|retryable|completed|cancelled|discarded)\s*)*$"))]
            pub state: Option<String>,
            #[schemars(regex(pattern = $crate::schema_rules::NO_NUL))]
            pub queue: Option<String>,
            #[schemars(regex(pattern = $crate::schema_rules::NO_NUL))]
            pub kind: Option<String>,
            /// Jobs whose args contain this: a JSON object (`{"game_id":42}`; else 422
            /// `invalid_json`) or `key=value` pairs separated by commas
            /// (`game_id=42,team=lions`; a value reads as JSON when it parses, as text
            /// otherwise). Only an admin's token may name a header or a secret-named field.
            #[schemars(regex(pattern = $crate::schema_rules::ARGS_FILTER_PATTERN))]
            pub args: Option<String>,
            /// Jobs carrying every one of these tags: separated by commas, or a JSON array (for a
            /// tag with a comma; else 422 `invalid_json`); 1 to 20 tags of 1 to 100 characters.
            #[schemars(regex(pattern = $crate::schema_rules::TAGS_FILTER_PATTERN))]
            pub tags: Option<String>,
            /// Text in the last error's message, case-insensitive (at most 200 characters). Read
            /// row by row: bound it with a state, queue or kind on a large table. A job whose
            /// secrets the token may not see matches on the message as shown to it (secrets
            /// hidden), so a page may hold fewer jobs than `limit` while `next_before` says more
            /// follow.
            #[schemars(length(max = 200), regex(pattern = $crate::schema_rules::NO_NUL))]
            pub error: Option<String>,
            /// RFC 3339; `scheduled_at` at or after it.
            pub scheduled_from: Option<::chrono::DateTime<::chrono::Utc>>,
            /// RFC 3339; `scheduled_at` before it.
            pub scheduled_to: Option<::chrono::DateTime<::chrono::Utc>>,
            /// Jobs with an attempt that started more than this many ms after it was due (0 to a
            /// day).
            #[schemars(range(min = 0, max = 86400000))]
            pub late_by_ms: Option<f64>,
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $name {
            /// The engine's filter, checked by the code the dashboard's filter form goes through.
            pub fn to_filter(
                &self,
            ) -> Result<$crate::engine::JobFilter, $crate::http::error::AppError> {
                $crate::http::api_jobs::json_filter_checked(self.args.as_deref(), '{')?;
                $crate::http::api_jobs::json_filter_checked(self.tags.as_deref(), '[')?;
                let fields = $crate::engine::job_filter::FilterFields {
                    states: self.state.as_deref(),
                    queue: self.queue.as_deref(),
                    kind: self.kind.as_deref(),
                    args: self.args.as_deref(),
                    tags: self.tags.as_deref(),
                    error: self.error.as_deref(),
                    late_by_ms: self.late_by_ms,
                };
                Ok($crate::engine::JobFilter {
                    scheduled_from: self.scheduled_from,
                    scheduled_to: self.scheduled_to,
                    ..fields
                        .into_filter()
                        .map_err($crate::http::error::AppError::invalid)?
                })
            }
        }
    };
}
pub(crate) use job_filter_query;

/// A filter written as JSON (it starts with `open`) that is not JSON of that shape: 422
/// `invalid_json` (a rule no pattern can state).
pub(crate) fn json_filter_checked(text: Option<&str>, open: char) -> Result<(), AppError> {
    let Some(text) = text.map(str::trim).filter(|t| t.starts_with(open)) else {
        return Ok(());
    };
    use crate::engine::job_filter::{parse_args_filter, parse_tags_filter};
    let fits = match open {
        '{' => parse_args_filter(text).is_ok_and(|v| !v.to_string().contains("\\u0000")),
        _ => parse_tags_filter(text).is_ok_and(|t| !t.iter().any(|t| t.contains('\0'))),
    };
    if fits {
        return Ok(());
    }
    Err(AppError::Unprocessable {
        code: "invalid_json",
        message: format!(
            "{}: starts with `{open}` but is not a JSON {}",
            if open == '{' { "args" } else { "tags" },
            if open == '{' {
                "object (without NUL)"
            } else {
                "array of 1 to 20 texts of 1 to 100 characters (without NUL)"
            }
        ),
    })
}

job_filter_query! {
    /// The query of `GET /api/v1/jobs`: the filters and the page.
    ListParams {
        /// Keyset cursor: list jobs with a smaller id.
        before: Option<i64>,
        /// 1 to 500 (default 50).
        #[schemars(range(min = 1, max = 500))]
        limit: Option<i64>,
    }
}

#[derive(schemars::JsonSchema, Serialize)]
pub struct JobPage {
    pub jobs: Vec<Job>,
    /// Pass as `before` for the next page; absent on the last page.
    pub next_before: Option<JobId>,
}

/// How the jobs `caller` inserts name their creator: the token owner's name, or for the bootstrap
/// token [`BOOTSTRAP_CREATOR`], which no user name can be (a user named like the bootstrap
/// token's audit actor must not count as the creator of its jobs).
pub(crate) fn creator(caller: &ApiCaller) -> &str {
    match caller.token_id {
        Some(_) => &caller.actor,
        None => BOOTSTRAP_CREATOR,
    }
}

/// The creator of the jobs the bootstrap token inserts (spaces and parentheses: no user's name).
pub const BOOTSTRAP_CREATOR: &str = "(bootstrap token)";

/// What of the jobs' secrets `caller` sees (see [`sight`](crate::engine::sight)), by the rules of
/// the kinds `workers` run.
pub(crate) fn sight<'a>(caller: &'a ApiCaller, workers: &'a Workers) -> Sight<'a> {
    Sight {
        name: creator(caller),
        admin: caller.role == Role::Admin,
        reader: caller.scope < TokenScope::Write || caller.role < Role::Operator,
        workers,
    }
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<JobPage>, AppError> {
    let filter = params.to_filter()?;
    let sight = sight(&caller, state.client.workers());
    sight.check_search(&filter).map_err(ClientError::from)?;
    let limit = params.limit.unwrap_or(50);
    let (jobs, next_before) = page_as_seen(
        &state.client,
        &sight,
        &filter,
        params.before.map(JobId),
        limit,
    )
    .await?;
    Ok(Json(JobPage { jobs, next_before }))
}

/// The kinds, queues, tags and top-level args keys a job filter may suggest (the dashboard's
/// filter fields offer the same).
pub async fn suggestions(State(state): State<AppState>) -> Result<Json<JobSuggestions>, AppError> {
    Ok(Json(state.client.job_suggestions().await?))
}

/// A page of jobs as `sight` sees them, and the cursor of the next. With an error filter, a
/// caller who may not search secrets gets only the jobs whose error matches as they see it
/// (secrets hidden); the page is filled from the rows after, and its cursor names the last job
/// shown, so neither a short page nor the cursor tells that a hidden match exists.
pub(crate) async fn page_as_seen(
    client: &crate::engine::Client,
    sight: &Sight<'_>,
    filter: &JobFilter,
    before: Option<JobId>,
    limit: i64,
) -> Result<(Vec<Job>, Option<JobId>), crate::engine::ClientError> {
    if filter.error.is_none() || sight.may_search_secrets() {
        let jobs = client.list(filter, before, limit).await?;
        let next = (jobs.len() as i64 == limit)
            .then(|| jobs.last().map(|j| j.id))
            .flatten();
        return Ok((jobs.into_iter().map(|j| sight.job(j)).collect(), next));
    }
    let mut shown = Vec::new();
    let mut cursor = before;
    loop {
        let rows = client.list(filter, cursor, limit).await?;
        let more = rows.len() as i64 == limit;
        cursor = rows.last().map(|j| j.id);
        shown.extend(sight.jobs_matching(rows, filter));
        if shown.len() as i64 >= limit {
            shown.truncate(limit as usize);
            let next = shown.last().map(|j| j.id);
            return Ok((shown, next));
        }
        if !more {
            return Ok((shown, None));
        }
    }
}

pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    JobIdPath(id): JobIdPath,
) -> Result<Json<Job>, AppError> {
    Ok(Json(
        sight(&caller, state.client.workers()).job(state.client.get(id).await?),
    ))
}

pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    JobIdPath(id): JobIdPath,
) -> Result<Audited<Json<Job>>, AppError> {
    let sight = sight(&caller, state.client.workers());
    audit
        .run(uncounted, async |work| {
            Ok(Json(sight.job(
                state.client.cancel_one_with(work.conn().await?, id).await?,
            )))
        })
        .await
}

pub async fn retry(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    JobIdPath(id): JobIdPath,
) -> Result<Audited<Json<Job>>, AppError> {
    let sight = sight(&caller, state.client.workers());
    audit
        .run(uncounted, async |work| {
            Ok(Json(sight.job(
                state.client.retry_with(work.conn().await?, id).await?,
            )))
        })
        .await
}

pub async fn run_now(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    JobIdPath(id): JobIdPath,
) -> Result<Audited<Json<Job>>, AppError> {
    let sight = sight(&caller, state.client.workers());
    audit
        .run(uncounted, async |work| {
            Ok(Json(sight.job(
                state.client.run_now_with(work.conn().await?, id).await?,
            )))
        })
        .await
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RescheduleBody {
    pub scheduled_at: DateTime<Utc>,
}

pub async fn reschedule(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    JobIdPath(id): JobIdPath,
    ApiJson(body): ApiJson<RescheduleBody>,
) -> Result<Audited<Json<Job>>, AppError> {
    let sight = sight(&caller, state.client.workers());
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            let job = state
                .client
                .reschedule_with(conn, id, body.scheduled_at)
                .await?;
            Ok(Json(sight.job(job)))
        })
        .await
}

pub async fn delete(
    State(state): State<AppState>,
    audit: Audit,
    JobIdPath(id): JobIdPath,
) -> Result<Audited<StatusCode>, AppError> {
    audit
        .run(uncounted, async |work| {
            state.client.delete_with(work.conn().await?, id).await?;
            Ok(StatusCode::NO_CONTENT)
        })
        .await
}

/// The filter of a bulk action: every field optional; `{}` matches every job.
#[derive(schemars::JsonSchema, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    /// Any of these states; absent or empty: every state.
    #[serde(default)]
    pub states: Vec<JobState>,
    #[schemars(regex(pattern = NO_NUL))]
    pub queue: Option<String>,
    #[schemars(regex(pattern = NO_NUL))]
    pub kind: Option<String>,
    /// Jobs whose args contain this object.
    #[serde(default)]
    #[schemars(schema_with = "super::schema::args_schema")]
    pub args: Option<Value>,
    /// RFC 3339; `scheduled_at` at or after it.
    pub scheduled_from: Option<DateTime<Utc>>,
    /// RFC 3339; `scheduled_at` before it.
    pub scheduled_to: Option<DateTime<Utc>>,
    /// Leave jobs with a larger id alone (the list the caller confirmed); absent: the newest job
    /// when the action starts.
    pub max_id: Option<JobId>,
    /// Jobs with an attempt that started more than this many ms after it was due (0 to a day).
    #[schemars(range(min = 0, max = 86400000))]
    pub late_by_ms: Option<f64>,
    /// Jobs carrying every one of these tags (1 to 20 of 1 to 100 characters).
    #[serde(default)]
    #[schemars(schema_with = "super::schema::tags_schema", length(min = 1))]
    pub tags: Option<Vec<String>>,
    /// Text in the last error's message, case-insensitive (at most 200 characters). Only an
    /// admin's token: a count over messages others see with secrets hidden would tell whether a
    /// guessed secret is in one (list with this filter, then act on the ids).
    #[schemars(length(max = 200), regex(pattern = NO_NUL))]
    pub error: Option<String>,
}

impl TryFrom<BulkFilter> for JobFilter {
    type Error = String;

    fn try_from(f: BulkFilter) -> Result<Self, String> {
        Ok(JobFilter {
            states: f.states,
            queue: f.queue,
            kind: f.kind,
            args: f.args,
            scheduled_from: f.scheduled_from,
            scheduled_to: f.scheduled_to,
            max_id: f.max_id,
            late_by_ms: f.late_by_ms.map(late_by_checked).transpose()?,
            tags: f.tags.map(tags_checked).transpose()?.unwrap_or_default(),
            error: f.error.map(error_text_checked).transpose()?,
        })
    }
}

/// The body of `POST /api/v1/jobs/bulk`: an action and either `ids` (at most 1,000) or `filter`.
#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[schemars(transform = ExactlyOne(&["ids", "filter"]))]
pub struct BulkBody {
    /// `cancel`, `retry`, `run_now` or `delete`.
    pub action: BulkAction,
    /// 1 to 1,000 ids. Not with `filter`.
    #[schemars(length(min = 1, max = crate::engine::bulk::MAX_BULK_IDS))]
    pub ids: Option<Vec<JobId>>,
    /// Not with `ids`.
    pub filter: Option<BulkFilter>,
}

/// Applies an action to listed jobs or to every job matching a filter. Answers how many changed
/// and how many were left alone because their state does not allow the action.
///
/// The audit entry keeps what it was applied to (the ids or the filter) and how many changed.
/// Listed ids change in one transaction with the entry; a filter's batches each commit on their
/// own, the first with an entry reading `started` (see `Operations::bulk_filter`).
pub async fn bulk(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    audit: Audit,
    ApiJson(body): ApiJson<BulkBody>,
) -> Result<Response, AppError> {
    match (body.ids, body.filter) {
        (Some(ids), None) => {
            let entry = audit.applied_to(json!({ "ids": ids })).into_entry();
            let done = state
                .operations()
                .bulk_ids(entry, body.action, &ids, worded)
                .await;
            Ok(recorded(done.map(Json)))
        }
        (None, Some(filter)) => {
            let audit = audit.applied_to(serde_json::to_value(&filter).unwrap_or_default());
            let filter = JobFilter::try_from(filter).map_err(AppError::invalid)?;
            let sight = sight(&caller, state.client.workers());
            let done = state
                .operations()
                .bulk_filter(&sight, audit.into_entry(), body.action, &filter, worded)
                .await;
            Ok(recorded(done.map(Json)))
        }
        // The schema admits exactly one of them.
        _ => Err(AppError::invalid("give either ids or filter (not both)")),
    }
}
