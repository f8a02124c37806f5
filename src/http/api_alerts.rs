//! `/api/v1/alert-rules` (admins make, list, enable or disable and delete the rules) and
//! `/api/v1/alerts` (everyone reads the incidents; operators acknowledge one). Every change is
//! audited by the rule's name or the incident's id; a rule's `notify_url` (a Slack URL is a
//! secret) is answered to admins only and never audited.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use super::api_audit::{uncounted, Audit, Audited};
use super::auth::ApiCaller;
use super::error::AppError;
use super::extract::{AlertIdPath, ApiJson, ApiQuery};
use super::state::AppState;
use crate::accounts::Role;
use crate::alerts::{IncidentRow, RuleRow, RuleSpec};

fn admin(caller: &ApiCaller) -> Result<(), AppError> {
    caller.must_be_admin("manage alert rules")
}

/// A rule switched on or off.
#[derive(schemars::JsonSchema, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulePatch {
    pub enabled: bool,
}

pub async fn list_rules(
    State(state): State<AppState>,
    Extension(caller): Extension<ApiCaller>,
) -> Result<Json<Vec<RuleRow>>, AppError> {
    admin(&caller)?;
    Ok(Json(state.alerts.rules().await?))
}

pub async fn create_rule(
    State(state): State<AppState>,
    audit: Audit,
    Extension(caller): Extension<ApiCaller>,
    ApiJson(spec): ApiJson<RuleSpec>,
) -> Result<(StatusCode, Audited<Json<RuleRow>>), AppError> {
    admin(&caller)?;
    let made = audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(
                state
                    .alerts
                    .create_rule_with(conn, spec, Some(&caller.actor))
                    .await?,
            ))
        })
        .await?;
    Ok((StatusCode::CREATED, made))
}

pub async fn update_rule(
    State(state): State<AppState>,
    audit: Audit,
    Extension(caller): Extension<ApiCaller>,
    AlertIdPath(id): AlertIdPath,
    ApiJson(patch): ApiJson<RulePatch>,
) -> Result<Audited<Json<RuleRow>>, AppError> {
    admin(&caller)?;
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(
                state
                    .alerts
                    .set_enabled_with(conn, id, patch.enabled)
                    .await?,
            ))
        })
        .await
}

pub async fn delete_rule(
    State(state): State<AppState>,
    audit: Audit,
    Extension(caller): Extension<ApiCaller>,
    AlertIdPath(id): AlertIdPath,
) -> Result<Audited<Json<RuleRow>>, AppError> {
    admin(&caller)?;
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(state.alerts.delete_rule_with(conn, id).await?))
        })
        .await
}

#[derive(schemars::JsonSchema, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct IncidentParams {
    /// `firing` (open incidents) or `resolved`; absent or blank: both.
    #[schemars(regex(pattern = r"^\s*$|^\s*(firing|resolved)\s*$"))]
    pub state: Option<String>,
    /// Keyset cursor: incidents with a smaller id.
    pub before: Option<i64>,
    /// 1 to 500, default 50.
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<i64>,
}

#[derive(schemars::JsonSchema, Serialize)]
pub struct IncidentPage {
    pub incidents: Vec<IncidentRow>,
    /// Pass as `before` for the next page; absent on the last page.
    pub next_before: Option<i64>,
}

pub async fn list_incidents(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<IncidentParams>,
) -> Result<Json<IncidentPage>, AppError> {
    let firing = match params.state.as_deref().map(str::trim) {
        None | Some("") => None,
        Some("firing") => Some(true),
        Some("resolved") => Some(false),
        Some(other) => {
            return Err(AppError::invalid(format!(
                "state: `{other}` is not firing or resolved"
            )))
        }
    };
    let limit = params.limit.unwrap_or(50);
    let incidents = state.alerts.incidents(firing, params.before, limit).await?;
    let next_before = (incidents.len() as i64 == limit)
        .then(|| incidents.last().map(|i| i.id))
        .flatten();
    Ok(Json(IncidentPage {
        incidents,
        next_before,
    }))
}

pub async fn acknowledge(
    State(state): State<AppState>,
    audit: Audit,
    Extension(caller): Extension<ApiCaller>,
    AlertIdPath(id): AlertIdPath,
) -> Result<Audited<Json<IncidentRow>>, AppError> {
    if caller.role < Role::Operator {
        return Err(AppError::Forbidden(format!(
            "{} is a viewer: operators and admins acknowledge alerts",
            caller.actor
        )));
    }
    audit
        .run(uncounted, async |work| {
            let conn = work.conn().await?;
            Ok(Json(
                state
                    .alerts
                    .acknowledge_with(conn, id, &caller.actor)
                    .await?,
            ))
        })
        .await
}
