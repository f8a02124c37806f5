//! Login names: what one may be, and the one spelling it is stored and looked up in.

use super::error::AccountError;

/// The name the audit log and the jobs' creators give the bootstrap token: no user may take it.
pub const BOOTSTRAP_ACTOR: &str = "api-token";

/// The longest name, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// Lowers `name` and checks it is 1 to [`MAX_NAME_CHARS`] of `a-z 0-9 _ . -`.
///
/// Only ASCII letters are lowered: Unicode lowering maps look-alikes onto ASCII (the Kelvin sign
/// `K` becomes `k`), which would let two different inputs sign in as one name.
pub fn normalize_name(name: &str) -> Result<String, AccountError> {
    let invalid = |message: &str| AccountError::Invalid {
        field: "name",
        message: message.to_string(),
    };
    let count = name.chars().count();
    if count == 0 || count > MAX_NAME_CHARS {
        return Err(invalid("must be 1 to 64 characters"));
    }
    let lowered = name.to_ascii_lowercase();
    if !lowered
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(invalid("may only hold a-z, 0-9, '_', '.' and '-'"));
    }
    Ok(lowered)
}
