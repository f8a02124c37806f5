//! The dashboard behind an application's own sign-in: when Kickoff is mounted in an application
//! (`kickoff::embed`), a hook of the application's ([`Authenticate`]) says who calls each
//! dashboard request and in which role, instead of Kickoff's accounts and sessions.
//!
//! The caller is kept as an account of that name (made, or given the role the application says,
//! on first sight and whenever the role changes: see `accounts::store::user_mirror`), with no
//! password: the audit log, the API tokens and the users page see a user as any other, and an
//! admin may still disable them here. The forms' CSRF token is the caller's own, a tag of their
//! name by the server's secret key (the same on every node that shares the key); Kickoff's own
//! sign-in and setup answer 404.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::request::Parts;

use crate::accounts::{Accounts, Role, User};
use crate::engine::BoxFuture;
use crate::webhooks::SecretKey;

/// Who the application says calls: a name fit for an account (`[a-z0-9_.-]{1,64}`, lowercased)
/// and their role in Kickoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Role,
}

/// The application's own sign-in, asked for every dashboard request.
pub trait Authenticate: Send + Sync + 'static {
    /// The caller of a request (its headers: the application's cookie or token), or none: not
    /// signed in.
    fn caller<'a>(&'a self, request: &'a Parts) -> BoxFuture<'a, Option<Caller>>;

    /// Where a page sends a caller who is not signed in: the application's sign-in, told to come
    /// back to `next` (the page's whole path). None (the default): the page answers 401.
    fn sign_in_url(&self, next: &str) -> Option<String> {
        let _ = next;
        None
    }
}

/// How long an account seen for a caller is taken as it is before it is read again: a disable
/// here shows within this (a role the application changed shows at once).
const SEEN_FOR: Duration = Duration::from_secs(5);

/// The application's hook, with the accounts its callers are kept as.
pub struct AppAuth {
    hook: Arc<dyn Authenticate>,
    accounts: Accounts,
    key: Arc<SecretKey>,
    base: String,
    seen: Mutex<HashMap<String, (User, Instant)>>,
}

/// Why a request has no caller.
#[derive(Debug)]
pub enum NoCaller {
    /// The application says no one is signed in.
    SignedOut,
    /// The application's caller cannot be an account here (the message says why), or their
    /// account is disabled.
    Refused(String),
    /// The accounts could not be read.
    Unavailable,
}

impl AppAuth {
    /// `key` makes the callers' CSRF tokens (give every node the same); `base` is the path the
    /// dashboard is served under (a token of one dashboard is not another's).
    pub fn new(
        hook: Arc<dyn Authenticate>,
        accounts: Accounts,
        key: Arc<SecretKey>,
        base: &str,
    ) -> AppAuth {
        AppAuth {
            hook,
            accounts,
            key,
            base: base.to_string(),
            seen: Mutex::default(),
        }
    }

    /// The CSRF token of `user`'s forms: their own, the same on every node holding the key. Not
    /// the only guard: every post of this mode must also come from the dashboard's own origin
    /// (see `session::by_the_application`), since the application's cookie may be sent by
    /// another site's form.
    pub fn csrf(&self, user: &User) -> String {
        let data = format!("{}\0{}", self.base, user.name);
        self.key.tag("kickoff dashboard csrf", data.as_bytes())[..48].to_string()
    }

    /// Where the application's sign-in is, for a page at `next`.
    pub fn sign_in_url(&self, next: &str) -> Option<String> {
        self.hook.sign_in_url(next)
    }

    /// The account of the request's caller.
    pub async fn caller(&self, request: &Parts) -> Result<User, NoCaller> {
        let caller = self.hook.caller(request).await.ok_or(NoCaller::SignedOut)?;
        let fresh = {
            let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.get(&caller.name).and_then(|(user, at)| {
                (user.role == caller.role && at.elapsed() < SEEN_FOR).then(|| user.clone())
            })
        };
        let user = match fresh {
            Some(user) => user,
            None => {
                let user = self
                    .accounts
                    .mirror(&caller.name, caller.role)
                    .await
                    .map_err(|e| match e {
                        crate::accounts::AccountError::Database(e) => {
                            tracing::error!(error = %e, "could not keep the application's caller");
                            NoCaller::Unavailable
                        }
                        refused => NoCaller::Refused(format!(
                            "the application's user cannot be a Kickoff account: {refused}"
                        )),
                    })?;
                let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
                // Bounded: a busy application's callers, not every name ever seen.
                if seen.len() >= 10_000 {
                    seen.clear();
                }
                seen.insert(caller.name.clone(), (user.clone(), Instant::now()));
                user
            }
        };
        if user.disabled {
            return Err(NoCaller::Refused(format!(
                "the account {} is disabled in Kickoff",
                user.name
            )));
        }
        Ok(user)
    }
}
