//! The command line: `kickoff serve` (default), `kickoff migrate`, `kickoff bench ...`,
//! `kickoff postgres start|stop` (the embedded cluster on its own, for tests and tools).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::Config;

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
    /// Fill the database with a living fixture list (questions, predictions, jobs).
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
        /// Jobs in the table for the pages workload.
        #[arg(long, default_value_t = 1_000_000)]
        rows: i64,
        /// Timed requests per address for the pages workload.
        #[arg(long, default_value_t = 40)]
        samples: usize,
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
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BenchWorkload {
    /// Bulk insert 20,000 jobs, then process them with concurrency 10.
    Throughput,
    /// 500 jobs inserted one at a time, 20 ms apart: insert-to-start latency.
    Latency,
    /// 1,000 jobs scheduled over a 2 s window: start minus scheduled_at.
    Scheduled,
    /// Dashboard pages and API lists with 1,000,000 jobs (`--rows`) in the table: server time
    /// percentiles per address, table size, RSS, time to prune.
    Pages,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PostgresAction {
    /// Start (or adopt) the cluster and print its admin URL.
    Start,
    /// Stop the cluster.
    Stop,
}
