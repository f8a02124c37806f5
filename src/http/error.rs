//! The one HTTP error type: a status, a stable code and a message, as
//! `{"error": {"code": ..., "message": ...}}`. Internal errors are logged and answered with a short
//! message that leaks nothing.
//!
//! The dashboard's refusals come out of the same table (`From<AppError> for Refusal`): the REST
//! API and the dashboard answer an error of the engine, the questions or the accounts with the
//! same status and message.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kickoff_app::console::Refusal;
use serde_json::json;

use crate::accounts::{AccountError, LoginError, SetupError};
use crate::engine::{is_transient, ClientError};

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("a valid bearer token is required")]
    Unauthorized,
    /// A partner's call to us whose Standard Webhooks signature does not hold (the words say
    /// which header and rule).
    #[error("{0}")]
    Unsigned(String),
    /// A dashboard sign-in with an unknown name, a wrong password or a disabled account:
    /// deliberately one answer.
    #[error("wrong name or password")]
    BadCredentials,
    /// Authenticated, but the token's scope or its owner's role does not allow this.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("the request body is larger than the limit")]
    PayloadTooLarge,
    /// The body did not arrive within the listener's deadline.
    #[error("the request body arrived too slowly")]
    RequestTimeout,
    #[error("send the body as JSON with `Content-Type: application/json`")]
    UnsupportedMediaType,
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    /// Too many failed attempts: try again after `retry_after_secs` (also a `Retry-After` header).
    #[error("{message}")]
    TooManyRequests {
        message: String,
        retry_after_secs: u64,
    },
    #[error("the server is busy or its database is unreachable; try again")]
    Unavailable,
    /// An action undone because its audit entry could not be written.
    #[error(transparent)]
    NotRecorded(#[from] crate::audit::NotRecorded),
    /// A limit of this node is reached (connections, streams): 503 with `Retry-After`.
    #[error("{0}")]
    Busy(String),
    #[error("internal error")]
    Internal(String),
}

impl AppError {
    pub fn status_code(&self) -> StatusCode {
        match self {
            AppError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            AppError::Unauthorized | AppError::BadCredentials | AppError::Unsigned(_) => {
                StatusCode::UNAUTHORIZED
            }
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::Conflict { .. } => StatusCode::CONFLICT,
            AppError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            AppError::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            AppError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            AppError::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            AppError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            AppError::Unavailable | AppError::Busy(_) | AppError::NotRecorded(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            AppError::BadRequest { code, .. }
            | AppError::Unprocessable { code, .. }
            | AppError::Conflict { code, .. } => code,
            AppError::Unauthorized => "unauthorized",
            AppError::Unsigned(_) => "unsigned",
            AppError::BadCredentials => "bad_credentials",
            AppError::Forbidden(_) => "forbidden",
            AppError::NotFound(_) => "not_found",
            AppError::PayloadTooLarge => "payload_too_large",
            AppError::RequestTimeout => "request_timeout",
            AppError::UnsupportedMediaType => "unsupported_media_type",
            AppError::TooManyRequests { .. } => "too_many_requests",
            AppError::Unavailable => "unavailable",
            AppError::Busy(_) => "busy",
            AppError::NotRecorded(_) => "not_recorded",
            AppError::Internal(_) => "internal",
        }
    }

    /// When the client may try again, in seconds (the `Retry-After` header).
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            AppError::TooManyRequests {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            AppError::Busy(_) => Some(1),
            _ => None,
        }
    }

    /// Logs what the answer leaves out: an internal error's detail.
    fn log(&self) {
        if let AppError::Internal(detail) = self {
            tracing::error!(%detail, "internal error");
        }
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        AppError::Conflict {
            code: "conflict",
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        AppError::Unprocessable {
            code: "invalid",
            message: message.into(),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        self.log();
        let body = json!({ "error": { "code": self.code(), "message": self.to_string() } });
        let mut res = (self.status_code(), Json(body)).into_response();
        if matches!(self, AppError::Unauthorized) {
            res.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        if let Some(secs) = self.retry_after_secs() {
            res.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(secs),
            );
        }
        res
    }
}

/// The dashboard's answer to the same error: the status, message and `Retry-After` the REST API
/// would give it.
impl From<AppError> for Refusal {
    fn from(e: AppError) -> Self {
        e.log();
        Refusal {
            status: e.status_code().as_u16(),
            message: e.to_string(),
            retry_after_secs: e.retry_after_secs(),
        }
    }
}

impl From<crate::audit::NotRecorded> for Refusal {
    fn from(e: crate::audit::NotRecorded) -> Self {
        AppError::from(e).into()
    }
}

impl From<ClientError> for AppError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Invalid { .. } => AppError::invalid(e.to_string()),
            ClientError::UnknownKind(_) => AppError::Unprocessable {
                code: "unknown_kind",
                message: e.to_string(),
            },
            ClientError::ArgsRefused(_) => AppError::Unprocessable {
                code: "args_refused",
                message: e.to_string(),
            },
            ClientError::OutOfWindow { .. } => AppError::Unprocessable {
                code: "out_of_window",
                message: e.to_string(),
            },
            ClientError::Inconsistent { .. } => AppError::Unprocessable {
                code: "inconsistent",
                message: e.to_string(),
            },
            ClientError::NotFound(what) => AppError::NotFound(format!("{what} not found")),
            ClientError::Conflict(m) => AppError::conflict(m),
            ClientError::Forbidden(m) => AppError::Forbidden(m),
            ClientError::Database(e) => e.into(),
        }
    }
}

/// A change to the accounts refused: the rule broken (422), a name taken or the last admin (409), a
/// missing user or token (404).
impl From<AccountError> for AppError {
    fn from(e: AccountError) -> Self {
        match e {
            AccountError::Invalid { .. } => AppError::invalid(e.to_string()),
            AccountError::NameTaken(_) | AccountError::Conflict(_) => {
                AppError::conflict(e.to_string())
            }
            AccountError::NotFound(_) => AppError::NotFound(e.to_string()),
            AccountError::Database(e) => e.into(),
        }
    }
}

/// A refused sign-in (or password check): 401 for wrong credentials, 429 for a lock.
impl From<LoginError> for AppError {
    fn from(e: LoginError) -> Self {
        match e {
            LoginError::BadCredentials => AppError::BadCredentials,
            LoginError::Locked {
                retry_after_secs, ..
            } => AppError::TooManyRequests {
                message: format!(
                    "too many failed sign-ins: try again in {} min",
                    retry_after_secs.div_ceil(60).max(1)
                ),
                retry_after_secs,
            },
            LoginError::RateLimited { retry_after_secs } => AppError::TooManyRequests {
                message: format!(
                    "too many sign-in attempts from this address: try again in {retry_after_secs} s"
                ),
                retry_after_secs,
            },
            LoginError::Invalid(message) => AppError::invalid(message),
            LoginError::Database(e) => e.into(),
        }
    }
}

/// A refused setup link: one 404 for a missing, wrong or spent code and a database with users
/// (worded like any unknown page), the sign-in lock, or the name and password rules.
impl From<SetupError> for AppError {
    fn from(e: SetupError) -> Self {
        match e {
            SetupError::NotFound => AppError::NotFound("Page not found.".into()),
            SetupError::Locked {
                retry_after_secs,
                unchecked,
            } => LoginError::Locked {
                retry_after_secs,
                unchecked,
            }
            .into(),
            SetupError::RateLimited { retry_after_secs } => {
                LoginError::RateLimited { retry_after_secs }.into()
            }
            SetupError::Account(e) => e.into(),
        }
    }
}

impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> Self {
        let code = match &e {
            sqlx::Error::Database(db) => db.code(),
            _ => None,
        };
        match code.as_deref() {
            Some("23505") => AppError::conflict("a record with the same key already exists"),
            // check_violation, not_null, foreign key, invalid text: input the checks let through.
            Some("23514") | Some("23502") | Some("23503") | Some("22P02") | Some("22007")
            | Some("22008") | Some("22021") | Some("22P05") | Some("22001") => {
                let message = e
                    .as_database_error()
                    .map(|db| db.message())
                    .unwrap_or_default();
                AppError::invalid(format!("rejected by the database: {message}"))
            }
            // A lost race (deadlock, serialization failure) or an outage (a read-only standby
            // after a failover, a server shutting down, a lost connection, too many connections,
            // the pool closing): nothing was written; the client may send it again.
            _ if is_transient(&e) || matches!(e, sqlx::Error::PoolClosed) => {
                tracing::warn!(error = %e, "database unavailable");
                AppError::Unavailable
            }
            _ => AppError::Internal(e.to_string()),
        }
    }
}

impl From<JsonRejection> for AppError {
    fn from(r: JsonRejection) -> Self {
        match r {
            JsonRejection::JsonSyntaxError(e) => AppError::BadRequest {
                code: "malformed_json",
                message: format!("the body is not valid JSON: {}", e.body_text()),
            },
            JsonRejection::JsonDataError(e) => AppError::invalid(e.body_text()),
            JsonRejection::MissingJsonContentType(_) => AppError::UnsupportedMediaType,
            other if super::listener::body_timed_out(&other) => AppError::RequestTimeout,
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => AppError::PayloadTooLarge,
            other => AppError::BadRequest {
                code: "bad_body",
                message: other.body_text(),
            },
        }
    }
}

impl From<QueryRejection> for AppError {
    fn from(r: QueryRejection) -> Self {
        AppError::BadRequest {
            code: "bad_query",
            message: r.body_text(),
        }
    }
}

impl From<crate::webhooks::EndpointError> for AppError {
    fn from(e: crate::webhooks::EndpointError) -> Self {
        use crate::webhooks::EndpointError;
        match e {
            EndpointError::Invalid(m) => AppError::invalid(m),
            EndpointError::Inconsistent(m) => AppError::Unprocessable {
                code: "inconsistent",
                message: m,
            },
            EndpointError::BadUrl(m) => AppError::Unprocessable {
                code: "invalid_url",
                message: m,
            },
            EndpointError::NotFound(_) => AppError::NotFound(e.to_string()),
            EndpointError::Taken(_) => AppError::Conflict {
                code: "taken",
                message: e.to_string(),
            },
            EndpointError::Unsigned(u) => AppError::Unsigned(u.to_string()),
            EndpointError::Database(e) => e.into(),
            EndpointError::OtherKey { .. } | EndpointError::Unsealing(_) => {
                AppError::Internal(e.to_string())
            }
        }
    }
}

impl From<crate::alerts::AlertError> for AppError {
    fn from(e: crate::alerts::AlertError) -> Self {
        use crate::alerts::AlertError;
        match e {
            AlertError::Invalid(m) => AppError::invalid(m),
            AlertError::NotifyRefused(_) => AppError::Unprocessable {
                code: "notify_url_refused",
                message: e.to_string(),
            },
            AlertError::NotFound(_) => AppError::NotFound(e.to_string()),
            AlertError::Conflict(m) => AppError::Conflict {
                code: "conflict",
                message: m,
            },
            AlertError::Database(e) => e.into(),
        }
    }
}

impl From<PathRejection> for AppError {
    fn from(r: PathRejection) -> Self {
        AppError::NotFound(r.body_text())
    }
}
