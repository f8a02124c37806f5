//! The loopback endpoint the chaos suite's webhook jobs call: it counts deliveries per job.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use chrono::{DateTime, Utc};

/// One call received: the attempt number it carried, and when.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    pub attempt: i32,
    pub at: DateTime<Utc>,
}

/// Deliveries per job id.
#[derive(Clone, Default)]
pub struct Deliveries(Arc<Mutex<HashMap<i64, Vec<Delivery>>>>);

impl Deliveries {
    pub fn snapshot(&self) -> HashMap<i64, Vec<Delivery>> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

async fn receive(State(d): State<Deliveries>, headers: HeaderMap) -> &'static str {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i64>().ok())
    };
    let (id, attempt) = (number("x-kickoff-job-id"), number("x-kickoff-attempt"));
    if let (Some(id), Ok(mut m)) = (id, d.0.lock()) {
        m.entry(id).or_default().push(Delivery {
            attempt: attempt.unwrap_or(0) as i32,
            at: Utc::now(),
        });
    }
    "ok"
}

/// Serves on a free loopback port until the runtime ends; returns its address and the counts.
pub async fn start() -> Result<(SocketAddr, Deliveries), String> {
    let deliveries = Deliveries::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(deliveries.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, deliveries))
}
