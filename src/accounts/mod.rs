//! Dashboard accounts: who may sign in, with which [`Role`], and the brute-force protection of
//! their logins.
//!
//! - Names are 1 to 64 of `a-z 0-9 _ . -`, lowered on input (see `name`); passwords 12 to 1024
//!   characters, stored as argon2id PHC strings (see `password`). Hashing and verifying run on the
//!   blocking pool: each is tens of milliseconds of CPU.
//! - [`Accounts::authenticate`] answers one [`LoginError::BadCredentials`] for an unknown name, a
//!   wrong password and a disabled account alike, and takes as long for each (an unknown name is
//!   verified against a dummy hash).
//! - Failed logins are counted in the database, per login name and per client address, so every
//!   server process sharing the database enforces the same limits (see `login_throttle` for the
//!   rules and their constants).
//! - The first administrator: [`Accounts::ensure_first_admin`] creates `admin` on a database with
//!   no user at all (`KICKOFF_ADMIN_PASSWORD`); without it, the server prints a one-time setup link
//!   and [`Accounts::set_up_first_admin`] creates the admin it is opened for (see `setup_link`).
//!   Either way once, even when several nodes start together: the insert locks the table.
//!
//! - Request limits shared by every node: API calls per token, sign-in attempts per address (see
//!   `request_limit`).
//! - API tokens ([`Accounts::create_token`]): per user, scoped read or write, stored as SHA-256
//!   of their text (see `api_token`); revoked or a disabled owner's tokens stop at the next request.
//!
//! Sessions are not kept here: the HTTP layer stores them and asks [`Accounts::get`] who a session's
//! user is.

pub mod api_token;
pub mod bootstrap_token;
pub mod error;
mod login_throttle;
mod name;
mod password;
pub mod password_prompt;
pub mod request_limit;
mod role;
pub mod secret;
mod service;
pub mod session_store;
pub mod setup_link;
pub mod store;
mod text_column;
pub mod token_store;

pub use api_token::TokenScope;
pub use error::{AccountError, LoginError};
pub use login_throttle::{
    FAILURE_WINDOW, LOCK_AFTER_FAILURES, LOCK_DURATION, SLOWDOWN, SLOW_AFTER_FAILURES,
};
pub use name::{normalize_name, BOOTSTRAP_ACTOR, MAX_NAME_CHARS};
pub use password::{validate_password, MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS};
pub use request_limit::{RequestLimits, Taken, DEFAULT_SIGN_IN_RATE};
pub use role::Role;
pub use service::{Accounts, FIRST_ADMIN_NAME, UNKNOWN_NAME};
pub use setup_link::{SetupError, SetupLink, SetupPass};
pub use store::User;
pub use token_store::{ApiToken, TokenOwner};
