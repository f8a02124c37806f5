//! The heartbeat: keeps this node's row in `nodes` fresh, renews the leases of its running
//! attempts, and writes what those running a beat or longer logged since the last beat (their
//! jobs' pages show it live, see `job_attempt_live`). An attempt whose claim no longer holds its job (cancelled, rescued while this node was
//! cut off, or claimed again after its claim was lost in a crash) is stopped. A lease whose row
//! another transaction has locked is not waited for (see `job_renew_leases`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::job::JobId;
use super::node::{bookkeeping_lock_wait, Attempts};
use super::store::{jobs as job_store, nodes as node_store};

pub struct Heartbeat {
    /// The bookkeeping pool, which handlers cannot exhaust.
    pool: Db,
    attempts: Arc<Attempts>,
    node_id: String,
    hostname: String,
    queues: Value,
    lease: Duration,
    interval: Duration,
    /// The first beat registers the node: its row (maybe left by an earlier process with the
    /// same id) says it started now.
    registered: std::sync::atomic::AtomicBool,
    /// The jobs whose running attempt this node wrote to `job_attempt_live`.
    live: std::sync::Mutex<HashSet<JobId>>,
}

impl Heartbeat {
    /// The heartbeat of node `node_id` running `queues` (name, concurrency), renewing the leases
    /// of `attempts` by `lease` every `interval`.
    pub fn new(
        pool: Db,
        attempts: Arc<Attempts>,
        node_id: String,
        queues: &[(String, usize)],
        lease: Duration,
        interval: Duration,
    ) -> Self {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default();
        let queues = json!(queues
            .iter()
            .map(|(q, c)| (q.clone(), json!(c)))
            .collect::<serde_json::Map<_, _>>());
        Heartbeat {
            pool,
            attempts,
            node_id,
            hostname,
            queues,
            lease,
            interval,
            registered: Default::default(),
            live: Default::default(),
        }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.run_once().await {
                tracing::warn!(error = %e, "heartbeat failed; leases expire unless the next one succeeds");
            }
        }
    }

    /// A lease is renewed once it has less than this left: two beats and the longest a beat may
    /// wait for one locked row ([`bookkeeping_lock_wait`]), or the whole lease if that is
    /// shorter. A lease left as it is on one beat thus outlives the next beat even when that
    /// one starts late behind a lock wait, and a row is rewritten every other beat or less often
    /// rather than on each (with the server's beat of a fifth of the lease and a lease of 5 s,
    /// every other beat; of 30 s, every third).
    fn renew_below(&self) -> Duration {
        (self.interval * 2 + bookkeeping_lock_wait(self.lease)).min(self.lease)
    }

    /// One heartbeat: the leases first (they matter most), then the node row.
    pub async fn run_once(&self) -> Result<(), sqlx::Error> {
        use std::sync::atomic::Ordering;
        let leases = self.renew_leases().await;
        let first = !self.registered.load(Ordering::Relaxed);
        node_store::node_heartbeat(
            &self.pool,
            &self.node_id,
            &self.hostname,
            std::process::id() as i32,
            &self.queues,
            first,
        )
        .await?;
        self.registered.store(true, Ordering::Relaxed);
        if let Err(e) = self.write_live().await {
            tracing::debug!(error = %e, "writing the running attempts' log lines failed");
        }
        leases
    }

    /// What the attempts running a beat or longer logged and recorded since the last beat, for
    /// their jobs' pages; and the rows of those that ended since, deleted (their records hold
    /// the lines now). Attempts shorter than a beat, or silent, write nothing.
    async fn write_live(&self) -> Result<(), sqlx::Error> {
        let (changed, running) = self.attempts.live(self.interval);
        let ended: Vec<JobId> = {
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            live.extend(changed.iter().map(|c| c.0.id));
            let ended = live.difference(&running).copied().collect();
            live.retain(|id| running.contains(id));
            ended
        };
        if !changed.is_empty() {
            job_store::attempt_live_write(&self.pool, &self.node_id, &changed).await?;
        }
        if !ended.is_empty() {
            job_store::attempt_live_delete(&self.pool, &self.node_id, &ended).await?;
        }
        Ok(())
    }

    async fn renew_leases(&self) -> Result<(), sqlx::Error> {
        // Finished attempts keep their lease until the completer has written their outcome.
        let held = self.attempts.held();
        if held.is_empty() {
            return Ok(());
        }
        let mut conn = self.pool.connection().await?;
        let renewal =
            job_store::job_renew_leases(&mut conn, &held, self.lease, self.renew_below()).await?;
        drop(conn);
        if !renewal.locked.is_empty() {
            tracing::debug!(jobs = ?renewal.locked, "leases of locked rows renewed next time");
        }
        // Only attempts whose handler still runs are lost and stopped. One that finished has
        // nothing to stop, and its outcome, written during the renewal, is why its row no
        // longer matched (seen: 64 completed attempts reported lost at a beat of `kickoff bench
        // throughput`, a false alarm in the node's log); an outcome whose job was cancelled or
        // rescued meanwhile is fenced off when the completer writes it.
        let running = self.attempts.running_claims();
        let lost: Vec<_> = held
            .into_iter()
            .filter(|c| !renewal.holds(c) && running.contains(c))
            .collect();
        if !lost.is_empty() {
            // Claimed between the snapshot and the update are not lost: only attempts still
            // running for the claim we tried to renew are stopped.
            tracing::info!(jobs = ?lost.iter().map(|c| c.id).collect::<Vec<_>>(), "attempts lost their jobs (cancelled, rescued or claimed again): stopping them");
            self.attempts.stop_claims(&lost);
        }
        Ok(())
    }
}
