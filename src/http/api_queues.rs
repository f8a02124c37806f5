//! `/api/v1/queues` and `/api/v1/stats`.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::api_audit::{uncounted, Audit, Audited};
use super::error::AppError;
use super::extract::ApiJson;
use super::state::AppState;
use crate::engine::JobState;
use crate::engine::QueueRow;

#[derive(schemars::JsonSchema, Serialize)]
pub struct QueueView {
    #[serde(flatten)]
    pub queue: QueueRow,
    pub counts: BTreeMap<&'static str, i64>,
}

pub async fn list(State(state): State<AppState>) -> Result<Json<Vec<QueueView>>, AppError> {
    let rows = state.client.queues().await?;
    let counts = state.client.counts().await?;
    let mut views: Vec<QueueView> = rows
        .into_iter()
        .map(|queue| QueueView {
            queue,
            counts: zero_counts(),
        })
        .collect();
    for (queue, st, n) in counts {
        if let Some(v) = views.iter_mut().find(|v| v.queue.name == queue) {
            v.counts.insert(st.as_str(), n);
        }
    }
    Ok(Json(views))
}

fn zero_counts() -> BTreeMap<&'static str, i64> {
    JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect()
}

pub async fn pause(
    State(state): State<AppState>,
    audit: Audit,
    Path(name): Path<String>,
) -> Result<Audited<Json<QueueRow>>, AppError> {
    set_paused(&state, audit, &name, true).await
}

pub async fn resume(
    State(state): State<AppState>,
    audit: Audit,
    Path(name): Path<String>,
) -> Result<Audited<Json<QueueRow>>, AppError> {
    set_paused(&state, audit, &name, false).await
}

async fn set_paused(
    state: &AppState,
    audit: Audit,
    name: &str,
    paused: bool,
) -> Result<Audited<Json<QueueRow>>, AppError> {
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(
                state
                    .client
                    .set_queue_paused_with(conn, name, paused)
                    .await?,
            ))
        })
        .await
}

#[derive(schemars::JsonSchema, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuePatch {
    /// Per-node concurrency; `null` returns to each node's configured limit.
    pub concurrency: Option<i32>,
}

pub async fn update(
    State(state): State<AppState>,
    audit: Audit,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<QueuePatch>,
) -> Result<Audited<Json<QueueRow>>, AppError> {
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(
                state
                    .client
                    .set_queue_concurrency_with(conn, &name, body.concurrency)
                    .await?,
            ))
        })
        .await
}

#[derive(schemars::JsonSchema, Serialize)]
pub struct Stats {
    pub states: BTreeMap<&'static str, i64>,
    pub queues: BTreeMap<String, BTreeMap<&'static str, i64>>,
}

pub async fn stats(State(state): State<AppState>) -> Result<Json<Stats>, AppError> {
    let mut stats = Stats {
        states: zero_counts(),
        queues: BTreeMap::new(),
    };
    for (queue, st, n) in state.client.counts().await? {
        *stats.states.entry(st.as_str()).or_default() += n;
        stats
            .queues
            .entry(queue)
            .or_insert_with(zero_counts)
            .insert(st.as_str(), n);
    }
    Ok(Json(stats))
}
