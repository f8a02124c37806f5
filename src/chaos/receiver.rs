//! The loopback endpoint the chaos suite's webhook jobs call: it counts deliveries per job. The
//! history checker's receiver is also unreliable, as partners are: by the job's id, a first
//! attempt is answered 500, or 429 with `Retry-After: 1`, or 500 with the request's headers
//! echoed back (a careless partner: [`echoes`]), or only after 300 ms; and a first attempt whose
//! body asks for it (`"no_retry": true`) 422 with `kickoff-no-retry: true`, as a worker in
//! another language refuses what no retry can help (docs/workers.md).
//!
//! It is also a partner's result API (`GET /result/{game}`, what a game's `poll` step asks):
//! `{"final": false}` until [`FINAL_AFTER`] after the game's first call, then `{"final": true,
//! "answers": {}}`, noting when it first answered so ([`Deliveries::finals`]).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};

/// One call received: the attempt number it carried, and when.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    pub attempt: i32,
    pub at: DateTime<Utc>,
    /// Answered with `kickoff-no-retry: true`: the job is to fail for good at once.
    pub for_good: bool,
}

/// Deliveries per job id, and the result API's games: its first call, and when it first
/// answered final.
#[derive(Clone, Default)]
pub struct Deliveries(Arc<Mutex<HashMap<i64, Vec<Delivery>>>>, Arc<Mutex<Games>>);

/// The result API's games by name: its first call, and when it first answered final.
type Games = HashMap<String, (DateTime<Utc>, Option<DateTime<Utc>>)>;

/// How long after a game's first call the result API answers final.
pub const FINAL_AFTER: chrono::Duration = chrono::Duration::milliseconds(1500);

#[derive(Clone)]
struct Receiver {
    deliveries: Deliveries,
    unreliable: bool,
}

impl Deliveries {
    pub fn snapshot(&self) -> HashMap<i64, Vec<Delivery>> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// When the result API first answered each game's result final (noted before the answer
    /// left).
    pub fn finals(&self) -> BTreeMap<String, DateTime<Utc>> {
        self.1
            .lock()
            .map(|m| {
                m.iter()
                    .filter_map(|(game, (_, at))| Some((game.clone(), (*at)?)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

async fn result(State(r): State<Receiver>, Path(game): Path<String>) -> Response {
    let now = Utc::now();
    let Ok(mut games) = r.deliveries.1.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let (first, answered) = games.entry(game).or_insert((now, None));
    if now - *first < FINAL_AFTER {
        return Json(serde_json::json!({ "final": false })).into_response();
    }
    answered.get_or_insert(now);
    Json(serde_json::json!({ "final": true, "answers": {} })).into_response()
}

async fn receive(
    State(r): State<Receiver>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let d = r.deliveries;
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i64>().ok())
    };
    let (id, attempt) = (number("x-kickoff-job-id"), number("x-kickoff-attempt"));
    let asks_no_retry = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|b| b.get("no_retry")?.as_bool())
        .unwrap_or(false);
    let for_good = r.unreliable && asks_no_retry && attempt == Some(1);
    if let (Some(id), Ok(mut m)) = (id, d.0.lock()) {
        m.entry(id).or_default().push(Delivery {
            attempt: attempt.unwrap_or(0) as i32,
            at: Utc::now(),
            for_good,
        });
    }
    if for_good {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            [(HeaderName::from_static("kickoff-no-retry"), "true")],
            "not a task of mine",
        )
            .into_response();
    }
    match (r.unreliable, id, attempt) {
        (true, Some(id), Some(1)) if id % 7 == 0 => {
            (StatusCode::INTERNAL_SERVER_ERROR, "not now").into_response()
        }
        (true, Some(id), Some(1)) if echoes(id) => echo(&headers),
        (true, Some(id), Some(1)) if id % 7 == 3 => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            "slow down",
        )
            .into_response(),
        (true, Some(id), _) if id % 7 == 5 => {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            "ok".into_response()
        }
        _ => "ok".into_response(),
    }
}

/// Whether the unreliable receiver answers the first attempt of job `id` as a careless partner
/// does: 500, with every header of the request in the body and again as `x-echo-<name>` headers.
/// Whatever the job sent (its `Authorization`) is then in its delivery record, and who may read
/// that is Kickoff's to decide. Two ids in seven, so that some of a history's few jobs with
/// planted secrets meet it.
pub fn echoes(id: i64) -> bool {
    matches!(id % 7, 2 | 6)
}

fn echo(headers: &HeaderMap) -> Response {
    // By name: the delivery record keeps the first 500 characters of a body, and `authorization`
    // sorts near the start, ahead of Kickoff's long signature headers.
    let sent: BTreeMap<&str, &str> = headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let mut answer = (StatusCode::INTERNAL_SERVER_ERROR, Json(&sent)).into_response();
    for (name, value) in headers {
        if let Ok(echoed) = HeaderName::try_from(format!("x-echo-{name}")) {
            answer.headers_mut().append(echoed, value.clone());
        }
    }
    answer
}

/// Serves on a free loopback port until the runtime ends; returns its address and the counts.
pub async fn start() -> Result<(SocketAddr, Deliveries), String> {
    serve(false).await
}

/// [`start`], answering some first attempts with 500 (some echoing the request's headers) or 429,
/// and some calls slowly.
pub async fn start_unreliable() -> Result<(SocketAddr, Deliveries), String> {
    serve(true).await
}

async fn serve(unreliable: bool) -> Result<(SocketAddr, Deliveries), String> {
    let deliveries = Deliveries::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let app = Router::new()
        .route("/hook", post(receive))
        .route("/result/{game}", get(result))
        .with_state(Receiver {
            deliveries: deliveries.clone(),
            unreliable,
        });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, deliveries))
}
