//! The embedded PostgreSQL cluster: with no `DATABASE_URL`, Kickoff runs a private cluster from the
//! machine's PostgreSQL binaries, with its data on disk so jobs survive restarts.
//!
//! Invariants:
//! - One Kickoff process owns a data directory at a time: `kickoff.lock` is held with an OS file lock,
//!   which the kernel releases when the process dies, even by SIGKILL.
//! - A postmaster left running by a killed Kickoff process is adopted (its port is read from
//!   `postmaster.pid`); a stale `postmaster.pid` whose process is gone is cleaned up by PostgreSQL
//!   itself at start.
//! - PostgreSQL refuses to run as root: when Kickoff runs as root, the cluster runs as the unprivileged
//!   `postgres` system user, which must own the cluster directory and be able to reach it. Kickoff
//!   adds the search bit to the data directory itself, never to a directory above it: one that
//!   the `postgres` user cannot pass is an error that says what to do.
//! - The data directory is checked before use (see [`crate::data_dir`]); root never follows a
//!   symbolic link in the cluster directory (which the `postgres` user owns) when it writes there.
//! - The cluster listens on a free loopback port only (no unix socket, whose path length is limited),
//!   with password authentication; the generated password is kept in the data directory.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What went wrong while preparing or starting the embedded cluster.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "no PostgreSQL server binaries found (looked for initdb and pg_ctl on PATH and in \
         /usr/lib/postgresql/*/bin): install PostgreSQL (e.g. `apt-get install postgresql`) or set \
         DATABASE_URL to use an existing server"
    )]
    NoBinaries,
    #[error(
        "the data directory {0} is in use by another Kickoff process; stop it, choose another \
         KICKOFF_DATA_DIR, or point both at one server with DATABASE_URL"
    )]
    Locked(PathBuf),
    #[error(
        "running as root needs the unprivileged `postgres` system user to run PostgreSQL: {0}"
    )]
    NoPostgresUser(String),
    #[error(
        "running as root, the cluster runs as the `postgres` user, who cannot reach {data_dir}: \
         {blocked} (mode {mode:04o}) lacks the search bit for others. Kickoff changes no mode \
         outside its data directory: place the data directory where that user can reach it (e.g. \
         KICKOFF_DATA_DIR=/var/lib/kickoff), or run `chmod o+x {blocked}` yourself"
    )]
    Unreachable {
        data_dir: PathBuf,
        blocked: PathBuf,
        mode: u32,
    },
    #[error(transparent)]
    DataDir(#[from] crate::data_dir::DataDirError),
    #[error("{step} failed: {detail}")]
    Command { step: String, detail: String },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> EmbeddedError + '_ {
    move |source| EmbeddedError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How the cluster is tuned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Default PostgreSQL settings: every commit is flushed to disk.
    Durable,
    /// `fsync=off`, `synchronous_commit=off`: for throwaway test clusters only.
    Throwaway,
}

/// A running embedded cluster. Call [`EmbeddedPostgres::stop`] on shutdown.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    bin_dir: PathBuf,
    pg_dir: PathBuf,
    run_as: Option<(u32, u32)>,
    port: u16,
    password: String,
    // Held for the life of the cluster: dropping it releases the data directory to other processes.
    _lock: fs::File,
}

const SUPERUSER: &str = "kickoff";
/// Written into the cluster directory when it is complete (configured, database created).
const INIT_MARKER: &str = "kickoff-initialized";
/// The database Kickoff itself uses inside the cluster.
pub const DATABASE: &str = "kickoff";

impl EmbeddedPostgres {
    /// Starts (or adopts) the cluster under `data_dir/pg`, creating it on first use.
    pub fn start(data_dir: &Path, durability: Durability) -> Result<Self, EmbeddedError> {
        let bin_dir = find_bin_dir().ok_or(EmbeddedError::NoBinaries)?;
        let data_dir = crate::data_dir::prepare(data_dir)?;

        let lock_path = data_dir.join("kickoff.lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        if lock.try_lock().is_err() {
            return Err(EmbeddedError::Locked(data_dir));
        }

        let run_as = if is_root() {
            Some(postgres_user()?)
        } else {
            None
        };
        let pg_dir = data_dir.join("pg");
        let mut cluster = EmbeddedPostgres {
            bin_dir,
            pg_dir,
            run_as,
            port: 0,
            password: String::new(),
            _lock: lock,
        };
        if run_as.is_some() {
            grant_traversal(&data_dir)?;
        }
        // The marker is written last by `init`: a cluster without it was never finished (an init
        // interrupted or failed) and holds no data, so it is made again.
        if !cluster.pg_dir.join(INIT_MARKER).exists() {
            if running_postmaster(&cluster.pg_dir).is_some() {
                let _ = cluster.stop();
            }
            cluster.init(&data_dir, durability)?;
        }
        let pw_path = data_dir.join("pg-password");
        cluster.password = crate::data_dir::read_private(&pw_path)?
            .ok_or_else(|| {
                io_err(&pw_path)(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the cluster's password file is missing",
                ))
            })?
            .trim()
            .to_string();

        match running_postmaster(&cluster.pg_dir) {
            Some(port) => {
                tracing::info!(
                    port,
                    "using the embedded PostgreSQL that is already running (just created, or left by a previous process)"
                );
                cluster.port = port;
            }
            None => cluster.start_on_free_port(&data_dir)?,
        }
        Ok(cluster)
    }

    /// The URL of `database` in the cluster that another Kickoff process holds in `data_dir` and
    /// runs, for a command run beside a server (`kickoff demo`, `kickoff user`, `kickoff
    /// schedule`): it uses that cluster and leaves it running. `None` when no process holds the
    /// directory (the command then starts the cluster itself) or the holder's cluster is not
    /// running (yet).
    pub fn running_url(data_dir: &Path, database: &str) -> Result<Option<String>, EmbeddedError> {
        let data_dir = data_dir.canonicalize().map_err(io_err(data_dir))?;
        crate::data_dir::check(&data_dir)?;
        let lock_path = data_dir.join("kickoff.lock");
        let lock = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        if lock.try_lock().is_ok() {
            return Ok(None);
        }
        let Some(port) = running_postmaster(&data_dir.join("pg")) else {
            return Ok(None);
        };
        let pw_path = data_dir.join("pg-password");
        let Some(password) = crate::data_dir::read_private(&pw_path)? else {
            return Ok(None);
        };
        Ok(Some(cluster_url(password.trim(), port, database)))
    }

    /// The URL of the maintenance database `postgres` (to create other databases).
    pub fn admin_url(&self) -> String {
        self.url_for("postgres")
    }

    /// The URL of a database in this cluster.
    pub fn url_for(&self, database: &str) -> String {
        cluster_url(&self.password, self.port, database)
    }

    /// The port the cluster listens on (loopback only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the cluster (fast shutdown: open transactions are rolled back, data is kept).
    pub fn stop(&self) -> Result<(), EmbeddedError> {
        let pg_dir = self.pg_dir.to_string_lossy().into_owned();
        self.run(
            "pg_ctl stop",
            "pg_ctl",
            &["stop", "-D", &pg_dir, "-m", "fast", "-w", "-t", "60"],
        )
    }

    /// Crashes the cluster (immediate shutdown: no checkpoint, every connection cut, recovery from
    /// the WAL at the next start) and starts it again on the same port. For the chaos suite.
    pub fn crash_and_restart(&self) -> Result<(), EmbeddedError> {
        let pg_dir = self.pg_dir.to_string_lossy().into_owned();
        self.run(
            "pg_ctl stop",
            "pg_ctl",
            &["stop", "-D", &pg_dir, "-m", "immediate", "-w", "-t", "60"],
        )?;
        self.pg_ctl_start()
    }

    /// A streaming standby of this cluster under `data_dir/pg` (made with `pg_basebackup -R`,
    /// the same password), started on a port of its own. For the failover scenario: make it
    /// synchronous with `synchronous_standby_names` on this primary.
    pub fn replica_of(&self, data_dir: &Path) -> Result<EmbeddedPostgres, EmbeddedError> {
        let data_dir = crate::data_dir::prepare(data_dir)?;
        let pg_dir = data_dir.join("pg");
        fs::create_dir_all(&pg_dir).map_err(io_err(&pg_dir))?;
        fs::set_permissions(&pg_dir, fs::Permissions::from_mode(0o700)).map_err(io_err(&pg_dir))?;
        self.chown_to_postgres(&pg_dir)?;
        if self.run_as.is_some() {
            grant_traversal(&data_dir)?;
        }
        write_private(&data_dir.join("pg-password"), &self.password)?;
        let port = self.port.to_string();
        let target = pg_dir.to_string_lossy().into_owned();
        self.run(
            "pg_basebackup",
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                SUPERUSER,
                "-D",
                &target,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
            ],
        )?;
        // The copy holds the primary's marker: `start` adopts it as made, and starts it.
        EmbeddedPostgres::start(&data_dir, Durability::Durable)
    }

    /// Promotes this standby to a primary (it stops following and takes writes).
    pub fn promote(&self) -> Result<(), EmbeddedError> {
        let pg_dir = self.pg_dir.to_string_lossy().into_owned();
        self.run(
            "pg_ctl promote",
            "pg_ctl",
            &["promote", "-D", &pg_dir, "-w", "-t", "60"],
        )
    }

    /// Kills the cluster's postmaster with SIGKILL, as a machine that dies: no shutdown, no
    /// checkpoint; its backends end as they notice. It is not restarted.
    pub fn kill(&self) -> Result<(), EmbeddedError> {
        let pid_path = self.pg_dir.join("postmaster.pid");
        let text = fs::read_to_string(&pid_path).map_err(io_err(&pid_path))?;
        let pid: i32 = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| EmbeddedError::Command {
                step: "kill".into(),
                detail: format!("no pid in {}", pid_path.display()),
            })?;
        let killed = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .map_err(io_err(&pid_path))?;
        if killed.success() {
            Ok(())
        } else {
            Err(EmbeddedError::Command {
                step: "kill".into(),
                detail: format!("kill -KILL {pid}: {killed}"),
            })
        }
    }

    fn init(&mut self, data_dir: &Path, durability: Durability) -> Result<(), EmbeddedError> {
        tracing::info!(dir = %self.pg_dir.display(), "creating the embedded PostgreSQL cluster");
        if self.pg_dir.exists() {
            // A half-made cluster from an interrupted init: it holds no data yet.
            fs::remove_dir_all(&self.pg_dir).map_err(io_err(&self.pg_dir))?;
        }
        fs::create_dir_all(&self.pg_dir).map_err(io_err(&self.pg_dir))?;
        fs::set_permissions(&self.pg_dir, fs::Permissions::from_mode(0o700))
            .map_err(io_err(&self.pg_dir))?;
        let password = random_hex(32);
        let pw_path = data_dir.join("pg-password");
        // initdb wants an empty directory: its password file sits beside it, readable by the
        // cluster's user for the moment initdb needs it.
        let pw_tmp = data_dir.join("initdb-password");
        write_private(&pw_path, &password)?;
        write_private(&pw_tmp, &password)?;
        self.chown_to_postgres(&self.pg_dir)?;
        self.chown_to_postgres(&pw_tmp)?;

        let pg_dir = self.pg_dir.to_string_lossy().into_owned();
        let pwfile = format!("--pwfile={}", pw_tmp.display());
        let made = self.run(
            "initdb",
            "initdb",
            &[
                "-D",
                &pg_dir,
                "-U",
                SUPERUSER,
                &pwfile,
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
            ],
        );
        let _ = fs::remove_file(&pw_tmp);
        made?;

        let mut conf = String::from(
            "\n# Kickoff embedded cluster\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n\
             max_connections = 300\nshared_buffers = '256MB'\n",
        );
        if durability == Durability::Throwaway {
            conf.push_str("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n");
        }
        let conf_path = self.pg_dir.join("postgresql.conf");
        self.append_to_cluster_file(&conf_path, &conf)?;

        // Left running: `start` finds and adopts it.
        self.password = password;
        self.start_on_free_port(data_dir)?;
        let port = self.port.to_string();
        self.run(
            "createdb",
            "createdb",
            &["-h", "127.0.0.1", "-p", &port, "-U", SUPERUSER, DATABASE],
        )?;
        let marker = self.pg_dir.join(INIT_MARKER);
        crate::data_dir::create_private(&marker, "")?;
        // The cluster's user owns everything in its directory (a base backup reads every file).
        self.chown_to_postgres(&marker)
    }

    /// Appends to a file initdb made: never through a symbolic link, and only to a regular file of
    /// the cluster's user (root writes here in a directory another user owns).
    fn append_to_cluster_file(&self, path: &Path, text: &str) -> Result<(), EmbeddedError> {
        let mut file = fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(io_err(path))?;
        let meta = file.metadata().map_err(io_err(path))?;
        let owner = self
            .run_as
            .map_or_else(crate::data_dir::effective_uid, |(uid, _)| uid);
        if !meta.is_file() || meta.uid() != owner {
            return Err(crate::data_dir::DataDirError::Unsafe {
                path: path.to_path_buf(),
            }
            .into());
        }
        file.write_all(text.as_bytes()).map_err(io_err(path))
    }

    /// Starts the cluster on a free loopback port; another process may take the port between the
    /// look-up and the start, so a failed start is tried again on another port.
    fn start_on_free_port(&mut self, data_dir: &Path) -> Result<(), EmbeddedError> {
        let mut last = None;
        for _ in 0..3 {
            self.port = free_port().map_err(io_err(data_dir))?;
            match self.pg_ctl_start() {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("tried at least once"))
    }

    fn pg_ctl_start(&self) -> Result<(), EmbeddedError> {
        let pg_dir = self.pg_dir.to_string_lossy().into_owned();
        let log = self
            .pg_dir
            .join("server.log")
            .to_string_lossy()
            .into_owned();
        let opts = format!("-p {}", self.port);
        self.run(
            "pg_ctl start",
            "pg_ctl",
            &[
                "start", "-D", &pg_dir, "-l", &log, "-o", &opts, "-w", "-t", "120",
            ],
        )
        .map_err(|e| match e {
            EmbeddedError::Command { step, detail } => EmbeddedError::Command {
                step,
                detail: format!("{detail}\nsee {log}"),
            },
            other => other,
        })
    }

    fn run(&self, step: &str, program: &str, args: &[&str]) -> Result<(), EmbeddedError> {
        let mut cmd = Command::new(self.bin_dir.join(program));
        cmd.args(args)
            .env("PGPASSWORD", &self.password)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The cluster must not die with the terminal's Ctrl-C before Kickoff stops it cleanly.
            .process_group(0)
            .current_dir(&self.pg_dir);
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        let out = cmd.output().map_err(|e| EmbeddedError::Command {
            step: step.to_string(),
            detail: e.to_string(),
        })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(EmbeddedError::Command {
                step: step.to_string(),
                detail: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            })
        }
    }

    fn chown_to_postgres(&self, path: &Path) -> Result<(), EmbeddedError> {
        if let Some((uid, gid)) = self.run_as {
            // Of the link itself, were it one: never of what it points to.
            std::os::unix::fs::lchown(path, Some(uid), Some(gid)).map_err(io_err(path))?;
        }
        Ok(())
    }
}

/// Finds the directory holding `initdb` and `pg_ctl`: PATH first, then the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian keeps server binaries off PATH).
fn find_bin_dir() -> Option<PathBuf> {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_tools(&dir) {
                // PATH often holds symlinks to the real directory (which also has createdb):
                // use where initdb really lives.
                return fs::canonicalize(dir.join("initdb"))
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf))
                    .filter(|d| has_tools(d))
                    .or(Some(dir));
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_tools(&bin).then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// The port of a live postmaster in `pg_dir`, read from its `postmaster.pid`.
/// The URL of `database` in a cluster on this machine's loopback `port`, as its superuser.
fn cluster_url(password: &str, port: u16, database: &str) -> String {
    format!("postgres://{SUPERUSER}:{password}@127.0.0.1:{port}/{database}")
}

fn running_postmaster(pg_dir: &Path) -> Option<u16> {
    let text = fs::read_to_string(pg_dir.join("postmaster.pid")).ok()?;
    let mut lines = text.lines();
    let pid: u32 = lines.next()?.trim().parse().ok()?;
    let port: u16 = lines.nth(2)?.trim().parse().ok()?;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    // A recycled pid that now belongs to another program, or to another cluster, does not count.
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    (cmdline.contains("postgres") && cmdline.contains(&*pg_dir.to_string_lossy())).then_some(port)
}

/// Writes a file only its owner can read, from its creation on, in place of any file (or link)
/// there.
fn write_private(path: &Path, content: &str) -> Result<(), EmbeddedError> {
    let _ = fs::remove_file(path);
    Ok(crate::data_dir::create_private(path, content)?)
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn is_root() -> bool {
    crate::data_dir::effective_uid() == 0
}

/// The `postgres` system user (uid, gid), as whom root runs what refuses to run as root.
pub fn postgres_user() -> Result<(u32, u32), EmbeddedError> {
    let passwd = fs::read_to_string("/etc/passwd")
        .map_err(|e| EmbeddedError::NoPostgresUser(e.to_string()))?;
    passwd
        .lines()
        .find_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            (f.len() > 3 && f[0] == "postgres")
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
        .ok_or_else(|| {
            EmbeddedError::NoPostgresUser(
                "no `postgres` entry in /etc/passwd (installing the postgresql package creates it)"
                    .into(),
            )
        })
}

/// Lets the `postgres` user reach the cluster directory inside `dir`: adds only the search (x) bit
/// for others on `dir` itself where it lacks (never read or write), and checks, without changing
/// them, that every directory above it has that bit.
fn grant_traversal(dir: &Path) -> Result<(), EmbeddedError> {
    for ancestor in dir.ancestors().skip(1) {
        let mode = fs::metadata(ancestor)
            .map_err(io_err(ancestor))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            return Err(EmbeddedError::Unreachable {
                data_dir: dir.to_path_buf(),
                blocked: ancestor.to_path_buf(),
                mode: mode & 0o7777,
            });
        }
    }
    let mode = fs::metadata(dir).map_err(io_err(dir))?.permissions().mode();
    if mode & 0o001 == 0 {
        tracing::info!(path = %dir.display(), "adding o+x so the postgres user can reach the cluster directory");
        fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o001)).map_err(io_err(dir))?;
    }
    Ok(())
}

/// `len` hex digits from the operating system's generator (a password must not be predictable
/// from the clock, as `fastrand`'s seed is).
fn random_hex(len: usize) -> String {
    let mut hex = crate::accounts::secret::random_hex(len.div_ceil(2));
    hex.truncate(len);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_above_the_data_directory_is_never_widened() {
        let parent = std::env::temp_dir().join(format!("kickoff-traversal-{}", random_hex(8)));
        let data_dir = parent.join("data");
        fs::create_dir_all(&data_dir).unwrap();
        fs::set_permissions(&parent, fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(&data_dir, fs::Permissions::from_mode(0o700)).unwrap();
        let err = grant_traversal(&data_dir).unwrap_err();
        assert!(
            matches!(&err, EmbeddedError::Unreachable { blocked, mode: 0o700, .. } if *blocked == parent),
            "{err}"
        );
        assert!(err.to_string().contains("KICKOFF_DATA_DIR"), "{err}");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode(&parent),
            0o700,
            "the directory above is left as it was"
        );

        // Reachable from above: only the data directory itself gets the search bit.
        fs::set_permissions(&parent, fs::Permissions::from_mode(0o711)).unwrap();
        grant_traversal(&data_dir).unwrap();
        assert_eq!(mode(&data_dir), 0o701);
        assert_eq!(mode(&parent), 0o711);
        fs::remove_dir_all(&parent).unwrap();
    }
}
