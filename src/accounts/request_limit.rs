//! Request limits shared by every node: `N` calls per period of one API token, and `N` sign-in
//! attempts per period from one client address.
//!
//! - **Per token** (`KICKOFF_API_RATE_LIMIT`, default none): every call of the REST API made with
//!   one token counts, reads and writes alike, whatever its answer; the bootstrap token is one
//!   token. The call past the limit is answered 429 with `Retry-After` (the seconds to the end of
//!   the window) and is not run; calls within it carry `RateLimit-Limit`, `RateLimit-Remaining` and
//!   `RateLimit-Reset`.
//! - **Per address** (`KICKOFF_SIGN_IN_RATE_LIMIT`, default [`DEFAULT_SIGN_IN_RATE`]): every sign-in
//!   attempt and every setup-link check from one address (an IPv6 client by its /64), right or
//!   wrong. It comes before the failure counts of `login_throttle`: a refused attempt is not
//!   checked, not counted as a failure and not audited one by one (a flood would write a row per
//!   attempt); `kickoff_request_rate_limited_total{scope}` counts them.
//!
//! Counts live in `request_windows` (unlogged: they cost no WAL flush), in fixed windows aligned
//! to the period by the database clock, so every node sharing the database shares them and a
//! window means the same instant on each. A burst that straddles a window boundary can get up to
//! twice the limit in one period's time: the price of one row and one statement per call (a
//! sliding window needs a row per call).

use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::db::Db;

use super::store;
use crate::rate::Rate;

/// Sign-in attempts one address may make per period unless configured: 60 a minute (a person
/// retyping a password makes a few; an office behind one address, a few dozen an hour).
pub const DEFAULT_SIGN_IN_RATE: &str = "60/min";

/// The limits in force; `None`: that one is off.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestLimits {
    /// Calls of one API token per period.
    pub per_token: Option<Rate>,
    /// Sign-in attempts (and setup-link checks) from one client address per period.
    pub per_address: Option<Rate>,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits {
            per_token: None,
            per_address: Some(DEFAULT_SIGN_IN_RATE.parse().expect("a valid rate")),
        }
    }
}

impl RequestLimits {
    /// No limit at all.
    pub fn none() -> Self {
        RequestLimits {
            per_token: None,
            per_address: None,
        }
    }
}

/// One request counted against a limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Taken {
    /// The limit of the window.
    pub limit: u32,
    /// Requests in the window, this one included.
    pub used: u32,
    /// Seconds until the window ends (and a refused caller may try again).
    pub resets_in_secs: f64,
}

impl Taken {
    pub fn allowed(&self) -> bool {
        self.used <= self.limit
    }

    pub fn remaining(&self) -> u32 {
        self.limit.saturating_sub(self.used)
    }

    /// Whole seconds to wait: the window's end, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        (self.resets_in_secs.ceil() as u64).max(1)
    }
}

/// Counts requests against [`RequestLimits`] in the database.
#[derive(Clone)]
pub(crate) struct RequestLimiter {
    pool: Db,
    limits: RequestLimits,
    refused: Arc<Refused>,
}

#[derive(Debug, Default)]
struct Refused {
    token: AtomicU64,
    address: AtomicU64,
}

/// Whose requests are counted.
#[derive(Debug, Clone, Copy)]
pub enum Requester {
    /// A user's API token by its id; `None`: the bootstrap token.
    Token(Option<i64>),
    /// A client address (sign-in attempts).
    Address(IpAddr),
}

impl RequestLimiter {
    pub(crate) fn new(pool: Db, limits: RequestLimits) -> Self {
        RequestLimiter {
            pool,
            limits,
            refused: Arc::default(),
        }
    }

    pub(crate) fn limits(&self) -> &RequestLimits {
        &self.limits
    }

    /// Counts a request of `who`; `None` when its limit is off.
    pub(crate) async fn take(&self, who: Requester) -> Result<Option<Taken>, sqlx::Error> {
        let (rate, scope, key) = match who {
            Requester::Token(id) => (
                &self.limits.per_token,
                "token",
                id.map_or_else(|| "bootstrap".to_string(), |id| id.to_string()),
            ),
            Requester::Address(address) => {
                (&self.limits.per_address, "address", address_key(address))
            }
        };
        let Some(rate) = rate else {
            return Ok(None);
        };
        let (used, resets_in_secs) =
            store::request_window_take(&self.pool, scope, &key, rate.period_ms()).await?;
        let taken = Taken {
            limit: rate.n,
            used: used.max(0) as u32,
            resets_in_secs,
        };
        if !taken.allowed() {
            let counter = match who {
                Requester::Token(_) => &self.refused.token,
                Requester::Address(_) => &self.refused.address,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(taken))
    }

    /// Requests refused by a limit since this process started: (per token, per address).
    pub(crate) fn refused(&self) -> (u64, u64) {
        (
            self.refused.token.load(Ordering::Relaxed),
            self.refused.address.load(Ordering::Relaxed),
        )
    }
}

/// The address counter's key: an IPv4 address (also when it comes IPv4-mapped in IPv6), or the
/// /64 network of an IPv6 address, since one IPv6 client usually has a whole /64 to pick from.
pub(super) fn address_key(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{}/64", Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::address_key;

    #[test]
    fn ipv6_clients_are_counted_by_their_64_network() {
        let a = address_key("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = address_key("2001:db8:1:2:bbbb::2".parse().unwrap());
        assert_eq!(a, "2001:db8:1:2::/64");
        assert_eq!(a, b);
        assert_ne!(a, address_key("2001:db8:1:3::1".parse().unwrap()));
        assert_eq!(
            address_key("::ffff:192.0.2.7".parse().unwrap()),
            "192.0.2.7"
        );
        assert_eq!(address_key("192.0.2.7".parse().unwrap()), "192.0.2.7");
    }
}
