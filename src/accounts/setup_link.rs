//! The first admin's setup link: a server that starts on a database with no user at all prints
//! `http://ADDR/setup?code=CODE`, and whoever opens it creates the first admin in the browser.
//!
//! - The code is 24 bytes from the operating system's generator, made when the server starts. It
//!   lives only in this process's memory and on its standard output: it is never stored, logged or
//!   sent anywhere else. Every node that starts on an empty database makes and prints its own, and
//!   its link points at that node.
//! - A presented code is compared in constant time. A wrong one is a failed sign-in of the client's
//!   address (the same counter, see `login_throttle`): 10 within 15 minutes lock the address out
//!   of signing in and of the setup alike. A missing code, a wrong one, a used one and a database
//!   that has a user all get one answer (the HTTP layer makes it a 404).
//! - It works once and only while no user exists: [`super::Accounts::set_up_first_admin`] makes
//!   the admin with `store::user_insert_first`, whose table lock makes "no user yet" and the
//!   insert one step in the database. Two tabs, two nodes' links, `KICKOFF_ADMIN_PASSWORD` on
//!   another node and `kickoff user add` cannot get a second first admin past it. A success spends
//!   the code; so does finding that a user exists.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use super::error::AccountError;
use super::secret::{constant_time_eq, random_hex};

/// Bytes of randomness in a setup code.
const CODE_BYTES: usize = 24;

/// This process's setup code, if its link is live. Clones share it.
#[derive(Clone, Default)]
pub struct SetupLink {
    code: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for SetupLink {
    // Never the code itself, even in a debug dump.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetupLink")
            .field("live", &self.code().is_some())
            .finish()
    }
}

impl SetupLink {
    /// No link: the setup page is a 404 (a database with users, or a first admin made at start).
    pub fn none() -> Self {
        SetupLink::default()
    }

    /// A live link with a fresh code from the operating system's generator.
    pub fn generate() -> Self {
        SetupLink::with_code(random_hex(CODE_BYTES))
    }

    /// A live link with this code (tests choose theirs).
    pub fn with_code(code: impl Into<String>) -> Self {
        SetupLink {
            code: Arc::new(Mutex::new(Some(code.into()))),
        }
    }

    fn code(&self) -> Option<String> {
        self.lock().clone()
    }

    /// The link to print, for a server listening on `addr` (an unspecified address such as
    /// `0.0.0.0` is reached on the loopback); `None` once the link is spent.
    pub fn url(&self, addr: SocketAddr, base: &str) -> Option<String> {
        let code = self.code()?;
        let ip = match addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        Some(format!(
            "http://{}{base}/setup?code={code}",
            SocketAddr::new(ip, addr.port())
        ))
    }

    /// Whether the link is live and `presented` is its code (compared in constant time).
    pub(crate) fn matches(&self, presented: &str) -> bool {
        self.code()
            .is_some_and(|code| constant_time_eq(code.as_bytes(), presented.as_bytes()))
    }

    pub(crate) fn is_live(&self) -> bool {
        self.lock().is_some()
    }

    /// Spends the link: from now on every code is refused.
    pub(crate) fn spend(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // A panic while holding this lock cannot leave the option half-written.
        self.code.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Proof that a request presented this process's live setup code (from
/// [`super::Accounts::check_setup_code`]); [`super::Accounts::set_up_first_admin`] takes it.
#[derive(Debug)]
pub struct SetupPass {
    pub(crate) _private: (),
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// No code, a wrong one, a spent one, or a database that has a user: one answer for all, so
    /// that nothing tells a guesser how close they are.
    #[error("no such setup link")]
    NotFound,
    /// Too many failed sign-ins or wrong codes from this address.
    #[error("too many failed attempts: try again in {retry_after_secs} s")]
    Locked {
        retry_after_secs: u64,
        unchecked: bool,
    },
    /// Too many attempts from this address in the current window (see `request_limit`).
    #[error("too many attempts from this address: try again in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// The right code, but a name or password that breaks the rules (the link stays live).
    #[error(transparent)]
    Account(#[from] AccountError),
}

#[cfg(test)]
mod tests {
    use super::SetupLink;

    #[test]
    fn a_link_matches_its_code_until_spent() {
        let link = SetupLink::with_code("abc123");
        assert!(link.matches("abc123"));
        assert!(!link.matches("abc124"));
        assert!(!link.matches("abc12"));
        assert!(!link.matches(""));
        assert_eq!(
            link.url("0.0.0.0:3000".parse().unwrap(), "").as_deref(),
            Some("http://127.0.0.1:3000/setup?code=abc123")
        );
        assert_eq!(
            link.url("[::]:8080".parse().unwrap(), "/kickoff")
                .as_deref(),
            Some("http://[::1]:8080/kickoff/setup?code=abc123")
        );
        let clone = link.clone();
        clone.spend();
        assert!(!link.matches("abc123"));
        assert_eq!(link.url("127.0.0.1:3000".parse().unwrap(), ""), None);
        assert!(!SetupLink::none().matches(""));
        let generated = SetupLink::generate();
        let url = generated.url("127.0.0.1:1".parse().unwrap(), "").unwrap();
        let code = url.rsplit('=').next().unwrap();
        assert_eq!(code.len(), 48);
        assert!(generated.matches(code));
        assert!(!format!("{generated:?}").contains(code));
    }
}
