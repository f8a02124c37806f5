//! The server's side of the dashboard's port (`kickoff_app::console::Console`): turns the engine's
//! and the questions' answers into the UI's DTOs, and the operator's input into engine calls.
//!
//! One module an area, each implementing that area's trait for [`ServerConsole`]; this one holds
//! what they share: the context, the role check and the audit wrapper every action runs in.
//!
//! An error of the engine, the questions or the accounts is refused through [`AppError`], by the
//! table the REST API answers with: the two agree on statuses and messages by construction.

mod accounts;
mod alerts;
mod audit;
mod history;
mod job_forms;
pub(crate) mod jobs;
mod overview;
mod questions;
mod queues;
mod schedules;
mod webhooks;
mod workflows;

use chrono::{DateTime, Utc};
use kickoff_app::console::Refusal;
use leptos::prelude::use_context;
use serde_json::Value;

use crate::accounts::{Accounts, Role};
use crate::audit::{AuditEntry, Auditor, Work};
use crate::engine::Client;
use crate::http::error::AppError;
use crate::http::session::Operator;
use crate::questions::QuestionService;

/// How many rows a dashboard list shows.
const LIST_ROWS: i64 = 100;

/// An operator's action as the audit log names it.
struct Act {
    /// `job.cancel`, `jobs.bulk_retry`, `queue.pause`, ...
    action: String,
    /// What it acts on: `job 42`, `queue default`, ...
    target: Option<String>,
    /// A bulk action's filter.
    filter: Option<Value>,
}

pub struct ServerConsole {
    client: Client,
    questions: QuestionService,
    accounts: Accounts,
    auditor: Auditor,
    endpoints: crate::webhooks::Endpoints,
    alerts: crate::alerts::Alerts,
    /// The lists', charts' and counts' reads (a standby, if one is set).
    reader: crate::http::reader::Reader,
}

/// The request being served (leptos_axum provides it to server functions and rendered pages).
fn request() -> Option<axum::http::request::Parts> {
    use_context::<axum::http::request::Parts>()
}

/// The signed-in operator of the request, if their role is at least `need`: 401 without one (the
/// session guard normally answered already), 403 for a role below.
fn operator(need: Role) -> Result<Operator, Refusal> {
    let op = request()
        .and_then(|p| p.extensions.get::<Operator>().cloned())
        // Not the REST API's 401, which asks for a bearer token.
        .ok_or_else(|| Refusal::new(401, "sign in first"))?;
    if !op.may(need) {
        return Err(AppError::Forbidden(format!(
            "signed in as a {}: only an {} or admin may do this",
            op.user.role.as_str(),
            need.as_str()
        ))
        .into());
    }
    Ok(op)
}

impl ServerConsole {
    /// The use cases every surface shares, over this console's services.
    fn operations(&self) -> crate::operations::Operations<'_> {
        crate::operations::Operations::new(&self.client, &self.questions, &self.auditor)
    }

    pub fn new(
        client: Client,
        questions: QuestionService,
        accounts: Accounts,
        auditor: Auditor,
        endpoints: crate::webhooks::Endpoints,
        alerts: crate::alerts::Alerts,
        reader: crate::http::reader::Reader,
    ) -> Self {
        ServerConsole {
            client,
            questions,
            accounts,
            auditor,
            endpoints,
            alerts,
            reader,
        }
    }

    /// Runs an operator's action (after checking the role) and records it, with its result and
    /// (for bulk actions) how many jobs it changed, in the audit log. The action's database
    /// change is made in its [`Work`] and commits with its entry, or not at all (see
    /// [`Auditor::run`]).
    async fn act<T>(
        &self,
        act: Act,
        count: fn(&T) -> Option<i64>,
        run: impl AsyncFnOnce(&mut Work) -> Result<T, Refusal>,
    ) -> Result<T, Refusal> {
        self.act_as(Role::Operator, act, count, run).await
    }

    /// [`Self::act`] for actions that need another role than operator (admins' user management,
    /// anyone's own tokens and password).
    async fn act_as<T>(
        &self,
        need: Role,
        act: Act,
        count: fn(&T) -> Option<i64>,
        run: impl AsyncFnOnce(&mut Work) -> Result<T, Refusal>,
    ) -> Result<T, Refusal> {
        let op = self
            .operator_for(need, &act.action, act.target.as_deref())
            .await?;
        let entry = entry(&op, &act.action, act.target.clone(), act.filter.clone());
        let result = self.auditor.run(entry, count, run).await;
        if result.is_err() {
            self.record(&op, &act.action, act.target, act.filter, None, &result)
                .await;
        }
        result
    }

    /// [`operator`], recording a signed-in user's refusal (a role below `need`) as an attempt of
    /// `action` on `target`.
    async fn operator_for(
        &self,
        need: Role,
        action: &str,
        target: Option<&str>,
    ) -> Result<Operator, Refusal> {
        let refusal = match operator(need) {
            Ok(op) => return Ok(op),
            Err(refusal) => refusal,
        };
        let signed_in = request().and_then(|p| p.extensions.get::<Operator>().cloned());
        if let Some(op) = signed_in {
            let refused: Result<(), Refusal> = Err(refusal.clone());
            self.record(&op, action, target.map(String::from), None, None, &refused)
                .await;
        }
        Err(refusal)
    }

    /// Records what an operator did (or tried) in the audit log.
    async fn record<T>(
        &self,
        op: &Operator,
        action: &str,
        target: Option<String>,
        filter: Option<Value>,
        count: Option<i64>,
        result: &Result<T, Refusal>,
    ) {
        self.auditor
            .record(AuditEntry {
                count,
                result: result.as_ref().map(|_| ()).map_err(|r| r.message.clone()),
                ..entry(op, action, target, filter)
            })
            .await;
    }

    async fn now_ms(&self) -> Result<i64, Refusal> {
        self.client
            .db_now()
            .await
            .map(|t| t.timestamp_millis())
            .map_err(refused)
    }
}

/// The entry of `op`'s `action` (a success; its count and result are filled in after).
fn entry(op: &Operator, action: &str, target: Option<String>, filter: Option<Value>) -> AuditEntry {
    AuditEntry {
        actor: op.user.name.clone(),
        role: op.user.role.as_str().to_string(),
        action: action.to_string(),
        target,
        filter,
        count: None,
        address: Some(op.address),
        result: Ok(()),
    }
}

/// The connection of an action's work, or the refusal of a database that cannot give one.
async fn conn(work: &mut Work) -> Result<&mut sqlx::PgConnection, Refusal> {
    work.conn().await.map_err(refused)
}

/// An error of a service the console calls, as the dashboard's refusal: through [`AppError`], so
/// with the status and message the REST API gives it.
fn refused(e: impl Into<AppError>) -> Refusal {
    e.into().into()
}

/// An engine refusal as the dashboard answers it: as the API would (its status and words).
impl From<crate::engine::ClientError> for Refusal {
    fn from(e: crate::engine::ClientError) -> Self {
        refused(e)
    }
}

/// A failure of the session store: logged, and answered like an unreachable database.
fn unavailable(e: impl std::fmt::Display) -> Refusal {
    tracing::error!(error = %e, "dashboard query failed");
    AppError::Unavailable.into()
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_ms(field: &str, ms: i64) -> Result<DateTime<Utc>, String> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| format!("{field}: out of range"))
}
