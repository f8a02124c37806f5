//! The server's side of the dashboard's port (`kickoff_app::console::Console`): turns the engine's
//! and the questions' answers into the UI's DTOs, and the operator's input into engine calls.
//!
//! One module an area, each implementing that area's trait for [`ServerConsole`]; this one holds
//! what they share: the context, the role check, the audit wrapper every action runs in, and the
//! mapping of the services' errors to refusals.

mod accounts;
mod audit;
mod jobs;
mod overview;
mod questions;
mod queues;

use chrono::{DateTime, Utc};
use kickoff_app::console::Refusal;
use leptos::prelude::use_context;
use serde_json::Value;

use crate::accounts::{AccountError, Accounts, LoginError, Role, SetupError};
use crate::audit::{AuditEntry, Auditor};
use crate::engine::store::jobs::db_now;
use crate::engine::{Client, ClientError};
use crate::http::session::Operator;
use crate::questions::{QuestionError, QuestionService};

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
        .ok_or_else(|| Refusal {
            status: 401,
            message: "sign in first".into(),
        })?;
    if !op.may(need) {
        return Err(Refusal {
            status: 403,
            message: format!(
                "signed in as a {}: only an {} or admin may do this",
                op.user.role.as_str(),
                need.as_str()
            ),
        });
    }
    Ok(op)
}

impl ServerConsole {
    pub fn new(
        client: Client,
        questions: QuestionService,
        accounts: Accounts,
        auditor: Auditor,
    ) -> Self {
        ServerConsole {
            client,
            questions,
            accounts,
            auditor,
        }
    }

    /// Runs an operator's action (after checking the role) and records it, with its result and
    /// (for bulk actions) how many jobs it changed, in the audit log.
    async fn act<T>(
        &self,
        act: Act,
        count: fn(&T) -> Option<i64>,
        run: impl std::future::Future<Output = Result<T, Refusal>>,
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
        run: impl std::future::Future<Output = Result<T, Refusal>>,
    ) -> Result<T, Refusal> {
        let op = operator(need)?;
        let result = run.await;
        let changed = result.as_ref().ok().and_then(count);
        self.record(&op, &act.action, act.target, act.filter, changed, &result)
            .await;
        result
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
                actor: op.user.name.clone(),
                role: op.user.role.as_str().to_string(),
                action: action.to_string(),
                target,
                filter,
                count,
                address: Some(op.address),
                result: result.as_ref().map(|_| ()).map_err(|r| r.message.clone()),
            })
            .await;
    }

    async fn now_ms(&self) -> Result<i64, Refusal> {
        db_now(self.client.pool())
            .await
            .map(|t| t.timestamp_millis())
            .map_err(unavailable)
    }
}

/// Logs the cause and gives the browser a message without internals.
fn unavailable(e: impl std::fmt::Display) -> Refusal {
    tracing::error!(error = %e, "dashboard query failed");
    Refusal::unavailable()
}

/// An operator's request refused: say why (a conflict, a missing job, bad input are the operator's
/// to know) with the matching status; a database failure is logged and summarised.
fn refused(e: ClientError) -> Refusal {
    match e {
        ClientError::Database(e) => unavailable(e),
        ClientError::NotFound(_) => Refusal::not_found(e.to_string()),
        ClientError::Conflict(_) => Refusal::conflict(e.to_string()),
        ClientError::Invalid { .. } | ClientError::UnknownKind(_) => {
            Refusal::invalid(e.to_string())
        }
    }
}

/// A refused sign-in (or password check): 401 for wrong credentials, 429 with `Retry-After` for a
/// lock.
fn login_refused(e: LoginError) -> Refusal {
    match e {
        LoginError::BadCredentials => Refusal {
            status: 401,
            message: "wrong name or password".into(),
        },
        LoginError::Locked { retry_after_secs } => {
            if let Some(res) = use_context::<leptos_axum::ResponseOptions>() {
                res.insert_header(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from(retry_after_secs),
                );
            }
            Refusal {
                status: 429,
                message: format!(
                    "too many failed sign-ins: try again in {} min",
                    retry_after_secs.div_ceil(60).max(1)
                ),
            }
        }
        LoginError::Invalid(message) => Refusal::invalid(message),
        LoginError::Database(e) => unavailable(e),
    }
}

/// An account change refused: the rule broken (422), a name taken or the last admin (409), a
/// missing user or token (404).
fn account_refused(e: AccountError) -> Refusal {
    match e {
        AccountError::Database(e) => unavailable(e),
        AccountError::NotFound(_) => Refusal::not_found(e.to_string()),
        AccountError::NameTaken(_) | AccountError::Conflict(_) => Refusal::conflict(e.to_string()),
        AccountError::Invalid { .. } => Refusal::invalid(e.to_string()),
    }
}

/// A refused setup link: one 404 for a missing, wrong or spent code and a database with users
/// (worded like any unknown page), the sign-in lock, or the name and password rules.
fn setup_refused(e: SetupError) -> Refusal {
    match e {
        SetupError::NotFound => Refusal::not_found("Page not found."),
        SetupError::Locked { retry_after_secs } => {
            login_refused(LoginError::Locked { retry_after_secs })
        }
        SetupError::Account(e) => account_refused(e),
    }
}

fn question_refused(e: QuestionError) -> Refusal {
    match e {
        QuestionError::Database(e) => unavailable(e),
        QuestionError::Client(e) => refused(e),
        QuestionError::NotFound(_) => Refusal::not_found(e.to_string()),
        QuestionError::Conflict(_) | QuestionError::PredictionsClosed => {
            Refusal::conflict(e.to_string())
        }
        QuestionError::Invalid { .. } | QuestionError::UnknownChoice(_) => {
            Refusal::invalid(e.to_string())
        }
    }
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_ms(field: &str, ms: i64) -> Result<DateTime<Utc>, String> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| format!("{field}: out of range"))
}
