//! SQL of filtered job lists and bulk actions: [`JobFilter`] and the statements built from it.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgExecutor, Postgres, QueryBuilder};

use super::cancelled::CancelledJob;
use super::params::ids_param;
use crate::engine::job::{Job, JobId, JobState};

/// Filters of a job listing (and of bulk actions on everything matching).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFilter {
    /// Any of these states; empty: every state.
    pub states: Vec<JobState>,
    pub queue: Option<String>,
    pub kind: Option<String>,
    /// JSON containment: jobs whose args contain this object (`args @> $x`, GIN-indexed).
    pub args: Option<Value>,
    /// `scheduled_at` at or after this instant.
    pub scheduled_from: Option<DateTime<Utc>>,
    /// `scheduled_at` before this instant.
    pub scheduled_to: Option<DateTime<Utc>>,
    /// Only jobs with an id at most this (a list frozen while read; a bulk action's snapshot).
    pub max_id: Option<JobId>,
    /// Jobs with an attempt that started more than this many ms after its due time (read from
    /// `job_attempts`: attempts that ended).
    pub late_by_ms: Option<f64>,
    /// Jobs carrying every one of these tags (`tags @> $x`, GIN-indexed).
    pub tags: Vec<String>,
    /// Text in the last error's message, case-insensitive (`ILIKE`, its `%`, `_` and `\\`
    /// matched as themselves). Read row by row: bound it with a state, queue or kind on a large
    /// table.
    pub error: Option<String>,
}

/// At most this many tags in a filter, each 1 to this many characters: the insert's own rule.
use crate::engine::job::{MAX_TAGS, MAX_TAG_CHARS};

/// The longest text an error filter may look for, in characters.
pub const ERROR_TEXT_MAX_CHARS: usize = 200;

/// A job filter as text, the way a URL query or the dashboard's filter form carries it. Both
/// `GET /api/v1/jobs` (and its export) and the dashboard read their filters through
/// [`FilterFields::into_filter`], so they accept the same filters under the same rules; the due
/// time range is each caller's (RFC 3339 in the API, a wall time and zone in the dashboard).
#[derive(Debug, Clone, Default)]
pub struct FilterFields<'a> {
    /// One state or several separated by commas.
    pub states: Option<&'a str>,
    pub queue: Option<&'a str>,
    pub kind: Option<&'a str>,
    /// A JSON object, or `key=value` pairs separated by commas (a value reads as JSON when it
    /// parses, as text otherwise).
    pub args: Option<&'a str>,
    /// Tags separated by commas, or a JSON array of them (for a tag holding a comma).
    pub tags: Option<&'a str>,
    /// Text in the last error.
    pub error: Option<&'a str>,
    /// "Late by more than" this many ms.
    pub late_by_ms: Option<f64>,
}

impl FilterFields<'_> {
    /// The filter, or what is wrong with it, naming the field (as the API names it). Blank fields
    /// filter nothing.
    pub fn into_filter(self) -> Result<JobFilter, String> {
        let text = |v: Option<&str>| v.map(str::trim).filter(|s| !s.is_empty()).map(String::from);
        Ok(JobFilter {
            states: match text(self.states) {
                None => Vec::new(),
                Some(s) => parse_states(&s)?,
            },
            queue: text(self.queue),
            kind: text(self.kind),
            args: text(self.args).map(|a| parse_args_filter(&a)).transpose()?,
            tags: match text(self.tags) {
                None => Vec::new(),
                Some(t) => parse_tags_filter(&t)?,
            },
            error: text(self.error).map(error_text_checked).transpose()?,
            late_by_ms: self.late_by_ms.map(late_by_checked).transpose()?,
            ..JobFilter::default()
        })
    }
}

/// `available,retryable`: the states, each a known one.
pub fn parse_states(text: &str) -> Result<Vec<JobState>, String> {
    text.split(',')
        .map(|p| p.trim().parse::<JobState>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("state: {e}"))
}

/// `key=value, key2=value2` (values read as JSON when they parse, as text otherwise) or a JSON
/// object: the object the jobs' args must contain.
pub fn parse_args_filter(text: &str) -> Result<Value, String> {
    let text = text.trim();
    if text.starts_with('{') {
        return match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err("args: not a JSON object".into()),
        };
    }
    let mut object = serde_json::Map::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("args: `{pair}` is not key=value (or give a JSON object)"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(format!("args: `{pair}` has no key"));
        }
        let value = serde_json::from_str::<Value>(v).unwrap_or_else(|_| Value::from(v));
        object.insert(k.to_string(), value);
    }
    if object.is_empty() {
        return Err("args: no key=value pair".into());
    }
    Ok(Value::Object(object))
}

/// `vip,derby` or `["a,b", "c"]`: the tags every matching job carries.
pub fn parse_tags_filter(text: &str) -> Result<Vec<String>, String> {
    let text = text.trim();
    let tags: Vec<String> = if text.starts_with('[') {
        serde_json::from_str(text).map_err(|_| "tags: not a JSON array of strings".to_string())?
    } else {
        split_tags(text)
    };
    tags_checked(tags)
}

/// `a, b,,c` as its tags: separated by commas, trimmed, blanks dropped (a filter's, an edit's).
pub fn split_tags(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect()
}

/// `tags` as a tags filter, or why they cannot be.
pub fn tags_checked(tags: Vec<String>) -> Result<Vec<String>, String> {
    let bad = |t: &String| t.is_empty() || t.chars().count() > MAX_TAG_CHARS || t.contains('\0');
    if tags.is_empty() || tags.len() > MAX_TAGS || tags.iter().any(bad) {
        return Err(format!(
            "tags: 1 to {MAX_TAGS} tags of 1 to {MAX_TAG_CHARS} characters"
        ));
    }
    Ok(tags)
}

/// `text` as an error filter, or why it cannot be.
pub fn error_text_checked(text: String) -> Result<String, String> {
    if text.chars().count() > ERROR_TEXT_MAX_CHARS || text.contains('\0') {
        return Err(format!(
            "error: at most {ERROR_TEXT_MAX_CHARS} characters, no NUL"
        ));
    }
    Ok(text)
}

/// Whether `message` holds `text`, as the error filter matches it (case-insensitive): for the
/// callers who see a job's errors with its secrets hidden, the listing checks again on the text
/// they see (see `engine::sight`).
pub fn error_matches(message: &str, text: &str) -> bool {
    message.to_lowercase().contains(&text.to_lowercase())
}

/// `text` as a LIKE pattern matching it anywhere, its wildcards escaped.
fn contains_pattern(text: &str) -> String {
    let mut p = String::with_capacity(text.len() + 2);
    p.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

impl JobFilter {
    /// Whether the per-state counters answer how many jobs match (states, queue and a snapshot
    /// only): every field is named, so a new one cannot be forgotten here (a late-by filter was,
    /// and its confirmation counted every job of its states).
    pub fn is_counted(&self) -> bool {
        let JobFilter {
            states: _,
            queue: _,
            max_id: _,
            kind,
            args,
            scheduled_from,
            scheduled_to,
            late_by_ms,
            tags,
            error,
        } = self;
        kind.is_none()
            && args.is_none()
            && scheduled_from.is_none()
            && scheduled_to.is_none()
            && late_by_ms.is_none()
            && tags.is_empty()
            && error.is_none()
    }
}

/// The largest lateness a filter may ask about: a day, in ms.
pub const LATE_BY_MAX_MS: f64 = 86_400_000.0;

/// `ms` as the "late by more than" of a filter, or why it cannot be.
pub fn late_by_checked(ms: f64) -> Result<f64, String> {
    if ms.is_finite() && (0.0..=LATE_BY_MAX_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(format!(
            "late_by_ms: must be between 0 and {LATE_BY_MAX_MS} (a day)"
        ))
    }
}

/// Appends the filter's conditions, each as ` AND ...`, to a WHERE clause already opened.
///
/// Only the conditions the filter sets are written, and every query built with it runs unprepared
/// (`persistent(false)`), so that each run is planned for its own values: a reused generic plan of
/// `($1 IS NULL OR queue = $1) AND ...` cannot use any index and walks the whole table. One state is
/// written as `state = $n`, which `jobs_state_id_idx` reads in id order; `state = ANY($n)` cannot
/// be, so listings give each state a branch of its own (see [`push_listing`]).
fn push_filter(qb: &mut QueryBuilder<'_, Postgres>, filter: &JobFilter, states: &[JobState]) {
    match states {
        [] => {}
        [one] => {
            qb.push(" AND state = ").push_bind(*one);
        }
        many => {
            qb.push(" AND state = ANY(")
                .push_bind(many.to_vec())
                .push(")");
        }
    }
    if let Some(queue) = &filter.queue {
        qb.push(" AND queue = ").push_bind(queue.clone());
    }
    if let Some(kind) = &filter.kind {
        qb.push(" AND kind = ").push_bind(kind.clone());
    }
    if let Some(args) = &filter.args {
        qb.push(" AND args @> ").push_bind(args.clone());
    }
    if let Some(from) = filter.scheduled_from {
        qb.push(" AND scheduled_at >= ").push_bind(from);
    }
    if let Some(to) = filter.scheduled_to {
        qb.push(" AND scheduled_at < ").push_bind(to);
    }
    if let Some(max_id) = filter.max_id {
        qb.push(" AND id <= ").push_bind(max_id);
    }
    if !filter.tags.is_empty() {
        // `tags <> '{}'` is implied (the filter has a tag), and written so the planner proves
        // `jobs_tagged_idx`'s predicate, word for word its own.
        qb.push(" AND tags @> ")
            .push_bind(filter.tags.clone())
            .push(TAGGED);
    }
    if let Some(text) = &filter.error {
        qb.push(" AND (errors -> -1 ->> 'message') ILIKE ")
            .push_bind(contains_pattern(text))
            .push(" ESCAPE '\\'");
    }
    if let Some(late) = filter.late_by_ms {
        // A semi-join: with few late attempts the planner reads `job_attempts_late_idx`.
        qb.push(" AND id IN (SELECT job_id FROM job_attempts WHERE late_ms > ")
            .push_bind(late)
            .push(")");
    }
}

/// Appends the filter's conditions (its states included) to a statement on a bulk batch's
/// listed jobs.
pub(super) fn push_filter_for_batch(qb: &mut QueryBuilder<'_, Postgres>, filter: &JobFilter) {
    push_filter(qb, filter, &distinct_states(filter));
}

/// The filter's states, each once, in a stable order.
fn distinct_states(filter: &JobFilter) -> Vec<JobState> {
    JobState::ALL
        .into_iter()
        .filter(|s| filter.states.contains(s))
        .collect()
}

/// Whether the filter reads an index that leaves out `available` and `executing` jobs (kind,
/// queue, args, due time: see `migrations/20261208000001_filter_indexes_skip_running.sql`).
fn uses_running_less_index(filter: &JobFilter) -> bool {
    filter.queue.is_some()
        || filter.kind.is_some()
        || filter.args.is_some()
        || filter.scheduled_from.is_some()
        || filter.scheduled_to.is_some()
        || !filter.tags.is_empty()
}

/// The states one branch of a listing reads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Branch {
    /// Any state (the filter names none).
    Any,
    One(JobState),
    /// Every state but `available` and `executing`: written as the filter indexes' own
    /// predicate, so the planner reads them as before they left those two states out.
    NotRunning,
}

/// The condition a tags filter adds: word for word the predicate of `jobs_tagged_idx`, which
/// leaves out the jobs without tags.
const TAGGED: &str = " AND tags <> '{}'";

/// The condition [`Branch::NotRunning`] adds, word for word the filter indexes' predicate.
const NOT_RUNNING: &str = " AND state NOT IN ('available', 'executing')";

/// The branches of a listing, each read on its own and merged by id: one per state the filter
/// names (each reads the index that serves it best in id order; `state = ANY(...)` could not
/// be read in id order). A filter that names no state but reads an index that leaves out the
/// running states gets three: those indexes, then the two running states from
/// `jobs_state_id_idx` (a single branch could use neither, and would walk the table).
fn branches(filter: &JobFilter) -> Vec<Branch> {
    let states = distinct_states(filter);
    if !states.is_empty() {
        states.into_iter().map(Branch::One).collect()
    } else if uses_running_less_index(filter) {
        vec![
            Branch::NotRunning,
            Branch::One(JobState::Available),
            Branch::One(JobState::Executing),
        ]
    } else {
        vec![Branch::Any]
    }
}

/// Appends the filter's conditions for one branch.
fn push_branch_filter(qb: &mut QueryBuilder<'_, Postgres>, filter: &JobFilter, branch: Branch) {
    match branch {
        Branch::Any => push_filter(qb, filter, &[]),
        Branch::One(state) => push_filter(qb, filter, &[state]),
        Branch::NotRunning => {
            qb.push(NOT_RUNNING);
            push_filter(qb, filter, &[]);
        }
    }
}

/// `SELECT <columns> FROM jobs WHERE <filter> AND id < before ORDER BY id DESC LIMIT limit`.
///
/// With several states, one branch per state, each newest first from `jobs_state_id_idx`, merged
/// by id (a Merge Append): the failures page (retryable and discarded) reads a hundred index
/// entries instead of walking the primary key past every completed job.
fn push_listing(
    qb: &mut QueryBuilder<'_, Postgres>,
    columns: &str,
    filter: &JobFilter,
    before: Option<JobId>,
    limit: i64,
) {
    let branches = branches(filter);
    let branch = |qb: &mut QueryBuilder<'_, Postgres>, b: Branch| {
        qb.push("SELECT ")
            .push(columns)
            .push(" FROM jobs WHERE true");
        push_branch_filter(qb, filter, b);
        if let Some(before) = before {
            qb.push(" AND id < ").push_bind(before);
        }
        qb.push(" ORDER BY id DESC LIMIT ").push_bind(limit);
    };
    if let [one] = branches[..] {
        branch(qb, one);
        return;
    }
    qb.push("SELECT ").push(columns).push(" FROM (");
    for (i, b) in branches.iter().enumerate() {
        if i > 0 {
            qb.push(" UNION ALL ");
        }
        qb.push("(");
        branch(qb, *b);
        qb.push(")");
    }
    qb.push(") matching ORDER BY id DESC LIMIT ")
        .push_bind(limit);
}

/// Lists jobs newest first, after the keyset cursor `before` (an id).
pub async fn job_list<'e>(
    db: impl PgExecutor<'e>,
    filter: &JobFilter,
    before: Option<JobId>,
    limit: i64,
) -> Result<Vec<Job>, sqlx::Error> {
    let mut qb = QueryBuilder::new("");
    push_listing(&mut qb, "*", filter, before, limit);
    qb.build_query_as().persistent(false).fetch_all(db).await
}

/// The ids of matching jobs, newest first, after the keyset cursor `before`: one batch of a bulk
/// action.
pub async fn job_list_ids<'e>(
    db: impl PgExecutor<'e>,
    filter: &JobFilter,
    before: Option<JobId>,
    limit: i64,
) -> Result<Vec<JobId>, sqlx::Error> {
    let mut qb = QueryBuilder::new("");
    push_listing(&mut qb, "id", filter, before, limit);
    qb.build_query_scalar()
        .persistent(false)
        .fetch_all(db)
        .await
}

/// How many jobs match the filter, counting at most `cap` (the count stops there: a confirmation
/// needs "more than 100,000", not a scan of a million rows). Counted in the branches a listing
/// reads (see `branches`).
pub async fn job_count_matching<'e>(
    db: impl PgExecutor<'e>,
    filter: &JobFilter,
    cap: i64,
) -> Result<i64, sqlx::Error> {
    let mut qb = QueryBuilder::new("SELECT count(*) FROM (SELECT 1 FROM (");
    for (i, b) in branches(filter).into_iter().enumerate() {
        if i > 0 {
            qb.push(" UNION ALL ");
        }
        qb.push("SELECT 1 FROM jobs WHERE true");
        push_branch_filter(&mut qb, filter, b);
    }
    qb.push(") matching LIMIT ").push_bind(cap).push(") capped");
    qb.build_query_scalar()
        .persistent(false)
        .fetch_one(db)
        .await
}

/// The newest job's id (a bulk action's snapshot: jobs inserted later are left alone).
pub async fn job_max_id<'e>(db: impl PgExecutor<'e>) -> Result<Option<JobId>, sqlx::Error> {
    sqlx::query_scalar("SELECT max(id) FROM jobs")
        .fetch_one(db)
        .await
}

/// Jobs waiting to run (scheduled, available, retryable), oldest `scheduled_at` first: overdue
/// jobs lead. Reads `jobs_waiting_idx` in order.
pub async fn job_list_waiting<'e>(
    db: impl PgExecutor<'e>,
    limit: i64,
) -> Result<Vec<Job>, sqlx::Error> {
    sqlx::query_as(
        "SELECT * FROM jobs WHERE state IN ('scheduled', 'available', 'retryable')
         ORDER BY scheduled_at, id
         LIMIT $1",
    )
    .bind(limit)
    .fetch_all(db)
    .await
}

// Bulk actions. Each takes one batch of ids that matched `filter` and checks the filter again on
// the row it changes, so a job that moved meanwhile (staged, claimed, finished) is only touched if
// it still matches; the state guard is the one of the single-job operation.

/// Cancels the listed jobs that still match and are not final.
pub async fn job_cancel_matching<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<Vec<CancelledJob>, sqlx::Error> {
    // Rows are locked in id order, as job_cancel_many does, so two cancellations never deadlock;
    // locked, they still match when `kickoff_cancel_jobs` cancels them.
    let mut qb = QueryBuilder::new(
        "WITH target AS (
             SELECT id FROM jobs
             WHERE finalized_at IS NULL AND NOT meta ? 'owner' AND id = ANY(",
    );
    qb.push_bind(ids_param(ids)).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    qb.push(
        " ORDER BY id
             FOR UPDATE)
         SELECT * FROM kickoff_cancel_jobs(ARRAY(SELECT id FROM target))",
    );
    qb.build_query_as().persistent(false).fetch_all(db).await
}

/// Runs the listed retryable or final jobs that still match again, now (as `job_retry`; not
/// those with an owner). Returns how many moved.
///
/// A final job whose unique key a live job holds is skipped rather than failing the batch, and of
/// several final jobs in the batch sharing a key only the newest runs. A job inserted with the key
/// between this statement's snapshot and its write still raises a unique violation: the caller
/// then retries the batch one job at a time.
pub async fn job_retry_matching<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<u64, sqlx::Error> {
    let ids = ids_param(ids);
    let mut qb = QueryBuilder::new(
        "WITH newest_per_key AS (
             SELECT DISTINCT ON (unique_key) id FROM jobs
             WHERE id = ANY(",
    );
    qb.push_bind(ids.clone()).push(
        ") AND unique_key IS NOT NULL AND finalized_at IS NOT NULL
             ORDER BY unique_key, id DESC)
         UPDATE jobs SET state = 'available', scheduled_at = statement_timestamp(),
                finalized_at = NULL,
                max_attempts = least(greatest(max_attempts, attempt + 1), 1000),
                rate_key = kickoff_rate_key(queue, kind, args, call_host)
         WHERE state IN ('retryable', 'completed', 'discarded', 'cancelled')
           -- A job with an owner (a question's lock job) runs when its owner says: never again
           -- by an operator's bulk retry.
           AND NOT meta ? 'owner'
           -- Nor a settled workflow step's job: it runs again with its step, through its run.
           AND (step_id IS NULL OR finalized_at IS NULL)
           AND (unique_key IS NULL OR finalized_at IS NULL
                OR (id IN (SELECT id FROM newest_per_key)
                    AND NOT EXISTS (SELECT 1 FROM jobs live
                                    WHERE live.unique_key = jobs.unique_key
                                      AND live.finalized_at IS NULL)))
           AND id = ANY(",
    );
    qb.push_bind(ids).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    let r = qb.build().persistent(false).execute(db).await?;
    Ok(r.rows_affected())
}

/// Makes the listed waiting jobs that still match due now (not those with an owner: a question's
/// lock job runs at its game time; nor a workflow step's job before its first start: its run
/// starts it). Returns how many moved.
pub async fn job_run_now_matching<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<u64, sqlx::Error> {
    let mut qb = QueryBuilder::new(
        "UPDATE jobs SET state = 'available', scheduled_at = statement_timestamp()
         WHERE state IN ('scheduled', 'retryable', 'available') AND NOT meta ? 'owner'
           AND NOT (step_id IS NOT NULL AND attempt = 0)
           AND id = ANY(",
    );
    qb.push_bind(ids_param(ids)).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    let r = qb.build().persistent(false).execute(db).await?;
    Ok(r.rows_affected())
}

/// Deletes the listed jobs that still match and are not executing. Returns how many.
pub async fn job_delete_matching<'e>(
    db: impl PgExecutor<'e>,
    ids: &[JobId],
    filter: &JobFilter,
) -> Result<u64, sqlx::Error> {
    // A live job with an owner (`meta.owner`) ends with its owner: never by a bulk action.
    let mut qb = QueryBuilder::new(
        "DELETE FROM jobs WHERE state <> 'executing'
           AND NOT (meta ? 'owner' AND finalized_at IS NULL) AND id = ANY(",
    );
    qb.push_bind(ids_param(ids)).push(")");
    push_filter(&mut qb, filter, &distinct_states(filter));
    let r = qb.build().persistent(false).execute(db).await?;
    Ok(r.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every args or tags filter text the document's patterns admit is one the parsers read (the
    /// JSON forms aside: the handler answers those `invalid_json`).
    #[test]
    fn every_filter_text_the_patterns_admit_is_read() {
        use crate::schema_rules::{ARGS_FILTER_PATTERN, TAGS_FILTER_PATTERN};
        let validator = |pattern: &str| {
            jsonschema::validator_for(&json!({ "type": "string", "pattern": pattern })).unwrap()
        };
        let (args, tags) = (
            validator(ARGS_FILTER_PATTERN),
            validator(TAGS_FILTER_PATTERN),
        );
        let parts = [
            "",
            " ",
            "a",
            "a=1",
            " a = b ",
            "=1",
            "a=",
            "a=b=c",
            "\u{85}",
            "\u{85}a=1",
            "\u{a0}",
            "{",
            "[",
            "x\u{2028}",
            "\t",
        ];
        let mut read = 0;
        for first in parts {
            for second in parts {
                for sep in [",", ", ", ",,"] {
                    let text = format!("{first}{sep}{second}");
                    for text in [text.clone(), first.to_string()] {
                        let blank = text.trim().is_empty();
                        if args.is_valid(&json!(text)) && !blank && !text.trim().starts_with('{') {
                            read += 1;
                            assert!(parse_args_filter(&text).is_ok(), "args {text:?}");
                        }
                        if tags.is_valid(&json!(text)) && !blank && !text.trim().starts_with('[') {
                            read += 1;
                            assert!(parse_tags_filter(&text).is_ok(), "tags {text:?}");
                        }
                    }
                }
            }
        }
        assert!(read > 20, "{read}");
        // Blank parts between commas are skipped, as the parsers skip them.
        for text in ["game_id=42,", "a=1,,b=2", " a=1 , "] {
            assert!(args.is_valid(&json!(text)), "{text}");
        }
        for text in ["vip,derby,", "a,,b", " a , b "] {
            assert!(tags.is_valid(&json!(text)), "{text}");
        }
    }

    #[test]
    fn args_filter_reads_pairs_and_json() {
        assert_eq!(
            parse_args_filter("game_id=42, team=lions").unwrap(),
            json!({"game_id": 42, "team": "lions"})
        );
        assert_eq!(
            parse_args_filter(r#"{"a": {"b": true}}"#).unwrap(),
            json!({"a": {"b": true}})
        );
        assert!(parse_args_filter("no pair here").is_err());
        assert!(parse_args_filter("[1, 2]").is_err());
        assert!(parse_args_filter("=3").is_err());
        assert!(parse_args_filter(" , ").is_err());
    }

    #[test]
    fn tags_and_error_text_are_checked() {
        assert_eq!(parse_tags_filter("vip, derby").unwrap(), ["vip", "derby"]);
        assert_eq!(parse_tags_filter(r#"["a,b", "c"]"#).unwrap(), ["a,b", "c"]);
        assert!(parse_tags_filter("[1]").is_err());
        assert!(parse_tags_filter(&vec!["t"; 21].join(",")).is_err());
        assert!(parse_tags_filter(&"x".repeat(101)).is_err());
        assert!(error_text_checked("x".repeat(201)).is_err());
        assert_eq!(contains_pattern(r"50%_a\b"), r"%50\%\_a\\b%");
        assert!(error_matches("HTTP 503 from Partner", "partner"));
    }

    #[test]
    fn fields_name_what_is_wrong_and_blank_ones_filter_nothing() {
        let f = FilterFields {
            states: Some(" "),
            tags: Some(""),
            ..FilterFields::default()
        };
        assert_eq!(f.into_filter().unwrap(), JobFilter::default());
        let bad = |f: FilterFields| f.into_filter().unwrap_err();
        assert!(bad(FilterFields {
            states: Some("exploded"),
            ..Default::default()
        })
        .starts_with("state:"));
        assert!(bad(FilterFields {
            late_by_ms: Some(-1.0),
            ..Default::default()
        })
        .starts_with("late_by_ms:"));
        assert!(bad(FilterFields {
            late_by_ms: Some(f64::NAN),
            ..Default::default()
        })
        .starts_with("late_by_ms:"));
        let f = FilterFields {
            states: Some("retryable,discarded"),
            error: Some(" timeout "),
            late_by_ms: Some(1500.0),
            ..FilterFields::default()
        }
        .into_filter()
        .unwrap();
        assert_eq!(f.states, [JobState::Retryable, JobState::Discarded]);
        assert_eq!(f.error.as_deref(), Some("timeout"));
        assert_eq!(f.late_by_ms, Some(1500.0));
    }
}

/// What the filters of a job list may suggest: kinds, queues, tags and top-level args keys.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct JobSuggestions {
    pub kinds: Vec<String>,
    pub queues: Vec<String>,
    pub tags: Vec<String>,
    pub args_keys: Vec<String>,
}

/// The kinds, queues, tags and args keys of the newest `recent` jobs, each list sorted and cut at
/// `each`: one read of at most `recent` rows from the primary key, whatever the table's size.
pub async fn job_suggestions<'e>(
    db: impl PgExecutor<'e>,
    recent: i64,
    each: i64,
) -> Result<JobSuggestions, sqlx::Error> {
    let (kinds, queues, tags, args_keys) = sqlx::query_as(
        "WITH recent AS (SELECT kind, queue, tags, args FROM jobs ORDER BY id DESC LIMIT $1)
         SELECT ARRAY(SELECT DISTINCT kind FROM recent ORDER BY 1 LIMIT $2),
                ARRAY(SELECT DISTINCT queue FROM recent ORDER BY 1 LIMIT $2),
                ARRAY(SELECT DISTINCT t FROM recent, unnest(tags) t ORDER BY 1 LIMIT $2),
                ARRAY(SELECT DISTINCT k FROM recent, jsonb_object_keys(args) k
                      WHERE jsonb_typeof(args) = 'object' ORDER BY 1 LIMIT $2)",
    )
    .bind(recent)
    .bind(each)
    .fetch_one(db)
    .await?;
    Ok(JobSuggestions {
        kinds,
        queues,
        tags,
        args_keys,
    })
}
