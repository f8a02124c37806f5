//! API tokens: what they may do ([`TokenScope`]), how their secrets are made and stored.
//!
//! A token reads `ko_` followed by 64 hex digits (32 bytes from the OS generator). Only its
//! SHA-256 is stored, with its first characters ([`PREFIX_CHARS`]) to tell tokens apart in lists.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What every token starts with: makes a leaked token easy to recognise (secret scanners, logs).
pub const TOKEN_MARK: &str = "ko_";
/// How many characters of a token (with its mark) are kept to show it.
pub const PREFIX_CHARS: usize = 11;
/// The most characters of a token's name.
pub const MAX_TOKEN_NAME_CHARS: usize = 100;

/// What a token may do, within its owner's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenScope {
    /// Reads only (GET).
    Read,
    /// Everything the owner's role allows.
    Write,
}

impl TokenScope {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::Write => "write",
        }
    }
}

impl std::fmt::Display for TokenScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for TokenScope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read" => Ok(TokenScope::Read),
            "write" => Ok(TokenScope::Write),
            other => Err(format!("unknown scope `{other}`: use read or write")),
        }
    }
}

super::text_column::impl_text_column!(TokenScope);

/// A new token's text.
pub fn generate() -> String {
    format!("{TOKEN_MARK}{}", super::secret::random_hex(32))
}

/// What is stored of a token (and looked up when one is presented).
pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The characters shown of a token.
pub fn prefix(token: &str) -> String {
    token.chars().take(PREFIX_CHARS).collect()
}

/// Whether a presented bearer token has the shape of a user token (so it is worth a lookup).
pub fn looks_like_token(presented: &str) -> bool {
    presented.len() == TOKEN_MARK.len() + 64
        && presented.starts_with(TOKEN_MARK)
        && presented[TOKEN_MARK.len()..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_marked_and_hashed() {
        let a = generate();
        let b = generate();
        assert_ne!(a, b);
        assert!(looks_like_token(&a), "{a}");
        assert_eq!(prefix(&a).len(), PREFIX_CHARS);
        assert_eq!(hash(&a), hash(&a));
        assert_ne!(hash(&a), hash(&b));
        assert!(!looks_like_token("ko_xyz"));
        assert!(!looks_like_token(&a.replace("ko_", "kx_")));
    }
}
