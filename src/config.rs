//! Server configuration, from the environment (or the same names as command-line flags).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

/// Everything `kickoff serve` needs. Each field's doc gives its variable and default.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// PostgreSQL to use. Default: none, which starts an embedded cluster in the data directory.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,

    /// Where the embedded cluster and the generated API token live. Default: `./.kickoff`.
    #[arg(long, env = "KICKOFF_DATA_DIR", default_value = ".kickoff")]
    pub data_dir: PathBuf,

    /// Listen address (Leptos's variable). Default: `127.0.0.1:3000`.
    #[arg(long, env = "LEPTOS_SITE_ADDR", default_value = "127.0.0.1:3000")]
    pub site_addr: SocketAddr,

    /// Where the built site (wasm, js, css, public files) is. Default: `target/site`, or
    /// `$CARGO_TARGET_DIR/site` when that exists (cargo-leptos puts it there).
    #[arg(long, env = "LEPTOS_SITE_ROOT")]
    pub site_root: Option<PathBuf>,

    /// Bearer token of the REST API. Default: generated once and kept in `<data dir>/api-token`.
    #[arg(long, env = "KICKOFF_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,

    /// On the first start of a database without operator accounts, create the admin `admin` with
    /// this password. Default: unset (create one with `kickoff user add NAME --role admin`).
    #[arg(long, env = "KICKOFF_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,

    /// Send the session cookie over HTTPS only (set it when the dashboard is served over HTTPS,
    /// e.g. behind a TLS proxy). Default: false.
    #[arg(long, env = "KICKOFF_SECURE_COOKIES", default_value_t = false)]
    pub secure_cookies: bool,

    /// Hosts (`host` or `host:port`, comma-separated) that webhook jobs may call. A host name must
    /// resolve to public addresses only, unless written `private:host[:port]`; an IP literal must
    /// be listed exactly. Default: none.
    #[arg(
        long,
        env = "KICKOFF_WEBHOOK_ALLOWED_HOSTS",
        value_delimiter = ',',
        default_value = ""
    )]
    pub webhook_allowed_hosts: Vec<String>,

    /// Queues this node runs, as `name:concurrency` (comma-separated).
    /// Default: `default:10,webhooks:10,questions:10`.
    #[arg(
        long,
        env = "KICKOFF_QUEUES",
        value_delimiter = ',',
        default_value = "default:10,webhooks:10,questions:10"
    )]
    pub queues: Vec<String>,

    /// Hours finished jobs are kept before the pruner deletes them. Default: 24.
    #[arg(long, env = "KICKOFF_RETENTION_HOURS", default_value_t = 24)]
    pub retention_hours: u64,

    /// This node's id. Default: `<hostname>-<pid>-<random>`.
    #[arg(long, env = "KICKOFF_NODE_ID")]
    pub node_id: Option<String>,

    /// Seconds running jobs get to finish at shutdown before they are handed back. Default: 10.
    #[arg(long, env = "KICKOFF_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,

    /// Lease of an executing job in milliseconds: a dead node's jobs are rescued this long after its
    /// last heartbeat. Default: 5000.
    #[arg(long, env = "KICKOFF_LEASE_MS", default_value_t = 5000)]
    pub lease_ms: u64,

    /// Largest database pool. Default: 20.
    #[arg(long, env = "KICKOFF_DB_POOL", default_value_t = 20)]
    pub db_pool: u32,

    /// Log format: `text` or `json`. Default: `text`.
    #[arg(long, env = "KICKOFF_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

impl Config {
    /// Parses `KICKOFF_QUEUES` entries.
    pub fn queue_list(&self) -> Result<Vec<(String, usize)>, String> {
        self.queues
            .iter()
            .filter(|q| !q.trim().is_empty())
            .map(|q| {
                let (name, n) = q.trim().split_once(':').unwrap_or((q.trim(), "10"));
                let n: usize = n
                    .parse()
                    .map_err(|_| format!("KICKOFF_QUEUES: `{q}` is not name:concurrency"))?;
                Ok((name.to_string(), n))
            })
            .collect()
    }

    /// The allowed webhook hosts, trimmed and lower-cased.
    pub fn allowed_hosts(&self) -> Vec<String> {
        self.webhook_allowed_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        config: super::Config,
    }

    #[test]
    fn parses_queue_lists_and_refuses_bad_ones() {
        let w = Wrap::parse_from(["x", "--queues", "default:5,hooks:2,plain"]);
        assert_eq!(
            w.config.queue_list().unwrap(),
            vec![
                ("default".into(), 5),
                ("hooks".into(), 2),
                ("plain".into(), 10)
            ]
        );
        let w = Wrap::parse_from(["x", "--queues", "default:many"]);
        assert!(w.config.queue_list().is_err());
    }
}
