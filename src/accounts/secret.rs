//! Secrets from the operating system's generator (never from `fastrand`, whose output can be
//! predicted from earlier output).

use password_hash::rand_core::{OsRng, RngCore};

/// `bytes` random bytes as lowercase hex (twice as many characters).
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    OsRng.fill_bytes(&mut buf);
    let mut out = String::with_capacity(bytes * 2);
    for b in buf {
        out.push_str(&format!("{b:02x}"));
    }
    out
}
