//! Password rules, hashing and verification (argon2id with the argon2 crate's default parameters).
//!
//! Both hashing and verifying cost tens of milliseconds of CPU and 19 MiB of memory by design, so
//! the async functions here run them on tokio's blocking pool (on the runtime's threads they would
//! stall every request and job of the process meanwhile), at most [`concurrent_hashes`] at once: a
//! burst of sign-ins waits its turn instead of taking the machine's memory and cores.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use super::error::AccountError;

/// The shortest password, in characters.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// The longest password, in characters: enough for any passphrase, and a bound on what a login
/// makes the server read and hash.
pub const MAX_PASSWORD_CHARS: usize = 1024;

/// What an unknown name is verified against, so that a login for a name that does not exist costs
/// the same time as one for a name that does. Made once with `Argon2::default()` from random bytes
/// nobody kept; its parameters must stay those of new hashes (a test checks).
pub(crate) const DUMMY_HASH: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$fTZIz/tXXikX2Hkyjb4s1A$zhhOv34udGTmdJOW1EZnxpekyzeMNzY3fy70qbzleJo";

/// Checks the length rules of a new password.
pub fn validate_password(password: &str) -> Result<(), AccountError> {
    let count = password.chars().count();
    let message = if count < MIN_PASSWORD_CHARS {
        "must be at least 12 characters"
    } else if count > MAX_PASSWORD_CHARS {
        "must be at most 1024 characters"
    } else {
        return Ok(());
    };
    Err(AccountError::Invalid {
        field: "password",
        message: message.to_string(),
    })
}

/// The PHC string of `password` with a fresh random salt.
pub(crate) async fn hash(password: &str) -> String {
    let password = password.to_string();
    blocking(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            // The only failures are invalid parameters or salt, which are the crate's own here,
            // or a password longer than 4 GiB, which validate_password has refused.
            .expect("argon2 with its default parameters hashes any valid password")
            .to_string()
    })
    .await
}

/// Whether `password` matches the PHC string `hash` (with the parameters the hash names).
pub(crate) async fn verify(password: &str, hash: &str) -> bool {
    // An account the application's sign-in vouches for has no password here.
    if hash == super::store::APPLICATION_SIGNED {
        return false;
    }
    let (password, hash) = (password.to_string(), hash.to_string());
    blocking(move || match PasswordHash::new(&hash) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(e) => {
            // A hash written by hand into the table: nobody can sign in with it; say why.
            tracing::error!(error = %e, "a stored password hash is not a PHC string");
            false
        }
    })
    .await
}

/// How many hashes run at once: one per core, at least 2.
pub fn concurrent_hashes() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
}

static HASHING: std::sync::LazyLock<std::sync::Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| {
        std::sync::Arc::new(tokio::sync::Semaphore::new(concurrent_hashes()))
    });

#[cfg(test)]
static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
#[cfg(test)]
static MOST_RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    // The semaphore is never closed. The turn goes with the hash itself: a sign-in whose client
    // goes away drops its future, not the hash already running, which keeps its place until done.
    let turn = HASHING
        .clone()
        .acquire_owned()
        .await
        .expect("the hashing semaphore is open");
    let f = move || {
        let _turn = turn;
        #[cfg(test)]
        {
            use std::sync::atomic::Ordering;
            let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
            MOST_RUNNING.fetch_max(now, Ordering::SeqCst);
            let value = f();
            RUNNING.fetch_sub(1, Ordering::SeqCst);
            value
        }
        #[cfg(not(test))]
        f()
    };
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => value,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only when the runtime shuts down, when nobody waits for the answer any more.
        Err(e) => panic!("password hashing was cancelled: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_sign_ins_hashes_a_bounded_number_at_once() {
        let n = 3 * concurrent_hashes();
        let checks: Vec<_> = (0..n)
            .map(|_| tokio::spawn(async { verify("correct horse battery", DUMMY_HASH).await }))
            .collect();
        for check in checks {
            assert!(!check.await.unwrap());
        }
        let most = MOST_RUNNING.load(std::sync::atomic::Ordering::SeqCst);
        assert!(
            (1..=concurrent_hashes()).contains(&most),
            "{most} hashes ran at once; the bound is {}",
            concurrent_hashes()
        );
    }

    #[test]
    fn the_dummy_hash_costs_what_a_new_hash_costs() {
        let dummy = PasswordHash::new(DUMMY_HASH).unwrap();
        let params = argon2::Params::try_from(&dummy).unwrap();
        let default = argon2::Params::default();
        assert_eq!(dummy.algorithm, argon2::Algorithm::Argon2id.ident());
        assert_eq!(
            (params.m_cost(), params.t_cost(), params.p_cost()),
            (default.m_cost(), default.t_cost(), default.p_cost())
        );
    }
}
