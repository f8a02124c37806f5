//! `/api/v1/queues` and `/api/v1/stats`.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::api_audit::{uncounted, Audit, Audited};
use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::ApiJson;
use super::state::AppState;
use crate::engine::limits::{
    check_global, QueueLimits, GLOBAL_CONCURRENCY_MAX, GLOBAL_CONCURRENCY_MIN,
};
use crate::engine::QueueRow;
use crate::engine::{ClientError, JobState};

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

/// A change of some of a queue's settings; absent fields keep theirs, `null` removes one.
#[derive(schemars::JsonSchema, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::schema_rules::AtLeastOne(&[
    "concurrency", "rate", "per", "global_concurrency",
]))]
#[schemars(transform = crate::schema_rules::NotRemovedWith("per", "rate"))]
pub struct QueuePatch {
    /// Per-node concurrency, 1 to 10000; `null` returns to each node's configured one.
    #[serde(default, deserialize_with = "super::extract::present")]
    #[schemars(range(min = 1, max = 10000))]
    pub concurrency: Option<Option<i32>>,
    /// Attempts started per period across every node, as `N/period` (`100/s`, `5000/min`,
    /// `20/10s`; N 1 to 1000000, the period 1 ms to 1 day); `null` removes the rate. Jobs over it
    /// stay available and lose no attempt.
    #[serde(default, deserialize_with = "super::extract::present")]
    #[schemars(regex(pattern = crate::schema_rules::RATE_PATTERN))]
    #[schemars(extend("x-message" = "rate: write N/period, N 1 to 1000000 and the period at most a day, e.g. 100/s, 5000/min, 20/10s"))]
    pub rate: Option<Option<String>>,
    /// What the rate is counted by, each key getting all of it: `kind`, `host` (of a webhook's
    /// url) or `args.<field>` (1 to 64 of A-Z, a-z, 0-9, `_`, `-`); `null`: one count for the
    /// queue. Needs a rate: not with `rate` `null`; without `rate`, the queue's (else 422
    /// `inconsistent`).
    #[serde(default, deserialize_with = "super::extract::present")]
    #[schemars(regex(pattern = r"^(kind|host|args\.[A-Za-z0-9_-]{1,64})$"))]
    #[schemars(extend("x-message" = "per: kind, host or args.<field> (1 to 64 of A-Z, a-z, 0-9, `_`, `-`)"))]
    pub per: Option<Option<String>>,
    /// Attempts executing on all nodes together, 1 to 100000; `null` removes it.
    #[serde(default, deserialize_with = "super::extract::present")]
    #[schemars(range(min = GLOBAL_CONCURRENCY_MIN, max = GLOBAL_CONCURRENCY_MAX))]
    pub global_concurrency: Option<Option<i32>>,
}

impl QueuePatch {
    fn touches_limits(&self) -> bool {
        self.rate.is_some() || self.per.is_some() || self.global_concurrency.is_some()
    }

    /// `limits` with this patch applied.
    fn limits(&self, mut limits: QueueLimits) -> Result<QueueLimits, ClientError> {
        let invalid =
            |field: &'static str, message: String| ClientError::Invalid { field, message };
        if let Some(rate) = &self.rate {
            limits.rate = rate
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e| invalid("rate", e))?;
        }
        if let Some(per) = &self.per {
            limits.per = per
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e| invalid("per", e))?;
        }
        if let Some(global) = self.global_concurrency {
            limits.global = global
                .map(|g| check_global(i64::from(g)))
                .transpose()
                .map_err(|e| invalid("global_concurrency", e))?;
        }
        if limits.per.is_some() && limits.rate.is_none() {
            return Err(ClientError::Inconsistent {
                field: "per",
                message: "a partition needs a rate: give `rate` too".into(),
            });
        }
        Ok(limits)
    }
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
            let client = &state.client;
            let mut row = None;
            if let Some(concurrency) = body.concurrency {
                row = Some(
                    client
                        .set_queue_concurrency_with(&mut *conn, &name, concurrency)
                        .await?,
                );
            }
            if body.touches_limits() {
                let current = client.queue_with(&mut *conn, &name).await?;
                let limits = body.limits(current.map(|q| q.limits()).unwrap_or_default())?;
                row = Some(
                    client
                        .set_queue_limits_with(&mut *conn, &name, &limits)
                        .await?,
                );
            }
            match row {
                Some(row) => Ok(Json(row)),
                None => Err(ClientError::Invalid {
                    field: "body",
                    message: "name a setting to change: concurrency, rate, per, global_concurrency"
                        .into(),
                }
                .into()),
            }
        })
        .await
}

/// A job kind this server runs, and whether it is paused on every node.
#[derive(schemars::JsonSchema, Serialize)]
pub struct KindView {
    pub kind: String,
    pub paused: bool,
    pub paused_at: Option<chrono::DateTime<chrono::Utc>>,
    pub paused_by: Option<String>,
}

/// Every kind this server's workers run, and any other kind that is paused.
pub async fn kinds(State(state): State<AppState>) -> Result<Json<Vec<KindView>>, AppError> {
    let kinds = state.client.kinds_and_pauses().await?;
    Ok(Json(
        kinds
            .into_iter()
            .map(|(kind, pause)| KindView {
                kind,
                paused: pause.is_some(),
                paused_at: pause.as_ref().map(|p| p.paused_at),
                paused_by: pause.and_then(|p| p.paused_by),
            })
            .collect(),
    ))
}

/// Pauses a kind on every node: its jobs stay where they are until it is resumed.
pub async fn pause_kind(
    State(state): State<AppState>,
    audit: Audit,
    Extension(caller): Extension<ApiCaller>,
    Path(kind): Path<String>,
) -> Result<Audited<Json<KindView>>, AppError> {
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            let row = state
                .client
                .pause_kind_with(conn, &kind, Some(&caller.actor))
                .await
                .map_err(|e| match e {
                    // The path names no kind this server runs.
                    ClientError::UnknownKind(kind) => ClientError::NotFound(format!("kind {kind}")),
                    e => e,
                })?;
            Ok(Json(KindView {
                kind: row.kind,
                paused: true,
                paused_at: Some(row.paused_at),
                paused_by: row.paused_by,
            }))
        })
        .await
}

/// Resumes a paused kind on every node (resuming a kind that is not paused changes nothing).
pub async fn resume_kind(
    State(state): State<AppState>,
    audit: Audit,
    Path(kind): Path<String>,
) -> Result<Audited<Json<KindView>>, AppError> {
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            state.client.resume_kind_with(conn, &kind).await?;
            Ok(Json(KindView {
                kind,
                paused: false,
                paused_at: None,
                paused_by: None,
            }))
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
