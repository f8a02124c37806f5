//! The accounts service: creating and changing users, the first admin (at first start or by the
//! setup link), and checking logins.

use std::net::IpAddr;

use crate::db::Db;
use sqlx::PgConnection;

use super::api_token::TokenScope;
use super::api_token::{self, MAX_TOKEN_NAME_CHARS};
use super::error::{AccountError, LoginError};
use super::login_throttle::LoginThrottle;
use super::name::normalize_name;
use super::password::{self, validate_password};
use super::request_limit::{RequestLimiter, RequestLimits, Requester, Taken};
use super::role::Role;
use super::setup_link::{SetupError, SetupLink, SetupPass};
use super::store::{self, User};
use super::token_store::{self, ApiToken, TokenOwner};

/// The name of the administrator made on first start.
pub const FIRST_ADMIN_NAME: &str = "admin";

/// What the audit log says for a failed sign-in whose name names no account.
pub const UNKNOWN_NAME: &str = "(unknown name)";

/// A new password, checked against the rules and hashed: ready to write. Hashing takes a while
/// (and its memory): make it before taking a connection.
pub struct NewPassword {
    hash: String,
}

/// The accounts of the dashboard, in the database behind `pool`.
#[derive(Clone)]
pub struct Accounts {
    pool: Db,
    throttle: LoginThrottle,
    limiter: RequestLimiter,
    setup_link: SetupLink,
}

impl Accounts {
    /// The accounts, with no setup link (see [`Self::with_setup_link`]) and the default request
    /// limits (see [`Self::with_request_limits`]).
    pub fn new(pool: Db) -> Self {
        let limiter = RequestLimiter::new(pool.clone(), RequestLimits::default());
        Accounts {
            throttle: LoginThrottle::new(pool.clone(), limiter.clone()),
            limiter,
            pool,
            setup_link: SetupLink::none(),
        }
    }

    /// The accounts with these limits of API calls per token and sign-in attempts per address
    /// (see `request_limit`).
    pub fn with_request_limits(self, limits: RequestLimits) -> Self {
        let limiter = RequestLimiter::new(self.pool.clone(), limits);
        Accounts {
            throttle: LoginThrottle::new(self.pool.clone(), limiter.clone()),
            limiter,
            ..self
        }
    }

    /// The request limits in force.
    pub fn request_limits(&self) -> &RequestLimits {
        self.limiter.limits()
    }

    /// Counts an API call made with a token (`None`: the bootstrap token) against the per-token
    /// limit: `None` when there is none; the caller refuses the call when it is not
    /// [`Taken::allowed`].
    pub async fn take_api_call(
        &self,
        token_id: Option<i64>,
    ) -> Result<Option<Taken>, AccountError> {
        Ok(self.limiter.take(Requester::Token(token_id)).await?)
    }

    /// Requests refused by a limit since this process started: (per token, per address).
    pub fn requests_rate_limited(&self) -> (u64, u64) {
        self.limiter.refused()
    }

    /// Deletes the request counts of windows that ended; returns how many.
    pub async fn prune_request_windows(&self) -> Result<u64, AccountError> {
        Ok(store::request_windows_delete_ended(&self.pool).await?)
    }

    /// The accounts with this process's setup link live (a server started on an empty
    /// database): [`Self::check_setup_code`] accepts its code.
    pub fn with_setup_link(self, setup_link: SetupLink) -> Self {
        Accounts { setup_link, ..self }
    }

    /// Creates a user. `name`: 1 to 64 of `a-z 0-9 _ . -` (upper case is lowered); `password`: 12 to
    /// 1024 characters, stored as an argon2id PHC string.
    pub async fn create(
        &self,
        name: &str,
        password: &str,
        role: Role,
    ) -> Result<User, AccountError> {
        refuse_reserved(&normalize_name(name)?)?;
        let password = self.new_password(password).await?;
        crate::db::in_transaction!(self, |tx| self.create_with(tx, name, &password, role))
    }

    /// The account of a caller the application's own sign-in vouches for (`name`, `role`): made
    /// or given the role now (see [`store::user_mirror`]). The name must be an account's name.
    pub async fn mirror(&self, name: &str, role: Role) -> Result<User, AccountError> {
        let normal = normalize_name(name)?;
        // `Alice` and `alice` are two users of an application that tells case apart: one account
        // here would merge them.
        if normal != name {
            return Err(AccountError::Invalid {
                field: "name",
                message: "must be written in lowercase".into(),
            });
        }
        refuse_reserved(name)?;
        store::user_mirror(&self.pool, name, role)
            .await?
            .ok_or_else(|| {
                AccountError::Conflict(format!(
                    "`{name}` is an account with a password here, not the application's user"
                ))
            })
    }

    /// Checks and hashes a new password.
    pub async fn new_password(&self, password: &str) -> Result<NewPassword, AccountError> {
        validate_password(password)?;
        Ok(NewPassword {
            hash: password::hash(password).await,
        })
    }

    /// [`Self::create`] on the caller's connection or inside the caller's transaction.
    pub async fn create_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
        password: &NewPassword,
        role: Role,
    ) -> Result<User, AccountError> {
        let name = normalize_name(name)?;
        refuse_reserved(&name)?;
        store::user_insert(conn, &name, role, &password.hash)
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

    /// Changes a user's role. Refused (conflict) when it would leave no enabled admin.
    pub async fn set_role(&self, id: i64, role: Role) -> Result<User, AccountError> {
        let mut tx = self.pool.begin().await?;
        let user = self.set_role_with(&mut tx, id, role).await?;
        tx.commit().await?;
        Ok(user)
    }

    /// [`Self::set_role`] inside the caller's transaction.
    pub async fn set_role_with(
        &self,
        tx: &mut PgConnection,
        id: i64,
        role: Role,
    ) -> Result<User, AccountError> {
        if role != Role::Admin {
            keeps_an_admin(&mut *tx, id, "take the admin role from").await?;
        }
        found(id, store::user_set_role(tx, id, role).await?)
    }

    /// Disables or enables a user. A disabled user cannot sign in and their tokens stop working;
    /// their open sessions end at their next request (the session layer looks the user up on
    /// each). Refused (conflict) when it would leave no enabled admin.
    pub async fn set_disabled(&self, id: i64, disabled: bool) -> Result<User, AccountError> {
        let mut tx = self.pool.begin().await?;
        let user = self.set_disabled_with(&mut tx, id, disabled).await?;
        tx.commit().await?;
        Ok(user)
    }

    /// [`Self::set_disabled`] inside the caller's transaction.
    pub async fn set_disabled_with(
        &self,
        tx: &mut PgConnection,
        id: i64,
        disabled: bool,
    ) -> Result<User, AccountError> {
        if disabled {
            keeps_an_admin(&mut *tx, id, "disable").await?;
        }
        found(id, store::user_set_disabled(tx, id, disabled).await?)
    }

    /// Sets a user's password (an admin's reset, or the user's own change once checked). Their
    /// sessions signed in before now end at their next request.
    pub async fn set_password(&self, id: i64, password: &str) -> Result<User, AccountError> {
        let password = self.new_password(password).await?;
        crate::db::in_transaction!(self, |tx| self.set_password_with(tx, id, &password))
    }

    /// [`Self::set_password`] on the caller's connection or inside the caller's transaction.
    pub async fn set_password_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        password: &NewPassword,
    ) -> Result<User, AccountError> {
        match store::user_set_password_hash(&mut *conn, id, &password.hash).await? {
            Some(user) => Ok(user),
            None => match store::user_get(conn, id).await? {
                Some(user) => Err(AccountError::Conflict(format!(
                    "{} is signed in by the application Kickoff is mounted in: no password here",
                    user.name
                ))),
                None => Err(AccountError::NotFound(format!("user {id}"))),
            },
        }
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
        self.create_first_admin(FIRST_ADMIN_NAME, password).await
    }

    /// Creates `name` as an admin if the database has no user at all, and returns it; `Ok(None)`
    /// when it has one, or when a concurrent first admin (or any new user) got there first.
    async fn create_first_admin(
        &self,
        name: &str,
        password: &str,
    ) -> Result<Option<User>, AccountError> {
        let name = normalize_name(name)?;
        validate_password(password)?;
        // Hashed before the transaction: the table lock is held for the insert only.
        let hash = password::hash(password).await;
        let mut tx = self.pool.begin().await?;
        let user = store::user_insert_first(&mut tx, &name, Role::Admin, &hash).await?;
        tx.commit().await?;
        Ok(user)
    }

    /// Checks a setup link's code presented from `address` (see `setup_link`): a pass for
    /// [`Self::set_up_first_admin`] if it is this process's live code and the database has no
    /// user; [`SetupError::NotFound`] for anything else. A wrong code counts as a failed sign-in
    /// of the address, and a locked address is refused even the right one.
    pub async fn check_setup_code(
        &self,
        presented: &str,
        address: IpAddr,
    ) -> Result<SetupPass, SetupError> {
        if presented.is_empty() || !self.setup_link.is_live() {
            return Err(SetupError::NotFound);
        }
        if store::user_count(&self.pool)
            .await
            .map_err(AccountError::from)?
            > 0
        {
            // Someone made a user meanwhile (another node's link, `kickoff user add`).
            self.setup_link.spend();
            return Err(SetupError::NotFound);
        }
        let admission = self
            .throttle
            .admit(None, address)
            .await
            .map_err(setup_refused)?;
        if self.setup_link.matches(presented) {
            admission.succeeded().await.map_err(AccountError::from)?;
            Ok(SetupPass { _private: () })
        } else {
            Err(setup_refused(admission.failed().await))
        }
    }

    /// Creates the first admin, `name`, through the setup link, and spends the link (see
    /// [`Self::set_up_first_admin_with`]).
    pub async fn set_up_first_admin(
        &self,
        pass: SetupPass,
        name: &str,
        password: &str,
    ) -> Result<User, SetupError> {
        let password = self.new_password(password).await?;
        let mut tx = self.pool.begin().await.map_err(AccountError::from)?;
        let user = self
            .set_up_first_admin_with(&mut tx, pass, name, &password)
            .await?;
        tx.commit().await.map_err(AccountError::from)?;
        self.spend_setup_link();
        Ok(user)
    }

    /// Creates the first admin, `name`, through the setup link, inside the caller's transaction;
    /// once it commits, the caller spends the link ([`Self::spend_setup_link`]). Refused
    /// ([`SetupError::NotFound`]) when any user exists by the time of the insert, whoever made it;
    /// a name or password that breaks the rules leaves the link live.
    pub async fn set_up_first_admin_with(
        &self,
        conn: &mut PgConnection,
        _pass: SetupPass,
        name: &str,
        password: &NewPassword,
    ) -> Result<User, SetupError> {
        let name = normalize_name(name)?;
        refuse_reserved(&name)?;
        let mut tx = sqlx::Connection::begin(&mut *conn)
            .await
            .map_err(AccountError::from)?;
        let made = store::user_insert_first(&mut tx, &name, Role::Admin, &password.hash)
            .await
            .map_err(AccountError::from)?;
        tx.commit().await.map_err(AccountError::from)?;
        made.ok_or(SetupError::NotFound)
    }

    /// Ends the setup link once the admin it was opened for is made (and committed).
    pub fn spend_setup_link(&self) {
        self.setup_link.spend();
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

    /// How a failed sign-in's typed name is recorded: the account's name when it names one,
    /// else [`UNKNOWN_NAME`]. A name nobody has may be a password typed into the wrong field; it
    /// must not reach the audit log.
    pub async fn name_for_audit(&self, typed: &str) -> Result<String, AccountError> {
        let Ok(name) = normalize_name(typed) else {
            return Ok(UNKNOWN_NAME.into());
        };
        Ok(
            match store::user_get_credentials(&self.pool, &name).await? {
                Some(c) => c.user.name,
                None => UNKNOWN_NAME.into(),
            },
        )
    }

    /// Deletes failure counters that no longer count (window over, no running lock). For a
    /// periodic sweep; returns how many were deleted.
    pub async fn prune_login_failures(&self) -> Result<u64, AccountError> {
        Ok(
            store::login_failure_prune(&self.pool, super::login_throttle::FAILURE_WINDOW, None)
                .await?,
        )
    }

    /// Writes the audit entry of each sign-in lock that is over, with the attempts it refused
    /// unchecked (see the `login_lock_refusals` migration).
    pub async fn flush_lock_refusals(&self) -> Result<u64, AccountError> {
        Ok(store::login_lock_refusals_flush(&self.pool, None).await?)
    }
}

impl Accounts {
    /// Creates an API token for `user`, returning it with its text (shown once, never stored).
    /// `write` needs a role that may act (operator or admin).
    pub async fn create_token(
        &self,
        user: &User,
        name: &str,
        scope: TokenScope,
    ) -> Result<(ApiToken, String), AccountError> {
        crate::db::in_transaction!(self, |tx| self.create_token_with(tx, user, name, scope))
    }

    /// [`Self::create_token`] on the caller's connection or inside the caller's transaction.
    pub async fn create_token_with(
        &self,
        conn: &mut PgConnection,
        user: &User,
        name: &str,
        scope: TokenScope,
    ) -> Result<(ApiToken, String), AccountError> {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > MAX_TOKEN_NAME_CHARS {
            return Err(AccountError::Invalid {
                field: "name",
                message: format!("must be 1 to {MAX_TOKEN_NAME_CHARS} characters"),
            });
        }
        if name.chars().any(char::is_control) {
            return Err(AccountError::Invalid {
                field: "name",
                message: "must not hold control characters".into(),
            });
        }
        if scope == TokenScope::Write && user.role < Role::Operator {
            return Err(AccountError::Invalid {
                field: "scope",
                message: format!(
                    "write needs an operator or admin; {} is a viewer",
                    user.name
                ),
            });
        }
        let token = api_token::generate();
        let stored = token_store::api_token_insert(
            conn,
            user.id,
            name,
            scope,
            &api_token::prefix(&token),
            &api_token::hash(&token),
        )
        .await?;
        Ok((stored, token))
    }

    /// Tokens of one user, or of everyone (`None`), newest first.
    pub async fn tokens(&self, user_id: Option<i64>) -> Result<Vec<ApiToken>, AccountError> {
        Ok(token_store::api_token_list(&self.pool, user_id).await?)
    }

    pub async fn token(&self, id: i64) -> Result<Option<ApiToken>, AccountError> {
        Ok(token_store::api_token_get(&self.pool, id).await?)
    }

    /// Revokes a token: the next request that presents it is refused.
    pub async fn revoke_token(&self, id: i64) -> Result<ApiToken, AccountError> {
        crate::db::in_transaction!(self, |tx| self.revoke_token_with(tx, id))
    }

    /// [`Self::revoke_token`] on the caller's connection or inside the caller's transaction.
    pub async fn revoke_token_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
    ) -> Result<ApiToken, AccountError> {
        match token_store::api_token_revoke(&mut *conn, id).await? {
            Some(t) => Ok(t),
            None => match token_store::api_token_get(conn, id).await? {
                Some(_) => Err(AccountError::Conflict(format!(
                    "token {id} is revoked already"
                ))),
                None => Err(AccountError::NotFound(format!("token {id}"))),
            },
        }
    }

    /// The owner of a presented token, if it is a live token of an enabled user.
    pub async fn authenticate_token(
        &self,
        presented: &str,
    ) -> Result<Option<TokenOwner>, AccountError> {
        if !api_token::looks_like_token(presented) {
            return Ok(None);
        }
        Ok(token_store::api_token_authenticate(&self.pool, &api_token::hash(presented)).await?)
    }

    /// A user changing their own password: checks the new one's rules, then `current` like a
    /// sign-in (a wrong one counts toward the same lock), and answers the new one hashed, for
    /// [`Self::set_password_with`] (which ends their sessions signed in before it).
    pub async fn check_own_password(
        &self,
        user: &User,
        current: &str,
        new: &str,
        address: IpAddr,
    ) -> Result<NewPassword, LoginError> {
        // Checked before the current password, so that a bad new one does not cost an attempt.
        if let Err(e) = validate_password(new) {
            return Err(LoginError::Invalid(e.to_string()));
        }
        self.authenticate(&user.name, current, address).await?;
        Ok(NewPassword {
            hash: password::hash(new).await,
        })
    }
}

/// Refuses (conflict) a change that would leave no enabled admin besides `id`. Locks the admins'
/// rows for the transaction, so concurrent changes are checked one after the other.
async fn keeps_an_admin(
    tx: &mut sqlx::PgConnection,
    id: i64,
    verb: &str,
) -> Result<(), AccountError> {
    let admins = store::user_lock_enabled_admins(&mut *tx).await?;
    if admins.contains(&id) && admins.len() == 1 {
        return Err(AccountError::Conflict(format!(
            "cannot {verb} the last enabled admin: make another admin first"
        )));
    }
    Ok(())
}

/// A refused setup code's answer: the lock, or the one answer for everything else.
fn setup_refused(e: LoginError) -> SetupError {
    match e {
        LoginError::Locked {
            retry_after_secs,
            unchecked,
        } => SetupError::Locked {
            retry_after_secs,
            unchecked,
        },
        LoginError::RateLimited { retry_after_secs } => {
            SetupError::RateLimited { retry_after_secs }
        }
        LoginError::Database(e) => SetupError::Account(AccountError::Database(e)),
        LoginError::BadCredentials | LoginError::Invalid(_) => SetupError::NotFound,
    }
}

/// Refuses a name no user may take (the bootstrap token's in the audit log).
pub fn refuse_reserved(name: &str) -> Result<(), AccountError> {
    if name == super::name::BOOTSTRAP_ACTOR {
        return Err(AccountError::Invalid {
            field: "name",
            message: format!("`{name}` is the bootstrap token's name in the audit log"),
        });
    }
    Ok(())
}

fn found(id: i64, user: Option<User>) -> Result<User, AccountError> {
    user.ok_or_else(|| AccountError::NotFound(format!("user {id}")))
}
