//! Starts and stops a node's engine services.
//!
//! A node runs: the notifier (LISTEN/NOTIFY), the timer (stages jobs exactly when due), one
//! producer per queue (claims into free slots), the executor (runs handlers) and its completer
//! (writes outcomes in batches), the heartbeat (node row and job leases), the queue settings sync
//! (pause and concurrency, also when a notification was lost), the rescuer (expired leases, on
//! every node), and the leader elector, which runs the other maintenance services (pruner,
//! schedules, count folder) while this node leads.
//!
//! Connections: handlers (and the application) use the pool the node is started with. The engine's
//! own bookkeeping never waits behind them: claims and staging have the claim pool, the heartbeat,
//! completer, rescuer, elector and settings sync have the bookkeeping pool, and the listener has a
//! connection of its own. Handlers that hold every connection of their pool (each inside a long
//! transaction) therefore cannot starve lease renewal into a rescue that would run them twice.
//!
//! Shutdown: producers stop claiming; running attempts get `shutdown_grace` to finish; the rest are
//! interrupted and handed back to `available` (they run again on any node, and the interruption
//! does not count as an attempt); outcomes are flushed; the leader resigns; the node row goes.

use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::attempt_hook::AttemptHooks;
use super::client::Client;
use super::completer::Completer;
use super::config::EngineConfig;
use super::control::Control;
use super::executor::{Executor, ExecutorParts};
use super::heartbeat::Heartbeat;
use super::leadership::{failover_horizon, LeaderElector, Maintenance};
use super::maintenance::deadlines::DeadlineKeeper;
use super::maintenance::rescuer::JobRescuer;
use super::metrics::Metrics;
use super::node::{Attempts, DbClock, LeaderFlag, Pools, TimerSignal};
use super::notifier::{Listeners, Notifier};
use super::producer::{ClaimSettings, Producer};
use super::queue_settings::QueueSettingsSync;
use super::queue_state::Queues;
use super::schedules::gate::ScheduleRuns;
use super::schedules::Schedules;
use super::store::errors::is_transient;
use super::store::jobs::AttemptEnd;
use super::store::{jobs as job_store, nodes as node_store, queues as queue_store};
use super::timer::Timer;
use super::worker::Workers;
use crate::db::PoolMode;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid engine configuration: {0}")]
    Config(String),
    #[error("database error while starting the engine: {0}")]
    Database(#[from] sqlx::Error),
}

/// A running node. Stop it with [`Engine::stop`].
pub struct Engine {
    config: EngineConfig,
    pools: Pools,
    attempts: Arc<Attempts>,
    queues: Arc<Queues>,
    leader: Arc<LeaderFlag>,
    metrics: Arc<Metrics>,
    events: broadcast::Sender<String>,
    executor: Executor,
    /// Stops claiming and the timer.
    stop_claiming: CancellationToken,
    /// Stops the remaining services after the executor drained.
    stop_services: CancellationToken,
    /// Makes the completer flush what it has and end.
    stop_completer: CancellationToken,
    /// The timer and the producers: stopped first, and awaited, so no claim lands after.
    claimers: TaskTracker,
    services: TaskTracker,
    completer: tokio::task::JoinHandle<()>,
    client: Client,
}

impl Engine {
    /// Starts a node on `pool` with these workers.
    pub async fn start(
        pool: Db,
        workers: Workers,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        config.validate().map_err(EngineError::Config)?;
        let workers = Arc::new(workers);
        let names: Vec<String> = config.queues.iter().map(|(q, _)| q.clone()).collect();
        queue_store::queue_ensure(&pool, &names).await?;
        apply_config_limits(&pool, &config).await?;
        // The settings are read after the listener is up (below): a change made in between is
        // then either in the rows read or in a notification received.
        let queues = Arc::new(Queues::with_fetch_ahead(&config.queues, config.fetch_ahead));
        let pools = Pools::new(&pool, queues.len(), config.lease);
        let node_id = config.node_id.clone();
        let attempts = Arc::new(Attempts::default());
        let timer_signal = Arc::new(TimerSignal::default());
        let clock = Arc::new(DbClock::default());
        let metrics = Arc::new(Metrics::new());
        let leader = Arc::new(LeaderFlag::new(metrics.clone()));
        let (events, _) = broadcast::channel(1024);
        let (completions, completions_rx) = mpsc::unbounded_channel();
        let executor = Executor::new(ExecutorParts {
            workers: workers.clone(),
            pool: pool.clone(),
            attempts: attempts.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
            completions,
            node_id: node_id.clone(),
            hooks: AttemptHooks::new(vec![Arc::new(ScheduleRuns::new(pool.clone()))]),
        });

        pools.warm_up(config.lease).await?;
        let stop_claiming = CancellationToken::new();
        let stop_services = CancellationToken::new();
        let services = TaskTracker::new();

        // Behind a transaction pooler LISTEN needs a direct connection of its own; without one
        // the node polls (`poll_only_interval`) instead of waiting to be woken.
        let poll_only = pool.mode() == PoolMode::Transaction && config.listen_url.is_none();
        let backstop_poll = if poll_only {
            tracing::warn!(
                poll_ms = config.poll_only_interval.as_millis() as u64,
                "behind a transaction pooler without KICKOFF_LISTEN_DATABASE_URL: no LISTEN. The \
                 node polls for work; jobs inserted elsewhere start up to one poll late, a cancel \
                 stops a running attempt at the next heartbeat, and the dashboard is not live"
            );
            config.poll_only_interval.min(config.backstop_poll)
        } else {
            config.backstop_poll
        };
        // The listener first, so that no notification of the start-up period is missed; then the
        // queue settings as they are now.
        let settings =
            QueueSettingsSync::new(pools.bookkeeping.clone(), queues.clone(), backstop_poll);
        let listeners = Listeners {
            queues: queues.clone(),
            timer: timer_signal.clone(),
            attempts: attempts.clone(),
            settings: settings.clone(),
            events: events.clone(),
        };
        let notifier = if poll_only {
            None
        } else {
            Some(Notifier::connect(&pool, config.listen_url.as_deref(), listeners).await?)
        };
        settings.run_once().await?;
        let heartbeat = Heartbeat::new(
            pools.bookkeeping.clone(),
            attempts.clone(),
            node_id.clone(),
            &config.queues,
            config.lease,
            config.heartbeat,
        );
        heartbeat.run_once().await?;
        // The kinds this node runs, for the inserts of SQL callers (`kickoff_add_job`).
        super::store::kinds::kind_register(&pool, workers.kinds(), workers.own_kinds(), &node_id)
            .await?;
        // Beating from now on: the reconciliation below may wait for another node's.
        services.spawn(heartbeat.run(stop_services.clone()));
        // Schedules declared in code, then the slots missed while no node ran: before this node
        // claims anything, so that a run the missed-run policy skips never starts.
        let schedules = Schedules::new(Client::new(pool.clone(), workers.clone()))
            .with_horizon(failover_horizon(config.leader_ttl));
        schedules
            .declare(&config.schedules, config.schedules_code_wins)
            .await
            .map_err(|e| EngineError::Config(format!("declaring the schedules: {e}")))?;
        match schedules.reconcile_missed(&node_id, config.lease).await {
            Ok((0, 0)) => {}
            Ok((inserted, skipped)) => {
                tracing::info!(
                    inserted,
                    skipped,
                    "schedules: slots missed while no node ran"
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, "schedules: applying the missed-run policies failed")
            }
        }
        if let Some(notifier) = notifier {
            services.spawn(notifier.run(stop_services.clone()));
        }
        services.spawn(settings.run(stop_services.clone()));
        let maintenance = Maintenance {
            pool: pool.clone(),
            workers: workers.clone(),
            pruner: config.pruner.clone(),
            count_folder: config.count_folder.clone(),
        };
        services.spawn(
            LeaderElector::new(
                pools.bookkeeping.clone(),
                node_id.clone(),
                config.leader_ttl,
                leader.clone(),
                maintenance,
            )
            .run(stop_services.clone()),
        );
        services.spawn(
            JobRescuer::new(pools.bookkeeping.clone(), config.rescuer.clone())
                .with_metrics(metrics.clone())
                .run(stop_services.clone()),
        );
        services.spawn(DeadlineKeeper::new(pools.bookkeeping.clone()).run(stop_services.clone()));
        let claimers = TaskTracker::new();
        claimers.spawn(
            Timer::new(
                pools.claims.clone(),
                timer_signal.clone(),
                clock,
                queues.clone(),
                backstop_poll,
            )
            .with_claim_ahead(config.claim_ahead)
            .run(stop_claiming.clone()),
        );
        let claim_settings = ClaimSettings {
            node_id: node_id.clone(),
            lease: config.lease,
            batch: config.claim_batch,
            backstop_poll,
        };
        for q in queues.iter() {
            let producer = Producer::new(
                q.clone(),
                pools.claims.clone(),
                claim_settings.clone(),
                executor.clone(),
                metrics.clone(),
            );
            claimers.spawn(producer.run(stop_claiming.clone()));
        }
        claimers.close();
        let stop_completer = CancellationToken::new();
        let completer = tokio::spawn(
            Completer::new(
                pools.bookkeeping.clone(),
                attempts.clone(),
                node_id.clone(),
                config.shutdown_grace,
                completions_rx,
                stop_completer.clone(),
            )
            .waking(poll_only.then(|| timer_signal.clone()))
            .run(),
        );

        // A node that cannot LISTEN hears of this process's own inserts from its client, at once
        // (see `announcer`); one that listens hears of them from the database as of the others'.
        let client = Client::new(pool, workers);
        if poll_only {
            client.announcer.here(queues.clone(), timer_signal.clone());
        }
        tracing::info!(node = %node_id, queues = ?config.queues, "engine started");
        Ok(Engine {
            client,
            config,
            pools,
            attempts,
            queues,
            leader,
            metrics,
            events,
            executor,
            stop_claiming,
            stop_services,
            stop_completer,
            claimers,
            services,
            completer,
        })
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    pub fn node_id(&self) -> &str {
        &self.config.node_id
    }

    /// Whether this node currently holds the leader lease.
    pub fn is_leader(&self) -> bool {
        self.leader.get()
    }

    /// [`Engine::is_leader`] for a service of its own that runs only on the leader (the alerts'
    /// evaluation), asked each time it is called.
    pub fn leader_check(&self) -> super::leadership::LeaderCheck {
        let leader = self.leader.clone();
        Arc::new(move || leader.get())
    }

    /// State changes of jobs on any node: one JSON message per database statement (see the
    /// `kickoff_events` trigger).
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.events.subscribe()
    }

    /// The sender behind [`Engine::subscribe`], for handlers that subscribe per request.
    pub fn events(&self) -> broadcast::Sender<String> {
        self.events.clone()
    }

    /// What this node measures, for `/metrics`.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Attempts running on this node right now.
    pub fn running_count(&self) -> usize {
        self.attempts.running_count()
    }

    /// Stops the node gracefully (see the module doc).
    pub async fn stop(self) {
        self.stop_claiming.cancel();
        self.claimers.wait().await;
        // Jobs claimed ahead that no slot took yet (fetched ahead into the buffer, or waiting for
        // their due time) go back first, for other nodes to run while this one drains.
        self.executor.stop_waiting().await;
        self.hand_back_unstarted().await;
        if !self.executor.drain(self.config.shutdown_grace).await {
            tracing::warn!(
                running = self.attempts.running_count(),
                "shutdown grace over: interrupting running attempts"
            );
            self.executor.interrupt().await;
        }
        // (And any that went back to a buffer meanwhile.)
        self.hand_back_unstarted().await;
        // Every task that could send an outcome has ended: flush the outcomes, then stop the
        // services (the heartbeat kept leases alive until now).
        self.stop_completer.cancel();
        let _ = self.completer.await;
        self.stop_services.cancel();
        self.services.close();
        self.services.wait().await;
        let node_id = &self.config.node_id;
        if let Err(e) = node_store::node_delete(&self.pools.bookkeeping, node_id).await {
            tracing::warn!(error = %e, "could not remove the node row; the leader will sweep it");
        }
        self.pools.close().await;
        tracing::info!(node = %node_id, "engine stopped");
    }

    /// Hands back the buffered jobs and the interrupted attempts (those waiting for their due
    /// time among them).
    async fn hand_back_unstarted(&self) {
        let buffered: Vec<_> = self
            .queues
            .iter()
            .flat_map(|q| q.take_buffered(None))
            .collect();
        self.executor.forget(&buffered);
        let mut claims: Vec<_> = buffered.iter().map(|b| b.claim).collect();
        let mut ends = vec![AttemptEnd::default(); claims.len()];
        for (claim, end) in self.attempts.take_interrupted() {
            claims.push(claim);
            ends.push(end.unwrap_or_default());
        }
        if !claims.is_empty() {
            self.hand_back(&claims, &ends).await;
        }
    }

    /// Hands interrupted attempts back to `available` (those that had started recorded with
    /// `ends`, one per claim), with a few tries through a transient error: a job that is not
    /// handed back is rescued when its lease lapses, which costs it an attempt.
    async fn hand_back(&self, interrupted: &[super::job::Claim], ends: &[AttemptEnd]) {
        for try_number in 1.. {
            let handed = job_store::job_hand_back(
                &self.pools.bookkeeping,
                interrupted,
                ends,
                &self.config.node_id,
            )
            .await;
            match handed {
                Ok(n) => {
                    tracing::info!(handed_back = n, "interrupted attempts handed back");
                    return;
                }
                Err(e) if try_number < 5 && is_transient(&e) => {
                    tracing::warn!(error = %e, "hand back failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "hand back failed: the rescuer will take these jobs back when their leases expire");
                    return;
                }
            }
        }
    }
}

/// Writes the limits this node's configuration gives its queues (none, for a queue it names
/// without any) where no operator set them, and tells every node; rows that already hold them
/// are left alone, so a node's start does not wake the others.
async fn apply_config_limits(pool: &Db, config: &EngineConfig) -> Result<(), sqlx::Error> {
    for (name, _) in &config.queues {
        let limits = config.limits_of(name);
        let mut tx = pool.begin().await?;
        let current = queue_store::queue_get(&mut *tx, name).await?;
        if current
            .as_ref()
            .is_some_and(|row| row.limits_by == "operator" || row.limits() == limits)
        {
            continue;
        }
        match queue_store::queue_set_limits(&mut *tx, name, &limits, "config").await {
            Ok(_) => {
                Control::QueueChanged(name.clone()).send(&mut *tx).await?;
                tx.commit().await?;
            }
            // An operator set them meanwhile.
            Err(sqlx::Error::RowNotFound) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
