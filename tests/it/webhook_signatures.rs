//! Signed webhooks (issue 17): calls to an endpoint carry a Standard Webhooks `webhook-signature`
//! that the published verifier (`standardwebhooks` from PyPI, installed by scripts/bootstrap.sh)
//! accepts, for several bodies and across a secret rotation; the endpoints API shows a secret
//! once and only to admins.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use crate::common::receiver::Receiver;
use crate::common::{state_of, test_db, wait_for, TestDb};
use kickoff::engine::{Engine, EngineConfig, JobState, NewJob};
use kickoff::webhooks::{Endpoints, SecretKey};

/// The Python of the tools scripts/bootstrap.sh installs, with `standardwebhooks`.
fn python() -> String {
    let cache = std::env::var("KICKOFF_CACHE")
        .unwrap_or_else(|_| format!("{}/.cache/kickoff", std::env::var("HOME").unwrap()));
    let python = format!("{cache}/tools/pyvenv/bin/python");
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} is missing: run scripts/bootstrap.sh --e2e (scripts/test does), which installs the \
         standardwebhooks verifier"
    );
    python
}

/// Whether the published verifier accepts `body` with `headers` for `secret`.
fn verifies(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), String> {
    let wanted: serde_json::Map<String, Value> =
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .iter()
            .filter_map(|h| {
                headers
                    .get(*h)
                    .map(|v| (h.to_string(), Value::from(v.to_str().unwrap())))
            })
            .collect();
    let script = "import json, sys\n\
        from standardwebhooks import Webhook, WebhookVerificationError\n\
        try:\n\
        \x20   Webhook(sys.argv[1]).verify(sys.stdin.buffer.read(), json.loads(sys.argv[2]), json_parse=False)\n\
        except WebhookVerificationError as e:\n\
        \x20   print(e); sys.exit(3)\n";
    let mut child = Command::new(python())
        .args(["-c", script, secret, &Value::Object(wanted).to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    match out.status.code() {
        Some(0) => Ok(()),
        Some(3) => Err(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        _ => panic!(
            "the verifier failed to run: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

struct Rig {
    db: TestDb,
    engine: Engine,
    endpoints: Endpoints,
    addr: std::net::SocketAddr,
    receiver: Receiver,
}

async fn rig() -> Rig {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let addr = receiver.addr;
    let key = Arc::new(SecretKey::generate().0);
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin_signed(vec![addr.to_string()], key.clone()),
        EngineConfig {
            queues: vec![("default".into(), 4)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let endpoints = Endpoints::new(db.pool.clone(), key);
    Rig {
        db,
        engine,
        endpoints,
        addr,
        receiver,
    }
}

impl Rig {
    /// Calls `path` with `body` and returns what the receiver got.
    async fn call(&self, path: &str, body: Option<Value>) -> (HeaderMap, Bytes) {
        let mut args = json!({ "url": format!("http://{}{path}", self.addr) });
        if let Some(body) = body {
            args["body"] = body;
        }
        let job = self
            .engine
            .client()
            .insert(&NewJob::new("webhook", args))
            .await
            .unwrap()
            .job;
        wait_for("the call", Duration::from_secs(20), || async {
            state_of(&self.db.pool, job.id).await == JobState::Completed
        })
        .await;
        let call = self.receiver.calls_to(path).pop().unwrap();
        (call.headers, call.body)
    }
}

#[tokio::test]
async fn calls_to_an_endpoint_are_signed_as_the_published_verifier_expects() {
    let rig = rig().await;
    let made = {
        let mut conn = rig.db.pool.pool().acquire().await.unwrap();
        rig.endpoints
            .create_with(
                &mut conn,
                &format!("http://{}/partner/", rig.addr),
                &Default::default(),
                Some("test"),
            )
            .await
            .unwrap()
    };
    assert!(made.secret.starts_with("whsec_"), "{}", made.secret);
    for body in [
        Some(json!({ "game": "Bears vs Wolves", "score": [2, 1] })),
        Some(json!("ünïcode ✓ \"quoted\" \\ slash")),
        Some(json!([])),
        None,
    ] {
        let (headers, sent) = rig.call("/partner/hook", body.clone()).await;
        verifies(&made.secret, &headers, &sent)
            .unwrap_or_else(|e| panic!("{body:?}: the verifier refused: {e}"));
        // A changed body, or another secret, is refused by the same verifier.
        let mut changed = sent.to_vec();
        changed.push(b' ');
        assert!(verifies(&made.secret, &headers, &changed).is_err());
        let other = kickoff::webhooks::signing::whsec(&[7u8; 32]);
        assert!(verifies(&other, &headers, &sent).is_err());
    }
    // Outside the endpoint's prefix: no signature.
    let (headers, _) = rig.call("/elsewhere", Some(json!({}))).await;
    assert!(headers.get("webhook-signature").is_none());
    assert!(headers.get("webhook-id").is_some());
    rig.engine.stop().await;
}

#[tokio::test]
async fn during_a_rotation_both_secrets_verify_and_after_it_only_the_new_one() {
    let rig = rig().await;
    let prefix = format!("http://{}/", rig.addr);
    let mut conn = rig.db.pool.pool().acquire().await.unwrap();
    let old = rig
        .endpoints
        .create_with(&mut conn, &prefix, &Default::default(), None)
        .await
        .unwrap();
    let new = rig
        .endpoints
        .rotate_with(&mut conn, old.endpoint.id, Duration::from_secs(3600))
        .await
        .unwrap();
    drop(conn);
    assert_ne!(old.secret, new.secret);
    let (headers, sent) = rig.call("/during", Some(json!({ "n": 1 }))).await;
    let signature = headers["webhook-signature"].to_str().unwrap().to_string();
    assert_eq!(signature.split(' ').count(), 2, "{signature}");
    verifies(&new.secret, &headers, &sent).expect("the new secret verifies");
    verifies(&old.secret, &headers, &sent).expect("the old secret verifies during the overlap");

    // The overlap over: only the new secret signs.
    sqlx::query("UPDATE webhook_endpoints SET previous_until = now() - interval '1 second'")
        .execute(&rig.db.pool)
        .await
        .unwrap();
    let (headers, sent) = rig.call("/after", Some(json!({ "n": 2 }))).await;
    assert_eq!(
        headers["webhook-signature"]
            .to_str()
            .unwrap()
            .split(' ')
            .count(),
        1
    );
    verifies(&new.secret, &headers, &sent).expect("the new secret verifies");
    assert!(verifies(&old.secret, &headers, &sent).is_err());

    // Then dropped: the leader's sweep forgets the previous secret (once), and still only the new
    // one signs.
    let sweeper = kickoff::webhooks::sweeper::SecretSweeper::new(rig.db.pool.clone());
    assert_eq!(sweeper.run_once().await.unwrap(), 1);
    assert_eq!(sweeper.run_once().await.unwrap(), 0);
    let kept: Option<Vec<u8>> = sqlx::query_scalar("SELECT previous_secret FROM webhook_endpoints")
        .fetch_one(&rig.db.pool)
        .await
        .unwrap();
    assert_eq!(kept, None);
    let (headers, sent) = rig.call("/swept", Some(json!({ "n": 3 }))).await;
    verifies(&new.secret, &headers, &sent).expect("the new secret verifies");

    // A database dump alone does not hold the secret.
    let stored: Vec<u8> = sqlx::query_scalar("SELECT secret FROM webhook_endpoints")
        .fetch_one(&rig.db.pool)
        .await
        .unwrap();
    let raw = base64_decode(new.secret.trim_start_matches("whsec_"));
    assert!(!stored.windows(raw.len()).any(|w| w == raw.as_slice()));
    rig.engine.stop().await;
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

const TOKEN: &str = "signatures-test-token";

async fn call(
    app: &axum::Router,
    token: &str,
    method: Method,
    path: &str,
    body: Option<&str>,
) -> (StatusCode, Value) {
    let body = body.map(|b| (b.as_bytes().to_vec(), "application/json"));
    let (status, text) = crate::common::rest::send(app, method, path, Some(token), body).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn admins_manage_endpoints_by_the_api_and_a_secret_is_shown_once() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let (status, made) = call(
        &app,
        TOKEN,
        Method::POST,
        "/api/v1/webhook-endpoints",
        Some(r#"{"url_prefix": "https://Partner.Example/hooks/"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let secret = made["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(
        made["endpoint"]["url_prefix"],
        "https://partner.example/hooks/"
    );
    let id = made["endpoint"]["id"].as_i64().unwrap();

    let (status, list) = call(&app, TOKEN, Method::GET, "/api/v1/webhook-endpoints", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!list.to_string().contains(&secret[6..]), "{list}");
    assert_eq!(list[0]["id"], id);

    // The same prefix again, a bad one, an unknown field, a long overlap: refused.
    for (body, want) in [
        (
            r#"{"url_prefix": "https://partner.example/hooks/"}"#,
            StatusCode::CONFLICT,
        ),
        (
            r#"{"url_prefix": "ftp://partner.example/"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            r#"{"url": "https://x.example/"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let (status, answer) = call(
            &app,
            TOKEN,
            Method::POST,
            "/api/v1/webhook-endpoints",
            Some(body),
        )
        .await;
        assert_eq!(status, want, "{body}: {answer}");
    }
    let rotate = format!("/api/v1/webhook-endpoints/{id}/rotate");
    let (status, _) = call(
        &app,
        TOKEN,
        Method::POST,
        &rotate,
        Some(r#"{"overlap_secs": 9999999}"#),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, rotated) = call(&app, TOKEN, Method::POST, &rotate, Some("{}")).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let second = rotated["secret"].as_str().unwrap().to_string();
    assert_ne!(second, secret);
    assert!(
        rotated["endpoint"]["previous_until"].is_string(),
        "{rotated}"
    );
    let (status, _) = call(
        &app,
        TOKEN,
        Method::POST,
        "/api/v1/webhook-endpoints/999/rotate",
        Some("{}"),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Not for an operator's token.
    let operator = crate::common::operator_token(&db.pool).await;
    for (method, path, body) in [
        (Method::GET, "/api/v1/webhook-endpoints".to_string(), None),
        (Method::POST, rotate.clone(), Some("{}")),
    ] {
        let (status, answer) = call(&app, &operator, method, &path, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {answer}");
    }

    // No secret in the audit log.
    let audit: Vec<String> = sqlx::query_scalar("SELECT row_to_json(a)::text FROM audit_log a")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(
        audit.iter().any(|e| e.contains("webhook-endpoints")),
        "{audit:?}"
    );
    for entry in &audit {
        assert!(
            !entry.contains(&secret[6..]) && !entry.contains(&second[6..]),
            "{entry}"
        );
    }

    let delete = format!("/api/v1/webhook-endpoints/{id}");
    let (status, _) = call(&app, TOKEN, Method::DELETE, &delete, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&app, TOKEN, Method::DELETE, &delete, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Issue 30, point 12: an endpoint's sealed secret and default headers are bound to it. A
/// database writer without the key who copies partner A's sealed values into an endpoint of their
/// own gets nothing: the copies do not open, so no call under B's prefix carries A's credential.
/// Values sealed before binding are bound at the next start and go on signing.
#[tokio::test]
async fn sealed_values_copied_into_another_endpoint_do_not_open_there() {
    use kickoff::webhooks::service::for_call;
    use kickoff::webhooks::EndpointSettings;
    let db = test_db().await;
    let key = Arc::new(SecretKey::generate().0);
    let endpoints = Endpoints::new(db.pool.clone(), key.clone());
    let settings = |value: &str| EndpointSettings {
        headers: Some([("Authorization".to_string(), value.to_string())].into()),
        ..EndpointSettings::default()
    };
    let mut conn = db.pool.pool().acquire().await.unwrap();
    let partner = endpoints
        .create_with(
            &mut conn,
            "https://partner.example/hooks/",
            &settings("Bearer partner"),
            None,
        )
        .await
        .unwrap();
    let mine = endpoints
        .create_with(
            &mut conn,
            "https://attacker.example/",
            &settings("Bearer mine"),
            None,
        )
        .await
        .unwrap();
    let call = for_call(&db.pool, Some(&key), "https://partner.example/hooks/x")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(call.headers["Authorization"], "Bearer partner");

    sqlx::query(
        "UPDATE webhook_endpoints m SET secret = p.secret, headers = p.headers
         FROM webhook_endpoints p WHERE m.id = $1 AND p.id = $2",
    )
    .bind(mine.endpoint.id)
    .bind(partner.endpoint.id)
    .execute(&db.pool)
    .await
    .unwrap();
    let copied = for_call(&db.pool, Some(&key), "https://attacker.example/x").await;
    assert!(
        copied.is_err(),
        "the partner's sealed values opened in another endpoint: {:?}",
        copied.map(|c| c.map(|c| c.headers))
    );

    // Sealed before binding (as a server of the previous version did): bound at the next start.
    let legacy_headers = key.seal_unbound(br#"{"Authorization":"Bearer old"}"#);
    let legacy_secret = key.seal_unbound(&[7u8; 32]);
    sqlx::query(
        "UPDATE webhook_endpoints SET secret = $2, headers = $3, bound = false WHERE id = $1",
    )
    .bind(partner.endpoint.id)
    .bind(&legacy_secret)
    .bind(&legacy_headers)
    .execute(&db.pool)
    .await
    .unwrap();
    assert!(
        for_call(&db.pool, Some(&key), "https://partner.example/hooks/x")
            .await
            .is_err(),
        "an unbound row signs nothing"
    );
    let (bound, failed) = endpoints.bind_sealed().await.unwrap();
    assert_eq!((bound, failed.len()), (1, 0), "{failed:?}");
    let call = for_call(&db.pool, Some(&key), "https://partner.example/hooks/x")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(call.headers["Authorization"], "Bearer old");
    assert_eq!(call.keys, [vec![7u8; 32]]);

    // Once: an old unbound value pasted into a row later (from a dump, say) is never opened.
    sqlx::query(
        "UPDATE webhook_endpoints SET secret = $2, headers = $3, bound = false WHERE id = $1",
    )
    .bind(mine.endpoint.id)
    .bind(&legacy_secret)
    .bind(&legacy_headers)
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(endpoints.bind_sealed().await.unwrap(), (0, Vec::new()));
    assert!(for_call(&db.pool, Some(&key), "https://attacker.example/x")
        .await
        .is_err());
}
