//! `/api/v1/webhook-deliveries`: the delivery record of webhook calls (see
//! `crate::webhooks::deliveries`), newest first, searchable by status code and job. Anyone signed
//! in reads it (as they read the jobs and their errors); it never holds a request header, and the
//! answer to a call that carried its endpoint's default headers is shown only to admins and the
//! job's creator.

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::ApiQuery;
use super::state::AppState;
use crate::webhooks::deliveries::{DeliveryRow, DeliverySearch, StatusFilter, MAX_PAGE};

#[derive(schemars::JsonSchema, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryParams {
    /// A status code (`500`), a class (`5xx`), or `none` for the calls that got no answer (a
    /// time-out, a refused connection, a refusal before the call); blank: any.
    #[schemars(regex(pattern = r"^\s*$|^\s*([1-9][0-9]{2}|[1-9][xX]{2}|[nN][oO][nN][eE])\s*$"))]
    pub status: Option<String>,
    /// Only this job's calls.
    #[schemars(range(min = 1))]
    pub job_id: Option<i64>,
    /// Keyset cursor: calls with a smaller id.
    pub before: Option<i64>,
    /// 1 to 500, default 50.
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<i64>,
}

#[derive(schemars::JsonSchema, Serialize)]
pub struct DeliveryPage {
    pub deliveries: Vec<DeliveryRow>,
    /// Pass as `before` for the next page; absent on the last page.
    pub next_before: Option<i64>,
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
    ApiQuery(params): ApiQuery<DeliveryParams>,
) -> Result<Json<DeliveryPage>, AppError> {
    let status = params
        .status
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse::<StatusFilter>)
        .transpose()
        .map_err(AppError::invalid)?;
    let limit = params.limit.unwrap_or(50);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(AppError::invalid(format!("limit: 1 to {MAX_PAGE}")));
    }
    let search = DeliverySearch {
        status,
        job_id: params.job_id,
        before: params.before,
        limit,
    };
    let found = state.endpoints.deliveries(&search).await?;
    let next_before = (found.len() as i64 == limit)
        .then(|| found.last().map(|d| d.id))
        .flatten();
    let sight = super::api_jobs::sight(&caller, state.client.workers());
    Ok(Json(DeliveryPage {
        deliveries: DeliveryRow::all_as_seen_by(found, &sight),
        next_before,
    }))
}
