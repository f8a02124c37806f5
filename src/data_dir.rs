//! The data directory (`KICKOFF_DATA_DIR`): the embedded cluster, its password and the bootstrap
//! API token live there, so whoever can write in it can plant a token or a cluster that Kickoff
//! adopts.
//!
//! Invariants:
//! - Kickoff uses a data directory only when this process's user owns it and neither its group nor
//!   others may write in it; one it creates is made `0700`.
//! - Secret files are created with mode `0600` from the first byte (`create_new`, never a chmod
//!   afterwards), never through a symbolic link (`O_NOFOLLOW`), and read only when they are
//!   regular files of this user that nobody else may read.
//! - Kickoff changes no mode outside the data directory: what the embedded cluster's `postgres`
//!   user must reach is checked and explained, not granted.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a data directory or one of its files is refused.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error(
        "the data directory {path} may be written by its group or by others (mode {mode:04o}): \
         anyone who can write there can plant a token or a database; run `chmod go-w {path}` or \
         choose another KICKOFF_DATA_DIR"
    )]
    Writable { path: PathBuf, mode: u32 },
    #[error(
        "the data directory {path} belongs to uid {owner}, not to this process's user (uid {me}): \
         run Kickoff as its owner, `chown` it, or choose another KICKOFF_DATA_DIR"
    )]
    Owner { path: PathBuf, owner: u32, me: u32 },
    #[error(
        "{path} is not a regular file of this user readable by it alone (a symbolic link, another \
         owner, or a mode wider than 0600); remove it (or `chmod 600` it if it is yours) and start \
         again"
    )]
    Unsafe { path: PathBuf },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> DataDirError + '_ {
    move |source| DataDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `dir` (mode `0700`) if needed and returns its canonical path once it is safe to use:
/// owned by this process's user and not writable by its group or others.
pub fn prepare(dir: &Path) -> Result<PathBuf, DataDirError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))?;
    let dir = dir.canonicalize().map_err(io_err(dir))?;
    check(&dir)?;
    Ok(dir)
}

/// Refuses a data directory that another user owns or that its group or others may write.
pub fn check(dir: &Path) -> Result<(), DataDirError> {
    let meta = fs::metadata(dir).map_err(io_err(dir))?;
    let me = effective_uid();
    if meta.uid() != me {
        return Err(DataDirError::Owner {
            path: dir.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(DataDirError::Writable {
            path: dir.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Writes a new file that only this user can read, from its creation on; fails if `path` exists
/// (a file or a symbolic link).
pub fn create_private(path: &Path, content: &str) -> Result<(), DataDirError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut f| f.write_all(content.as_bytes()).and_then(|()| f.sync_all()))
        .map_err(io_err(path))
}

/// Replaces `path` with a new private file in one step (a new file beside it, renamed over it):
/// a reader sees the old content or the new, never a part.
pub fn replace_private(path: &Path, content: &str) -> Result<(), DataDirError> {
    // Unpredictable enough: the directory is the server's own (0700) and the file is created
    // exclusively, never followed through a link.
    let tmp = path.with_extension(format!("new-{:08x}", fastrand::u32(..)));
    create_private(&tmp, content)?;
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err(path)(e)
    })
}

/// Reads a private file: `None` if there is none; refused if it is a symbolic link, not a regular
/// file, another user's, or readable by anyone else.
pub fn read_private(path: &Path) -> Result<Option<String>, DataDirError> {
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // ELOOP: the last component is a symbolic link.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(DataDirError::Unsafe {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io_err(path)(e)),
    };
    if !is_private(&file)? {
        return Err(DataDirError::Unsafe {
            path: path.to_path_buf(),
        });
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io_err(path))?;
    Ok(Some(text))
}

fn is_private(file: &File) -> Result<bool, DataDirError> {
    let meta = file.metadata().map_err(|source| DataDirError::Io {
        path: PathBuf::from("(open file)"),
        source,
    })?;
    Ok(meta.is_file() && meta.uid() == effective_uid() && meta.mode() & 0o077 == 0)
}

/// This process's effective user id, from procfs (no unsafe call needed).
pub fn effective_uid() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2)?.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "kickoff-data-dir-test-{name}-{:012x}",
            fastrand::u64(..) >> 16
        ));
        fs::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn a_data_directory_others_may_write_is_refused_and_left_as_it_is() {
        let dir = temp_dir("writable");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let err = prepare(&dir).unwrap_err();
        assert!(
            matches!(err, DataDirError::Writable { mode: 0o777, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("chmod go-w"), "{err}");
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o777
        );
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
        prepare(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_new_data_directory_is_private() {
        let parent = temp_dir("new");
        let dir = prepare(&parent.join("a/b")).unwrap();
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn a_data_directory_of_another_user_is_refused() {
        // Only root can give a directory away; as another user, /proc/1 is root's to start with.
        let dir = temp_dir("owner");
        if effective_uid() == 0 {
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
            let err = check(&dir).unwrap_err();
            assert!(
                matches!(
                    err,
                    DataDirError::Owner {
                        owner: 65534,
                        me: 0,
                        ..
                    }
                ),
                "{err}"
            );
        } else {
            let err = check(Path::new("/")).unwrap_err();
            assert!(matches!(err, DataDirError::Owner { owner: 0, .. }), "{err}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn private_files_are_0600_from_creation_and_never_followed_through_a_link() {
        let dir = temp_dir("files");
        let token = dir.join("api-token");
        create_private(&token, "secret").unwrap();
        assert_eq!(
            fs::metadata(&token).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read_private(&token).unwrap().as_deref(), Some("secret"));
        assert!(
            create_private(&token, "again").is_err(),
            "an existing file is not overwritten"
        );

        // A link planted where a secret is read or written: refused, the target untouched.
        let target = dir.join("elsewhere");
        fs::write(&target, "planted").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.join("pg-password");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            read_private(&link),
            Err(DataDirError::Unsafe { .. })
        ));
        assert!(create_private(&link, "x").is_err());
        assert_eq!(fs::read_to_string(&target).unwrap(), "planted");

        // Readable by others: not trusted as a secret.
        fs::set_permissions(&token, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            read_private(&token),
            Err(DataDirError::Unsafe { .. })
        ));

        replace_private(&token, "rotated").unwrap();
        assert_eq!(read_private(&token).unwrap().as_deref(), Some("rotated"));
        assert_eq!(read_private(&dir.join("none")).unwrap(), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
