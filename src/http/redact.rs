//! What each caller sees of a job's args and meta: webhook header values (an `Authorization`
//! often) and every field named like a secret are replaced by [`REDACTED`], except for admins
//! and the job's creator (see [`Sight`]); read-only callers (viewers, read-scope tokens) never
//! see them. A clone keeps its original's creator, so copying a job reveals nothing.

use serde_json::Value;

use crate::engine::schedules::ScheduleView;
use crate::engine::Job;
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
/// dashboard, either may name a secret's value) hidden whole.
fn audit_filter_for_reader(mut filter: Value) -> Value {
    if let Some(args) = filter.get_mut("args") {
        if !args.is_null() {
            *args = Value::String(REDACTED.into());
        }
    }
    hide_secret_fields(&mut filter);
    filter
}

/// `job` with the secrets of its args and meta hidden.
fn job_for_reader(mut job: Job) -> Job {
    job.args = args_for_reader(&job.kind, &job.args);
    hide_alert_url(&job.meta, &mut job.args);
    hide_secret_fields(&mut job.meta);
    job
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
}
