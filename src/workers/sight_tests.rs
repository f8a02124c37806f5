//! The engine's one sight (`engine::sight`) applied to the built-in kinds: what a reader, an
//! operator who did not make a job and an admin see of a webhook's URL, headers and body, of an
//! alert's notification, of an edit and an error search in the audit log.

use serde_json::Value;

use crate::engine::sight::*;
use crate::engine::{AttemptRecord, Job, Workers};
use serde_json::json;

fn workers() -> Workers {
    super::builtin(vec![])
}

fn args_for_reader(kind: &str, args: &Value) -> Value {
    hidden_args(&workers(), kind, args, &json!({})).0
}

#[test]
fn a_recorded_error_search_is_hidden_from_readers() {
    let workers = workers();
    let reader = Sight {
        name: "viewer",
        admin: false,
        reader: true,
        workers: &workers,
    };
    let shown = reader.audit_filter(json!({"error": "hunter2", "queue": "q"}));
    assert_eq!(shown, json!({"error": REDACTED, "queue": "q"}));
    // A shift and a bulk edit keep their filter under `filter`.
    let shown = reader.audit_filter(json!({
        "filter": {"error": "sk_live_1", "args": {"x": "sk_live_2"}, "queue": "q"},
        "by_ms": 60000, "game": "Lions vs Bears",
        "edit": {"priority": 3, "args": {"team": "lions"}},
    }));
    assert_eq!(
        shown,
        json!({
            "filter": {"error": REDACTED, "args": REDACTED, "queue": "q"},
            "by_ms": 60000, "game": "Lions vs Bears",
            "edit": {"priority": 3, "args": {"team": "lions"}},
        })
    );
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
    let shown = as_reader_edit(&workers(), &edit, None).to_string();
    for secret in ["tok3n", "s3cr3t-value", "k3y-value"] {
        assert!(!shown.contains(secret), "{shown}");
    }
}

#[test]
fn an_alerts_notification_url_shows_its_origin_only() {
    let meta = json!({ "alert_incident": 4, "alert_event": "fired" });
    let args = json!({ "url": "https://hooks.slack.com/services/T0/B0/tok3n", "body": {} });
    let (shown, found) = hidden_args(&workers(), "webhook", &args, &meta);
    assert_eq!(shown["url"], format!("https://hooks.slack.com/{REDACTED}"));
    assert!(found.iter().any(|f| f.contains("tok3n")), "{found:?}");
    let other = json!({ "url": "https://hooks.example.com/x" });
    let (shown, _) = hidden_args(&workers(), "webhook", &other, &json!({}));
    assert_eq!(shown["url"], "https://hooks.example.com/x");
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
        job_id: crate::engine::job::JobId(1),
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
    let workers = workers();
    let reader = Sight {
        name: "bob",
        admin: false,
        reader: false,
        workers: &workers,
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
        workers: &workers,
    };
    assert_eq!(creator.attempts(&job, vec![rec.clone()])[0], rec);
    let admin = Sight {
        name: "eve",
        admin: true,
        reader: false,
        workers: &workers,
    };
    assert_eq!(admin.attempts(&job, vec![rec.clone()])[0], rec);
    let viewer = Sight {
        name: "ada",
        admin: true,
        reader: true,
        workers: &workers,
    };
    assert_ne!(viewer.attempts(&job, vec![rec.clone()])[0], rec);
}

#[test]
fn a_failed_attempts_message_hides_the_jobs_secrets_from_readers() {
    let mut job = webhook(json!({"url": "https://h.example/x", "headers": {"X-Key": "sk_live_1"}}));
    job.errors.push(
        serde_json::from_value(json!({
            "attempt": 1, "at": "2026-12-05T00:00:00Z", "node": "n",
            "message": "refused key sk_live_1"
        }))
        .unwrap(),
    );
    let shown = as_reader(&workers(), job);
    assert_eq!(shown.errors[0].message, "refused key [redacted]");
}

/// What a job held before an edit took it out stays hidden in what its attempts left; a
/// secret cut where a text was cut to its bound is hidden too; a kind this server does not
/// run shows no args at all.
#[test]
fn former_secrets_cut_secrets_and_unknown_kinds_are_hidden() {
    let workers = workers();
    let before =
        webhook(json!({"url": "https://h.example/x", "headers": {"X-Key": "sk_live_old"}}));
    let mut after = before.clone();
    after.args = json!({"url": "https://h.example/x"});
    let dropped = secrets_dropped(&workers, &before, &after.args, &after.meta);
    assert_eq!(dropped, ["sk_live_old"]);
    after.former_secrets = dropped;
    after.errors.push(
        serde_json::from_value(json!({
            "attempt": 1, "at": "2026-12-05T00:00:00Z", "node": "n",
            "message": "refused key sk_live_old; body ended: sk_li"
        }))
        .unwrap(),
    );
    let shown = as_reader(&workers, after);
    assert_eq!(
        shown.errors[0].message,
        "refused key [redacted]; body ended: [redacted]"
    );
    let mut unknown = webhook(json!({"anything": "as_is"}));
    unknown.kind = "not_run_here".into();
    assert_eq!(as_reader(&workers, unknown).args, json!(REDACTED));
}
