//! Starts and stops a node's engine services.
//!
//! A node runs: the notifier (LISTEN/NOTIFY), the timer (stages jobs exactly when due), one
//! producer per queue (claims into free slots), the executor (runs handlers) and its completer
//! (writes outcomes in batches), the heartbeat (node row and job leases), the queue settings sync
//! (pause and concurrency, also when a notification was lost), the rescuer (expired leases, on
//! every node), and the leader elector, which runs the other maintenance services (pruner,
//! periodic jobs, count folder) while this node leads.
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

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::{broadcast, mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::client::{is_valid_queue_name, Client};
use super::executor::{Completer, Completion};
use super::heartbeat::Heartbeat;
use super::job::{Claim, JobId};
use super::leadership::LeaderElector;
use super::maintenance::{
    count_folder::CountFolderConfig,
    periodic::PeriodicJob,
    pruner::PrunerConfig,
    rescuer::{JobRescuer, RescuerConfig},
};
use super::metrics::Metrics;
use super::notifier::Notifier;
use super::producer::{Producer, QueueState};
use super::queue_settings::QueueSettingsSync;
use super::store::errors::is_transient;
use super::store::{jobs as job_store, nodes as node_store, queues as queue_store};
use super::timer::Timer;
use super::worker::Workers;

/// Default per-node concurrency of a queue.
pub const DEFAULT_CONCURRENCY: usize = 10;
/// Default lease of an executing attempt. A node that stops renewing (crash, hang, lost database)
/// has its jobs rescued this long after its last renewal.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);
/// Default interval of the heartbeat (node row and lease renewal).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// Default backstop poll: covers notifications lost while the listener reconnects.
pub const DEFAULT_BACKSTOP_POLL: Duration = Duration::from_secs(1);
/// Default largest claim in one statement.
pub const DEFAULT_CLAIM_BATCH: usize = 200;
/// Default time running attempts get to finish at shutdown.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A node's engine settings.
#[derive(Clone)]
pub struct EngineConfig {
    /// This node's id, unique among live nodes. Default: `<hostname>-<pid>-<random>`.
    pub node_id: String,
    /// The queues this node runs and their per-node concurrency. Default: `default` with 10.
    pub queues: Vec<(String, usize)>,
    /// Lease of an executing attempt. Default: [`DEFAULT_LEASE`] (5 s).
    pub lease: Duration,
    /// Heartbeat interval, which must be well under the lease. Default: [`DEFAULT_HEARTBEAT`] (1 s).
    pub heartbeat: Duration,
    /// Backstop poll interval. Default: [`DEFAULT_BACKSTOP_POLL`] (1 s).
    pub backstop_poll: Duration,
    /// Largest claim in one statement. Default: [`DEFAULT_CLAIM_BATCH`] (200).
    pub claim_batch: usize,
    /// Time running attempts get at shutdown. Default: [`DEFAULT_SHUTDOWN_GRACE`] (10 s).
    pub shutdown_grace: Duration,
    /// Leader lease time-to-live. Default: 5 s, renewed every second.
    pub leader_ttl: Duration,
    pub rescuer: RescuerConfig,
    pub pruner: PrunerConfig,
    pub count_folder: CountFolderConfig,
    /// Jobs the leader inserts on a fixed interval. Default: none.
    pub periodic: Vec<PeriodicJob>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            node_id: default_node_id(),
            queues: vec![("default".to_string(), DEFAULT_CONCURRENCY)],
            lease: DEFAULT_LEASE,
            heartbeat: DEFAULT_HEARTBEAT,
            backstop_poll: DEFAULT_BACKSTOP_POLL,
            claim_batch: DEFAULT_CLAIM_BATCH,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            leader_ttl: Duration::from_secs(5),
            rescuer: RescuerConfig::default(),
            pruner: PrunerConfig::default(),
            count_folder: CountFolderConfig::default(),
            periodic: Vec::new(),
        }
    }
}

impl EngineConfig {
    /// Fails at startup on settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.node_id.is_empty() || self.node_id.len() > 200 {
            return Err("node id must be 1 to 200 characters".into());
        }
        for (q, c) in &self.queues {
            if !is_valid_queue_name(q) {
                return Err(format!(
                    "queue name `{q}`: use 1 to 64 of a-z, 0-9, `_`, `-`"
                ));
            }
            if *c == 0 || *c > 10_000 {
                return Err(format!("queue `{q}`: concurrency must be 1 to 10000"));
            }
        }
        if self.heartbeat * 2 >= self.lease {
            return Err("the heartbeat must be under half the lease".into());
        }
        if self.claim_batch == 0 {
            return Err("claim batch must be at least 1".into());
        }
        if self.leader_ttl < Duration::from_secs(2) {
            return Err("leader ttl must be at least 2 s".into());
        }
        self.rescuer.validate()?;
        self.pruner.validate()?;
        self.count_folder.validate()?;
        for p in &self.periodic {
            p.validate()?;
        }
        Ok(())
    }
}

fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "node".into());
    format!("{host}-{}-{:04x}", std::process::id(), fastrand::u16(..))
}

/// An attempt running on this node.
pub(crate) struct Running {
    pub attempt: i32,
    /// The claim it runs for; a newer claim of the same job has another token.
    pub claim: Claim,
    pub cancel: CancellationToken,
    pub abort: Option<tokio::task::AbortHandle>,
    /// Set when the attempt was stopped because its job is gone (cancelled, rescued).
    pub stopped: bool,
}

/// State shared by a node's services.
pub(crate) struct Shared {
    /// The handlers' pool (the one the node was started with).
    pub pool: PgPool,
    /// Connections for claiming and staging only; see [`claim_pool`].
    pub claim_pool: PgPool,
    /// Connections for the engine's bookkeeping only; see [`bookkeeping_pool`].
    pub bookkeeping_pool: PgPool,
    pub workers: Arc<Workers>,
    pub config: EngineConfig,
    pub node_id: String,
    pub queues: HashMap<String, Arc<QueueState>>,
    pub running: Mutex<HashMap<JobId, Running>>,
    /// Attempts interrupted at shutdown, to hand back.
    pub interrupted: Mutex<Vec<Claim>>,
    /// Attempts that finished but whose outcome the completer has not written yet.
    pub pending_outcomes: Mutex<HashSet<Claim>>,
    pub completions: mpsc::UnboundedSender<Completion>,
    pub events: broadcast::Sender<String>,
    pub timer_wake: Notify,
    /// An earlier due time learnt from a notification (ms since epoch, `i64::MAX` if none).
    pub timer_hint_ms: AtomicI64,
    /// Database clock minus local clock, in microseconds.
    pub clock_offset_us: AtomicI64,
    pub is_leader: AtomicBool,
    /// What this node measures (see `metrics`).
    pub metrics: Arc<Metrics>,
    /// Cancelled when executing attempts must stop (after the shutdown grace).
    pub hard_stop: CancellationToken,
    pub tracker: TaskTracker,
}

impl Shared {
    /// The database clock, estimated from the local clock and the measured offset.
    pub fn db_now(&self) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::microseconds(self.clock_offset_us.load(Ordering::Relaxed))
    }

    pub fn set_leader(&self, leader: bool) {
        self.is_leader.store(leader, Ordering::Relaxed);
        self.metrics.set_leader(leader);
    }

    pub fn wake_queue(&self, queue: &str) {
        if let Some(q) = self.queues.get(queue) {
            q.wake.notify_one();
        }
    }

    pub fn wake_all_queues(&self) {
        for q in self.queues.values() {
            q.wake.notify_one();
        }
    }

    /// Stops the attempts of these jobs (cancelled by an operator).
    pub fn stop_attempts(&self, ids: &[JobId]) {
        let mut running = self.running.lock().expect("running map poisoned");
        for id in ids {
            if let Some(r) = running.get_mut(id) {
                r.stop();
            }
        }
    }

    /// Stops the attempts of these claims, if they still run here (their claims lost their jobs).
    pub fn stop_claims(&self, claims: &[Claim]) {
        let mut running = self.running.lock().expect("running map poisoned");
        for c in claims {
            if let Some(r) = running.get_mut(&c.id).filter(|r| r.claim == *c) {
                r.stop();
            }
        }
    }
}

impl Running {
    fn stop(&mut self) {
        self.stopped = true;
        self.cancel.cancel();
        if let Some(abort) = &self.abort {
            abort.abort();
        }
    }
}

/// A small pool of connections tuned for the claim and stage statements:
///
/// - `synchronous_commit = off`: a claim's commit does not wait for the disk. This is safe: a
///   claim lost in a database crash puts the job back to `available` with its old attempt number,
///   and its next claim issues that number again; but every claim draws a fresh claim token, and
///   every write of an attempt is guarded by its token, so the attempt that started meanwhile is
///   fenced off (its completion, failure and lease renewals find no row) and the job simply runs
///   again. Since the WAL is written in order, the durable commit of an outcome also makes the
///   claim before it durable.
/// - no bitmap or sequential scans: a queue table's statistics are nearly always stale (a bulk
///   insert into a small table), and the planner then sorts every available row to take ten. The
///   claim and stage indexes already return rows in the order wanted.
fn claim_pool(pool: &PgPool, queues: usize) -> PgPool {
    // (Each producer and the timer use one connection at a time; two more for the warm-up's
    // parallel checkouts and a producer retrying.)
    let options = named_options(pool, "claims").options([
        ("synchronous_commit", "off"),
        ("enable_bitmapscan", "off"),
        ("enable_seqscan", "off"),
    ]);
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(queues as u32 + 2)
        .min_connections(queues as u32 + 2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options)
}

/// The bookkeeping pool: the heartbeat, the completer, the rescuer, the leader elector, the queue
/// settings sync, the notifier's settings reads and its catch-up after a reconnect each use one
/// connection at a time, so they never wait on each other here, and handlers cannot take these.
/// Commits stay durable (outcomes must not be lost).
const BOOKKEEPING_CONNECTIONS: u32 = 7;
/// How long a bookkeeping statement waits for a row lock another transaction holds before it
/// gives up (and is tried again later): an operator's open transaction on one job must not stall
/// the node's outcomes or leases.
const BOOKKEEPING_LOCK_TIMEOUT: &str = "2s";

/// The pool's connect options with `application_name` extended by `role` (`<name>-<role>`, or
/// `kickoff-<role>`), so that `pg_stat_activity` tells a node's connections and their use apart.
pub(crate) fn named_options(pool: &PgPool, role: &str) -> sqlx::postgres::PgConnectOptions {
    let options = (*pool.connect_options()).clone();
    let name = match options.get_application_name() {
        Some(base) => format!("{base}-{role}"),
        None => format!("kickoff-{role}"),
    };
    options.application_name(&name)
}

fn bookkeeping_pool(pool: &PgPool) -> PgPool {
    let options =
        named_options(pool, "bookkeeping").options([("lock_timeout", BOOKKEEPING_LOCK_TIMEOUT)]);
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(BOOKKEEPING_CONNECTIONS)
        .min_connections(2)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options)
}

/// Opens every connection of the claim pool now, and runs the claim, stage and next-due statements
/// once on each (matching nothing, rolled back). A first claim that has to log in (SCRAM costs
/// milliseconds), load the table's and its triggers' catalog entries into a fresh backend, and
/// plan its statement fired the first due jobs about 20 ms late.
async fn warm_up(pool: &PgPool, lease: Duration) -> Result<(), sqlx::Error> {
    let n = pool.options().get_max_connections() as usize;
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut conn = pool.acquire().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        // Queue names are never empty, and nothing is due before the epoch.
        job_store::job_claim(&mut *tx, "", 1, "warm-up", lease).await?;
        job_store::job_stage_due(&mut *tx, Some(DateTime::<Utc>::UNIX_EPOCH), 1).await?;
        job_store::job_next_due(&mut *tx).await?;
        tx.rollback().await?;
        held.push(conn);
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid engine configuration: {0}")]
    Config(String),
    #[error("database error while starting the engine: {0}")]
    Database(#[from] sqlx::Error),
}

/// A running node. Stop it with [`Engine::stop`].
pub struct Engine {
    shared: Arc<Shared>,
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
        pool: PgPool,
        workers: Workers,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        config.validate().map_err(EngineError::Config)?;
        let workers = Arc::new(workers);
        let names: Vec<String> = config.queues.iter().map(|(q, _)| q.clone()).collect();
        queue_store::queue_ensure(&pool, &names).await?;
        // The settings are read after the listener is up (below): a change made in between is
        // then either in the rows read or in a notification received.
        let queues: HashMap<String, Arc<QueueState>> = config
            .queues
            .iter()
            .map(|(name, concurrency)| {
                (
                    name.clone(),
                    Arc::new(QueueState::new(name.clone(), *concurrency)),
                )
            })
            .collect();

        let (completions, completions_rx) = mpsc::unbounded_channel();
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            claim_pool: claim_pool(&pool, queues.len()),
            bookkeeping_pool: bookkeeping_pool(&pool),
            pool: pool.clone(),
            workers: workers.clone(),
            node_id: config.node_id.clone(),
            config,
            queues,
            running: Mutex::new(HashMap::new()),
            interrupted: Mutex::new(Vec::new()),
            pending_outcomes: Mutex::new(HashSet::new()),
            completions,
            events,
            timer_wake: Notify::new(),
            timer_hint_ms: AtomicI64::new(i64::MAX),
            clock_offset_us: AtomicI64::new(0),
            is_leader: AtomicBool::new(false),
            metrics: Arc::new(Metrics::new()),
            hard_stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
        });

        warm_up(&shared.claim_pool, shared.config.lease).await?;
        let stop_claiming = CancellationToken::new();
        let stop_services = CancellationToken::new();
        let services = TaskTracker::new();

        // The listener first, so that no notification of the start-up period is missed; then the
        // queue settings as they are now.
        let notifier = Notifier::connect(shared.clone()).await?;
        let settings = QueueSettingsSync::new(shared.clone());
        settings.run_once().await?;
        Heartbeat::new(shared.clone()).beat().await?;
        services.spawn(notifier.run(stop_services.clone()));
        services.spawn(settings.run(stop_services.clone()));
        services.spawn(Heartbeat::new(shared.clone()).run(stop_services.clone()));
        services.spawn(LeaderElector::new(shared.clone()).run(stop_services.clone()));
        services.spawn(
            JobRescuer::new(
                shared.bookkeeping_pool.clone(),
                shared.config.rescuer.clone(),
            )
            .with_metrics(shared.metrics.clone())
            .run(stop_services.clone()),
        );
        let claimers = TaskTracker::new();
        claimers.spawn(Timer::new(shared.clone()).run(stop_claiming.clone()));
        for q in shared.queues.values() {
            claimers.spawn(Producer::new(shared.clone(), q.clone()).run(stop_claiming.clone()));
        }
        claimers.close();
        let stop_completer = CancellationToken::new();
        let completer = tokio::spawn(
            Completer::new(shared.clone(), completions_rx, stop_completer.clone()).run(),
        );

        tracing::info!(node = %shared.node_id, queues = ?shared.config.queues, "engine started");
        Ok(Engine {
            client: Client::new(pool, workers),
            shared,
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
        &self.shared.node_id
    }

    /// Whether this node currently holds the leader lease.
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader.load(Ordering::Relaxed)
    }

    /// State changes of jobs on any node: one JSON message per database statement (see the
    /// `kickoff_events` trigger).
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.shared.events.subscribe()
    }

    /// The sender behind [`Engine::subscribe`], for handlers that subscribe per request.
    pub fn events(&self) -> broadcast::Sender<String> {
        self.shared.events.clone()
    }

    /// What this node measures, for `/metrics`.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    /// Attempts running on this node right now.
    pub fn running_count(&self) -> usize {
        self.shared.running.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// Stops the node gracefully (see the module doc).
    pub async fn stop(self) {
        let shared = self.shared.clone();
        self.stop_claiming.cancel();
        self.claimers.wait().await;
        shared.tracker.close();
        if tokio::time::timeout(shared.config.shutdown_grace, shared.tracker.wait())
            .await
            .is_err()
        {
            let n = shared.running.lock().map(|r| r.len()).unwrap_or(0);
            tracing::warn!(
                running = n,
                "shutdown grace over: interrupting running attempts"
            );
            // Abort first: a handler told to stop might still report a failure before the abort
            // lands, which would spend an attempt instead of handing it back.
            let aborts: Vec<_> = shared
                .running
                .lock()
                .map(|r| r.values().filter_map(|x| x.abort.clone()).collect())
                .unwrap_or_default();
            for a in aborts {
                a.abort();
            }
            shared.hard_stop.cancel();
            shared.tracker.wait().await;
        }
        let mut interrupted = std::mem::take(&mut *shared.interrupted.lock().expect("poisoned"));
        interrupted.sort_unstable();
        if !interrupted.is_empty() {
            // A few tries through a transient error: a job that is not handed back is rescued
            // when its lease lapses, which costs it an attempt.
            for try_number in 1.. {
                match job_store::job_hand_back(
                    &shared.bookkeeping_pool,
                    &interrupted,
                    &shared.node_id,
                )
                .await
                {
                    Ok(n) => {
                        tracing::info!(handed_back = n, "interrupted attempts handed back");
                        break;
                    }
                    Err(e) if try_number < 5 && is_transient(&e) => {
                        tracing::warn!(error = %e, "hand back failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "hand back failed: the rescuer will take these jobs back when their leases expire");
                        break;
                    }
                }
            }
        }
        // Every task that could send an outcome has ended: flush the outcomes, then stop the
        // services (the heartbeat kept leases alive until now).
        self.stop_completer.cancel();
        let _ = self.completer.await;
        self.stop_services.cancel();
        self.services.close();
        self.services.wait().await;
        if let Err(e) = node_store::node_delete(&shared.bookkeeping_pool, &shared.node_id).await {
            tracing::warn!(error = %e, "could not remove the node row; the leader will sweep it");
        }
        shared.bookkeeping_pool.close().await;
        shared.claim_pool.close().await;
        tracing::info!(node = %shared.node_id, "engine stopped");
    }
}
