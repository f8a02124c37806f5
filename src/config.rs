//! Server configuration, from the environment (or the same names as command-line flags).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::accounts::RequestLimits;
use crate::engine::limits::QueueLimits;
use crate::rate::Rate;

/// Everything `kickoff serve` needs. Each field's doc gives its variable and default.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// A configuration file (TOML) with any of the settings below, named after their variables
    /// (see `config_file`); the environment and the flags override it. Default: none.
    #[arg(
        long = "config",
        env = "KICKOFF_CONFIG",
        value_name = "FILE",
        global = true
    )]
    pub config_file: Option<PathBuf>,

    /// PostgreSQL to use. Default: none, which starts an embedded cluster in the data directory.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,

    /// PostgreSQL for the node's listening connection alone (`LISTEN` needs a session of its
    /// own): the database directly when `DATABASE_URL` goes through a transaction pooler.
    /// Default: none (the listener connects like the others).
    #[arg(long, env = "KICKOFF_LISTEN_DATABASE_URL")]
    pub listen_database_url: Option<String>,

    /// A standby (streaming replica) of the database for the dashboard's lists, charts and
    /// counts, which tolerate staleness; a job's page, every action and the REST API read the
    /// primary. Default: none (everything reads the primary).
    #[arg(long, env = "KICKOFF_READ_DATABASE_URL")]
    pub read_database_url: Option<String>,

    /// Past this lag (milliseconds) the pages that read the standby say how far behind it is.
    /// Default: 2000 (0 to 3,600,000).
    #[arg(long, env = "KICKOFF_READ_MAX_LAG_MS", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub read_max_lag_ms: u64,

    /// How `DATABASE_URL` reaches PostgreSQL: `direct` (PostgreSQL itself, or a pooler in
    /// session mode) or `transaction` (a pooler in transaction mode, e.g. PgBouncer
    /// `pool_mode = transaction`: every statement in a transaction, no session state; migrations
    /// and LISTEN go through `KICKOFF_LISTEN_DATABASE_URL`, and without it the node polls).
    /// Default: `direct`.
    #[arg(long, env = "KICKOFF_DATABASE_POOL_MODE", default_value = "direct")]
    pub database_pool_mode: crate::db::PoolMode,

    /// How often a node that cannot LISTEN looks for work, in milliseconds: behind a transaction
    /// pooler without `KICKOFF_LISTEN_DATABASE_URL`. A job inserted by another process starts up
    /// to this late. Default: 100 (10 to 1000).
    #[arg(long, env = "KICKOFF_POLL_INTERVAL_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(10..=1000))]
    pub poll_interval_ms: u64,

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

    /// The path everything is served under, for a proxy that forwards a path of its site as it
    /// is (`/kickoff`: the dashboard at `/kickoff/`, the API at `/kickoff/api/v1`). Default: the
    /// site's root.
    #[arg(long, env = "KICKOFF_BASE_PATH", default_value = "")]
    pub base_path: String,

    /// Bearer token of the REST API, from `KICKOFF_API_TOKEN` (never a flag: a flag's value is
    /// visible to every user of the machine in `ps`). Default: generated once and kept in
    /// `<data dir>/api-token`.
    #[arg(skip = std::env::var("KICKOFF_API_TOKEN").ok())]
    pub api_token: Option<String>,

    /// A file holding the API token (its first line), instead of `KICKOFF_API_TOKEN`.
    #[arg(long, env = "KICKOFF_API_TOKEN_FILE", value_name = "FILE")]
    pub api_token_file: Option<PathBuf>,

    /// On the first start of a database without operator accounts, create the admin `admin` with
    /// this password, from `KICKOFF_ADMIN_PASSWORD` (never a flag). Default: unset (the server
    /// prints a one-time setup link, or create one with `kickoff user add NAME --role admin`).
    #[arg(skip = std::env::var("KICKOFF_ADMIN_PASSWORD").ok())]
    pub admin_password: Option<String>,

    /// A file holding that password (its first line), instead of `KICKOFF_ADMIN_PASSWORD`.
    #[arg(long, env = "KICKOFF_ADMIN_PASSWORD_FILE", value_name = "FILE")]
    pub admin_password_file: Option<PathBuf>,

    /// The key that seals the webhook endpoints' signing secrets in the database, base64 of 32
    /// bytes, from `KICKOFF_SECRET_KEY` (never a flag); every node sharing a database needs the
    /// same. Default: generated once and kept in `<data dir>/secret.key`.
    #[arg(skip = std::env::var("KICKOFF_SECRET_KEY").ok())]
    pub secret_key: Option<String>,

    /// A file holding the secret key (its first line), instead of `KICKOFF_SECRET_KEY`.
    #[arg(long, env = "KICKOFF_SECRET_KEY_FILE", value_name = "FILE")]
    pub secret_key_file: Option<PathBuf>,

    /// Send the session cookie over HTTPS only (set it when the dashboard is served over HTTPS,
    /// e.g. behind a TLS proxy). Default: false.
    #[arg(long, env = "KICKOFF_SECURE_COOKIES", default_value_t = false)]
    pub secure_cookies: bool,

    /// Names (`host` or `host:port`, comma-separated) clients reach this server by; a request
    /// naming another `Host` gets 421. Default: on loopback, `localhost`, `127.0.0.1` and `[::1]`
    /// on any port; on another address, any name.
    #[arg(
        long,
        env = "KICKOFF_ALLOWED_HOSTS",
        value_delimiter = ',',
        default_value = ""
    )]
    pub host_names: Vec<String>,

    /// Proxies (addresses or CIDR blocks, comma-separated) whose `X-Forwarded-For` names the client
    /// for the audit log and the sign-in throttle. Default: none (the peer is the client).
    #[arg(
        long,
        env = "KICKOFF_TRUSTED_PROXIES",
        value_delimiter = ',',
        default_value = ""
    )]
    pub trusted_proxies: Vec<String>,

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

    /// Queues this node runs, as `name:concurrency` (comma-separated), each optionally followed by
    /// limits shared by every node: `rate=N/period` (e.g. 100/s, 5000/min), `per=kind|host|args.<field>`
    /// (each key gets the whole rate), `global=N` (executing on all nodes together).
    /// Example: `default:10,webhooks:10,rate=100/s,per=host,global=20,questions:10`.
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

    /// Days the attempts' history (the per-minute and per-hour rollups behind the charts and
    /// `/api/v1/stats/history`) is kept; it outlives the pruned jobs. 1 to 400. Default: 30.
    #[arg(long, env = "KICKOFF_HISTORY_RETENTION_DAYS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=400))]
    pub history_retention_days: u64,

    /// This node's id. Default: `<hostname>-<pid>-<random>`.
    #[arg(long, env = "KICKOFF_NODE_ID")]
    pub node_id: Option<String>,

    /// Client connections served at once; one more is answered 503 and closed. Lowered to what
    /// the open-file limit leaves (minus 256 for everything else). Default: 4096.
    #[arg(long, env = "KICKOFF_MAX_CONNECTIONS", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,

    /// Live-update streams (`/events`, `/api/v1/events`) open at once on this node; one more is
    /// answered 503. Default: 2048.
    #[arg(long, env = "KICKOFF_MAX_STREAMS", default_value_t = 2048,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_streams: u32,

    /// Calls of the REST API one token may make per period, shared by every node: `N/period` (e.g.
    /// `100/s`, `6000/min`; N 1 to 1000000, period 1 ms to 1 day) or `off`. The call past it is
    /// answered 429 with `Retry-After`. Default: `off`.
    #[arg(long, env = "KICKOFF_API_RATE_LIMIT", default_value = "off")]
    pub api_rate_limit: String,

    /// Sign-in attempts (and setup-link checks) one client address may make per period, shared
    /// by every node, right or wrong: `N/period` or `off`. Past it, 429 with `Retry-After`, and the
    /// password is not checked. Default: `60/min`.
    #[arg(long, env = "KICKOFF_SIGN_IN_RATE_LIMIT", default_value = crate::accounts::DEFAULT_SIGN_IN_RATE)]
    pub sign_in_rate_limit: String,

    /// How often the leading node evaluates the alert rules, in milliseconds (500 to 60000). Each
    /// evaluation reads every enabled rule's condition in one transaction. Default: 2000.
    #[arg(long, env = "KICKOFF_ALERT_INTERVAL_MS", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(500..=60_000))]
    pub alert_interval_ms: u64,

    /// The queue the alert rules' notifications (webhook jobs) go to: `webhooks` when this node
    /// runs it, else its first queue, unless set (any queue name; a node that does not run it
    /// leaves them to one that does).
    #[arg(long, env = "KICKOFF_ALERT_QUEUE", value_parser = queue_name)]
    pub alert_queue: Option<String>,

    /// Seconds running jobs get to finish at shutdown before they are handed back. Default: 10.
    #[arg(long, env = "KICKOFF_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,

    /// Lease of an executing job in milliseconds: a dead node's jobs are rescued this long after its
    /// last heartbeat. Default: 5000.
    #[arg(long, env = "KICKOFF_LEASE_MS", default_value_t = 5000)]
    pub lease_ms: u64,

    /// The most jobs a queue claims ahead of its free slots, so that a slot that frees starts the
    /// next job without a round trip (0: none). The lead in force follows the queue's pace: none
    /// for jobs that run longer than a claim. Default: 100.
    #[arg(long, env = "KICKOFF_FETCH_AHEAD", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub fetch_ahead: u32,

    /// How long before its due time a scheduled job may be claimed into a free slot, where it
    /// waits for its instant by the database clock (0: claimed once due). Under a fifth of the
    /// lease. Default: 20.
    #[arg(long, env = "KICKOFF_CLAIM_AHEAD_MS", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub claim_ahead_ms: u64,

    /// Largest database pool (job handlers, the leader's maintenance). Default: 20.
    #[arg(long, env = "KICKOFF_DB_POOL", default_value_t = 20)]
    pub db_pool: u32,

    /// Connections of the dashboard and the REST API, a pool of their own: slow pages cannot take
    /// the connections of job handlers. A request that finds none free within 2 s gets 503.
    /// Default: 10.
    #[arg(long, env = "KICKOFF_WEB_POOL", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub web_pool: u32,

    /// The longest a dashboard or API statement may run, in milliseconds (PostgreSQL's
    /// `statement_timeout` on the web pool); a longer one is cancelled and answered 503.
    /// Default: 5000.
    #[arg(long, env = "KICKOFF_WEB_STATEMENT_TIMEOUT_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub web_statement_timeout_ms: u64,

    /// Log format: `text` or `json`. Default: `text`.
    #[arg(long, env = "KICKOFF_LOG_FORMAT", default_value = "text")]
    pub log_format: String,

    /// Export traces over OTLP/HTTP (JSON) to this collector, its base URL
    /// (`http://127.0.0.1:4318`: traces go to `/v1/traces`). The `traceparent` of an API call
    /// that inserts a job continues in its attempts and its webhook calls. Default: off.
    #[arg(long, env = "KICKOFF_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

/// A queue's name, as a job's queue must be.
fn queue_name(name: &str) -> Result<String, String> {
    if crate::engine::job::is_valid_queue_name(name) {
        Ok(name.to_string())
    } else {
        Err("1 to 64 characters of a-z, 0-9, `_` and `-`".into())
    }
}

impl Config {
    /// How long finished jobs, and resolved alert incidents, are kept (`retention_hours`).
    pub fn retention(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.retention_hours * 3600)
    }

    /// Reads the secrets given as files (`--api-token-file`, `--admin-password-file`); a secret
    /// given both ways is refused.
    pub fn read_secret_files(&mut self) -> Result<(), String> {
        fn read(
            value: &mut Option<String>,
            file: &Option<PathBuf>,
            variable: &str,
        ) -> Result<(), String> {
            let Some(path) = file else { return Ok(()) };
            if value.is_some() {
                return Err(format!(
                    "{variable} and {variable}_FILE are both set: use one"
                ));
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("{variable}_FILE {}: {e}", path.display()))?;
            *value = Some(text.lines().next().unwrap_or("").to_string());
            Ok(())
        }
        read(
            &mut self.api_token,
            &self.api_token_file,
            "KICKOFF_API_TOKEN",
        )?;
        read(
            &mut self.admin_password,
            &self.admin_password_file,
            "KICKOFF_ADMIN_PASSWORD",
        )?;
        read(
            &mut self.secret_key,
            &self.secret_key_file,
            "KICKOFF_SECRET_KEY",
        )
    }

    /// Parses `KICKOFF_QUEUES` entries: `name:concurrency`, each followed by its options shared by
    /// every node (`rate=100/s`, `per=host`, `global=20`; see `engine::limits`).
    pub fn queue_list(&self) -> Result<Vec<(String, usize)>, String> {
        Ok(self
            .queue_specs()?
            .into_iter()
            .map(|(name, n, _)| (name, n))
            .collect())
    }

    /// The limits `KICKOFF_QUEUES` gives its queues (only those that name some).
    pub fn queue_limits(&self) -> Result<Vec<(String, QueueLimits)>, String> {
        Ok(self
            .queue_specs()?
            .into_iter()
            .filter(|(_, _, limits)| *limits != QueueLimits::default())
            .map(|(name, _, limits)| (name, limits))
            .collect())
    }

    fn queue_specs(&self) -> Result<Vec<(String, usize, QueueLimits)>, String> {
        let mut specs: Vec<(String, usize, QueueLimits)> = Vec::new();
        for entry in self
            .queues
            .iter()
            .map(|q| q.trim())
            .filter(|q| !q.is_empty())
        {
            if entry.contains('=') {
                let (name, _, limits) = specs.last_mut().ok_or_else(|| {
                    format!("KICKOFF_QUEUES: `{entry}` must follow the queue it sets, as in webhooks:10,rate=100/s")
                })?;
                limits
                    .set_option(entry)
                    .map_err(|e| format!("KICKOFF_QUEUES: queue `{name}`: {e}"))?;
                continue;
            }
            let (name, n) = entry.split_once(':').unwrap_or((entry, "10"));
            let n: usize = n
                .parse()
                .map_err(|_| format!("KICKOFF_QUEUES: `{entry}` is not name:concurrency"))?;
            specs.push((name.to_string(), n, QueueLimits::default()));
        }
        for (name, _, limits) in &specs {
            limits
                .check()
                .map_err(|e| format!("KICKOFF_QUEUES: queue `{name}`: {e}"))?;
        }
        Ok(specs)
    }

    /// The request limits of `KICKOFF_API_RATE_LIMIT` and `KICKOFF_SIGN_IN_RATE_LIMIT`.
    pub fn request_limits(&self) -> Result<RequestLimits, String> {
        fn rate(value: &str, variable: &str) -> Result<Option<Rate>, String> {
            match value.trim() {
                "off" => Ok(None),
                v => v
                    .parse()
                    .map(Some)
                    .map_err(|e| format!("{variable}: {e}, or off")),
            }
        }
        Ok(RequestLimits {
            per_token: rate(&self.api_rate_limit, "KICKOFF_API_RATE_LIMIT")?,
            per_address: rate(&self.sign_in_rate_limit, "KICKOFF_SIGN_IN_RATE_LIMIT")?,
        })
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

    #[test]
    fn the_alert_interval_is_two_seconds_unless_set_within_its_range() {
        assert_eq!(Wrap::parse_from(["x"]).config.alert_interval_ms, 2000);
        let w = Wrap::parse_from(["x", "--alert-interval-ms", "500"]);
        assert_eq!(w.config.alert_interval_ms, 500);
        for bad in ["499", "60001", "soon"] {
            assert!(
                Wrap::try_parse_from(["x", "--alert-interval-ms", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_alert_queue_is_unset_unless_given_a_queue_name() {
        assert_eq!(Wrap::parse_from(["x"]).config.alert_queue, None);
        let w = Wrap::parse_from(["x", "--alert-queue", "alerts"]);
        assert_eq!(w.config.alert_queue.as_deref(), Some("alerts"));
        for bad in ["", "Alerts!", &"a".repeat(65)] {
            assert!(
                Wrap::try_parse_from(["x", "--alert-queue", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn request_limits_default_to_sign_ins_only_and_refuse_bad_rates() {
        let w = Wrap::parse_from(["x"]);
        let limits = w.config.request_limits().unwrap();
        assert_eq!(limits.per_token, None);
        assert_eq!(
            limits.per_address.map(|r| r.to_string()).as_deref(),
            Some("60/min")
        );
        let w = Wrap::parse_from([
            "x",
            "--api-rate-limit",
            "100/s",
            "--sign-in-rate-limit",
            "off",
        ]);
        let limits = w.config.request_limits().unwrap();
        assert_eq!(
            limits.per_token.map(|r| r.to_string()).as_deref(),
            Some("100/s")
        );
        assert_eq!(limits.per_address, None);
        for bad in ["fast", "0/s", "10/week", "2000000/s"] {
            let w = Wrap::parse_from(["x", "--api-rate-limit", bad]);
            let e = w.config.request_limits().unwrap_err();
            assert!(e.starts_with("KICKOFF_API_RATE_LIMIT: "), "{bad}: {e}");
        }
    }

    #[test]
    fn queue_options_set_limits_shared_by_every_node() {
        let w = Wrap::parse_from([
            "x",
            "--queues",
            "default:5,webhooks:10,rate=100/s,per=host,global=20,questions:10",
        ]);
        assert_eq!(
            w.config.queue_list().unwrap(),
            vec![
                ("default".into(), 5),
                ("webhooks".into(), 10),
                ("questions".into(), 10)
            ]
        );
        let limits = w.config.queue_limits().unwrap();
        assert_eq!(limits.len(), 1);
        assert_eq!(limits[0].0, "webhooks");
        assert_eq!(limits[0].1.rate.unwrap().to_string(), "100/s");
        assert_eq!(limits[0].1.per.as_ref().unwrap().to_string(), "host");
        assert_eq!(limits[0].1.global, Some(20));
        for bad in [
            "rate=1/s,default:1",
            "default:1,rate=fast",
            "default:1,per=host",
            "default:1,global=0",
            "default:1,burst=2",
        ] {
            let w = Wrap::parse_from(["x", "--queues", bad]);
            assert!(w.config.queue_list().is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn secrets_are_never_flags_but_may_come_from_files() {
        // A flag's value is visible to every user of the machine in `ps`.
        for flag in ["--api-token", "--admin-password"] {
            assert!(
                Wrap::try_parse_from(["x", flag, "s3cret"]).is_err(),
                "{flag} was taken on the command line"
            );
        }
        let dir = std::env::temp_dir().join(format!("kickoff-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "tok-from-file\n").unwrap();
        std::fs::write(dir.join("password"), "pw from file\n").unwrap();
        let mut w = Wrap::parse_from([
            "x",
            "--api-token-file",
            dir.join("token").to_str().unwrap(),
            "--admin-password-file",
            dir.join("password").to_str().unwrap(),
        ]);
        w.config.read_secret_files().unwrap();
        assert_eq!(w.config.api_token.as_deref(), Some("tok-from-file"));
        assert_eq!(w.config.admin_password.as_deref(), Some("pw from file"));
        let mut missing = Wrap::parse_from(["x", "--api-token-file", "/nonexistent/kickoff"]);
        let e = missing.config.read_secret_files().unwrap_err();
        assert!(e.contains("/nonexistent/kickoff"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
