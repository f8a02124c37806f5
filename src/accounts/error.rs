//! The accounts' errors: what a change of an account and a sign-in answer when they are refused.

/// A change of an account refused, or the database failing under it.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// Input that breaks a rule (name, password); the message says which rule, for the user.
    #[error("{field} {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("the name `{0}` is taken")]
    NameTaken(String),
    /// The change is refused as things stand (the last admin, a token revoked already).
    #[error("{0}")]
    Conflict(String),
    /// What was not found, e.g. `user 42`.
    #[error("{0} not found")]
    NotFound(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// A sign-in refused, or the database failing under it.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// Unknown name, wrong password, or a disabled account: deliberately one answer, so that it
    /// does not tell which names exist or which accounts are disabled.
    #[error("wrong name or password")]
    BadCredentials,
    /// Too many failed logins for this name or from this address; no password is checked until
    /// the lock ends.
    /// `unchecked`: this attempt was refused without a look at its password (the lock was set
    /// before it), so it is counted with the lock's other refusals, not audited on its own.
    #[error("too many failed logins: try again in {retry_after_secs} s")]
    Locked {
        retry_after_secs: u64,
        unchecked: bool,
    },
    /// Too many attempts from this address in the current window of `KICKOFF_SIGN_IN_RATE_LIMIT`,
    /// right or wrong: refused unchecked and uncounted (see `request_limit`).
    #[error("too many sign-in attempts from this address: try again in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// A new password that breaks the rules (changing one's own password).
    #[error("{0}")]
    Invalid(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}
