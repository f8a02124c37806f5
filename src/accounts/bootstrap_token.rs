//! The bootstrap API token: an admin's write token that exists before any account, for scripts
//! and the first steps. It comes from `KICKOFF_API_TOKEN`, or is generated once into
//! `<data dir>/api-token`; `KICKOFF_API_TOKEN=off` switches it off.
//!
//! Invariants:
//! - A generated token is shown once, when it is created; later starts say where it is kept.
//! - The file is created with mode `0600` (see [`crate::data_dir`]) and read only while it is a
//!   private regular file of this user; anything else disables the token rather than trusting it.
//! - `kickoff token rotate` replaces the file in one step; a running server reads it again every
//!   [`RELOAD_EVERY`], so the old token stops working within that time on every server sharing
//!   the data directory, without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::accounts::secret::{constant_time_eq, random_hex};
use crate::data_dir::{self, DataDirError};

/// The value of `KICKOFF_API_TOKEN` that switches the bootstrap token off.
pub const OFF: &str = "off";
/// The token's file inside the data directory.
pub const FILE_NAME: &str = "api-token";
/// How often a server reads the token's file again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// The live bootstrap token (or none).
#[derive(Debug)]
pub struct BootstrapToken {
    file: Option<PathBuf>,
    current: RwLock<Option<Arc<str>>>,
}

/// What [`BootstrapToken::open`] found, to tell the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// `KICKOFF_API_TOKEN=off`.
    Off,
    /// From `KICKOFF_API_TOKEN` (or its file).
    Configured,
    /// Generated now into the file: the only time it is shown.
    Created { token: String, path: PathBuf },
    /// Read from the file, made by an earlier start.
    Kept { path: PathBuf },
}

impl BootstrapToken {
    /// A fixed token (tests, and `KICKOFF_API_TOKEN`).
    pub fn fixed(token: &str) -> Self {
        BootstrapToken {
            file: None,
            current: RwLock::new(Some(Arc::from(token))),
        }
    }

    /// No bootstrap token.
    pub fn off() -> Self {
        BootstrapToken {
            file: None,
            current: RwLock::new(None),
        }
    }

    /// The token from `configured` (`KICKOFF_API_TOKEN`; `off`, or empty for the file), else from
    /// the data directory's file, made now if there is none.
    pub fn open(
        configured: Option<&str>,
        data_dir: &Path,
    ) -> Result<(BootstrapToken, Opened), DataDirError> {
        match configured.map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) if t.eq_ignore_ascii_case(OFF) => return Ok((Self::off(), Opened::Off)),
            Some(t) => return Ok((Self::fixed(t), Opened::Configured)),
            None => {}
        }
        let dir = data_dir::prepare(data_dir)?;
        let path = dir.join(FILE_NAME);
        let opened = match read(&path)? {
            Some(_) => Opened::Kept { path: path.clone() },
            None => {
                let token = random_hex(24);
                // An empty file (a write cut short, a `touch`) is replaced; a missing one made.
                match data_dir::read_private(&path)? {
                    Some(_) => data_dir::replace_private(&path, &token)?,
                    None => data_dir::create_private(&path, &token)?,
                }
                Opened::Created {
                    token,
                    path: path.clone(),
                }
            }
        };
        let token = BootstrapToken {
            current: RwLock::new(read(&path)?.map(Arc::from)),
            file: Some(path),
        };
        Ok((token, opened))
    }

    /// Whether `presented` is the live token (compared in constant time).
    pub fn matches(&self, presented: &str) -> bool {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current
            .as_deref()
            .is_some_and(|t| constant_time_eq(presented.as_bytes(), t.as_bytes()))
    }

    /// Reads the file again (a file-less token never changes). A file that is gone or no longer
    /// private leaves no token.
    pub fn reload(&self) {
        let Some(path) = &self.file else {
            return;
        };
        let next = match read(path) {
            Ok(t) => t.map(Arc::from),
            // A passing I/O error (out of file descriptors, say) keeps the token it had.
            Err(e @ DataDirError::Io { .. }) => {
                tracing::warn!(error = %e, "could not read the bootstrap API token again; keeping it");
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "the bootstrap API token is off until its file is safe again");
                None
            }
        };
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if current.as_deref() != next.as_deref() {
            tracing::info!(path = %path.display(), "the bootstrap API token changed");
            *current = next;
        }
    }

    /// Reads the file again every [`RELOAD_EVERY`] until `shutdown`.
    pub async fn watch(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        if self.file.is_none() {
            return;
        }
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RELOAD_EVERY) => {}
            }
            let token = self.clone();
            let _ = tokio::task::spawn_blocking(move || token.reload()).await;
        }
    }
}

/// `kickoff token rotate`: a new token in the data directory's file, replacing the old one (in one
/// step); returns it (to be shown once).
pub fn rotate(data_dir: &Path) -> Result<(String, PathBuf), DataDirError> {
    let dir = data_dir::prepare(data_dir)?;
    let path = dir.join(FILE_NAME);
    let token = random_hex(24);
    data_dir::replace_private(&path, &token)?;
    Ok((token, path))
}

fn read(path: &Path) -> Result<Option<String>, DataDirError> {
    Ok(data_dir::read_private(path)?
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir() -> PathBuf {
        std::env::temp_dir().join(format!("kickoff-token-test-{}", random_hex(6)))
    }

    #[test]
    fn made_once_shown_once_and_rotated_in_place() {
        let dir = temp_dir();
        let (token, opened) = BootstrapToken::open(None, &dir).unwrap();
        let Opened::Created { token: first, path } = opened else {
            panic!("a fresh data directory makes a token, got {opened:?}");
        };
        assert!(token.matches(&first));
        assert!(!token.matches("guess"));
        let (again, opened) = BootstrapToken::open(Some(""), &dir).unwrap();
        assert_eq!(opened, Opened::Kept { path: path.clone() });
        assert!(
            again.matches(&first),
            "an empty KICKOFF_API_TOKEN means the file"
        );

        let (second, _) = rotate(&dir).unwrap();
        assert!(token.matches(&first), "until the file is read again");
        token.reload();
        assert!(token.matches(&second));
        assert!(!token.matches(&first), "the old token stops working");

        // Made readable by others: no longer trusted, so no token at all.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        token.reload();
        assert!(!token.matches(&second));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_token_file_is_replaced_by_a_new_token() {
        let dir = temp_dir();
        std::fs::create_dir(&dir).unwrap();
        data_dir::create_private(&dir.join(FILE_NAME), "").unwrap();
        let (token, opened) = BootstrapToken::open(None, &dir).unwrap();
        let Opened::Created { token: made, .. } = opened else {
            panic!("an empty file gets a token, got {opened:?}");
        };
        assert!(token.matches(&made));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn off_is_no_token_and_no_file() {
        let dir = temp_dir();
        let (token, opened) = BootstrapToken::open(Some("off"), &dir).unwrap();
        assert_eq!(opened, Opened::Off);
        assert!(!token.matches("off"));
        assert!(!token.matches(""));
        assert!(!dir.exists(), "nothing is written");
        let (fixed, opened) = BootstrapToken::open(Some(" tok "), &dir).unwrap();
        assert_eq!(opened, Opened::Configured);
        assert!(fixed.matches("tok"));
    }
}
