//! The API document's schemas of the engine's types, held here at the HTTP edge: the engine's
//! types carry no schema (no `JsonSchema` derive, none of the document's words). Each engine type
//! named in `at_the_edge!` gets its `JsonSchema` from the mirror beside it (`JobSchema` for
//! `Job`, its component named as the type), which states its fields as serde writes and reads
//! them, with the document's descriptions and constraints; `tests/it/api.rs` and the schema
//! conformance run of the test command hold each mirror to what the API answers and accepts.

// The mirrors are never built, only described: their fields are never read.
#![allow(dead_code)]

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde_json::Value;

use crate::engine::job::{
    AttemptError, ClaimToken, JobId, JobState, MAX_ATTEMPTS_MAX, MAX_ATTEMPTS_MIN, MAX_TAGS,
    MAX_TAG_CHARS, PRIORITY_MAX, PRIORITY_MIN, RESERVED_META, TRACEPARENT_PATTERN,
};
use crate::engine::late_start::OnLate;
use crate::engine::schedules::service::LastRun;
use crate::engine::schedules::{rule, JobTemplate, Missed, Overlap, NAME_PATTERN};
/// A schedule as its author gives it (the API's body, a service's code, the CLI).
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::schema_rules::ExactlyOne(&["cron", "every_ms"]))]
#[schemars(transform = crate::schema_rules::JobKindRun)]
#[schemars(rename = "ScheduleSpec")]
pub struct ScheduleSpecSchema {
    /// 1 to 100 characters of `A-Z a-z 0-9 _ . : -`; unique.
    #[schemars(regex(pattern = NAME_PATTERN))]
    #[schemars(extend("x-message" = "name: must be 1 to 100 characters of A-Z, a-z, 0-9, `_`, `.`, `:` and `-`"))]
    pub name: String,
    /// A cron expression (5 fields, or 6 with seconds first; `L`, `W`, `#`, `@hourly` ...).
    /// Exactly one of `cron` and `every_ms`. Not blank.
    #[serde(default)]
    #[schemars(regex(pattern = crate::schema_rules::NOT_BLANK))]
    pub cron: Option<String>,
    /// An interval in ms (1,000 to 34,560,000,000), aligned to `starts_at` or the Unix epoch.
    #[serde(default)]
    #[schemars(range(min = rule::MIN_EVERY_MS, max = rule::MAX_EVERY_MS))]
    pub every_ms: Option<i64>,
    /// An IANA zone (`Europe/London`); `UTC` when absent. Cron rules read the zone's wall clock.
    #[serde(default = "crate::engine::schedules::spec::default_zone")]
    #[schemars(schema_with = "zone_schema")]
    pub time_zone: String,
    pub job: JobTemplate,
    #[serde(default)]
    pub paused: bool,
    /// No slot before this instant (within the years 1970 to 9999).
    #[serde(default)]
    #[schemars(regex(pattern = rule::INSTANT_PATTERN))]
    pub starts_at: Option<DateTime<Utc>>,
    /// No slot at or after this instant (within the years 1970 to 9999): after `starts_at` (else
    /// 422 `inconsistent`) and not passed (else 422 `out_of_window`).
    #[serde(default)]
    #[schemars(regex(pattern = rule::INSTANT_PATTERN))]
    pub ends_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub overlap: Overlap,
    #[serde(default)]
    pub missed: Missed,
    /// 1 to 1000: the most missed slots `run_all` runs.
    #[serde(default = "crate::engine::schedules::spec::default_missed_limit")]
    #[schemars(range(min = 1, max = 1000))]
    pub missed_limit: i32,
}
/// The job each run of a schedule inserts.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "JobTemplate")]
pub struct JobTemplateSchema {
    /// A kind some worker runs (else 422 `unknown_kind`).
    #[schemars(regex(pattern = crate::schema_rules::NO_NUL))]
    pub kind: String,
    /// A JSON object (at most 64 KiB), checked by the kind's worker (else 422 `args_refused`).
    #[serde(default = "crate::engine::schedules::spec::empty_object")]
    #[schemars(schema_with = "args_object_schema")]
    pub args: Value,
    /// 1 to 64 of a-z, 0-9, `_` and `-`.
    #[serde(default = "crate::engine::schedules::spec::default_queue")]
    #[schemars(regex(pattern = crate::engine::job::QUEUE_PATTERN))]
    #[schemars(extend("x-message" = "queue: must be 1 to 64 characters of a-z, 0-9, `_` and `-`"))]
    pub queue: String,
    /// Lower is claimed first (0 is the highest).
    #[serde(default)]
    #[schemars(range(min = PRIORITY_MIN, max = PRIORITY_MAX))]
    pub priority: i16,
    /// Attempts before a run is discarded.
    #[serde(default = "crate::engine::schedules::spec::default_max_attempts")]
    #[schemars(range(min = MAX_ATTEMPTS_MIN, max = MAX_ATTEMPTS_MAX))]
    pub max_attempts: i32,
    #[serde(default)]
    #[schemars(schema_with = "tags_list_schema")]
    pub tags: Vec<String>,
    /// A JSON object; each run's meta adds `schedule`, `schedule_id`, `slot` and `slot_ms` (and
    /// `overlap`, `trigger`, `triggered_by`), which it may not hold itself, nor `snoozes`.
    #[serde(default = "crate::engine::schedules::spec::empty_object")]
    #[schemars(schema_with = "template_meta_schema")]
    pub meta: Value,
}
/// What runs for the slots that passed while no node was running (downtime).
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "Missed")]
pub enum MissedSchema {
    /// None of them: the schedule goes on with its next slot.
    Skip,
    /// One run, for the latest missed slot, at once.
    RunOnce,
    /// One run for each missed slot, at once, up to `missed_limit` (the latest ones).
    RunAll,
}
/// What happens when a run comes due while an earlier run of the schedule is not final.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "Overlap")]
pub enum OverlapSchema {
    /// Run it anyway (runs may overlap).
    Allow,
    /// Skip it: the new run is cancelled, with the reason, and the earlier one goes on.
    Skip,
    /// Cancel the earlier runs that are not final, then run.
    CancelPrevious,
}
/// A schedule as callers see it.
#[derive(JsonSchema)]
#[schemars(rename = "ScheduleView")]
pub struct ScheduleViewSchema {
    pub name: String,
    pub cron: Option<String>,
    pub every_ms: Option<i64>,
    pub time_zone: String,
    /// The rule in words, e.g. "at 06:00 (Europe/London)".
    pub rule_text: String,
    pub job: JobTemplate,
    pub paused: bool,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub overlap: Overlap,
    pub missed: Missed,
    pub missed_limit: i32,
    /// `api` (the API, dashboard or CLI) or `code` (declared by a service at start).
    pub source: String,
    pub version: i32,
    /// The latest slot given a run or passed over.
    pub last_slot: Option<DateTime<Utc>>,
    pub runs_enqueued: i64,
    pub runs_skipped: i64,
    pub next_run_at: Option<DateTime<Utc>>,
    pub next_run_id: Option<JobId>,
    pub last_run: Option<LastRun>,
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
/// The latest run of a schedule that came due.
#[derive(JsonSchema)]
#[schemars(rename = "LastRun")]
pub struct LastRunSchema {
    pub job_id: JobId,
    pub state: String,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub attempted_at: Option<DateTime<Utc>>,
    /// How late its first attempt started after its due time, in ms, by the clock of the node
    /// that started it (absent until it started).
    pub late_ms: Option<f64>,
}
/// A slot of a preview: the instant, and the wall-clock time in the schedule's zone.
#[derive(JsonSchema)]
#[schemars(rename = "SlotPreview")]
pub struct SlotPreviewSchema {
    pub at: DateTime<Utc>,
    /// RFC 3339 with the zone's offset at that instant.
    pub local: String,
}
/// A job's late-start policy, as `meta.late` holds it.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "LatePolicy")]
pub struct LatePolicySchema {
    /// How late (ms after the due time, by the database's clock) an attempt may start.
    #[schemars(range(min = 0, max = 86400000))]
    pub after_ms: u64,
    /// What happens to an attempt that would start later.
    pub then: OnLate,
}
/// What happens to an attempt that would start more than `after_ms` late.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "OnLate")]
pub enum OnLateSchema {
    /// Run it anyway.
    Run,
    /// Cancel the job, saying how late it was.
    Skip,
    /// Discard the job (the job-discarded alert rule sees it).
    Discard,
}
/// What to do when a live job with the same unique key exists.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "OnConflict")]
pub enum OnConflictSchema {
    /// Keep the existing job untouched and return it.
    Keep,
    /// Move the existing job to the new schedule (unless it is executing) and return it.
    Reschedule,
}
/// A job row. Read leniently ([`sqlx::FromRow`] below): one row never fails the batch it is read
/// in (a claim, a list, a page, the export).
#[derive(JsonSchema)]
#[schemars(rename = "Job")]
pub struct JobSchema {
    pub id: JobId,
    pub queue: String,
    pub kind: String,
    pub args: Value,
    pub state: JobState,
    pub priority: i16,
    pub attempt: i32,
    pub max_attempts: i32,
    pub scheduled_at: DateTime<Utc>,
    pub attempted_at: Option<DateTime<Utc>>,
    pub attempted_by: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub finalized_at: Option<DateTime<Utc>>,
    pub errors: Vec<AttemptError>,
    pub unique_key: Option<String>,
    pub tags: Vec<String>,
    pub meta: Value,
    pub inserted_at: DateTime<Utc>,
    /// Who inserted it through the dashboard or the REST API (a user's name; `api-token` for the
    /// bootstrap token); absent for jobs the engine or a library caller inserted. A clone keeps
    /// its original's.
    pub created_by: Option<String>,
    /// The token of the job's latest claim (engine-internal: not shown by the API).
    #[serde(skip)]
    #[schemars(skip)]
    pub claim_token: Option<ClaimToken>,
    /// The host its call goes to, as its worker read it at insert (`Worker::call_host`); absent
    /// for kinds that name none, and rows written by SQL (engine-internal).
    #[serde(skip)]
    #[schemars(skip)]
    pub call_host: Option<String>,
    /// Its key under its queue's partitioned rate (see `limits`); absent when the queue has
    /// none (engine-internal).
    #[serde(skip)]
    #[schemars(skip)]
    pub rate_key: Option<String>,
    /// What of the row could not be read as it is stored, by field (`args.n: a number out of
    /// range ...`): a row written by plain SQL or an older release. Those values are shown as
    /// their text, and a claim of the row ends it with this as its error (engine-internal).
    #[serde(skip)]
    #[schemars(skip)]
    pub unreadable: Option<String>,
    /// Secrets the job held before an edit took them out (`jobs.former_secrets`): its earlier
    /// attempts' errors, records and answers may quote them, and they stay hidden there
    /// (`engine::sight`; engine-internal, never shown).
    #[serde(skip)]
    #[schemars(skip)]
    pub former_secrets: Vec<String>,
    /// The workflow step this job is the run of (docs/workflows.md); absent for every other job.
    pub step_id: Option<i64>,
}
/// One failed attempt, as kept in `jobs.errors`.
#[derive(JsonSchema)]
#[schemars(rename = "AttemptError")]
pub struct AttemptErrorSchema {
    pub attempt: i32,
    /// When the attempt ended.
    pub at: DateTime<Utc>,
    /// When the attempt started (its `attempted_at`), for its duration. Absent in errors recorded
    /// before it was kept.
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    pub node: Option<String>,
    pub message: String,
}
/// Where a job is in its life. Mapped to the Postgres enum `job_state`; the database's CHECK
/// constraints tie `finalized_at` and the lease columns to it.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "JobState")]
pub enum JobStateSchema {
    /// Waiting for `scheduled_at`. The timer of any node moves it to `available` when due; an
    /// operator may run it now, reschedule or cancel it.
    Scheduled,
    /// Due. A node's producer claims it into `executing` when its queue has a free slot.
    Available,
    /// Claimed by `attempted_by` under a lease. The executor moves it to a final state, to
    /// `retryable`, or back to `scheduled` (snooze); the rescuer takes it back when the lease expires;
    /// an operator may cancel it.
    Executing,
    /// Failed an attempt and waits for its backoff. The timer makes it `available` again when due.
    Retryable,
    /// Final: the handler succeeded. Only an operator's retry (rerun) moves it again.
    Completed,
    /// Final: out of attempts, or failed fatally. An operator's retry moves it again.
    Discarded,
    /// Final: cancelled by an operator or by its handler. An operator's retry moves it again.
    Cancelled,
}
/// A job's id (the `jobs.id` bigserial).
#[derive(JsonSchema)]
#[serde(transparent)]
#[schemars(rename = "JobId")]
pub struct JobIdSchema(pub i64);
/// How far a shift moves the matching jobs.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "ShiftBy")]
pub enum ShiftBySchema {
    /// By this many ms (negative: earlier).
    Ms(i64),
    /// The earliest matching job to this instant, the others keeping their distance to it.
    To(DateTime<Utc>),
}
/// What the filters of a job list may suggest: kinds, queues, tags and top-level args keys.
#[derive(JsonSchema)]
#[schemars(rename = "JobSuggestions")]
pub struct JobSuggestionsSchema {
    pub kinds: Vec<String>,
    pub queues: Vec<String>,
    pub tags: Vec<String>,
    pub args_keys: Vec<String>,
}
/// A kind paused on every node.
#[derive(JsonSchema)]
#[schemars(rename = "KindPause")]
pub struct KindPauseSchema {
    pub kind: String,
    pub paused_at: DateTime<Utc>,
    /// Who paused it (an operator, a token, the command line), when known.
    pub paused_by: Option<String>,
}
/// A queue's shared settings.
#[derive(JsonSchema)]
#[schemars(rename = "QueueRow")]
pub struct QueueRowSchema {
    pub name: String,
    pub paused: bool,
    /// Per-node concurrency set by an operator (null: each node's configured one).
    pub concurrency: Option<i32>,
    pub updated_at: DateTime<Utc>,
    /// Attempts started per `rate_period_ms`, across every node (null: no rate).
    pub rate_limit: Option<i32>,
    pub rate_period_ms: Option<i32>,
    /// What the rate is counted by, each key getting the whole rate: `kind`, `host` (of a
    /// webhook's url) or `args.<field>` (null: one count for the queue).
    pub rate_per: Option<String>,
    /// Attempts executing on all nodes together (null: only each node's concurrency).
    pub global_concurrency: Option<i32>,
    /// Who set the limits: `config` (a node's KICKOFF_QUEUES, at its start) or `operator`.
    pub limits_by: String,
    /// Drawn by every write of the row while it holds the row's lock (migration
    /// `20261214000301`), so a later commit always has a larger one: what a node compares to
    /// apply only settings at least as new as those it has (`updated_at`, the writing
    /// transaction's start, can be older for a later commit). Internal: not in the API.
    #[serde(skip)]
    pub version: i64,
}
/// The limits of a queue's row, as the API and the dashboard show them.
#[derive(JsonSchema)]
#[schemars(rename = "LimitsView")]
pub struct LimitsViewSchema {
    /// `N/period`, e.g. `100/s` (null: no rate).
    pub rate: Option<String>,
    /// `kind`, `host` or `args.<field>` (null: one count for the queue).
    pub per: Option<String>,
    /// Attempts executing on all nodes together (null: only each node's concurrency).
    pub global_concurrency: Option<i32>,
    /// Who set them: `config` (a node's KICKOFF_QUEUES) or `operator`.
    pub set_by: String,
}
/// What a bulk action did.
#[derive(JsonSchema)]
#[schemars(rename = "BulkReport")]
pub struct BulkReportSchema {
    /// Jobs the action changed.
    pub changed: u64,
    /// Jobs matched (or listed) but left alone: their state did not allow the action (a retry
    /// whose unique key a live job holds included), they changed meanwhile, they belong to a
    /// question, a move would take them out of the schedulable range, or (by ids) they do not
    /// exist.
    pub skipped: u64,
    /// Jobs an edit would have made invalid (their kind's check refused it), left as they were
    /// (always 0 for the other actions).
    pub refused: u64,
    /// Why the first of them was refused.
    pub refusal: Option<String>,
}
/// An action applied to many jobs at once, with the state rules of the single-job operation.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "BulkAction")]
pub enum BulkActionSchema {
    /// Cancel jobs that are not final (executing attempts are stopped on their node).
    Cancel,
    /// Run retryable and final jobs again.
    Retry,
    /// Make scheduled, retryable and available jobs due now.
    RunNow,
    /// Delete jobs that are not executing.
    Delete,
}
/// What an edit changes; absent fields stay as they are. At least one is given.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::schema_rules::AtMostOne(&["args", "args_patch"]))]
#[schemars(transform = crate::schema_rules::AtLeastOneGiven(&[
    "args", "args_patch", "priority", "queue", "max_attempts", "tags", "meta_patch",
]))]
#[schemars(rename = "JobEdit")]
pub struct JobEditSchema {
    /// The new args, whole (a JSON object). Not with `args_patch`.
    #[serde(default)]
    #[schemars(schema_with = "args_schema")]
    pub args: Option<Value>,
    /// A JSON merge patch (RFC 7386) of the args: its keys replace the args' keys of the same
    /// name (objects merge, `null` removes). Not with `args`.
    #[serde(default)]
    #[schemars(schema_with = "args_schema")]
    pub args_patch: Option<Value>,
    /// Lower is claimed first (0 is the highest).
    #[schemars(range(min = crate::engine::job::PRIORITY_MIN, max = crate::engine::job::PRIORITY_MAX))]
    pub priority: Option<i16>,
    /// 1 to 64 of a-z, 0-9, `_` and `-`.
    #[schemars(regex(pattern = crate::engine::job::QUEUE_PATTERN))]
    #[schemars(extend("x-message" = "queue: must be 1 to 64 characters of a-z, 0-9, `_` and `-`"))]
    pub queue: Option<String>,
    /// Not below the attempts the job already made.
    #[schemars(range(min = crate::engine::job::MAX_ATTEMPTS_MIN, max = crate::engine::job::MAX_ATTEMPTS_MAX))]
    pub max_attempts: Option<i32>,
    /// The new tags, all of them (at most 20 of 1 to 100 characters).
    #[serde(default)]
    #[schemars(schema_with = "tags_schema")]
    pub tags: Option<Vec<String>>,
    /// A JSON merge patch (RFC 7386) of the meta. The keys Kickoff sets (`owner`, a schedule
    /// run's) are refused.
    #[serde(default)]
    #[schemars(schema_with = "meta_patch_schema")]
    pub meta_patch: Option<Value>,
}
// The schemas of the engine's values that no type states (args, meta, tags, a zone).

/// The tags of a job as a request gives them (or `null`): at most [`MAX_TAGS`] of 1 to
/// [`MAX_TAG_CHARS`] characters, without NUL.
pub fn tags_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": ["array", "null"],
        "x-message": format!("tags: at most {MAX_TAGS} tags of 1 to {MAX_TAG_CHARS} characters"),
        "maxItems": MAX_TAGS,
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_TAG_CHARS,
            "pattern": crate::schema_rules::NO_NUL,
        },
    })
}

/// A job's meta as a request gives it (or `null`): an object whose texts hold no NUL, none of
/// [`RESERVED_META`] (Kickoff's own), `traceparent` a W3C one, `late` a late-start policy
/// ([`crate::engine::late_start::LatePolicy`]); at most `MAX_META_BYTES` bytes as JSON (not stated by
/// the schema: refused as `invalid`).
pub fn meta_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    meta_schema_without(generator, &RESERVED_META, true)
}

/// The meta of a schedule's template: [`meta_schema`] without any of [`RESERVED_META`] (each
/// run's own).
pub fn template_meta_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    meta_schema_without(generator, &RESERVED_META, false)
}

/// [`template_meta_schema`] or `null`.
pub fn template_meta_or_null(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    meta_schema_without(generator, &RESERVED_META, true)
}

fn meta_schema_without(
    generator: &mut schemars::SchemaGenerator,
    reserved: &[&str],
    nullable: bool,
) -> schemars::Schema {
    let late = generator.subschema_for::<crate::engine::late_start::LatePolicy>();
    let any = generator.subschema_for::<crate::schema_rules::JsonWithoutNul>();
    let mut properties = serde_json::Map::new();
    for key in reserved {
        properties.insert((*key).into(), Value::Bool(false));
    }
    properties.insert(
        "traceparent".into(),
        serde_json::json!({ "type": "string", "pattern": TRACEPARENT_PATTERN }),
    );
    properties.insert("late".into(), late.into());
    let ty = if nullable {
        serde_json::json!(["object", "null"])
    } else {
        serde_json::json!("object")
    };
    schemars::json_schema!({
        "type": ty,
        "x-message": format!(
            "meta: a JSON object without NUL characters; {} set by Kickoff (reserved); \
             `traceparent` a W3C one; `late` a late-start policy",
            reserved.join(", ")
        ),
        "propertyNames": { "pattern": crate::schema_rules::NO_NUL },
        "properties": properties,
        "additionalProperties": any,
    })
}

/// Args as a request gives them (or `null`): a JSON object whose texts hold no NUL; at most
/// `MAX_ARGS_BYTES` bytes as JSON (not stated by the schema: refused as `invalid`). Each kind's
/// worker checks them further (`args_refused`).
pub fn args_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<crate::schema_rules::ObjectWithoutNul>();
    schema = schemars::json_schema!({
        "anyOf": [schema, { "type": "null" }],
        "x-message": "args: a JSON object without NUL characters",
    });
    schema
}

/// [`args_schema`] without `null`.
pub fn args_object_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    generator.subschema_for::<crate::schema_rules::ObjectWithoutNul>()
}

/// [`tags_schema`] without `null`.
pub fn tags_list_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = tags_schema(generator);
    schema.insert("type".into(), "array".into());
    schema
}
/// A merge patch of a job's meta as a request gives it (or `null`): [`meta_schema`]'s rules, a key
/// `null` to remove it, none of [`RESERVED_META`].
pub fn meta_patch_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let late = generator.subschema_for::<Option<crate::engine::late_start::LatePolicy>>();
    let any = generator.subschema_for::<crate::schema_rules::JsonWithoutNul>();
    let mut properties = serde_json::Map::new();
    for key in RESERVED_META {
        properties.insert(key.into(), Value::Bool(false));
    }
    properties.insert(
        "traceparent".into(),
        serde_json::json!({ "type": ["string", "null"], "pattern": TRACEPARENT_PATTERN }),
    );
    properties.insert("late".into(), late.into());
    schemars::json_schema!({
        "type": ["object", "null"],
        "propertyNames": { "pattern": crate::schema_rules::NO_NUL },
        "properties": properties,
        "additionalProperties": any,
    })
}

/// The zones [`rule::zone`] reads, as the schema states them: every IANA name chrono-tz knows.
pub fn zone_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    schemars::json_schema!({
        "type": "string",
        "enum": names,
        "x-message": "time_zone: not an IANA time zone (e.g. `Europe/London`, `America/New_York`, `UTC`)",
    })
}

/// [`zone_schema`] or `null`.
pub fn zone_or_null(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = zone_schema(generator);
    schema.insert("type".into(), serde_json::json!(["string", "null"]));
    if let Some(names) = schema.get_mut("enum").and_then(|e| e.as_array_mut()) {
        names.push(serde_json::Value::Null);
    }
    schema
}

/// `impl JsonSchema for` each engine type, from its mirror.
macro_rules! at_the_edge {
    ($($engine:path => $mirror:ident),* $(,)?) => {$(
        impl JsonSchema for $engine {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                <$mirror as JsonSchema>::schema_name()
            }
            fn schema_id() -> std::borrow::Cow<'static, str> {
                <$mirror as JsonSchema>::schema_id()
            }
            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <$mirror as JsonSchema>::json_schema(generator)
            }
            fn inline_schema() -> bool {
                <$mirror as JsonSchema>::inline_schema()
            }
        }
    )*};
}

at_the_edge! {
    crate::engine::schedules::ScheduleSpec => ScheduleSpecSchema,
    crate::engine::schedules::JobTemplate => JobTemplateSchema,
    crate::engine::schedules::Missed => MissedSchema,
    crate::engine::schedules::Overlap => OverlapSchema,
    crate::engine::schedules::service::ScheduleView => ScheduleViewSchema,
    crate::engine::schedules::service::LastRun => LastRunSchema,
    crate::engine::schedules::service::SlotPreview => SlotPreviewSchema,
    crate::engine::late_start::LatePolicy => LatePolicySchema,
    crate::engine::late_start::OnLate => OnLateSchema,
    crate::engine::job::OnConflict => OnConflictSchema,
    crate::engine::job::Job => JobSchema,
    crate::engine::job::AttemptError => AttemptErrorSchema,
    crate::engine::job::JobState => JobStateSchema,
    crate::engine::job::JobId => JobIdSchema,
    crate::engine::job_edit::ShiftBy => ShiftBySchema,
    crate::engine::job_filter::JobSuggestions => JobSuggestionsSchema,
    crate::engine::KindPause => KindPauseSchema,
    crate::engine::QueueRow => QueueRowSchema,
    crate::engine::limits::LimitsView => LimitsViewSchema,
    crate::engine::bulk::BulkReport => BulkReportSchema,
    crate::engine::bulk::BulkAction => BulkActionSchema,
    crate::engine::job_edit::JobEdit => JobEditSchema,
}
