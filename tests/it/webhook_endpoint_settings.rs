//! Webhook endpoints' default headers and the allowlist kept as endpoints (issue 17): a call under
//! an endpoint carries its headers beneath the job's own, and their values are shown nowhere; an
//! endpoint that allows calls lets jobs call under its prefix (at a boundary), checked when the job
//! is inserted and again before each call; `private_network` vouches for a host name's private
//! address as `private:` does in `KICKOFF_WEBHOOK_ALLOWED_HOSTS`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::Router;
use serde_json::{json, Value};

use crate::common::receiver::Receiver;
use crate::common::rest::call;
use crate::common::{state_of, test_db, wait_for, TestDb};
use kickoff::engine::{Engine, EngineConfig, JobId, JobState};
use kickoff::webhooks::SecretKey;

const TOKEN: &str = "endpoint-settings-test-token";
/// A value that must never be shown again once given.
const CREDENTIAL: &str = "Bearer team-credential-5e1d";

struct Rig {
    db: TestDb,
    engine: Engine,
    app: Router,
    receiver: Receiver,
}

/// An engine whose `KICKOFF_WEBHOOK_ALLOWED_HOSTS` is `listed(the receiver's port)`, and the API
/// on the same key.
async fn rig(listed: fn(u16) -> Vec<String>) -> Rig {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let listed = listed(receiver.addr.port());
    let key = Arc::new(SecretKey::generate().0);
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin_signed(listed, key.clone()),
        EngineConfig {
            queues: vec![("default".into(), 4)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let app = crate::common::app_changed(&db.pool, TOKEN, |s| s.with_webhook_key(key));
    Rig {
        db,
        engine,
        app,
        receiver,
    }
}

impl Rig {
    async fn api(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        call(&self.app, method, path, Some(TOKEN), body.as_ref()).await
    }

    async fn endpoint(&self, body: Value) -> i64 {
        let (status, made) = self
            .api(Method::POST, "/api/v1/webhook-endpoints", Some(body))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        made["endpoint"]["id"].as_i64().unwrap()
    }

    /// Inserts a webhook job through the API: its id, or the refusal.
    async fn webhook(&self, args: Value) -> Result<JobId, (StatusCode, Value)> {
        let (status, answer) = self
            .api(
                Method::POST,
                "/api/v1/jobs",
                Some(json!({ "kind": "webhook", "args": args, "max_attempts": 1 })),
            )
            .await;
        if status == StatusCode::CREATED {
            Ok(JobId(answer["job"]["id"].as_i64().unwrap()))
        } else {
            Err((status, answer))
        }
    }

    /// Inserts a webhook job through the engine's own client (its allowlist, not the API's).
    async fn webhook_on_engine(&self, args: Value) -> JobId {
        let mut new = kickoff::engine::NewJob::new("webhook", args);
        new.max_attempts = 1;
        self.engine.client().insert(&new).await.unwrap().job.id
    }

    async fn finished(&self, id: JobId) -> JobState {
        wait_for("the call to finish", Duration::from_secs(20), || async {
            matches!(
                state_of(&self.db.pool, id).await,
                JobState::Completed | JobState::Discarded
            )
        })
        .await;
        state_of(&self.db.pool, id).await
    }

    async fn job_error(&self, id: JobId) -> String {
        sqlx::query_scalar("SELECT errors->-1->>'message' FROM jobs WHERE id = $1")
            .bind(id.0)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }
}

fn refusal(answer: &Value) -> String {
    answer["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test]
async fn default_headers_go_beneath_the_jobs_own_and_their_values_are_shown_nowhere() {
    let rig = rig(|_| Vec::new()).await;
    let prefix = rig.receiver.url("/partner/");
    let id = rig
        .endpoint(json!({
            "url_prefix": prefix,
            "allow_calls": true,
            "headers": { "Authorization": CREDENTIAL, "X-Team": "blue" },
        }))
        .await;

    // The job's own `x-team` wins over the default of that name, in any case.
    let job = rig
        .webhook(json!({ "url": rig.receiver.url("/partner/a"), "headers": { "x-team": "red" }, "body": {} }))
        .await
        .unwrap();
    assert_eq!(rig.finished(job).await, JobState::Completed);
    let got = rig.receiver.calls_to("/partner/a").pop().unwrap();
    assert_eq!(got.header("authorization"), CREDENTIAL);
    assert_eq!(
        got.headers.get_all("x-team").iter().collect::<Vec<_>>(),
        vec!["red"]
    );
    assert!(got.headers.contains_key("webhook-signature"), "{got:?}");

    // Shown by name; the value is in no answer, no audit entry, not the job, not in the clear in
    // the database.
    let (_, list) = rig
        .api(Method::GET, "/api/v1/webhook-endpoints", None)
        .await;
    assert_eq!(list[0]["header_names"], json!(["Authorization", "X-Team"]));
    let (_, shown_job) = rig
        .api(Method::GET, &format!("/api/v1/jobs/{}", job.0), None)
        .await;
    let (_, deliveries) = rig
        .api(
            Method::GET,
            &format!("/api/v1/webhook-deliveries?job_id={}", job.0),
            None,
        )
        .await;
    let audit: Vec<String> = sqlx::query_scalar("SELECT row_to_json(a)::text FROM audit_log a")
        .fetch_all(&rig.db.pool)
        .await
        .unwrap();
    let stored: Vec<u8> = sqlx::query_scalar("SELECT headers FROM webhook_endpoints")
        .fetch_one(&rig.db.pool)
        .await
        .unwrap();
    let secret_part = "team-credential-5e1d";
    for (what, text) in [
        ("the list", list.to_string()),
        ("the job", shown_job.to_string()),
        ("the delivery record", deliveries.to_string()),
        ("the audit log", audit.join("\n")),
        (
            "the stored row",
            String::from_utf8_lossy(&stored).into_owned(),
        ),
    ] {
        assert!(
            !text.contains(secret_part),
            "{what} shows the value: {text}"
        );
    }

    // Replaced by none: the next call goes without them.
    let (status, changed) = rig
        .api(
            Method::PATCH,
            &format!("/api/v1/webhook-endpoints/{id}"),
            Some(json!({ "headers": {} })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["header_names"], json!([]));
    assert_eq!(changed["allow_calls"], true);
    let job = rig
        .webhook(json!({ "url": rig.receiver.url("/partner/b") }))
        .await
        .unwrap();
    assert_eq!(rig.finished(job).await, JobState::Completed);
    let got = rig.receiver.calls_to("/partner/b").pop().unwrap();
    assert!(!got.headers.contains_key("authorization"), "{got:?}");
}

#[tokio::test]
async fn an_endpoint_that_allows_calls_is_the_allowlist_at_a_boundary() {
    let rig = rig(|_| Vec::new()).await;
    let under = rig.receiver.url("/partner/in");
    // Nothing allows the receiver yet.
    let (status, answer) = rig.webhook(json!({ "url": under })).await.unwrap_err();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        refusal(&answer).contains("no webhook endpoint allows calls under this URL"),
        "{answer}"
    );
    // An endpoint that only signs does not allow.
    let id = rig
        .endpoint(json!({ "url_prefix": rig.receiver.url("/partner") }))
        .await;
    assert!(rig.webhook(json!({ "url": under })).await.is_err());
    let (status, _) = rig
        .api(
            Method::PATCH,
            &format!("/api/v1/webhook-endpoints/{id}"),
            Some(json!({ "allow_calls": true })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    // Under the prefix: allowed and called. Beside it, or past it without a boundary: refused.
    let job = rig.webhook(json!({ "url": under })).await.unwrap();
    assert_eq!(rig.finished(job).await, JobState::Completed);
    assert_eq!(rig.receiver.calls_to("/partner/in").len(), 1);
    for url in [
        rig.receiver.url("/partner"),
        rig.receiver.url("/partner?x=1"),
    ] {
        assert!(rig.webhook(json!({ "url": url })).await.is_ok(), "{url}");
    }
    for url in [
        rig.receiver.url("/partners/in"),
        rig.receiver.url("/other"),
        // Out of the prefix once parsed, or once a receiver's server decodes or strips it.
        rig.receiver.url("/partner/../other"),
        rig.receiver.url("/partner/%2e%2e/other"),
        rig.receiver.url("/partner/..;/other"),
        rig.receiver.url("/partner/x%2F..%2F..%2Fother"),
        rig.receiver.url("/partner/x%5c..%5cother"),
    ] {
        let (status, answer) = rig.webhook(json!({ "url": url })).await.unwrap_err();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {answer}");
    }

    // Checked again before the call: a job inserted while allowed, run after the endpoint stopped
    // allowing, is refused without a call.
    let (status, answer) = rig
        .api(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({
                "kind": "webhook",
                "args": { "url": rig.receiver.url("/partner/later") },
                "schedule_in_ms": 3_600_000,
                "max_attempts": 1,
            })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let later = JobId(answer["job"]["id"].as_i64().unwrap());
    let (status, _) = rig
        .api(
            Method::PATCH,
            &format!("/api/v1/webhook-endpoints/{id}"),
            Some(json!({ "allow_calls": false })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = rig
        .api(
            Method::POST,
            &format!("/api/v1/jobs/{}/run-now", later.0),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rig.finished(later).await, JobState::Discarded);
    assert!(
        rig.job_error(later)
            .await
            .contains("no webhook endpoint allows calls under this URL"),
        "{}",
        rig.job_error(later).await
    );
    assert!(rig.receiver.calls_to("/partner/later").is_empty());

    // A prefix without a path allows that host and port, not a URL that starts with it as a user
    // name of another host, nor a longer port.
    let ip = rig.receiver.addr.ip();
    let port = rig.receiver.addr.port();
    let (status, made) = rig
        .api(
            Method::POST,
            "/api/v1/webhook-endpoints",
            Some(json!({ "url_prefix": format!("http://{ip}:{port}"), "allow_calls": true })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(
        made["endpoint"]["url_prefix"],
        format!("http://{ip}:{port}")
    );
    assert!(rig
        .webhook(json!({ "url": rig.receiver.url("/any") }))
        .await
        .is_ok());
    for url in [
        format!("http://{ip}:{port}@127.0.0.2:{port}/"),
        format!("http://{ip}:{port}0/"),
    ] {
        let (status, answer) = rig.webhook(json!({ "url": url })).await.unwrap_err();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {answer}");
    }
    // Kept as calls' URLs are read: a default port, a dot segment, the case of the host.
    let (status, made) = rig
        .api(
            Method::POST,
            "/api/v1/webhook-endpoints",
            Some(json!({ "url_prefix": "HTTPS://Partner.Example:443/a/../hooks/" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(
        made["endpoint"]["url_prefix"],
        "https://partner.example/hooks/"
    );
}

#[tokio::test]
async fn a_host_name_under_an_endpoint_resolves_privately_only_when_it_says_so() {
    let rig = rig(|_| Vec::new()).await;
    let port = rig.receiver.addr.port();
    let prefix = format!("http://localhost:{port}/partner/");
    let id = rig
        .endpoint(json!({ "url_prefix": prefix, "allow_calls": true }))
        .await;
    let url = format!("http://localhost:{port}/partner/named");
    let job = rig.webhook(json!({ "url": url })).await.unwrap();
    assert_eq!(rig.finished(job).await, JobState::Discarded);
    let error = rig.job_error(job).await;
    assert!(error.contains("a loopback address: refused"), "{error}");
    assert!(rig.receiver.calls_to("/partner/named").is_empty());

    let (status, _) = rig
        .api(
            Method::PATCH,
            &format!("/api/v1/webhook-endpoints/{id}"),
            Some(json!({ "private_network": true })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let job = rig.webhook(json!({ "url": url })).await.unwrap();
    assert_eq!(rig.finished(job).await, JobState::Completed);
    assert_eq!(rig.receiver.calls_to("/partner/named").len(), 1);

    // Calls switched off take the private network with them, without being told.
    let (status, changed) = rig
        .api(
            Method::PATCH,
            &format!("/api/v1/webhook-endpoints/{id}"),
            Some(json!({ "allow_calls": false })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["private_network"], false);
}

#[tokio::test]
async fn an_endpoint_vouches_for_a_private_address_of_a_host_the_variable_lists() {
    // The variable lists the host, without `private:`; the endpoint says it may resolve privately.
    let rig = rig(|port| vec![format!("localhost:{port}")]).await;
    let port = rig.receiver.addr.port();
    let url = format!("http://localhost:{port}/listed/call");
    let job = rig.webhook_on_engine(json!({ "url": url })).await;
    assert_eq!(rig.finished(job).await, JobState::Discarded);
    rig.endpoint(json!({
        "url_prefix": format!("http://localhost:{port}/listed/"),
        "allow_calls": true,
        "private_network": true,
    }))
    .await;
    let job = rig.webhook_on_engine(json!({ "url": url })).await;
    assert_eq!(rig.finished(job).await, JobState::Completed);
    assert_eq!(rig.receiver.calls_to("/listed/call").len(), 1);
}

#[tokio::test]
async fn endpoint_settings_are_checked_and_only_admins_change_them() {
    let rig = rig(|_| Vec::new()).await;
    let prefix = rig.receiver.url("/partner/");
    for (body, want) in [
        (
            json!({ "url_prefix": prefix, "private_network": true }),
            "private_network: only for an endpoint that allows calls",
        ),
        (
            json!({ "url_prefix": prefix, "headers": { "Host": "evil.test" } }),
            "other than Host",
        ),
        (
            // The value is not repeated (it may be a credential).
            json!({ "url_prefix": prefix, "headers": { "X-Key": "a\nb" } }),
            "each value visible ASCII",
        ),
    ] {
        let (status, answer) = rig
            .api(
                Method::POST,
                "/api/v1/webhook-endpoints",
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert!(refusal(&answer).contains(want), "{body}: {answer}");
        // A header's value is never repeated: it may be a credential.
        let text = answer.to_string();
        assert!(
            !text.contains("evil.test") && !text.contains("a\\nb"),
            "{text}"
        );
    }
    let id = rig.endpoint(json!({ "url_prefix": prefix })).await;
    let path = format!("/api/v1/webhook-endpoints/{id}");
    let (status, answer) = rig
        .api(
            Method::PATCH,
            &path,
            Some(json!({ "private_network": true })),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let (status, _) = rig
        .api(
            Method::PATCH,
            "/api/v1/webhook-endpoints/999999",
            Some(json!({ "allow_calls": true })),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = rig
        .api(Method::PATCH, &path, Some(json!({ "allowed": true })))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    // An operator's token may not.
    let operator = crate::common::operator_token(&rig.db.pool).await;
    let (status, _) = call(
        &rig.app,
        Method::PATCH,
        &path,
        Some(&operator),
        Some(&json!({ "allow_calls": true })),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let allows: bool = sqlx::query_scalar("SELECT allow_calls FROM webhook_endpoints")
        .fetch_one(&rig.db.pool)
        .await
        .unwrap();
    assert!(!allows);
    // Every change is audited, refused ones included, by route.
    let entries: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'api.PATCH /webhook-endpoints/{id}'",
    )
    .fetch_one(&rig.db.pool)
    .await
    .unwrap();
    assert!(entries >= 4, "{entries}");
}

#[tokio::test]
async fn a_failed_calls_error_names_its_cause_never_the_url() {
    // The URL may carry a credential (a Slack incoming webhook's path), and errors are shown to
    // everyone signed in.
    let rig = rig(|_| Vec::new()).await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    rig.endpoint(
        json!({ "url_prefix": format!("http://127.0.0.1:{closed}"), "allow_calls": true }),
    )
    .await;
    let job = rig
        .webhook(
            json!({ "url": format!("http://127.0.0.1:{closed}/services/T0/B0/token-in-path") }),
        )
        .await
        .unwrap();
    assert_eq!(rig.finished(job).await, JobState::Discarded);
    let error = rig.job_error(job).await;
    assert!(!error.contains("token-in-path"), "{error}");
    assert!(error.to_lowercase().contains("refused"), "{error}");
}

/// A write token of a new operator `name`.
async fn operator_named(pool: &kickoff::engine::Db, name: &str) -> String {
    let accounts = kickoff::accounts::Accounts::new(pool.clone());
    let user = accounts
        .create(
            name,
            "a long enough password",
            kickoff::accounts::Role::Operator,
        )
        .await
        .unwrap();
    accounts
        .create_token(&user, "script", kickoff::accounts::TokenScope::Write)
        .await
        .unwrap()
        .1
}

/// Issue 30, point 13: an endpoint's default headers are a credential. They go only with the
/// methods the endpoint lists (POST unless an admin lists more): a job with another method under
/// its prefix is refused at insert, and one inserted while allowed is discarded without a call if
/// the endpoint changed since. The answer to a call that carried them is shown only to admins and
/// the job's creator (the delivery record), and a failed call's error, which everyone reads,
/// leaves its body out.
#[tokio::test]
async fn an_endpoints_credentials_go_only_with_its_methods_and_its_answers_to_few() {
    let rig = rig(|_| Vec::new()).await;
    let id = rig
        .endpoint(json!({
            "url_prefix": rig.receiver.url("/status/"),
            "allow_calls": true,
            "headers": { "Authorization": CREDENTIAL },
        }))
        .await;
    let ops = operator_named(&rig.db.pool, "ops").await;
    let ana = operator_named(&rig.db.pool, "ana").await;
    let job_as = |token: String, args: Value| {
        let app = rig.app.clone();
        async move {
            call(
                &app,
                Method::POST,
                "/api/v1/jobs",
                Some(token.as_str()),
                Some(&json!({ "kind": "webhook", "args": args, "max_attempts": 1 })),
            )
            .await
        }
    };

    // Another method than the endpoint lists: refused, nothing inserted.
    let (status, refused) = job_as(
        ops.clone(),
        json!({ "url": rig.receiver.url("/status/200"), "method": "DELETE" }),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(refusal(&refused).contains("POST only"), "{refused}");

    // A POST by `ops` that fails (403): the job's error, read by all, has no body.
    let (status, made) = job_as(
        ops.clone(),
        json!({ "url": rig.receiver.url("/status/403") }),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let job = JobId(made["job"]["id"].as_i64().unwrap());
    assert_eq!(rig.finished(job).await, JobState::Discarded);
    assert_eq!(
        rig.receiver.calls_to("/status/403")[0].header("authorization"),
        CREDENTIAL
    );
    let error = rig.job_error(job).await;
    assert!(
        error.contains("403") && !error.contains("answered"),
        "{error}"
    );
    // Its answer: to `ops` (the creator) and admins, not to `ana`.
    let path = format!("/api/v1/webhook-deliveries?job_id={}", job.0);
    for (who, token, sees) in [
        ("ops", ops.as_str(), true),
        ("admin", TOKEN, true),
        ("ana", ana.as_str(), false),
    ] {
        let (status, page) = call(&rig.app, Method::GET, &path, Some(token), None).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let row = &page["deliveries"][0];
        assert_eq!(row["credentialed"], true, "{row}");
        assert_eq!(row["response_body"] == "answered 403", sees, "{who}: {row}");
        assert_eq!(row["response_headers"].is_null(), !sees, "{who}: {row}");
    }

    // An admin lists DELETE too: then it goes.
    let (status, changed) = rig
        .api(
            Method::PATCH,
            &format!("/api/v1/webhook-endpoints/{id}"),
            Some(json!({ "header_methods": ["POST", "DELETE"] })),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["header_methods"], json!(["POST", "DELETE"]));
    let (status, made) = call(
        &rig.app,
        Method::POST,
        "/api/v1/jobs",
        Some(ops.as_str()),
        Some(&json!({
            "kind": "webhook", "max_attempts": 1, "schedule_in_ms": 600_000,
            "args": { "url": rig.receiver.url("/status/204"), "method": "DELETE" },
        })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let waiting = JobId(made["job"]["id"].as_i64().unwrap());
    // ... and takes it back before the job runs: discarded without a call.
    let (status, _) = rig
        .api(
            Method::PATCH,
            &format!("/api/v1/webhook-endpoints/{id}"),
            Some(json!({ "header_methods": ["POST"] })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, ran) = rig
        .api(
            Method::POST,
            &format!("/api/v1/jobs/{}/run-now", waiting.0),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{ran}");
    assert_eq!(rig.finished(waiting).await, JobState::Discarded);
    assert!(rig.receiver.calls_to("/status/204").is_empty());
    assert!(rig.job_error(waiting).await.contains("POST only"));

    // A method that is none: refused by the schema.
    let (status, _) = rig
        .api(
            Method::PATCH,
            &format!("/api/v1/webhook-endpoints/{id}"),
            Some(json!({ "header_methods": ["TRACE"] })),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}
