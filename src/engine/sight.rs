//! Who sees what of a job's data: one rule, applied by every surface that shows it (the job, its
//! attempts' records, its webhook calls' delivery record, the lists, the export, the audit log,
//! the dashboard's pages, and the command line through the API).
//!
//! A job's secrets are the values of its args and meta fields named like a secret (at any depth,
//! for every kind), what its kind's worker holds secret (`Worker::hide_secrets`: a webhook's
//! header values, its URL's user info and query values, an alert notification's URL path), and
//! what the job held so before an edit took it out (`jobs.former_secrets`: a credential edited
//! out of a job is still in the errors, records and answers of its earlier attempts, and often
//! still valid). Admins and the job's creator see them whole, acting with a credential that may
//! change things; every other caller (another operator, a viewer, a read-scope token) sees each
//! replaced by [`REDACTED`], in the job's fields and wherever a text quotes them: an attempt's
//! error, output and log lines, a partner's answer to its call (body, headers and the error). The
//! value of every `name=value` or `name: value` whose name reads like a secret is hidden in those
//! texts as well (a handler's `tracing::info!(token = ...)`). A clone keeps its original's
//! creator, so copying a job reveals nothing.
//!
//! A kind this server does not run has no worker to say what of its args is secret: its args
//! are hidden whole from those callers.

use serde_json::Value;

use super::job::Job;
use super::schedules::{JobTemplate, ScheduleView};
use super::store::history::AttemptRecord;
use super::store::jobs::{error_matches, JobFilter};
use super::worker::Workers;

/// What a hidden value is shown as.
pub const REDACTED: &str = "[redacted]";

/// Who is looking, as far as secrets go.
#[derive(Clone, Copy)]
pub struct Sight<'a> {
    /// The caller's name, as jobs record their creator (a user's; `api-token`).
    pub name: &'a str,
    pub admin: bool,
    /// Reads only: a viewer, or a read-scope token (whoever owns it).
    pub reader: bool,
    /// The kinds this server runs, each of which says what of its args is secret.
    pub workers: &'a Workers,
}

/// A search [`Sight::check_search`] or [`Sight::check_walk`] refuses the caller (the API answers
/// 403; the dashboard, beside the filter's field, 422).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SearchRefused {
    /// The filter's field refused.
    pub field: &'static str,
    pub message: &'static str,
}

impl From<SearchRefused> for super::client::ClientError {
    fn from(e: SearchRefused) -> Self {
        super::client::ClientError::Forbidden(e.message.to_string())
    }
}

impl std::fmt::Debug for Sight<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sight")
            .field("name", &self.name)
            .field("admin", &self.admin)
            .field("reader", &self.reader)
            .finish()
    }
}

/// The values of one job's secrets, as a text may quote them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Secrets {
    /// Longest first (a value inside a longer one is hidden with it), none shorter than
    /// [`MIN_SECRET_CHARS`].
    values: Vec<String>,
}

/// The most secrets a job keeps once edits took them out ([`Job::former_secrets`]): an edit
/// past it is refused rather than forget one (each is looked for in every text about the job).
pub const MAX_FORMER_SECRETS: usize = 100;

/// The shortest value looked for as a secret in text: a shorter one (a header `X-Beta: on`)
/// would hide every occurrence of a common word and tell nothing.
pub const MIN_SECRET_CHARS: usize = 4;

impl Secrets {
    fn new(mut values: Vec<String>) -> Secrets {
        values.retain(|s| s.chars().count() >= MIN_SECRET_CHARS);
        values.sort_by_key(|s| std::cmp::Reverse(s.len()));
        values.dedup();
        Secrets { values }
    }

    /// The values themselves (what an edit that drops them keeps as the job's former secrets).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// `text` with each secret hidden (and a secret's beginning where the text ends: texts are
    /// cut to a bound, and the cut may fall inside one), and the value of each `name=value` or
    /// `name: value` whose name reads like a secret.
    pub fn scrub(&self, text: &str) -> String {
        let mut text = text.to_string();
        for s in &self.values {
            if text.contains(s.as_str()) {
                text = text.replace(s.as_str(), REDACTED);
            }
        }
        for s in &self.values {
            if let Some(cut) = cut_beginning(&text, s) {
                text.truncate(text.len() - cut);
                text.push_str(REDACTED);
            }
        }
        hide_named_values(&text)
    }

    /// Every string in `value` (keys aside) through [`Secrets::scrub`].
    pub fn scrub_json(&self, value: &mut Value) {
        match value {
            Value::String(s) => *s = self.scrub(s),
            Value::Object(map) => map.values_mut().for_each(|v| self.scrub_json(v)),
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_json(v)),
            _ => {}
        }
    }
}

/// The longest beginning of a secret looked for where a text ends: texts are cut to bounds of a
/// few hundred characters (a partner's answer to 500, a header value to 300), and the work stays
/// bounded however long a secret is.
const MAX_CUT_BYTES: usize = 512;

/// How many bytes at the end of `text` are the beginning of `secret` (of
/// [`MIN_SECRET_CHARS`] characters or more, short of the whole), the longest such, if any.
fn cut_beginning(text: &str, secret: &str) -> Option<usize> {
    let longest = secret
        .len()
        .saturating_sub(1)
        .min(text.len())
        .min(MAX_CUT_BYTES);
    (text.len() - longest..text.len())
        .filter(|&at| text.is_char_boundary(at))
        .map(|at| &text[at..])
        .find(|tail| secret.starts_with(tail) && tail.chars().count() >= MIN_SECRET_CHARS)
        .map(str::len)
}

impl Sight<'_> {
    /// Whether the caller sees whole the secrets of a job `created_by` made: an admin, or its
    /// creator, acting with a credential that may change things.
    pub fn sees_secrets_of_creator(&self, created_by: Option<&str>) -> bool {
        !self.reader && (self.admin || created_by == Some(self.name))
    }

    /// Whether the caller sees `job`'s secrets whole.
    pub fn sees_secrets_of(&self, job: &Job) -> bool {
        self.sees_secrets_of_creator(job.created_by.as_deref())
    }

    /// Whether the caller may look for jobs by their secrets (an args filter naming a header or
    /// a secret-named field matches every job's, whoever created it): admins only.
    pub fn may_search_secrets(&self) -> bool {
        !self.reader && self.admin
    }

    /// Whether the caller may look for jobs by `filter`: an args filter naming a header or a
    /// secret-named field is an admin's (matching a hidden value, in anyone's job, would tell
    /// whether a guess is right).
    pub fn check_search(&self, filter: &JobFilter) -> Result<(), SearchRefused> {
        if !self.may_search_secrets() && filter.args.as_ref().is_some_and(names_a_secret) {
            return Err(SearchRefused {
                field: "args",
                message: "only an admin may filter on header values or fields named like secrets",
            });
        }
        Ok(())
    }

    /// Whether the caller may count, or act on, every job `filter` matches: [`Self::check_search`],
    /// and a text searched in errors is an admin's too (the count would include errors the
    /// caller sees with secrets hidden; they list such jobs, then act on their ids).
    pub fn check_walk(&self, filter: &JobFilter) -> Result<(), SearchRefused> {
        self.check_search(filter)?;
        if !self.may_search_secrets() && filter.error.is_some() {
            return Err(SearchRefused {
                field: "error",
                message: "only an admin may count or act on every job whose error holds a text: \
                          list them with the filter, then act on the jobs chosen",
            });
        }
        Ok(())
    }

    /// `jobs` as the caller sees them, those `filter`'s error text no longer matches once their
    /// secrets are hidden left out: the database matched the text as stored, and a caller who
    /// sees a job's errors with its secrets hidden must not learn what they hide by searching.
    pub fn jobs_matching(&self, jobs: Vec<Job>, filter: &JobFilter) -> Vec<Job> {
        jobs.into_iter()
            .map(|j| self.job(j))
            .filter(|j| match &filter.error {
                None => true,
                Some(text) => j
                    .errors
                    .last()
                    .is_some_and(|e| error_matches(&e.message, text)),
            })
            .collect()
    }

    /// `job` as the caller sees it.
    pub fn job(&self, job: Job) -> Job {
        if self.sees_secrets_of(&job) {
            job
        } else {
            as_reader(self.workers, job)
        }
    }

    /// `job`'s args as the caller sees them.
    pub fn args(&self, job: &Job) -> Value {
        if self.sees_secrets_of(job) {
            job.args.clone()
        } else {
            hidden_args(self.workers, &job.kind, &job.args, &job.meta).0
        }
    }

    /// The secrets a text about `job` may quote, for this caller: none when the caller sees them
    /// whole.
    pub fn secrets_of(&self, job: &Job) -> Option<Secrets> {
        (!self.sees_secrets_of(job)).then(|| secrets(self.workers, job))
    }

    /// The records of `job`'s attempts as the caller sees them (`job` as stored, its secrets
    /// whole: they are what is looked for).
    pub fn attempts(&self, job: &Job, records: Vec<AttemptRecord>) -> Vec<AttemptRecord> {
        let Some(secrets) = self.secrets_of(job) else {
            return records;
        };
        records
            .into_iter()
            .map(|mut r| {
                r.error = r.error.map(|e| secrets.scrub(&e));
                if let Some(output) = r.output.as_mut() {
                    hide_secret_fields(output);
                    secrets.scrub_json(output);
                }
                if let Some(logs) = r.logs.as_mut() {
                    secrets.scrub_json(logs);
                }
                r
            })
            .collect()
    }

    /// A workflow step's output as the caller sees it: as the outputs of its job's attempts
    /// are (it is a copy of its completing attempt's), by the step's `job`; a job gone since (the
    /// pruner's), by the run's creator, with what is named like a secret hidden.
    pub fn step_output(
        &self,
        job: Option<&Job>,
        run_creator: Option<&str>,
        output: &Value,
    ) -> Value {
        let mut output = output.clone();
        let secrets = match job {
            Some(job) => self.secrets_of(job),
            None => (!self.sees_secrets_of_creator(run_creator)).then(Secrets::default),
        };
        if let Some(secrets) = secrets {
            hide_secret_fields(&mut output);
            secrets.scrub_json(&mut output);
        }
        output
    }

    /// A workflow signal's payload as the caller sees it: whole for admins and its sender
    /// (`source` `api:<name>` or `console:<name>`; a partner's `endpoint:<id>` is no caller's),
    /// acting with a credential that may change things; for the others, the fields named like a
    /// secret hidden, and the secrets of the run's steps' `jobs` it quotes (a partner's result
    /// may echo what a job sent it), as in any text about a job.
    pub fn signal_payload(&self, source: &str, jobs: &[Job], payload: &Value) -> Value {
        // A caller of Kickoff's own is a sender; a partner's endpoint (`endpoint:<id>`) and the
        // application from SQL (`sql:<database user>`, which may share an account's name) are
        // no caller's.
        let sender = source
            .split_once(':')
            .and_then(|(by, name)| matches!(by, "api" | "console").then_some(name));
        let mut payload = payload.clone();
        if self.sees_secrets_of_creator(sender) {
            return payload;
        }
        hide_secret_fields(&mut payload);
        let values = jobs
            .iter()
            .flat_map(|job| secrets(self.workers, job).values)
            .collect();
        Secrets::new(values).scrub_json(&mut payload);
        payload
    }

    /// A schedule as the caller sees it: its template's secrets whole for admins and its creator
    /// (acting with a credential that may change things), hidden for the others, as for jobs.
    pub fn schedule(&self, mut s: ScheduleView) -> ScheduleView {
        if !self.sees_secrets_of_creator(s.created_by.as_deref()) {
            hide_template(self.workers, &mut s.job);
        }
        s
    }

    /// A schedule's job template as the caller sees it (`created_by`: the schedule's creator),
    /// as [`Self::schedule`] shows it.
    pub fn template(&self, created_by: Option<&str>, mut job: JobTemplate) -> JobTemplate {
        if !self.sees_secrets_of_creator(created_by) {
            hide_template(self.workers, &mut job);
        }
        job
    }

    /// An action's recorded filter as the caller sees it (it may name anyone's secrets).
    pub fn audit_filter(&self, filter: Value) -> Value {
        if self.may_search_secrets() {
            filter
        } else {
            audit_filter_for_reader(filter)
        }
    }
}

/// The values of `job`'s secrets (see the module's doc), as a text may quote them.
pub fn secrets(workers: &Workers, job: &Job) -> Secrets {
    secrets_of_parts(
        workers,
        &job.kind,
        &job.args,
        &job.meta,
        &job.former_secrets,
    )
}

/// [`secrets`] of a job known by its parts (a delivery record reads them beside its call).
pub fn secrets_of_parts(
    workers: &Workers,
    kind: &str,
    args: &Value,
    meta: &Value,
    former: &[String],
) -> Secrets {
    let (_, mut found) = hidden_args(workers, kind, args, meta);
    collect_named_secrets(meta, &mut found);
    found.extend(former.iter().cloned());
    Secrets::new(found)
}

/// The secrets `before` held that it no longer holds once edited to `args` and `meta`: what the
/// job keeps as its former secrets, hidden in what its earlier attempts left.
pub fn secrets_dropped(workers: &Workers, before: &Job, args: &Value, meta: &Value) -> Vec<String> {
    let now = secrets_of_parts(workers, &before.kind, args, meta, &before.former_secrets);
    secrets(workers, before)
        .values
        .into_iter()
        .filter(|v| !now.values.contains(v))
        .collect()
}

/// `job` as a reader sees it: its secrets hidden in its args, its meta and its errors (what the
/// audit log keeps of an edit).
pub fn as_reader(workers: &Workers, mut job: Job) -> Job {
    let secrets = secrets(workers, &job);
    for e in &mut job.errors {
        e.message = secrets.scrub(&e.message);
    }
    job.args = hidden_args(workers, &job.kind, &job.args, &job.meta).0;
    hide_secret_fields(&mut job.meta);
    job
}

/// Whether `job` carries anything a reader does not see (a header value, a URL's password or
/// query, a secret-named field).
pub fn has_secrets(workers: &Workers, job: &Job) -> bool {
    let shown = as_reader(workers, job.clone());
    shown.args != job.args || shown.meta != job.meta
}

/// `args` of a job of `kind` with its secrets hidden, and the values hidden: those its kind's
/// worker holds secret, then every field named like a secret. A kind this server does not run
/// shows its args hidden whole.
pub(crate) fn hidden_args(
    workers: &Workers,
    kind: &str,
    args: &Value,
    meta: &Value,
) -> (Value, Vec<String>) {
    let mut found = Vec::new();
    let Some(worker) = workers.get(kind) else {
        collect_strings(args, &mut found);
        return (Value::String(REDACTED.into()), found);
    };
    let mut shown = args.clone();
    found.extend(worker.hide_secrets(&mut shown, meta));
    collect_named_secrets(args, &mut found);
    hide_secret_fields(&mut shown);
    (shown, found)
}

/// Parts of a field name that mark it as a secret (compared case-insensitively, `-` and `_`
/// ignored).
const SECRET_NAMES: [&str; 9] = [
    "secret",
    "password",
    "passwd",
    "token",
    "authorization",
    "apikey",
    "credential",
    "privatekey",
    "cookie",
];

/// Whether a field (or header) name reads like a secret's.
pub fn is_secret_name(name: &str) -> bool {
    let plain: String = name
        .chars()
        .filter(|c| !matches!(c, '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_NAMES.iter().any(|s| plain.contains(s))
}

/// Every field named like a secret in `value`, at any depth, replaced by [`REDACTED`].
pub fn hide_secret_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if is_secret_name(key) {
                    *v = Value::String(REDACTED.into());
                } else {
                    hide_secret_fields(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(hide_secret_fields),
        _ => {}
    }
}

/// Whether an args filter looks into what readers do not see (a webhook's `headers`, a field
/// named like a secret), at any depth.
pub fn names_a_secret(filter: &Value) -> bool {
    match filter {
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| k == "headers" || is_secret_name(k) || names_a_secret(v)),
        Value::Array(items) => items.iter().any(names_a_secret),
        _ => false,
    }
}

/// An action's recorded filter with every search it holds hidden whole, at any depth (a bulk
/// action keeps its filter at the top, a shift or a bulk edit under `filter`): the text of an
/// error search (an admin's, and it may be the secret it looks for) and a filter's `args` (an
/// object from the API, text from the dashboard, either may name a secret's value).
fn audit_filter_for_reader(mut filter: Value) -> Value {
    hide_searches(&mut filter, true);
    hide_secret_fields(&mut filter);
    filter
}

/// [`audit_filter_for_reader`]'s walk: `error` anywhere, `args` where `value` is a filter.
fn hide_searches(value: &mut Value, is_filter: bool) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if !v.is_null() && (key == "error" || (is_filter && key == "args")) {
                    *v = Value::String(REDACTED.into());
                } else {
                    hide_searches(v, key == "filter");
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| hide_searches(v, false)),
        _ => {}
    }
}

/// An edit as the audit log keeps it, for its readers: in its args (whole or a patch) what the
/// job's kind holds secret ([`Worker::hide_secrets`]) and every field named like a secret hidden,
/// as on the job; for a bulk edit (`job` `None`: many jobs, of any kind), what any kind this
/// server runs would hold secret (a webhook's header values and URL credentials, an alert
/// notification's URL path). A meta patch's secret-named fields are hidden.
///
/// [`Worker::hide_secrets`]: super::worker::Worker::hide_secrets
pub fn as_reader_edit(
    workers: &Workers,
    edit: &super::job_edit::JobEdit,
    job: Option<&Job>,
) -> Value {
    // Any notification's URL path is hidden too when the jobs are not known.
    let any_alert = serde_json::json!({ "alert_incident": true });
    let mut shown = serde_json::to_value(edit).unwrap_or_default();
    if let Value::Object(map) = &mut shown {
        map.retain(|_, v| !v.is_null());
        for key in ["args", "args_patch"] {
            let Some(part) = map.get_mut(key) else {
                continue;
            };
            match job {
                Some(j) => *part = hidden_args(workers, &j.kind, part, &j.meta).0,
                None => {
                    for kind in workers.kinds() {
                        if let Some(worker) = workers.get(kind) {
                            worker.hide_secrets(part, &any_alert);
                        }
                    }
                    hide_secret_fields(part);
                }
            }
        }
        if let Some(part) = map.get_mut("meta_patch") {
            hide_secret_fields(part);
        }
    }
    shown
}

/// A URL whose path is a secret (an incoming-webhook URL: Slack's carries its token there), as
/// shown: its origin alone.
pub fn url_origin_for_reader(url: &str) -> String {
    let origin = reqwest::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default();
    format!("{origin}/{REDACTED}")
}

/// A webhook's URL with what may be a credential hidden: its user info
/// (`https://svc:hunter2@host`) and its query's values (`?api_key=K`, `?sig=...`: a query value's
/// name says too little to tell). The scheme, host, port, path and query names stay, so an
/// operator still sees where it calls. A URL that does not parse is hidden whole.
pub fn url_for_reader(url: &str) -> String {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return REDACTED.into();
    };
    let mut shown = format!("{}://", parsed.scheme());
    if !parsed.username().is_empty() || parsed.password().is_some() {
        shown.push_str(REDACTED);
        shown.push('@');
    }
    shown.push_str(parsed.host_str().unwrap_or_default());
    if let Some(port) = parsed.port() {
        shown.push_str(&format!(":{port}"));
    }
    shown.push_str(parsed.path());
    if let Some(query) = parsed.query() {
        // A pair's name stays; a bare word (`?sk_live_abc`) may be the credential itself.
        let names: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) => format!("{name}={REDACTED}"),
                None => REDACTED.to_string(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&names.join("&"));
    }
    shown
}

/// The string values (and numbers, as written) of every secret-named field in `value`.
fn collect_named_secrets(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if is_secret_name(key) {
                    collect_strings(v, found);
                } else {
                    collect_named_secrets(v, found);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_named_secrets(v, found)),
        _ => {}
    }
}

/// Every string in `value`, and its numbers as written, pushed to `found`.
pub fn collect_strings(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::String(s) => found.push(s.clone()),
        Value::Number(n) => found.push(n.to_string()),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, found)),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, found)),
        _ => {}
    }
}

/// `text` with the value of each `name=value`, `name: value` or `"name": value` whose name reads
/// like a secret replaced by [`REDACTED`]: a quoted value up to its closing quote, another up to
/// the next space, comma, `&`, `;` or closing bracket.
fn hide_named_values(text: &str) -> String {
    let is_name_char = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['=', ':']) {
        let (before, after) = rest.split_at(at);
        let sep = &after[..1];
        let mut value = &after[1..];
        let name = before.trim_end_matches('"');
        let name = &name[name
            .char_indices()
            .rev()
            .find(|&(_, c)| !is_name_char(c))
            .map_or(0, |(i, c)| i + c.len_utf8())..];
        out.push_str(before);
        out.push_str(sep);
        // `name: value` takes one space; `name=value` none.
        if sep == ":" {
            if let Some(v) = value.strip_prefix(' ') {
                out.push(' ');
                value = v;
            } else if !value.starts_with('"') {
                rest = value;
                continue;
            }
        }
        if name.is_empty()
            || !is_secret_name(name)
            || value.is_empty()
            || value.starts_with(REDACTED)
        {
            rest = value;
            continue;
        }
        let end = match value.strip_prefix('"') {
            Some(quoted) => quoted
                .char_indices()
                .scan(false, |escaped, (i, c)| {
                    let closes = c == '"' && !*escaped;
                    *escaped = c == '\\' && !*escaped;
                    Some((i, closes))
                })
                .find(|&(_, closes)| closes)
                .map_or(value.len(), |(i, _)| i + 2),
            None => unquoted_end(value),
        };
        out.push_str(REDACTED);
        rest = &value[end..];
    }
    out.push_str(rest);
    out
}

/// Where an unquoted secret value ends: at the end of its line, a `&` (a URL's next query pair),
/// or before the next word followed by `=` or `: ` (the next field). A value may hold spaces
/// (`authorization=Bearer abc`, `%`-formatted fields are not quoted), so more is hidden rather
/// than less.
fn unquoted_end(value: &str) -> usize {
    let is_name_char = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let line = value.find(['\n', '&']).unwrap_or(value.len());
    let mut from = 0;
    while let Some(space) = value[from..line].find(char::is_whitespace) {
        let at = from + space;
        let next = value[at..line].trim_start();
        let word = next.len() - next.trim_start_matches(is_name_char).len();
        let after = &next[word..];
        if word > 0 && (after.starts_with('=') || after.starts_with(": ")) {
            return at;
        }
        from = at + value[at..].chars().next().map_or(1, char::len_utf8);
    }
    line
}

/// A job template's secrets hidden: its args by its kind's rule, its meta's secret-named fields.
fn hide_template(workers: &Workers, job: &mut JobTemplate) {
    job.args = hidden_args(workers, &job.kind, &job.args, &job.meta).0;
    hide_secret_fields(&mut job.meta);
}
