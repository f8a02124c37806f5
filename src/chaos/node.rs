//! A `kickoff serve` child process of the chaos suite: started, killed with SIGKILL, or stopped.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Every node's `KICKOFF_API_TOKEN` (the bootstrap token: an admin's).
pub const BOOTSTRAP_TOKEN: &str = "chaos-token";

/// What every node is started with.
pub struct NodeEnv {
    pub binary: std::path::PathBuf,
    /// Without query string; each node adds its `application_name`.
    pub database_url: String,
    pub lease_ms: u64,
    pub webhook_host: String,
    pub log_dir: std::path::PathBuf,
    /// `KICKOFF_QUEUES`.
    pub queues: String,
    /// `KICKOFF_SECRET_KEY`, the same for every node (webhook endpoints' secrets are sealed
    /// with it); `None`: each node's own, in its data directory.
    pub secret_key: Option<String>,
    /// Further settings (`KICKOFF_ALERT_INTERVAL_MS`, ...), the same for every node.
    pub settings: Vec<(&'static str, String)>,
    /// The path the nodes of odd slots serve under (`KICKOFF_BASE_PATH`: as behind a proxy
    /// that forwards a path of its site); their `url` ends with it. `None`: every node at the
    /// root.
    pub odd_base: Option<&'static str>,
}

pub struct Node {
    pub slot: usize,
    /// `chaos-<slot>-<generation>`: a restarted node is a new node, as after a real crash.
    pub id: String,
    /// The `application_name` of its database connections (to cut them).
    pub app_name: String,
    /// Where it serves: `http://127.0.0.1:<port>`, and its base path (`NodeEnv::odd_base`).
    pub url: String,
    child: Child,
}

impl Node {
    /// Starts a node and waits until it serves.
    pub async fn start(env: &NodeEnv, slot: usize, generation: usize) -> Result<Node, String> {
        Node::start_moved(env, slot, generation, 0).await
    }

    /// [`Node::start`], with the node's wall clock moved by `clock_secs` (Debian's libfaketime,
    /// installed by scripts/bootstrap.sh; the monotonic clock, which timers use, is left alone).
    pub async fn start_moved(
        env: &NodeEnv,
        slot: usize,
        generation: usize,
        clock_secs: i32,
    ) -> Result<Node, String> {
        let id = format!("chaos-{slot}-{generation}");
        let app_name = format!("kickoff-{id}");
        let log_path = env.log_dir.join(format!("{id}.log"));
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut command = Command::new(&env.binary);
        if let Some(key) = &env.secret_key {
            command.env("KICKOFF_SECRET_KEY", key);
        }
        command.envs(env.settings.iter().map(|(k, v)| (*k, v.as_str())));
        if let Some(base) = env.odd_base.filter(|_| slot % 2 == 1) {
            command.env("KICKOFF_BASE_PATH", base);
        }
        if clock_secs != 0 {
            command
                .env("LD_PRELOAD", faketime_library()?)
                .env("FAKETIME", format!("{clock_secs:+}s"))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let mut child = command
            .arg("serve")
            .env(
                "DATABASE_URL",
                format!("{}?application_name={app_name}", env.database_url),
            )
            .env("LEPTOS_SITE_ADDR", "127.0.0.1:0")
            .env("KICKOFF_API_TOKEN", BOOTSTRAP_TOKEN)
            .env("KICKOFF_NODE_ID", &id)
            .env("KICKOFF_QUEUES", &env.queues)
            .env("KICKOFF_LEASE_MS", env.lease_ms.to_string())
            .env("KICKOFF_SHUTDOWN_GRACE_SECS", "3")
            .env("KICKOFF_WEBHOOK_ALLOWED_HOSTS", &env.webhook_host)
            .env("KICKOFF_DATA_DIR", env.log_dir.join(&id))
            .env(
                "RUST_LOG",
                std::env::var("KICKOFF_CHAOS_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start {}: {e}", env.binary.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("Kickoff listening on ") {
                    return Some(url.trim().to_string());
                }
            }
            None
        })
        .await;
        let Ok(Some(url)) = ready else {
            return Err(format!(
                "node {id} did not start: see {}",
                log_path.display()
            ));
        };
        // Keep reading, so that a full pipe never blocks the node.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Node {
            slot,
            id,
            app_name,
            url,
            child,
        })
    }

    /// SIGKILL: no shutdown, no hand-back; its leases must expire.
    pub async fn kill9(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// SIGTERM and wait (a graceful stop hands running jobs back).
    pub async fn stop(self) {
        stop_child(self.child).await;
    }
}

/// Stops a `kickoff serve` child: SIGTERM, then up to 20 s for its graceful stop, then SIGKILL.
pub async fn stop_child(mut child: Child) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .await;
    }
    if tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

/// Debian's libfaketime (`/usr/lib/<arch>/faketime/libfaketime.so.1`).
pub fn faketime_library() -> Result<String, String> {
    std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|arch| arch.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
        .map(|p| p.to_string_lossy().to_string())
        .ok_or_else(|| {
            "libfaketime.so.1 not found under /usr/lib/*/faketime: run scripts/bootstrap.sh".into()
        })
}
