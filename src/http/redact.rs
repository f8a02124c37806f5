//! What each caller sees of a job's args and meta: webhook header values (an `Authorization`
//! often) and every field named like a secret are replaced by [`REDACTED`], except for admins
//! and the job's creator (see [`Sight`]); read-only callers (viewers, read-scope tokens) never
//! see them. A clone keeps its original's creator, so copying a job reveals nothing.
//!
//! What a job's attempts left behind (their errors, the output their handler recorded, their
//! log lines) is text a handler wrote, which may quote the job's secrets: for the same callers,
//! every value of the job's own secrets is hidden wherever it appears in that text, and so is the
//! value of every `name=value` or `name: value` whose name reads like a secret (a handler's
//! `tracing::info!(token = ...)`).

use serde_json::Value;

use crate::engine::schedules::ScheduleView;
use crate::engine::store::history::AttemptRecord;
use crate::engine::store::jobs::error_matches;
use crate::engine::{Job, JobFilter};
use crate::webhooks::deliveries::DeliveryRow;

/// Who is looking, as far as secrets go.
#[derive(Debug, Clone, Copy)]
pub struct Sight<'a> {
    /// The caller's name, as jobs record their creator (a user's; `api-token`).
    pub name: &'a str,
    pub admin: bool,
    /// Reads only: a viewer, or a read-scope token (whoever owns it).
    pub reader: bool,
}

impl Sight<'_> {
    /// Whether the caller sees `job`'s secrets whole: an admin, or its creator, acting with a
    /// credential that may change things.
    pub fn sees_secrets_of(&self, job: &Job) -> bool {
        !self.reader && (self.admin || job.created_by.as_deref() == Some(self.name))
    }

    /// Whether the caller may look for jobs by their secrets (an args filter naming a header or
    /// a secret-named field matches every job's, whoever created it): admins only.
    pub fn may_search_secrets(&self) -> bool {
        !self.reader && self.admin
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
            job_for_reader(job)
        }
    }

    /// `job`'s args as the caller sees them.
    pub fn args(&self, job: &Job) -> Value {
        if self.sees_secrets_of(job) {
            job.args.clone()
        } else {
            let mut args = args_for_reader(&job.kind, &job.args);
            hide_alert_url(&job.meta, &mut args);
            args
        }
    }

    /// The records of `job`'s attempts as the caller sees them (`job` as stored, its secrets
    /// whole: they are what is looked for).
    pub fn attempts(&self, job: &Job, records: Vec<AttemptRecord>) -> Vec<AttemptRecord> {
        if self.sees_secrets_of(job) {
            return records;
        }
        let secrets = secret_values(job);
        records
            .into_iter()
            .map(|mut r| {
                r.error = r.error.map(|e| scrub_text(&e, &secrets));
                if let Some(output) = r.output.as_mut() {
                    hide_secret_fields(output);
                    scrub_strings(output, &secrets);
                }
                if let Some(logs) = r.logs.as_mut() {
                    scrub_strings(logs, &secrets);
                }
                r
            })
            .collect()
    }

    /// A schedule as the caller sees it: its template's secrets whole for admins and its creator
    /// (acting with a credential that may change things), hidden for the others, as for jobs.
    pub fn schedule(&self, mut s: ScheduleView) -> ScheduleView {
        if self.reader || !(self.admin || s.created_by.as_deref() == Some(self.name)) {
            s.job.args = args_for_reader(&s.job.kind, &s.job.args);
            hide_secret_fields(&mut s.job.meta);
        }
        s
    }

    /// A webhook call of the delivery record as the caller sees it: the answer to a call that
    /// carried its endpoint's default headers (credentials) only for admins and the job's
    /// creator, acting with a credential that may change things, as a job's secrets.
    pub fn delivery(&self, row: DeliveryRow) -> DeliveryRow {
        let sees = !self.reader && (self.admin || row.job_created_by.as_deref() == Some(self.name));
        if row.credentialed && !sees {
            row.without_answer()
        } else {
            row
        }
    }

    /// A bulk action's recorded filter as the caller sees it (it may name anyone's secrets).
    pub fn audit_filter(&self, filter: Value) -> Value {
        if self.may_search_secrets() {
            filter
        } else {
            audit_filter_for_reader(filter)
        }
    }
}

/// What a hidden value is shown as.
pub const REDACTED: &str = "[redacted]";

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

fn is_secret_name(name: &str) -> bool {
    let plain: String = name
        .chars()
        .filter(|c| !matches!(c, '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_NAMES.iter().any(|s| plain.contains(s))
}

/// `args` of a job of `kind` with its secrets hidden.
fn args_for_reader(kind: &str, args: &Value) -> Value {
    let mut args = args.clone();
    if kind == crate::workers::webhook::KIND {
        if let Some(Value::Object(headers)) = args.get_mut("headers") {
            for value in headers.values_mut() {
                *value = Value::String(REDACTED.into());
            }
        }
        if let Some(Value::String(url)) = args.get_mut("url") {
            *url = url_for_reader(url);
        }
    }
    hide_secret_fields(&mut args);
    args
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

fn hide_secret_fields(value: &mut Value) {
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

/// A bulk action's recorded filter with its `args` (an object from the API, text from the
/// dashboard, either may name a secret's value) and its error text hidden whole.
fn audit_filter_for_reader(mut filter: Value) -> Value {
    // An error search is an admin's, and its text may be the secret it looks for.
    for key in ["args", "error"] {
        if let Some(v) = filter.get_mut(key) {
            if !v.is_null() {
                *v = Value::String(REDACTED.into());
            }
        }
    }
    hide_secret_fields(&mut filter);
    filter
}

/// `job` as a reader sees it: its secrets hidden (what the audit log keeps of an edit).
pub fn as_reader(job: Job) -> Job {
    job_for_reader(job)
}

/// Whether `job` carries anything a reader does not see (a header value, a URL's password or
/// query, a secret-named field).
pub fn has_secrets(job: &Job) -> bool {
    let shown = job_for_reader(job.clone());
    shown.args != job.args || shown.meta != job.meta
}

/// An edit as the audit log keeps it: the values of its args and meta that name secrets (header
/// values, a URL's password and query, secret-named fields) hidden, and for an alert's
/// notification (`job`'s meta says; `None`: many jobs, any of them may be one) its URL's path too.
pub fn as_reader_edit(edit: &crate::engine::job_edit::JobEdit, job: Option<&Job>) -> Value {
    let alert_meta = serde_json::json!({ "alert_incident": true });
    let meta = job.map_or(&alert_meta, |j| &j.meta);
    let mut shown = serde_json::to_value(edit).unwrap_or_default();
    if let Value::Object(map) = &mut shown {
        map.retain(|_, v| !v.is_null());
        for key in ["args", "args_patch", "meta_patch"] {
            let Some(part) = map.get_mut(key) else {
                continue;
            };
            hide_secret_fields(part);
            if let Some(Value::Object(headers)) = part.get_mut("headers") {
                headers
                    .values_mut()
                    .for_each(|v| *v = Value::String(REDACTED.into()));
            }
            if let Some(Value::String(url)) = part.get_mut("url") {
                *url = url_for_reader(url);
            }
            if key != "meta_patch" {
                hide_alert_url(meta, part);
            }
        }
    }
    shown
}

/// `job` with the secrets of its args and meta hidden, and in its errors' messages.
fn job_for_reader(mut job: Job) -> Job {
    let secrets = secret_values(&job);
    for e in &mut job.errors {
        e.message = scrub_text(&e.message, &secrets);
    }
    job.args = args_for_reader(&job.kind, &job.args);
    hide_alert_url(&job.meta, &mut job.args);
    hide_secret_fields(&mut job.meta);
    job
}

/// The shortest value looked for as a secret in text: a shorter one (a header `X-Beta: on`)
/// would hide every occurrence of a common word and tell nothing.
const MIN_SECRET_CHARS: usize = 4;

/// The values of `job`'s secrets, as text may quote them: what [`job_for_reader`] hides of its
/// args and meta (a webhook's header values, its URL's password and query values, an alert
/// notification's URL path, every secret-named field's values), longest first.
fn secret_values(job: &Job) -> Vec<String> {
    let mut found = Vec::new();
    collect_named_secrets(&job.args, &mut found);
    collect_named_secrets(&job.meta, &mut found);
    if job.kind == crate::workers::webhook::KIND {
        if let Some(Value::Object(headers)) = job.args.get("headers") {
            headers
                .values()
                .for_each(|v| collect_strings(v, &mut found));
        }
    }
    let url = job.args.get("url").and_then(Value::as_str);
    if let Some(parsed) = url.and_then(|u| reqwest::Url::parse(u).ok()) {
        if job.kind == crate::workers::webhook::KIND {
            found.extend(parsed.password().map(String::from));
            if !parsed.username().is_empty() {
                found.push(parsed.username().to_string());
            }
            for pair in parsed.query().unwrap_or_default().split('&') {
                found.push(pair.split_once('=').map_or(pair, |(_, v)| v).to_string());
            }
            for (_, v) in parsed.query_pairs() {
                found.push(v.into_owned());
            }
        }
        if job.meta.get("alert_incident").is_some() {
            found.push(parsed.path().trim_start_matches('/').to_string());
        }
    }
    found.retain(|s| s.chars().count() >= MIN_SECRET_CHARS);
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
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

fn collect_strings(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::String(s) => found.push(s.clone()),
        Value::Number(n) => found.push(n.to_string()),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, found)),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, found)),
        _ => {}
    }
}

/// `text` with each of `secrets` hidden, and the value of each `name=value` or `name: value`
/// whose name reads like a secret.
fn scrub_text(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_string();
    for s in secrets {
        if text.contains(s.as_str()) {
            text = text.replace(s.as_str(), REDACTED);
        }
    }
    hide_named_values(&text)
}

/// Every string in `value` (keys aside) through [`scrub_text`].
fn scrub_strings(value: &mut Value, secrets: &[String]) {
    match value {
        Value::String(s) => *s = scrub_text(s, secrets),
        Value::Object(map) => map.values_mut().for_each(|v| scrub_strings(v, secrets)),
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_strings(v, secrets)),
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

/// An alert's notification (a webhook job whose meta names its `alert_incident`, see
/// `alerts::evaluator`) calls the rule's URL, and an incoming-webhook URL is a secret (Slack's
/// carries its token in the path): only its origin is shown.
fn hide_alert_url(meta: &Value, args: &mut Value) {
    if meta.get("alert_incident").is_none() {
        return;
    }
    if let Some(Value::String(url)) = args.get_mut("url") {
        let origin = reqwest::Url::parse(url)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_default();
        *url = format!("{origin}/{REDACTED}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_recorded_error_search_is_hidden_from_readers() {
        let reader = Sight {
            name: "viewer",
            admin: false,
            reader: true,
        };
        let shown = reader.audit_filter(json!({"error": "hunter2", "queue": "q"}));
        assert_eq!(shown, json!({"error": REDACTED, "queue": "q"}));
    }

    #[test]
    fn an_edit_in_the_audit_log_hides_what_a_reader_may_not_see() {
        let edit = crate::engine::job_edit::JobEdit {
            args_patch: Some(
                json!({"url": "https://hooks.slack.com/services/T0/B0/tok3n",
                                    "headers": {"x-key": "s3cr3t-value"}, "api_key": "k3y-value"}),
            ),
            ..Default::default()
        };
        let shown = as_reader_edit(&edit, None).to_string();
        for secret in ["tok3n", "s3cr3t-value", "k3y-value"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn an_alerts_notification_url_shows_its_origin_only() {
        let meta = json!({ "alert_incident": 4, "alert_event": "fired" });
        let mut args = json!({ "url": "https://hooks.slack.com/services/T0/B0/tok3n", "body": {} });
        hide_alert_url(&meta, &mut args);
        assert_eq!(args["url"], format!("https://hooks.slack.com/{REDACTED}"));
        let mut other = json!({ "url": "https://hooks.example.com/x" });
        hide_alert_url(&json!({}), &mut other);
        assert_eq!(other["url"], "https://hooks.example.com/x");
    }

    #[test]
    fn a_webhook_urls_user_info_and_query_values_are_hidden() {
        let shown = args_for_reader(
            "webhook",
            &json!({"url": "https://svc:hunter2@hooks.example.com/x?api_key=K&team=lions#f"}),
        );
        let url = shown["url"].as_str().unwrap();
        assert!(
            !url.contains("hunter2") && !url.contains("=K") && !url.contains("lions"),
            "{url}"
        );
        assert_eq!(
            url,
            "https://[redacted]@hooks.example.com/x?api_key=[redacted]&team=[redacted]"
        );
        let bare = args_for_reader(
            "webhook",
            &json!({"url": "https://h.example/x?sk_live_abc&a=1"}),
        );
        assert_eq!(bare["url"], "https://h.example/x?[redacted]&a=[redacted]");
        let plain = args_for_reader("webhook", &json!({"url": "https://hooks.example.com/x"}));
        assert_eq!(plain["url"], "https://hooks.example.com/x");
        assert_eq!(
            args_for_reader("webhook", &json!({"url": "not a url"}))["url"],
            REDACTED
        );
    }

    #[test]
    fn header_values_and_secret_named_fields_are_hidden() {
        let args = json!({
            "url": "https://hooks.example.com/x",
            "headers": {"Authorization": "Bearer abc", "X-Team": "lions"},
            "body": {"game": 7, "api_key": "k", "nested": [{"Client-Secret": "s"}]},
        });
        let shown = args_for_reader("webhook", &args);
        assert_eq!(
            shown["headers"],
            json!({"Authorization": REDACTED, "X-Team": REDACTED})
        );
        assert_eq!(shown["body"]["api_key"], REDACTED);
        assert_eq!(shown["body"]["nested"][0]["Client-Secret"], REDACTED);
        assert_eq!(shown["body"]["game"], 7);
        assert_eq!(shown["url"], "https://hooks.example.com/x");
        // Another kind's `headers` is just a field (its secret-named ones hidden all the same).
        let other = args_for_reader("noop", &json!({"headers": {"a": 1}, "password": "p"}));
        assert_eq!(other, json!({"headers": {"a": 1}, "password": REDACTED}));
    }

    fn webhook(args: Value) -> Job {
        let mut job: Job = serde_json::from_value(json!({
            "id": 1, "queue": "default", "kind": "webhook", "args": args, "meta": {},
            "state": "completed", "priority": 0, "attempt": 1, "max_attempts": 3,
            "scheduled_at": "2026-12-05T00:00:00Z", "inserted_at": "2026-12-05T00:00:00Z",
            "errors": [], "tags": []
        }))
        .unwrap();
        job.created_by = Some("ada".into());
        job
    }

    fn record(error: &str, output: Value, logs: Value) -> AttemptRecord {
        let at = chrono::Utc::now();
        AttemptRecord {
            job_id: crate::engine::JobId(1),
            attempt: 1,
            node: "n".into(),
            due_at: at,
            started_at: at,
            finished_at: at,
            late_ms: 0.0,
            duration_ms: 1.0,
            outcome: "failed".into(),
            error: Some(error.into()),
            output: Some(output),
            logs: Some(logs),
            logs_dropped: 0,
        }
    }

    #[test]
    fn an_attempts_text_hides_the_jobs_secrets_and_secret_named_values_from_readers() {
        let job = webhook(json!({
            "url": "https://svc:hunter22@hooks.example.com/x?sig=s1gnature&v=2",
            "headers": {"Authorization": "Bearer abc123", "X-Beta": "on"},
            "body": {"game": 7, "api_key": "k-9876"},
        }));
        let rec = record(
            "POST https://svc:hunter22@hooks.example.com/x?sig=s1gnature&v=2 said 401",
            json!({"status": 401, "echo": "Bearer abc123", "token": "other", "beta": "on"}),
            json!([
                {"message": "calling with api_key=k-9876 now", "level": "INFO"},
                {"message": "retrying token=\"q w e\" password: pw-1 (attempt 2)"},
                {"message": "{\"client_secret\":\"zz-top\",\"game\":7} ok"},
                {"message": "status: 401, game=7, at 12:30"},
                {"message": "authorization=Bearer xyz-tok user=bob\nnext line"},
            ]),
        );
        let reader = Sight {
            name: "bob",
            admin: false,
            reader: false,
        };
        let shown = &reader.attempts(&job, vec![rec.clone()])[0];
        let text = format!("{shown:?}");
        for secret in [
            "hunter22",
            "s1gnature",
            "abc123",
            "k-9876",
            "other",
            "q w e",
            "pw-1",
            "zz-top",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(
            shown.error.as_deref(),
            Some("POST https://svc:[redacted]@hooks.example.com/x?sig=[redacted]&v=2 said 401")
        );
        // What is not a secret stays readable: a 2-character header value, a status, a time.
        assert_eq!(shown.output.as_ref().unwrap()["beta"], "on");
        assert_eq!(shown.output.as_ref().unwrap()["status"], 401);
        let logs = shown.logs.as_ref().unwrap();
        assert_eq!(logs[0]["message"], "calling with api_key=[redacted] now");
        assert_eq!(
            logs[1]["message"],
            "retrying token=[redacted] password: [redacted]"
        );
        assert_eq!(
            logs[2]["message"],
            "{\"client_secret\":[redacted],\"game\":7} ok"
        );
        assert_eq!(logs[3]["message"], "status: 401, game=7, at 12:30");
        assert_eq!(
            logs[4]["message"],
            "authorization=[redacted] user=bob\nnext line"
        );
        // The job's creator and admins see the record as written; a viewer never does.
        let creator = Sight {
            name: "ada",
            admin: false,
            reader: false,
        };
        assert_eq!(creator.attempts(&job, vec![rec.clone()])[0], rec);
        let admin = Sight {
            name: "eve",
            admin: true,
            reader: false,
        };
        assert_eq!(admin.attempts(&job, vec![rec.clone()])[0], rec);
        let viewer = Sight {
            name: "ada",
            admin: true,
            reader: true,
        };
        assert_ne!(viewer.attempts(&job, vec![rec.clone()])[0], rec);
    }

    #[test]
    fn a_failed_attempts_message_hides_the_jobs_secrets_from_readers() {
        let mut job =
            webhook(json!({"url": "https://h.example/x", "headers": {"X-Key": "sk_live_1"}}));
        job.errors.push(
            serde_json::from_value(json!({
                "attempt": 1, "at": "2026-12-05T00:00:00Z", "node": "n",
                "message": "refused key sk_live_1"
            }))
            .unwrap(),
        );
        let shown = job_for_reader(job);
        assert_eq!(shown.errors[0].message, "refused key [redacted]");
    }
}
