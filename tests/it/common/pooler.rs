//! Debian's PgBouncer in transaction mode in front of the test cluster, one per test that asks
//! (`KICKOFF_TEST_POOL_MODE=transaction`: see [`super::test_db`]).
//!
//! Set up to expose what relies on a session: `server_round_robin` hands out the server
//! connections in turn (the default, LIFO, gives a lone client the same one back, which hides a
//! statement split across two of them), and the pool is small enough that clients share servers.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

/// A running PgBouncer; stopped when dropped.
pub struct PgBouncer {
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

/// Where Debian's package puts the binary (`apt-get install pgbouncer`; scripts/bootstrap.sh).
const BINARY: &str = "/usr/sbin/pgbouncer";

impl PgBouncer {
    /// Starts one in front of the server `upstream` points at, for every database on it.
    pub async fn start(upstream: &PgConnectOptions) -> PgBouncer {
        // The free port found may be taken by another test's listener before PgBouncer binds
        // it: PgBouncer then exits, and another port is tried.
        for _ in 0..5 {
            if let Some(bouncer) = PgBouncer::try_start(upstream).await {
                return bouncer;
            }
        }
        panic!("PgBouncer could not bind a port in 5 tries");
    }

    async fn try_start(upstream: &PgConnectOptions) -> Option<PgBouncer> {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("kickoff-pgbouncer-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let user = upstream.get_username();
        let password = upstream_password();
        // Any client name is let in (the tests' own cluster, on loopback); the servers are
        // reached as the cluster's superuser.
        let ini = format!(
            "[databases]\n\
             * = host={host} port={upstream_port} user={user} password={password}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             auth_type = any\n\
             pool_mode = transaction\n\
             server_round_robin = 1\n\
             default_pool_size = 12\n\
             max_client_conn = 1000\n\
             unix_socket_dir =\n\
             logfile = {log}\n\
             pidfile = {pid}\n",
            host = upstream.get_host(),
            upstream_port = upstream.get_port(),
            log = dir.join("pgbouncer.log").display(),
            pid = dir.join("pgbouncer.pid").display(),
        );
        let config = dir.join("pgbouncer.ini");
        std::fs::write(&config, ini).unwrap();
        let mut cmd = Command::new(BINARY);
        if kickoff::data_dir::effective_uid() == 0 {
            // PgBouncer refuses to run as root: it runs as the cluster's own user.
            use std::os::unix::fs::PermissionsExt;
            use std::os::unix::process::CommandExt;
            let (uid, gid) = kickoff::postgres::postgres_user().unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
            std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
            cmd.uid(uid).gid(gid);
        }
        // It goes when the test's process does (a test's PgBouncer lives as long as the test).
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting {BINARY} failed ({e}): install it with scripts/bootstrap.sh")
            });
        let mut bouncer = PgBouncer { port, dir, child };
        let up = bouncer.wait_up().await;
        // Read at start only: nothing is left behind (its log stays open, unlinked).
        let _ = std::fs::remove_dir_all(&bouncer.dir);
        up.then_some(bouncer)
    }

    /// Whether it came up listening on its port (it logs "process up" once set up); `false` when
    /// it exited first or could not bind (its port was taken).
    async fn wait_up(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let log = self.dir.join("pgbouncer.log");
        loop {
            let listening = format!("listening on 127.0.0.1:{}", self.port);
            if let Ok(l) = std::fs::read_to_string(&log) {
                if l.contains("process up") {
                    return l.contains(&listening);
                }
            }
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            if tokio::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                panic!(
                    "PgBouncer did not come up on {} within 10 s:\n{log}",
                    self.port
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `upstream` reached through this PgBouncer instead (same user, password and database).
    pub fn in_front_of(&self, upstream: &PgConnectOptions) -> PgConnectOptions {
        upstream.clone().host("127.0.0.1").port(self.port)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keeps `bouncer` running until the test's process ends, whoever holds its pools: tests keep
/// a pool and drop the rest of their `TestDb`.
pub fn keep(bouncer: PgBouncer) -> Arc<PgBouncer> {
    static KEPT: Mutex<Vec<Arc<PgBouncer>>> = Mutex::new(Vec::new());
    let bouncer = Arc::new(bouncer);
    KEPT.lock().unwrap().push(bouncer.clone());
    bouncer
}

/// A port free a moment ago (for a process to listen on, named before it starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The cluster's password, from the test cluster's URL (PgConnectOptions does not give it back).
fn upstream_password() -> String {
    let url = std::env::var("KICKOFF_TEST_DATABASE_URL").unwrap();
    let parsed = reqwest::Url::parse(&url).unwrap();
    parsed.password().unwrap_or_default().to_string()
}
