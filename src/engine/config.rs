//! A node's engine settings: [`EngineConfig`], its defaults, and the checks made before a node
//! starts.

use std::time::Duration;

use super::job::is_valid_queue_name;
use super::limits::QueueLimits;
use super::maintenance::{
    count_folder::CountFolderConfig, pruner::PrunerConfig, rescuer::RescuerConfig,
};
use super::schedules::ScheduleSpec;

/// Default per-node concurrency of a queue.
pub const DEFAULT_CONCURRENCY: usize = 10;
/// Default lease of an executing attempt. A node that stops renewing (crash, hang, lost database)
/// has its jobs rescued this long after its last renewal.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);
/// Default interval of the heartbeat (node row and lease renewal).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(1);
/// Default backstop poll: covers notifications lost while the listener reconnects.
pub const DEFAULT_BACKSTOP_POLL: Duration = Duration::from_secs(1);
/// How often a node that cannot LISTEN looks for work (see [`EngineConfig::poll_only_interval`]).
pub const DEFAULT_POLL_ONLY_INTERVAL: Duration = Duration::from_millis(100);
/// Default largest claim in one statement.
pub const DEFAULT_CLAIM_BATCH: usize = 200;
/// Default most jobs a queue claims ahead of its free slots (see `queue_state`).
pub const DEFAULT_FETCH_AHEAD: usize = 100;
/// Default time before its due time that a scheduled job may be claimed (see `timer`).
pub const DEFAULT_CLAIM_AHEAD: Duration = Duration::from_millis(20);
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
    /// The most jobs a queue claims ahead of its free slots, to start the next one the moment a
    /// slot frees (0: none). The lead in force follows the queue's pace: none for jobs longer
    /// than a claim round trip. Default: [`DEFAULT_FETCH_AHEAD`] (100).
    pub fetch_ahead: usize,
    /// How long before its due time a scheduled job may be claimed into a free slot, where it
    /// waits for its instant (zero: claimed once due). Default: [`DEFAULT_CLAIM_AHEAD`] (20 ms).
    pub claim_ahead: Duration,
    /// Time running attempts get at shutdown. Default: [`DEFAULT_SHUTDOWN_GRACE`] (10 s).
    pub shutdown_grace: Duration,
    /// Leader lease time-to-live. Default: 5 s, renewed every second.
    pub leader_ttl: Duration,
    pub rescuer: RescuerConfig,
    pub pruner: PrunerConfig,
    pub count_folder: CountFolderConfig,
    /// Limits shared by every node, by queue (see `limits`): written to the queue's row at start
    /// unless an operator set them. A queue of `queues` not named here has none. Give every node
    /// the same: the last one started wins. Default: none.
    pub queue_limits: Vec<(String, QueueLimits)>,
    /// Schedules declared in code, upserted by name when the node starts (like Oban's crontab).
    /// Default: none.
    pub schedules: Vec<ScheduleSpec>,
    /// Whether the code's declaration of a schedule replaces one changed in the database (through
    /// the API or the dashboard) at start; `false` leaves a stored schedule as it is and only
    /// creates the missing ones. A pause set by an operator survives either way. Default: true.
    pub schedules_code_wins: bool,
    /// A PostgreSQL URL for the node's listening connection alone: `LISTEN` needs a session of
    /// its own, so behind a transaction pooler (PgBouncer) it points at the database directly.
    /// Default: none (the listener connects like the node's other connections).
    pub listen_url: Option<String>,
    /// Behind a transaction pooler without `listen_url` the node cannot LISTEN: it looks for work
    /// this often instead (each producer claims, the timer reads the next due time). A job
    /// inserted by another process starts up to this late.
    pub poll_only_interval: Duration,
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
            fetch_ahead: DEFAULT_FETCH_AHEAD,
            claim_ahead: DEFAULT_CLAIM_AHEAD,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            leader_ttl: Duration::from_secs(5),
            rescuer: RescuerConfig::default(),
            pruner: PrunerConfig::default(),
            count_folder: CountFolderConfig::default(),
            queue_limits: Vec::new(),
            schedules: Vec::new(),
            schedules_code_wins: true,
            listen_url: None,
            poll_only_interval: DEFAULT_POLL_ONLY_INTERVAL,
        }
    }
}

impl EngineConfig {
    /// Fails at startup on settings that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.listen_url {
            url.parse::<sqlx::postgres::PgConnectOptions>()
                .map_err(|e| format!("the listening connection's URL: {e}"))?;
        }
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
        if self.fetch_ahead > 1000 {
            return Err("fetch-ahead must be 0 to 1000".into());
        }
        if self.claim_ahead * 5 > self.lease {
            return Err("claim-ahead must be under a fifth of the lease".into());
        }
        if self.leader_ttl < Duration::from_secs(2) {
            return Err("leader ttl must be at least 2 s".into());
        }
        for (q, limits) in &self.queue_limits {
            if !self.queues.iter().any(|(name, _)| name == q) {
                return Err(format!(
                    "queue `{q}` has limits but this node does not run it"
                ));
            }
            limits.check().map_err(|e| format!("queue `{q}`: {e}"))?;
        }
        self.rescuer.validate()?;
        self.pruner.validate()?;
        self.count_folder.validate()?;
        for s in &self.schedules {
            s.check()
                .map_err(|e| format!("schedule `{}`: {e}", s.name))?;
        }
        Ok(())
    }
}

impl EngineConfig {
    /// The limits this configuration gives `queue` (none when it names none).
    pub fn limits_of(&self, queue: &str) -> QueueLimits {
        self.queue_limits
            .iter()
            .find(|(q, _)| q == queue)
            .map(|(_, l)| l.clone())
            .unwrap_or_default()
    }
}

fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "node".into());
    format!("{host}-{}-{:04x}", std::process::id(), fastrand::u16(..))
}
