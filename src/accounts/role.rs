//! What a user may do.

use serde::{Deserialize, Serialize};

/// A user's role. The variants are ordered (`Viewer < Operator < Admin`) so that a permission check
/// is `user.role >= Role::Operator`: each role may do everything the roles below it may.
///
/// Stored as text (`'viewer'`, `'operator'`, `'admin'`, held to these by a CHECK constraint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    /// The name used in the database, the API, the UI and the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, not `write_str`: widths and alignment (`{:<8}`) apply, as for a `str`.
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            other => Err(format!(
                "unknown role `{other}`: use viewer, operator or admin"
            )),
        }
    }
}

super::text_column::impl_text_column!(Role);
