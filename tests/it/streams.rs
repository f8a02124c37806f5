//! The live-update streams (`/events`, `/api/v1/events`) against real PostgreSQL: a node serves
//! a bounded number at once, and a stream ends soon after what opened it ends (a sign-out, a
//! disabled account, a revoked token, a rotated bootstrap token).

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use futures_util::StreamExt;
use tower::ServiceExt;

use crate::common::dashboard::{server_fn_as, sign_in, PASSWORD, TOKEN};
use crate::common::{app_with_streams, test_db};
use kickoff::accounts::{Accounts, Role, TokenScope};
use kickoff::http::state::StreamLimits;

const LIMITS: StreamLimits = StreamLimits {
    max_open: 2,
    recheck: Duration::from_millis(100),
};

/// An app with room for every stream a test opens, checking them often.
fn roomy(pool: &kickoff::engine::Db) -> Router {
    let limits = StreamLimits {
        max_open: 10,
        ..LIMITS
    };
    app_with_streams(pool, TOKEN, limits)
}

/// A viewer `reader` with a read token: the accounts, the token, and its text.
async fn reader_token(
    pool: &kickoff::engine::Db,
) -> (Accounts, kickoff::accounts::ApiToken, String) {
    let accounts = Accounts::new(pool.clone());
    let user = accounts
        .create("reader", PASSWORD, Role::Viewer)
        .await
        .unwrap();
    let (token, text) = accounts
        .create_token(&user, "dash", TokenScope::Read)
        .await
        .unwrap();
    (accounts, token, text)
}

/// Opens a stream with `auth` (a `Cookie` or an `Authorization` header); the response as it came.
async fn open(
    app: &Router,
    path: &str,
    auth: (header::HeaderName, String),
) -> axum::response::Response {
    let req = Request::get(path)
        .header(auth.0, auth.1)
        .body(Body::empty())
        .unwrap();
    app.clone().oneshot(req).await.unwrap()
}

/// Whether the stream's body ends within `within` (keep-alive comments aside).
async fn ends_within(res: axum::response::Response, within: Duration) -> bool {
    let mut body = res.into_body().into_data_stream();
    tokio::time::timeout(within, async {
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn a_node_serves_a_bounded_number_of_streams() {
    let db = test_db().await;
    let app = app_with_streams(&db.pool, TOKEN, LIMITS);
    let bearer = (header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    let first = open(&app, "/api/v1/events", bearer.clone()).await;
    let second = open(&app, "/api/v1/events", bearer.clone()).await;
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::OK, StatusCode::OK)
    );
    let third = open(&app, "/api/v1/events", bearer.clone()).await;
    assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(third.headers()[header::RETRY_AFTER], "1");
    let body = axum::body::to_bytes(third.into_body(), 4096).await.unwrap();
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["error"]["code"], "busy", "{error}");
    // A stream that closes gives its place back.
    drop(first);
    let again = open(&app, "/api/v1/events", bearer).await;
    assert_eq!(again.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_dashboard_stream_ends_with_its_session() {
    let db = test_db().await;
    let app = roomy(&db.pool);
    let accounts = Accounts::new(db.pool.clone());
    let user = accounts
        .create("ops", PASSWORD, Role::Operator)
        .await
        .unwrap();

    // Signed out: the stream opened before ends.
    let (cookie, csrf) = sign_in(&app, "ops", PASSWORD, None).await;
    let live = open(&app, "/events", (header::COOKIE, cookie.clone())).await;
    assert_eq!(live.status(), StatusCode::OK);
    let (status, _) = server_fn_as(&app, &cookie, &csrf, "logout", "").await;
    assert!(status.is_success() || status.is_redirection(), "{status}");
    assert!(
        ends_within(live, Duration::from_secs(3)).await,
        "the stream outlived the sign-out"
    );

    // A password changed elsewhere, then the account disabled: each ends the stream.
    let (cookie, _) = sign_in(&app, "ops", PASSWORD, None).await;
    let live = open(&app, "/events", (header::COOKIE, cookie)).await;
    accounts
        .set_password(user.id, "another horse battery")
        .await
        .unwrap();
    assert!(
        ends_within(live, Duration::from_secs(3)).await,
        "the stream outlived the password"
    );
    let (cookie, _) = sign_in(&app, "ops", "another horse battery", None).await;
    let live = open(&app, "/events", (header::COOKIE, cookie)).await;
    // Still signed in: the stream goes on.
    let kept = open(
        &app,
        "/events",
        (
            header::COOKIE,
            sign_in(&app, "ops", "another horse battery", None).await.0,
        ),
    )
    .await;
    assert!(
        !ends_within(kept, Duration::from_millis(600)).await,
        "a valid session's stream ended"
    );
    accounts.set_disabled(user.id, true).await.unwrap();
    assert!(
        ends_within(live, Duration::from_secs(3)).await,
        "the stream outlived the account"
    );
}

/// An application's sign-in whose callers (header `x-game-user`) are signed in while their name is
/// in the set.
struct SignedInSet(std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>);

impl kickoff::http::app_auth::Authenticate for SignedInSet {
    fn caller<'a>(
        &'a self,
        request: &'a axum::http::request::Parts,
    ) -> kickoff::engine::BoxFuture<'a, Option<kickoff::http::app_auth::Caller>> {
        Box::pin(async move {
            let name = request.headers.get("x-game-user")?.to_str().ok()?;
            self.0
                .lock()
                .unwrap()
                .contains(name)
                .then(|| kickoff::http::app_auth::Caller {
                    name: name.to_string(),
                    role: Role::Viewer,
                })
        })
    }
}

#[tokio::test]
async fn a_stream_of_the_applications_caller_ends_when_the_application_signs_them_out() {
    let db = test_db().await;
    let signed_in = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::from([
        "alice".to_string(),
    ])));
    let app = crate::common::app_changed(&db.pool, TOKEN, |s| {
        s.with_stream_limits(StreamLimits {
            max_open: 10,
            ..LIMITS
        })
        .with_app_auth(
            std::sync::Arc::new(SignedInSet(signed_in.clone())),
            std::sync::Arc::new(kickoff::webhooks::SecretKey::generate().0),
        )
    });
    let name = header::HeaderName::from_static("x-game-user");
    let live = open(&app, "/events", (name.clone(), "alice".into())).await;
    assert_eq!(live.status(), StatusCode::OK);
    assert!(
        !ends_within(live, Duration::from_millis(600)).await,
        "a signed-in caller's stream ended"
    );
    let live = open(&app, "/events", (name.clone(), "alice".into())).await;
    signed_in.lock().unwrap().clear();
    assert!(
        ends_within(live, Duration::from_secs(3)).await,
        "the stream outlived the application's sign-out"
    );
    let refused = open(&app, "/events", (name, "alice".into())).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_api_stream_ends_when_its_token_is_revoked() {
    let db = test_db().await;
    let app = roomy(&db.pool);
    let (accounts, token, text) = reader_token(&db.pool).await;
    let live = open(
        &app,
        "/api/v1/events",
        (header::AUTHORIZATION, format!("Bearer {text}")),
    )
    .await;
    assert_eq!(live.status(), StatusCode::OK);
    accounts.revoke_token(token.id).await.unwrap();
    assert!(
        ends_within(live, Duration::from_secs(3)).await,
        "the stream outlived its token"
    );
}

#[tokio::test]
async fn a_stream_outlives_a_recheck_the_database_cannot_answer() {
    let db = test_db().await;
    let app = roomy(&db.pool);
    let (accounts, token, text) = reader_token(&db.pool).await;
    let live = open(
        &app,
        "/api/v1/events",
        (header::AUTHORIZATION, format!("Bearer {text}")),
    )
    .await;
    assert_eq!(live.status(), StatusCode::OK);
    // Read as a client does, all along: the stream rechecks only while it is read.
    let reading = tokio::spawn(ends_within(live, Duration::from_secs(60)));
    // For a few rechecks the tokens cannot be read (as in an outage): the stream carries on.
    sqlx::query("ALTER TABLE api_tokens RENAME TO api_tokens_away")
        .execute(&db.pool)
        .await
        .unwrap();
    tokio::time::sleep(LIMITS.recheck * 4).await;
    sqlx::query("ALTER TABLE api_tokens_away RENAME TO api_tokens")
        .execute(&db.pool)
        .await
        .unwrap();
    tokio::time::sleep(LIMITS.recheck * 3).await;
    assert!(
        !reading.is_finished(),
        "an unanswered recheck ended the stream"
    );
    // It still ends when the token does.
    accounts.revoke_token(token.id).await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(3), reading).await;
    assert!(
        matches!(ended, Ok(Ok(true))),
        "the stream outlived its token"
    );
}

#[tokio::test]
async fn one_account_cannot_take_every_stream_of_a_node() {
    use kickoff::http::sse::MAX_STREAMS_PER_HOLDER;
    let db = test_db().await;
    let app = app_with_streams(
        &db.pool,
        TOKEN,
        StreamLimits {
            max_open: MAX_STREAMS_PER_HOLDER + 5,
            ..LIMITS
        },
    );
    let (_, _, text) = reader_token(&db.pool).await;
    let mine = (header::AUTHORIZATION, format!("Bearer {text}"));
    let mut held = Vec::new();
    for _ in 0..MAX_STREAMS_PER_HOLDER {
        let res = open(&app, "/api/v1/events", mine.clone()).await;
        assert_eq!(res.status(), StatusCode::OK);
        held.push(res);
    }
    let over = open(&app, "/api/v1/events", mine.clone()).await;
    assert_eq!(over.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = axum::body::to_bytes(over.into_body(), 4096).await.unwrap();
    assert!(String::from_utf8_lossy(&body).contains("of this account"));
    // The node has room left for others.
    let other = (header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    assert_eq!(
        open(&app, "/api/v1/events", other).await.status(),
        StatusCode::OK
    );
    // A stream that closes gives the account its place back.
    drop(held.pop());
    assert_eq!(
        open(&app, "/api/v1/events", mine).await.status(),
        StatusCode::OK
    );
}
