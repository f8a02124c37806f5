//! The command line: `kickoff serve` (default), `kickoff migrate`, `kickoff bench ...`,
//! `kickoff postgres start|stop` (the embedded cluster on its own, for tests and tools),
//! `kickoff user add|list` (dashboard accounts), `kickoff schedule ...` (recurring jobs),
//! `kickoff chaos` (the chaos suite), and against a running server's REST API `kickoff jobs ...`,
//! `kickoff queues ...`, `kickoff questions ...`, `kickoff workflows ...` (see [`remote`]).

mod audited;
pub mod jobs;
pub mod queues;
pub mod remote;
pub mod schedule;
pub mod workflows;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::accounts::{password_prompt, Accounts, Role};
use crate::config::Config;
use crate::server::Database;

#[derive(Debug, Parser)]
#[command(
    name = "kickoff",
    version,
    about = "A durable PostgreSQL job scheduler with an operator dashboard"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub config: Config,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (the default).
    Serve,
    /// Apply the database migrations and exit.
    Migrate,
    /// Fill the database with a living fixture list (questions, predictions, jobs); beside a
    /// running server, on the embedded PostgreSQL it holds.
    Demo,
    /// Measure the engine; prints one JSON line.
    Bench {
        #[arg(value_enum)]
        workload: BenchWorkload,
        /// PostgreSQL server to measure on; a fresh database is created there and dropped after.
        /// Default: the embedded cluster in the data directory.
        #[arg(long = "bench-database-url")]
        url: Option<String>,
        /// Concurrency of the throughput workload.
        #[arg(long, default_value_t = 10)]
        concurrency: usize,
        /// Jobs the throughput and nodes workloads process (1,000 to 10,000,000): more make a
        /// steadier figure on a noisy machine.
        #[arg(long, default_value_t = 20_000,
              value_parser = clap::value_parser!(u64).range(1_000..=10_000_000))]
        jobs: u64,
        /// The attempts' rollups switched off in the bench's database (their trigger disabled
        /// after migrating): what they cost the completions, measured against a run without.
        #[arg(long = "without-rollups")]
        without_rollups: bool,
        /// Jobs in the table for the pages workload.
        #[arg(long, default_value_t = 1_000_000)]
        rows: i64,
        /// Timed requests per address for the pages workload.
        #[arg(long, default_value_t = 40)]
        samples: usize,
        /// Jobs overdue at start for the recovery workload (1 to 10,000,000).
        #[arg(long, default_value_t = 10_000,
              value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        overdue: u64,
        /// Open live-update streams for the streams workload, one run per count (1 to 20,000
        /// each; the open-file limit must allow twice the largest).
        #[arg(long, value_delimiter = ',', default_value = "100,1000,5000",
              value_parser = clap::value_parser!(u32).range(1..=20_000))]
        streams: Vec<u32>,
        /// Limits of the bench queue across every node, as in KICKOFF_QUEUES
        /// (`rate=1000000/s`, `global=10`, comma-separated): what a limit's check costs.
        #[arg(long = "queue-limits", value_delimiter = ',')]
        queue_limits: Vec<String>,
        /// A transaction pooler (PgBouncer `pool_mode = transaction`) in front of the bench's
        /// server, `HOST:PORT`, that reaches its databases by name: the workload and the engine
        /// go through it in `transaction` pool mode, listening on a direct connection (the bench
        /// still creates and migrates its database directly).
        #[arg(long = "through-pooler", value_name = "HOST:PORT")]
        through_pooler: Option<String>,
        /// With `--through-pooler`: no direct connection for LISTEN either; the node polls
        /// (`KICKOFF_POLL_INTERVAL_MS`).
        #[arg(long = "poll-only", requires = "through_pooler")]
        poll_only: bool,
        /// Idle daily schedules beside the every-second one, for the schedules workload (0 to
        /// 1,000,000).
        #[arg(long, default_value_t = 10_000,
              value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
        count: u64,
    },
    /// The configuration: `kickoff config check` prints every setting in force, where it came
    /// from (flag, environment, configuration file, default) and its value, secrets masked.
    Config {
        #[arg(value_enum)]
        action: ConfigAction,
    },
    /// Start or stop the embedded PostgreSQL cluster on its own.
    Postgres {
        #[arg(value_enum)]
        action: PostgresAction,
        /// The cluster's directory.
        #[arg(long)]
        dir: PathBuf,
        /// Tune for throwaway data (no fsync): for test clusters.
        #[arg(long)]
        throwaway: bool,
    },
    /// The chaos suite: nodes on one embedded PostgreSQL under load, killed and restarted; the
    /// database crashed and restarted; connections cut. Prints what held; fails if anything did
    /// not.
    Chaos {
        /// Server processes.
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// SIGKILLs of a random node (each restarted).
        #[arg(long, default_value_t = 20)]
        kills: usize,
        /// Milliseconds between disturbances.
        #[arg(long, default_value_t = 2000)]
        interval_ms: u64,
        /// Jobs inserted per second.
        #[arg(long, default_value_t = 300)]
        rate: u32,
        /// Where the cluster and the nodes' logs go (default: a new temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print the report as one JSON line too.
        #[arg(long)]
        json: bool,
        /// Fail over halfway instead of restarting PostgreSQL: the nodes reach a primary with a
        /// synchronous standby (pg_basebackup) through an address of the suite's own; the primary
        /// is killed with SIGKILL, the standby promoted, the address moved to it. The report says
        /// how long until a job inserted after the kill ran.
        #[arg(long)]
        failover: bool,
    },
    /// Random operator histories with faults, checked against Kickoff's promises: nodes on an
    /// embedded PostgreSQL of their own driven through the REST API (docs/ARCHITECTURE.md,
    /// "History checker"). Fails, with the command that replays the shortest failing history,
    /// when a promise is broken.
    ChaosHistory {
        /// The first seed (each further history takes the next).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Steps drawn per history (1 to 100,000).
        #[arg(long, default_value_t = 80,
              value_parser = clap::value_parser!(u64).range(1..=100_000))]
        steps: u64,
        /// Server processes (1 to 5).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=5))]
        nodes: u64,
        /// Histories to run (seed, seed + 1, ...), unless --minutes is given.
        #[arg(long, default_value_t = 1)]
        seeds: u64,
        /// Run histories, seed after seed, for this many minutes (the long run).
        #[arg(long)]
        minutes: Option<u64>,
        /// Operator actions only: no kills, restarts, database crashes or cut connections.
        #[arg(long)]
        no_faults: bool,
        /// Only these steps of the plan (a shrunk history's replay), comma-separated indices.
        #[arg(long, value_delimiter = ',')]
        keep: Option<Vec<usize>>,
        /// Shrink a failing history to its shortest failing subsequence (each try a whole run).
        #[arg(long)]
        shrink: bool,
        /// Where the clusters and the nodes' logs go (default: a new temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Keep every history's directory with its record (history.json, snapshot.json), not
        /// only a failing one's.
        #[arg(long)]
        records: bool,
        /// The `kickoff` binary the nodes run (default: this one): another release's, to check
        /// it against this release's promises.
        #[arg(long)]
        server_binary: Option<PathBuf>,
        /// Give each history's cluster a synchronous standby and fail over to it at the plan's
        /// middle (the primary killed, the standby promoted, the database's address moved).
        #[arg(long)]
        failover: bool,
    },
    /// Manage the dashboard's accounts (in the database the server uses).
    User {
        #[command(subcommand)]
        action: UserAction,
    },
    /// Manage schedules (recurring jobs) in the server's database, or through a running server's
    /// API with --server.
    Schedule {
        #[command(subcommand)]
        action: schedule::ScheduleAction,
        /// A running server's base URL (e.g. http://127.0.0.1:3000): act through its REST API
        /// (audited as the token's owner) instead of on the database.
        #[arg(long, global = true, env = "KICKOFF_SERVER_URL")]
        server: Option<String>,
        /// The API token for --server.
        #[arg(long, global = true, env = "KICKOFF_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Send the token over plain HTTP to a server that is not on this machine.
        #[arg(long, global = true, env = "KICKOFF_INSECURE")]
        insecure: bool,
    },
    /// Jobs on a running server: list, show, retry, cancel, run now, delete, edit, shift in time,
    /// export (see `kickoff jobs --help`).
    Jobs {
        #[command(subcommand)]
        action: jobs::JobsAction,
        #[command(flatten)]
        remote: remote::Remote,
    },
    /// Queues on a running server: list, pause, resume, limits.
    Queues {
        #[command(subcommand)]
        action: queues::QueuesAction,
        #[command(flatten)]
        remote: remote::Remote,
    },
    /// Game questions on a running server: list, show, settle.
    Questions {
        #[command(subcommand)]
        action: queues::QuestionsAction,
        #[command(flatten)]
        remote: remote::Remote,
    },
    /// Workflow runs on a running server: list, show, cancel, retry, skip, rerun, signal, move.
    Workflows {
        #[command(subcommand)]
        action: workflows::WorkflowsAction,
        #[command(flatten)]
        remote: remote::Remote,
    },
    /// Manage the bootstrap API token kept in the data directory.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenAction {
    /// Replace the token in `<data dir>/api-token` with a new one and print it (this once). A
    /// running server stops accepting the old one within a second.
    Rotate,
}

impl TokenAction {
    pub fn run(self, config: &Config) -> Result<(), String> {
        match self {
            TokenAction::Rotate => {
                let (token, path) = crate::accounts::bootstrap_token::rotate(&config.data_dir)
                    .map_err(|e| e.to_string())?;
                println!("{token}");
                eprintln!(
                    "The new bootstrap API token (shown this once) is kept in {}; the old one stops working within a second.",
                    path.display()
                );
                if config
                    .api_token
                    .as_deref()
                    .is_some_and(|t| !t.trim().is_empty())
                {
                    eprintln!(
                        "Note: KICKOFF_API_TOKEN is set here; a server started with it uses that value, not the file."
                    );
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum UserAction {
    /// Create an account. The password is the first line of standard input, or is asked for
    /// twice when standard input is a terminal.
    Add {
        /// Login name: 1 to 64 of a-z, 0-9, '_', '.', '-' (upper case is lowered).
        name: String,
        /// viewer, operator or admin.
        #[arg(long, default_value = "viewer")]
        role: Role,
    },
    /// List the accounts.
    List,
}

impl UserAction {
    /// Runs the command against the server's database (migrated first, like `kickoff migrate`).
    pub async fn run(self, config: &Config) -> Result<(), String> {
        match self {
            UserAction::Add { name, role } => {
                // What can be refused without the database is, before it starts: a typo should
                // not cost an embedded cluster start.
                crate::accounts::normalize_name(&name).map_err(|e| e.to_string())?;
                let password = password_prompt::read_new_password()
                    .map_err(|e| format!("reading the password: {e}"))?;
                crate::accounts::validate_password(&password).map_err(|e| e.to_string())?;
                let db = Database::open_beside_server(config)
                    .await
                    .map_err(|e| e.to_string())?;
                let accounts = Accounts::new(db.pool.clone());
                let auditor = crate::audit::Auditor::new(db.pool.clone());
                let entry = || audited::entry("user.create", format!("user {}", name.trim()));
                // Hashed before the transaction opens: it takes tens of milliseconds.
                let created = match accounts.new_password(&password).await {
                    Ok(password) => {
                        audited::run(&auditor, entry, async |conn| {
                            accounts.create_with(conn, &name, &password, role).await
                        })
                        .await
                    }
                    Err(e) => Err(e.to_string()),
                };
                db.close().await;
                let user = created?;
                println!("created user {} ({})", user.name, user.role);
                Ok(())
            }
            UserAction::List => {
                let db = Database::open_beside_server(config)
                    .await
                    .map_err(|e| e.to_string())?;
                let listed = Accounts::new(db.pool.clone()).list().await;
                db.close().await;
                let users = listed.map_err(|e| e.to_string())?;
                println!(
                    "{:>6}  {:<24}  {:<8}  {:<8}  created",
                    "id", "name", "role", "status"
                );
                for u in users {
                    let status = if u.disabled { "disabled" } else { "active" };
                    println!(
                        "{:>6}  {:<24}  {:<8}  {:<8}  {}",
                        u.id,
                        u.name,
                        u.role,
                        status,
                        u.created_at.format("%Y-%m-%d %H:%M:%S UTC")
                    );
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BenchWorkload {
    /// Bulk insert 20,000 jobs (`--jobs`), then process them with concurrency 10: jobs a second, and the CPU microseconds a job cost this process and the database's backends (where `/proc` shows them)
    Throughput,
    /// 500 jobs inserted one at a time, 20 ms apart: insert-to-start latency.
    Latency,
    /// 1,000 jobs scheduled over a 2 s window: start minus scheduled_at.
    Scheduled,
    /// A schedule every second for a minute: start lateness of its 60 runs after their slots.
    Schedule,
    /// 10,000 idle daily schedules (`--count`): the database's commits a second while nothing is
    /// due, then the start lateness of an every-second schedule among them.
    Schedules,
    /// 10,000 jobs (`--overdue`) overdue when a node starts: time until all are done.
    Recovery,
    /// Throughput with 1, 2 and 3 nodes on one database.
    Nodes,
    /// Dashboard pages and API lists with 1,000,000 jobs (`--rows`) in the table: server time
    /// percentiles per address, table size, RSS, time to prune.
    Pages,
    /// The leader's alert evaluation with 1,000,000 jobs (`--rows`), 20,000 questions and one rule
    /// of each condition: the first evaluation and the steady state's percentiles (`--samples`).
    Alerts,
    /// Live updates: 100, 1,000 and 5,000 (`--streams`) open event streams on one server process;
    /// delivery time of one change to every stream, the server's RSS and CPU.
    Streams,
    /// Workflows: a step's start after its dependency's completion (chains), after its signal,
    /// after the last of 50 dependencies (fan-in); steps a second in runs of 5 against plain jobs.
    Workflows,
    /// A million players (`--rows`) notified by a workflow's map step of 1,000 tasks through a
    /// rate of 5,000 a second, its node killed halfway and another taking over: how long, and
    /// that no player was notified twice.
    Notify,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ConfigAction {
    /// Read the configuration file and the environment, and print the settings in force.
    Check,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PostgresAction {
    /// Start (or adopt) the cluster and print its admin URL.
    Start,
    /// Stop the cluster.
    Stop,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap's own checks of the whole command line (unique argument names, conflicts naming
    /// real arguments), which it otherwise makes only when a subcommand is first used.
    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
