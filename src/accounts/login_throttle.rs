//! Brute-force protection of logins: failed attempts are counted per login name and per client
//! address, in the database, so that every server process on it enforces the same limits.
//!
//! The rules, for each of the two counters:
//! - After [`SLOW_AFTER_FAILURES`] failures, each further failed attempt is answered only after
//!   [`SLOWDOWN`].
//! - The attempt that brings the failures within one [`FAILURE_WINDOW`] to [`LOCK_AFTER_FAILURES`]
//!   locks the name (or the address) for [`LOCK_DURATION`], and is itself answered `Locked`. While
//!   locked, attempts are refused unchecked, even with the right password, and are not counted.
//! - A success starts the name's count over. It leaves the address's count as it was: one address
//!   may be many people (an office behind NAT), and one of them signing in says nothing about the
//!   guesses of another.
//!
//! An attempt takes its place in both counts before its password is verified ([`LoginThrottle::admit`])
//! and gives it back if it succeeds ([`Admission::succeeded`]). Counting only after verifying would
//! let a burst of parallel guesses all be verified before the first failure is written; this way
//! the counts include the attempts in flight, and attempts beyond the limit are refused unchecked.
//!
//! The name counter is keyed by the name typed, whether a user has it or not: if only real accounts
//! could be locked, a lock would tell a guesser which names exist. Names that break the naming rules
//! (no account can have one) get no name counter; the address counter still counts them.

use std::net::IpAddr;
use std::time::Duration;

use crate::db::Db;

use super::error::LoginError;
use super::request_limit::{address_key, RequestLimiter, Requester};
use super::store::{self, LoginCounter, LoginScope};

/// Failures (of one name, or from one address) after which each further failed attempt is
/// answered only after [`SLOWDOWN`]: 5.
pub const SLOW_AFTER_FAILURES: i32 = 5;
/// How long a slowed-down failure waits before its answer: 1 s.
pub const SLOWDOWN: Duration = Duration::from_secs(1);
/// Failures within [`FAILURE_WINDOW`] that lock the name (or the address): 10.
pub const LOCK_AFTER_FAILURES: i32 = 10;
/// The window the failures are counted in, from the first failure of a count: 15 minutes.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// How long a lock lasts: 15 minutes.
pub const LOCK_DURATION: Duration = Duration::from_secs(15 * 60);

/// Counts login attempts and decides which may be checked.
#[derive(Clone)]
pub(crate) struct LoginThrottle {
    pool: Db,
    /// The rate of attempts per address, before any count (see `request_limit`).
    limiter: RequestLimiter,
}

/// An attempt admitted for checking, holding its places in the counts until it reports the outcome.
#[must_use = "report the outcome with succeeded() or failed()"]
pub(crate) struct Admission {
    pool: Db,
    by_address: (String, LoginCounter),
    by_name: Option<(String, LoginCounter)>,
}

impl LoginThrottle {
    pub(crate) fn new(pool: Db, limiter: RequestLimiter) -> Self {
        LoginThrottle { pool, limiter }
    }

    /// Counts an attempt for `name` (already normalized; `None` for a name no account can have)
    /// from `address`. `Err(Locked)` when either is locked or over its limit.
    pub(crate) async fn admit(
        &self,
        name: Option<&str>,
        address: IpAddr,
    ) -> Result<Admission, LoginError> {
        // Past the address's rate, an attempt is refused before it is counted or checked.
        if let Some(taken) = self.limiter.take(Requester::Address(address)).await? {
            if !taken.allowed() {
                return Err(LoginError::RateLimited {
                    retry_after_secs: taken.retry_after_secs(),
                });
            }
        }
        let address = address_key(address);
        let by_address = store::login_failure_reserve(
            &self.pool,
            LoginScope::Address,
            &address,
            FAILURE_WINDOW,
            None,
        )
        .await?;
        if by_address.locked() {
            return Err(self
                .refused_unchecked(LoginScope::Address, &address, &by_address)
                .await);
        }
        let by_name = match name {
            None => None,
            Some(name) => {
                let counter = store::login_failure_reserve(
                    &self.pool,
                    LoginScope::Name,
                    name,
                    FAILURE_WINDOW,
                    None,
                )
                .await?;
                if counter.locked() {
                    // Refused unchecked: it does not count against the address either.
                    store::login_failure_release(
                        &self.pool,
                        LoginScope::Address,
                        &address,
                        by_address.window_started_at,
                    )
                    .await?;
                    return Err(self
                        .refused_unchecked(LoginScope::Name, name, &counter)
                        .await);
                }
                Some((name.to_string(), counter))
            }
        };
        let admission = Admission {
            pool: self.pool.clone(),
            by_address: (address, by_address),
            by_name,
        };
        // More attempts in flight than the limit allows (a burst of parallel guesses): the ones
        // beyond it fail unchecked, which also sets the lock.
        if admission
            .counters()
            .any(|c| c.failures > LOCK_AFTER_FAILURES)
        {
            return Err(admission.failed().await);
        }
        Ok(admission)
    }

    /// An attempt refused unchecked by `counter`'s lock: counted with that lock's other refusals.
    async fn refused_unchecked(
        &self,
        scope: LoginScope,
        key: &str,
        counter: &LoginCounter,
    ) -> LoginError {
        if let Some(until) = counter.locked_until {
            if let Err(e) = store::login_lock_refused(&self.pool, scope, key, until).await {
                return LoginError::Database(e);
            }
        }
        locked(&[counter], true)
    }
}

impl Admission {
    fn counters(&self) -> impl Iterator<Item = &LoginCounter> {
        std::iter::once(&self.by_address.1).chain(self.by_name.as_ref().map(|(_, c)| c))
    }

    fn keys(&self) -> impl Iterator<Item = (LoginScope, &str)> {
        std::iter::once((LoginScope::Address, self.by_address.0.as_str())).chain(
            self.by_name
                .as_ref()
                .map(|(name, _)| (LoginScope::Name, name.as_str())),
        )
    }

    /// The attempt succeeded: the name's count starts over, the address gets its place back.
    pub(crate) async fn succeeded(self) -> Result<(), sqlx::Error> {
        let (address, counter) = &self.by_address;
        store::login_failure_release(
            &self.pool,
            LoginScope::Address,
            address,
            counter.window_started_at,
        )
        .await?;
        if let Some((name, _)) = &self.by_name {
            store::login_failure_clear(&self.pool, LoginScope::Name, name, None).await?;
        }
        Ok(())
    }

    /// The attempt failed: its places stay counted, a count at the limit locks its key. Returns
    /// the answer to give: `Locked` if this failure locked either key, else `BadCredentials`,
    /// after [`SLOWDOWN`] when either count was already past [`SLOW_AFTER_FAILURES`].
    pub(crate) async fn failed(self) -> LoginError {
        let mut now_locked = Vec::new();
        for (scope, key) in self.keys() {
            match store::login_failure_confirm(
                &self.pool,
                scope,
                key,
                LOCK_AFTER_FAILURES,
                LOCK_DURATION,
                None,
            )
            .await
            {
                Ok(Some(counter)) if counter.locked() => now_locked.push(counter),
                Ok(_) => {}
                Err(e) => return LoginError::Database(e),
            }
        }
        if !now_locked.is_empty() {
            return locked(&now_locked.iter().collect::<Vec<_>>(), false);
        }
        // The count includes this attempt: past the threshold means that many failures before it.
        if self.counters().any(|c| c.failures > SLOW_AFTER_FAILURES) {
            tokio::time::sleep(SLOWDOWN).await;
        }
        LoginError::BadCredentials
    }
}

fn locked(counters: &[&LoginCounter], unchecked: bool) -> LoginError {
    LoginError::Locked {
        unchecked,
        retry_after_secs: counters
            .iter()
            .map(|c| c.lock_remaining_secs())
            .max()
            .unwrap_or(LOCK_DURATION.as_secs()),
    }
}
