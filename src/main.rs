use kickoff::cli::{Command, ConfigAction, PostgresAction};
use kickoff::config::Config;
use kickoff::config_file::LoadError;
use kickoff::postgres::{Durability, EmbeddedPostgres};
use kickoff::{bench, chaos, server};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let loaded = match kickoff::config_file::load() {
        Ok(l) => l,
        Err(LoadError::Cli(e)) => e.exit(),
        Err(LoadError::File(e)) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(Command::Config {
        action: ConfigAction::Check,
    }) = loaded.cli.command
    {
        print!("{}", loaded.report());
        return match check(&loaded.cli.config) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::from(2)
            }
        };
    }
    let mut cli = loaded.cli;
    let telemetry =
        match kickoff::logging::init(&cli.config.log_format, cli.config.otlp_endpoint.as_deref()) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::from(2);
            }
        };
    if let Err(e) = cli.config.read_secret_files() {
        eprintln!("error: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => server::serve(cli.config).await.map_err(|e| e.to_string()),
        Command::Migrate => match server::Database::open(&cli.config).await {
            Ok(db) => {
                println!("migrations applied");
                // Closed before the process exits: the pool's connections end cleanly and an
                // embedded cluster is stopped, not left running.
                db.close().await;
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        },
        Command::Demo => kickoff::demo::run(&cli.config).await,
        Command::Bench {
            workload,
            url,
            concurrency,
            rows,
            samples,
            overdue,
            streams,
            queue_limits,
            count,
            jobs,
            without_rollups,
            through_pooler,
            poll_only,
        } => {
            let mut limits = kickoff::engine::limits::QueueLimits::default();
            let limits_ok = queue_limits
                .iter()
                .try_for_each(|option| limits.set_option(option))
                .and_then(|()| limits.check());
            if let Err(e) = limits_ok {
                eprintln!("error: --queue-limits: {e}");
                return std::process::ExitCode::FAILURE;
            }
            let options = bench::BenchOptions {
                queue_limits: limits,
                streams: streams.into_iter().map(|n| n as usize).collect(),
                concurrency,
                rows,
                samples,
                overdue: overdue as usize,
                schedules: count as usize,
                jobs: jobs as usize,
                without_rollups,
                fetch_ahead: cli.config.fetch_ahead as usize,
                claim_ahead: std::time::Duration::from_millis(cli.config.claim_ahead_ms),
                through_pooler,
                poll_only,
                poll_interval: std::time::Duration::from_millis(cli.config.poll_interval_ms),
                listen_url: None,
            };
            bench::run(workload, url, options, &cli.config).await
        }
        // Answered above, before the logging starts.
        Command::Config { .. } => Ok(()),
        Command::Postgres {
            action,
            dir,
            throwaway,
        } => {
            let durability = if throwaway {
                Durability::Throwaway
            } else {
                Durability::Durable
            };
            tokio::task::spawn_blocking(move || {
                let pg = EmbeddedPostgres::start(&dir, durability).map_err(|e| e.to_string())?;
                match action {
                    PostgresAction::Start => {
                        println!("{}", pg.admin_url());
                        Ok(())
                    }
                    PostgresAction::Stop => pg.stop().map_err(|e| e.to_string()),
                }
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
        }
        Command::User { action } => action.run(&cli.config).await,
        Command::Schedule {
            action,
            server,
            token,
            insecure,
        } => {
            let target = kickoff::cli::schedule::Target {
                server,
                token,
                insecure,
            };
            action.run(&cli.config, target).await
        }
        Command::Token { action } => action.run(&cli.config),
        // The commands against a server: exit codes that say what happened.
        Command::Jobs { action, remote } => {
            return remote_command(&remote, &cli.config, async |api| action.run(api).await).await;
        }
        Command::Queues { action, remote } => {
            return remote_command(&remote, &cli.config, async |api| action.run(api).await).await;
        }
        Command::Questions { action, remote } => {
            return remote_command(&remote, &cli.config, async |api| action.run(api).await).await;
        }
        Command::Workflows { action, remote } => {
            return remote_command(&remote, &cli.config, async |api| action.run(api).await).await;
        }
        Command::ChaosHistory {
            seed,
            steps,
            nodes,
            seeds,
            minutes,
            no_faults,
            keep,
            shrink,
            dir,
            records,
            server_binary,
            failover,
        } => {
            let dir = dir.unwrap_or_else(|| {
                std::env::temp_dir().join(format!("kickoff-history-{}", std::process::id()))
            });
            let binary = server_binary
                .or_else(|| std::env::current_exe().ok())
                .unwrap_or_else(|| "kickoff".into());
            let mut config = chaos::history::HistoryConfig::new(binary, dir, seed);
            config.steps = steps as usize;
            config.nodes = nodes as usize;
            config.faults = !no_faults;
            config.keep = keep;
            config.records = records;
            config.failover = failover;
            let limit = minutes.map(|m| std::time::Duration::from_secs(m * 60));
            chaos::history::run_seeds(config, seeds, limit, shrink, |report| {
                print!("{}", report.text());
            })
            .await
        }
        Command::Chaos {
            nodes,
            kills,
            interval_ms,
            rate,
            dir,
            json,
            failover,
        } => {
            let dir = dir.unwrap_or_else(|| {
                std::env::temp_dir().join(format!("kickoff-chaos-{}", std::process::id()))
            });
            let binary = std::env::current_exe().unwrap_or_else(|_| "kickoff".into());
            let mut config = chaos::ChaosConfig::new(binary, dir.clone());
            config.nodes = nodes.max(1);
            config.kills = kills;
            config.interval = std::time::Duration::from_millis(interval_ms.max(200));
            config.rate = rate;
            config.failover = failover;
            config.restart_postgres = !failover;
            println!("chaos: working in {}", dir.display());
            match chaos::run(config).await {
                Ok(report) => {
                    println!("{}", report.text());
                    if json {
                        println!("{}", serde_json::to_string(&report).unwrap_or_default());
                    }
                    if report.ok() {
                        Ok(())
                    } else {
                        Err(format!(
                            "chaos found problems: {}",
                            report.problems().join("; ")
                        ))
                    }
                }
                Err(e) => Err(e),
            }
        }
    };
    if let Some(t) = telemetry {
        // Flushed off the runtime's threads: the exporter sends on the runtime.
        let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kickoff: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs a command against the server `remote` names.
async fn remote_command(
    remote: &kickoff::cli::remote::Remote,
    config: &Config,
    run: impl AsyncFnOnce(&kickoff::cli::remote::Api) -> kickoff::cli::remote::Outcome,
) -> std::process::ExitCode {
    kickoff::cli::remote::exit_code(async {
        let api = kickoff::cli::remote::Api::new(remote, config)?;
        run(&api).await
    })
    .await
}

/// What `kickoff config check` checks beyond the command line's own parsing: the secrets given
/// as files can be read, the queues and the request limits parse.
fn check(config: &Config) -> Result<(), String> {
    let mut config = config.clone();
    config.read_secret_files()?;
    config.queue_limits()?;
    config.request_limits()?;
    Ok(())
}
