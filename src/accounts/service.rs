//! The accounts service: creating and changing users, first start, and checking logins.

use std::net::IpAddr;

use sqlx::PgPool;

use super::login_throttle::LoginThrottle;
use super::store::{self, User};
use super::{normalize_name, password, validate_password, Role};

/// The name of the administrator made on first start.
pub const FIRST_ADMIN_NAME: &str = "admin";

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
    /// What was not found, e.g. `user 42`.
    #[error("{0} not found")]
    NotFound(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// Unknown name, wrong password, or a disabled account: deliberately one answer, so that it
    /// does not tell which names exist or which accounts are disabled.
    #[error("wrong name or password")]
    BadCredentials,
    /// Too many failed logins for this name or from this address; no password is checked until
    /// the lock ends.
    #[error("too many failed logins: try again in {retry_after_secs} s")]
    Locked { retry_after_secs: u64 },
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// The accounts of the dashboard, in the database behind `pool`.
#[derive(Clone)]
pub struct Accounts {
    pool: PgPool,
    throttle: LoginThrottle,
}

impl Accounts {
    pub fn new(pool: PgPool) -> Self {
        Accounts {
            throttle: LoginThrottle::new(pool.clone()),
            pool,
        }
    }

    /// Creates a user. `name`: 1 to 64 of `a-z 0-9 _ . -` (upper case is lowered); `password`: 12 to
    /// 1024 characters, stored as an argon2id PHC string.
    pub async fn create(
        &self,
        name: &str,
        password: &str,
        role: Role,
    ) -> Result<User, AccountError> {
        let name = normalize_name(name)?;
        validate_password(password)?;
        let hash = password::hash(password).await;
        store::user_insert(&self.pool, &name, role, &hash)
            .await
            .map_err(|e| match e {
                sqlx::Error::Database(db) if db.is_unique_violation() => {
                    AccountError::NameTaken(name)
                }
                e => AccountError::Database(e),
            })
    }

    pub async fn get(&self, id: i64) -> Result<Option<User>, AccountError> {
        Ok(store::user_get(&self.pool, id).await?)
    }

    /// All users, by name.
    pub async fn list(&self) -> Result<Vec<User>, AccountError> {
        Ok(store::user_list(&self.pool).await?)
    }

    pub async fn count(&self) -> Result<i64, AccountError> {
        Ok(store::user_count(&self.pool).await?)
    }

    pub async fn set_role(&self, id: i64, role: Role) -> Result<User, AccountError> {
        found(id, store::user_set_role(&self.pool, id, role).await?)
    }

    /// Disables or enables a user. A disabled user cannot log in; ending its open sessions is the
    /// session layer's part (it looks the user up on each request).
    pub async fn set_disabled(&self, id: i64, disabled: bool) -> Result<User, AccountError> {
        found(
            id,
            store::user_set_disabled(&self.pool, id, disabled).await?,
        )
    }

    pub async fn set_password(&self, id: i64, password: &str) -> Result<User, AccountError> {
        validate_password(password)?;
        let hash = password::hash(password).await;
        found(
            id,
            store::user_set_password_hash(&self.pool, id, &hash).await?,
        )
    }

    /// First start: with no user at all and a `password`, creates [`FIRST_ADMIN_NAME`] as an admin
    /// and returns it; otherwise `Ok(None)`. Nodes starting together make one admin between them.
    pub async fn ensure_first_admin(
        &self,
        password: Option<&str>,
    ) -> Result<Option<User>, AccountError> {
        let Some(password) = password else {
            return Ok(None);
        };
        // Checked first so that the usual start (users exist) costs no hashing.
        if store::user_count(&self.pool).await? > 0 {
            return Ok(None);
        }
        validate_password(password)?;
        let hash = password::hash(password).await;
        Ok(store::user_insert_if_none(&self.pool, FIRST_ADMIN_NAME, Role::Admin, &hash).await?)
    }

    /// Checks a login from `address`, within the limits of `login_throttle` (slowed after 5
    /// failures, locked for 15 minutes after 10, per name and per address).
    pub async fn authenticate(
        &self,
        name: &str,
        password: &str,
        address: IpAddr,
    ) -> Result<User, LoginError> {
        // A name that breaks the rules belongs to nobody: it goes on as an unknown name, so that
        // its answer and its timing are those of any wrong login.
        let name = normalize_name(name).ok();
        let admission = self.throttle.admit(name.as_deref(), address).await?;
        let credentials = match &name {
            Some(name) => store::user_get_credentials(&self.pool, name).await?,
            None => None,
        };
        // An unknown name is verified too, against a hash nobody's password matches, so that it
        // takes as long to refuse as a wrong password for a real account.
        let hash = credentials
            .as_ref()
            .map_or(password::DUMMY_HASH, |c| c.password_hash.as_str());
        let verified = password::verify(password, hash).await;
        match credentials {
            Some(c) if verified && !c.user.disabled => {
                admission.succeeded().await?;
                Ok(c.user)
            }
            _ => Err(admission.failed().await),
        }
    }

    /// Deletes failure counters that no longer count (window over, no running lock). For a
    /// periodic sweep; returns how many were deleted.
    pub async fn prune_login_failures(&self) -> Result<u64, AccountError> {
        Ok(store::login_failure_prune(&self.pool, super::FAILURE_WINDOW, None).await?)
    }
}

fn found(id: i64, user: Option<User>) -> Result<User, AccountError> {
    user.ok_or_else(|| AccountError::NotFound(format!("user {id}")))
}
