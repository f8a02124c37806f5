//! The chaos suite (`kickoff chaos`): several server processes on one PostgreSQL under a steady
//! mixed load, while nodes are killed with SIGKILL and restarted, PostgreSQL itself crashes and
//! restarts, and a node's database connections are cut. At the end it checks what must hold and
//! prints the figures:
//!
//! - every job the load inserted (an acknowledged insert) exists and reached a final state: lost 0;
//! - the tally raised by counting jobs (in the transaction of their completion) equals the number
//!   of those jobs that completed: no double effect, no missing one;
//! - every completed webhook was delivered; a job delivered more than once has an earlier attempt
//!   rescued after its node died (the delivery of a killed attempt cannot be taken back: that is
//!   at-least-once for calls outside the database), and none is unexplained;
//! - every question locked;
//! - lateness (claim minus due time) p50 / p99 of first attempts away from any disturbance, and
//!   the time from each kill until the dead node's executing jobs were taken back.
//!
//! It runs on an embedded cluster of its own (in a temporary directory) so that it can crash it.
//! Its checks read the tables with queries of their own: they are the suite's instruments (like
//! the bench's), not paths of the application, so they stay here rather than in the store layer.

pub mod failover;
pub mod history;
mod load;
pub use node::faketime_library;
pub(crate) mod node;
pub mod receiver;
pub mod switch;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::db::Db;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;

use crate::engine::{Client, MIGRATOR};
use crate::postgres::{Durability, EmbeddedPostgres, DATABASE};
use node::{Node, NodeEnv};

/// What a chaos run does.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// The `kickoff` binary to start the nodes from.
    pub binary: PathBuf,
    /// Where the cluster and the nodes' logs go (kept after the run, for a look).
    pub dir: PathBuf,
    pub nodes: usize,
    /// How many times a random node is killed (and restarted).
    pub kills: usize,
    /// The time between disturbances.
    pub interval: Duration,
    /// Crash and restart PostgreSQL once, halfway.
    pub restart_postgres: bool,
    /// Cut one node's database connections once.
    pub cut_connections: bool,
    /// Jobs inserted per second.
    pub rate: u32,
    /// The nodes' lease: a dead node's jobs are rescued about this long after it died.
    pub lease: Duration,
    /// Fail over once, halfway: the primary killed with SIGKILL, its synchronous standby
    /// promoted, the address the nodes use moved to it (see [`failover`]).
    pub failover: bool,
}

impl ChaosConfig {
    pub fn new(binary: PathBuf, dir: PathBuf) -> Self {
        ChaosConfig {
            binary,
            dir,
            nodes: 3,
            kills: 4,
            interval: Duration::from_secs(3),
            restart_postgres: true,
            cut_connections: true,
            rate: 200,
            lease: Duration::from_secs(2),
            failover: false,
        }
    }
}

/// What a chaos run found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChaosReport {
    pub seconds: f64,
    pub kills: usize,
    pub postgres_restarts: usize,
    pub connection_cuts: usize,
    pub jobs: usize,
    pub failed_inserts: u64,
    /// Jobs in the table whose insert answered with an error (the commit happened, the answer was
    /// lost with the connection): expected after a crash, and they must complete like the others.
    pub unacknowledged_commits: usize,
    pub lost: usize,
    pub not_final: usize,
    pub completed: i64,
    pub discarded: i64,
    pub cancelled: i64,
    pub tally_expected: i64,
    pub tally: i64,
    /// Tally above the completed counting jobs: effects applied twice.
    pub double_effects: i64,
    /// Tally below: completions without their effect.
    pub missing_effects: i64,
    pub webhook_jobs: usize,
    pub deliveries: u64,
    pub duplicate_deliveries: u64,
    pub unexplained_duplicates: u64,
    pub undelivered: usize,
    pub questions: usize,
    pub questions_not_locked: i64,
    /// Lateness of first attempts scheduled away from disturbances, in ms.
    pub lateness_p50_ms: f64,
    pub lateness_p99_ms: f64,
    pub lateness_max_ms: f64,
    pub lateness_samples: usize,
    /// Per kill that left jobs in flight: ms until the dead node held no executing job.
    pub rescue_ms: Vec<f64>,
    pub failovers: usize,
    /// After the failover, the address reached the promoted standby (a primary, on its port).
    pub failover_confirmed: bool,
    /// From the primary's kill until a job inserted after it (retried until the insert went
    /// through) completed: the outage as the application sees it.
    pub failover_outage_ms: Option<f64>,
}

impl ChaosReport {
    /// Whether everything that must hold held.
    pub fn ok(&self) -> bool {
        self.problems().is_empty()
    }

    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let checks: [(bool, String); 10] = [
            (
                self.failovers == 0 || self.failover_outage_ms.is_some(),
                "no job inserted after the failover ran within 60 s".to_string(),
            ),
            (
                self.failovers == 0 || self.failover_confirmed,
                "after the failover the address did not reach the promoted standby".to_string(),
            ),
            (self.lost == 0, format!("{} jobs lost", self.lost)),
            (
                self.not_final == 0,
                format!("{} jobs not final", self.not_final),
            ),
            (
                self.double_effects == 0,
                format!("{} effects applied twice", self.double_effects),
            ),
            (
                self.missing_effects == 0,
                format!("{} effects missing", self.missing_effects),
            ),
            (
                self.unexplained_duplicates == 0,
                format!(
                    "{} duplicate deliveries without a rescued attempt",
                    self.unexplained_duplicates
                ),
            ),
            (
                self.undelivered == 0,
                format!("{} completed webhooks never delivered", self.undelivered),
            ),
            (
                self.questions_not_locked == 0,
                format!("{} questions not locked", self.questions_not_locked),
            ),
            (self.jobs > 0, "the load inserted nothing".to_string()),
        ];
        for (ok, problem) in checks {
            if !ok {
                p.push(problem);
            }
        }
        p
    }

    /// The report as a few readable lines.
    pub fn text(&self) -> String {
        let rescue = if self.rescue_ms.is_empty() {
            "-".to_string()
        } else {
            let max = self.rescue_ms.iter().cloned().fold(0.0, f64::max);
            let mean = self.rescue_ms.iter().sum::<f64>() / self.rescue_ms.len() as f64;
            format!(
                "mean {mean:.0} ms, max {max:.0} ms ({} kills with jobs in flight)",
                self.rescue_ms.len()
            )
        };
        format!(
            "chaos: {:.0} s, {} kills, {} PostgreSQL crash-restarts, {} connection cuts\n\
             jobs: {} inserted ({} inserts failed while the database was down, {} of them committed), lost {}, not final {}\n\
             final states: {} completed, {} discarded, {} cancelled\n\
             effects: tally {} for {} completed counting jobs: double {}, missing {}\n\
             webhooks: {} jobs, {} deliveries, {} duplicates ({} unexplained), {} undelivered\n\
             questions: {}, not locked {}\n\
             lateness while healthy: p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms ({} first attempts)\n\
             rescue after a kill: {rescue}\n\
             failovers: {}, outage {}\n\
             verdict: {}",
            self.seconds,
            self.kills,
            self.postgres_restarts,
            self.connection_cuts,
            self.jobs,
            self.failed_inserts,
            self.unacknowledged_commits,
            self.lost,
            self.not_final,
            self.completed,
            self.discarded,
            self.cancelled,
            self.tally,
            self.tally_expected,
            self.double_effects,
            self.missing_effects,
            self.webhook_jobs,
            self.deliveries,
            self.duplicate_deliveries,
            self.unexplained_duplicates,
            self.undelivered,
            self.questions,
            self.questions_not_locked,
            self.lateness_p50_ms,
            self.lateness_p99_ms,
            self.lateness_max_ms,
            self.lateness_samples,
            self.failovers,
            self.failover_outage_ms
                .map_or("-".to_string(), |ms| format!("{ms:.0} ms")),
            if self.ok() { "ok".to_string() } else { self.problems().join("; ") },
        )
    }
}

/// A disturbance: jobs due around it are left out of the healthy lateness.
struct Disturbance {
    at: DateTime<Utc>,
    /// PostgreSQL crashed: claims not yet on disk were lost.
    crash: bool,
    /// How long after it jobs are still disturbed: every node reconnecting after a database
    /// crash or a cut; a moment of restart for a killed node (its own jobs are rescued, and
    /// their later attempts are not counted anyway).
    settles: Duration,
}

/// Runs the suite and reports. An error means the run itself could not be made (no cluster, a
/// node that would not start); a run that finds a problem returns a report that is not `ok`.
pub async fn run(config: ChaosConfig) -> Result<ChaosReport, String> {
    let started = Instant::now();
    std::fs::create_dir_all(&config.dir).map_err(|e| e.to_string())?;
    // Durable: a crash may not lose an acknowledged commit (a throwaway cluster's asynchronous
    // commits would, and the suite would find "lost" jobs that PostgreSQL itself dropped).
    let cluster = EmbeddedPostgres::start(&config.dir.join("cluster"), Durability::Durable)
        .map_err(|e| e.to_string())?;
    let standby = if config.failover {
        match failover::Standby::make(&cluster, &config.dir.join("standby")).await {
            Ok(standby) => Some(standby),
            Err(e) => {
                let _ = cluster.stop();
                return Err(e);
            }
        }
    } else {
        None
    };
    let result = run_on(&config, &cluster, standby.as_ref(), started).await;
    // A killed primary is gone already.
    let _ = cluster.stop();
    if let Some(standby) = standby {
        standby.stop();
    }
    result
}

async fn run_on(
    config: &ChaosConfig,
    cluster: &EmbeddedPostgres,
    standby: Option<&failover::Standby>,
    started: Instant,
) -> Result<ChaosReport, String> {
    let url = match standby {
        Some(standby) => standby.url(),
        None => cluster.url_for(DATABASE),
    };
    let pool = connect_and_migrate(&url, 6).await?;
    let (receiver_addr, deliveries) = receiver::start().await?;
    let log_dir = config.dir.join("nodes");
    std::fs::create_dir_all(&log_dir).map_err(|e| e.to_string())?;
    let env = NodeEnv {
        binary: config.binary.clone(),
        database_url: url.clone(),
        lease_ms: config.lease.as_millis() as u64,
        webhook_host: receiver_addr.to_string(),
        log_dir,
        queues: "default:20,webhooks:20,questions:10".into(),
        secret_key: None,
        settings: Vec::new(),
        odd_base: None,
    };
    let mut nodes = Vec::new();
    for slot in 0..config.nodes {
        nodes.push(Node::start(&env, slot, 0).await?);
    }
    let mut generations = vec![0usize; config.nodes];

    let client = Client::new(
        pool.clone(),
        Arc::new(crate::workers::builtin(vec![env.webhook_host.clone()])),
    );
    let record = Arc::new(Mutex::new(load::Inserted::default()));
    let stop_load = CancellationToken::new();
    let load = tokio::spawn(load::run(
        client,
        config.rate,
        format!("http://{receiver_addr}/hook"),
        record.clone(),
        stop_load.clone(),
    ));

    let mut report = ChaosReport::default();
    let mut disturbances = Vec::new();
    let mut rescues = Vec::new();
    let mut rng = fastrand::Rng::new();
    let mut outage = None;
    for k in 0..config.kills {
        tokio::time::sleep(config.interval).await;
        if let (Some(standby), true) = (standby, k == config.kills / 2) {
            disturbances.push(Disturbance {
                at: Utc::now(),
                // Claims are committed without waiting for the standby: they may be lost.
                crash: true,
                settles: Duration::from_secs(10),
            });
            let killed_at = Instant::now();
            standby.fail_over(cluster)?;
            report.failovers += 1;
            outage = Some(tokio::spawn(failover::time_to_recover(
                Client::new(pool.clone(), Arc::new(crate::workers::builtin(Vec::new()))),
                killed_at,
            )));
            tokio::time::sleep(config.interval / 2).await;
        }
        if config.restart_postgres && k == config.kills / 2 {
            disturbances.push(Disturbance {
                at: Utc::now(),
                crash: true,
                settles: Duration::from_secs(10),
            });
            cluster
                .crash_and_restart()
                .map_err(|e| format!("restart PostgreSQL: {e}"))?;
            report.postgres_restarts += 1;
            tokio::time::sleep(config.interval / 2).await;
        }
        if config.cut_connections && k == config.kills / 3 {
            let victim = &nodes[rng.usize(..nodes.len())];
            disturbances.push(Disturbance {
                at: Utc::now(),
                crash: false,
                settles: Duration::from_secs(5),
            });
            cut_connections(&pool, &victim.app_name).await;
            report.connection_cuts += 1;
        }
        let slot = rng.usize(..nodes.len());
        let victim = nodes.swap_remove(slot);
        disturbances.push(Disturbance {
            at: Utc::now(),
            crash: false,
            settles: Duration::from_secs(1),
        });
        let killed_at = Instant::now();
        let dead_id = victim.id.clone();
        let victim_slot = victim.slot;
        victim.kill9().await;
        report.kills += 1;
        rescues.push(tokio::spawn(time_to_rescue(
            pool.clone(),
            dead_id,
            killed_at,
        )));
        generations[victim_slot] += 1;
        nodes.push(Node::start(&env, victim_slot, generations[victim_slot]).await?);
    }
    tokio::time::sleep(config.interval).await;
    stop_load.cancel();
    let _ = load.await;

    // Everything inserted must reach a final state; give the retries and rescues time.
    let inserted = record.lock().expect("record poisoned").clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let open = count_not_final(&pool, &inserted.jobs).await;
        if open == Some(0) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for r in rescues {
        if let Ok(Some(ms)) = r.await {
            report.rescue_ms.push(ms);
        }
    }
    if let Some(outage) = outage {
        report.failover_outage_ms = outage.await.ok().flatten();
    }
    if let (Some(standby), true) = (standby, report.failovers > 0) {
        report.failover_confirmed = standby.serves(&pool).await;
    }
    for n in nodes {
        n.stop().await;
    }

    check(&pool, &inserted, &deliveries, &disturbances, &mut report).await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A pool of `size` on the run's cluster, its schema migrated.
pub(crate) async fn connect_and_migrate(url: &str, size: u32) -> Result<Db, String> {
    let pool = PgPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    MIGRATOR
        .run(&pool)
        .await
        .map_err(|e| format!("migrate: {e}"))?;
    Ok(Db::from(pool))
}

/// Terminates every database connection of one node (it must reconnect on its own): its pool's,
/// and the engine's own (named `<app_name>-<role>`: bookkeeping, claims, listener).
pub(crate) async fn cut_connections(pool: &Db, app_name: &str) {
    let _ = sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1 OR application_name LIKE $1 || '-%'",
    )
    .bind(app_name)
    .execute(pool)
    .await;
}

/// Terminates only the listening connection of the node whose connections carry `app_name` (the
/// one whose last statement was a `LISTEN`): the notifications sent until it listens again are
/// lost to that node.
pub(crate) async fn cut_listener(pool: &Db, app_name: &str) {
    let _ = sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE (application_name = $1 OR application_name LIKE $1 || '-%')
           AND query ILIKE 'LISTEN%'",
    )
    .bind(app_name)
    .execute(pool)
    .await;
}

/// Ms from the kill until no job is executing on the dead node any more; `None` when it held
/// none (nothing to rescue), or not within a minute, or the database was unreachable.
async fn time_to_rescue(pool: Db, node: String, killed_at: Instant) -> Option<f64> {
    let deadline = killed_at + Duration::from_secs(60);
    let mut first = true;
    while Instant::now() < deadline {
        let held: Result<i64, _> = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE state = 'executing' AND attempted_by = $1",
        )
        .bind(&node)
        .fetch_one(&pool)
        .await;
        if matches!(held, Ok(0)) {
            return (!first).then(|| killed_at.elapsed().as_secs_f64() * 1000.0);
        }
        first = false;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    None
}

async fn count_not_final(pool: &Db, ids: &[i64]) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE id = ANY($1)
           AND state NOT IN ('completed', 'discarded', 'cancelled')",
    )
    .bind(ids)
    .fetch_one(pool)
    .await
    .ok()
}

/// Duplicate calls of one webhook job that nothing explains. A call is expected again when its
/// attempt was cut mid-flight:
/// - a later attempt after the node died: the job's errors hold a `rescued:` entry for every
///   delivered attempt but the last;
/// - the same attempt number twice: the claim was made on a connection that does not wait for the
///   disk (by design, see `engine::runtime::claim_pool`) and PostgreSQL crashed before writing it,
///   so the job was claimed again under the same number; a crash must lie between the two calls.
fn unexplained(calls: &[receiver::Delivery], rescued: &[i32], crashes: &[DateTime<Utc>]) -> u64 {
    let mut attempts: Vec<i32> = calls.iter().map(|c| c.attempt).collect();
    attempts.sort_unstable();
    attempts.dedup();
    // Every delivered attempt but the last must have been rescued (its node died after the call).
    let mut left = attempts
        .iter()
        .take(attempts.len().saturating_sub(1))
        .filter(|a| !rescued.contains(a))
        .count() as u64;
    for a in attempts {
        let mut times: Vec<DateTime<Utc>> = calls
            .iter()
            .filter(|c| c.attempt == a)
            .map(|c| c.at)
            .collect();
        times.sort();
        for pair in times.windows(2) {
            let crash_between = crashes
                .iter()
                .any(|c| *c >= pair[0] - chrono::Duration::seconds(5) && *c <= pair[1]);
            if !crash_between {
                left += 1;
            }
        }
    }
    left
}

/// Fills the report's checks from the database and the receiver.
async fn check(
    pool: &Db,
    inserted: &load::Inserted,
    deliveries: &receiver::Deliveries,
    disturbances: &[Disturbance],
    report: &mut ChaosReport,
) -> Result<(), String> {
    let db = |e: sqlx::Error| format!("check: {e}");
    report.jobs = inserted.jobs.len();
    report.failed_inserts = inserted.failed_inserts;
    let present: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE id = ANY($1)")
        .bind(&inserted.jobs)
        .fetch_one(pool)
        .await
        .map_err(db)?;
    report.lost = inserted.jobs.len() - present as usize;
    let all: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(pool)
        .await
        .map_err(db)?;
    report.unacknowledged_commits = (all - present).max(0) as usize;
    // Every job in the table, acknowledged or not, must have finished.
    let unfinished: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE state NOT IN ('completed', 'discarded', 'cancelled')",
    )
    .fetch_one(pool)
    .await
    .map_err(db)?;
    report.not_final = unfinished as usize;
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state::text, count(*) FROM jobs WHERE id = ANY($1) GROUP BY state")
            .bind(&inserted.jobs)
            .fetch_all(pool)
            .await
            .map_err(db)?;
    for (state, n) in states {
        match state.as_str() {
            "completed" => report.completed = n,
            "discarded" => report.discarded = n,
            "cancelled" => report.cancelled = n,
            _ => {}
        }
    }

    // Every completed counting job in the table, acknowledged or not: an insert whose commit
    // happened but whose answer was lost in the crash is a real job, and its effect counts.
    report.tally_expected = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE args->>'tally' = $1 AND state = 'completed'",
    )
    .bind(load::TALLY)
    .fetch_one(pool)
    .await
    .map_err(db)?;
    report.tally = crate::workers::tally_store::tally_get(pool, load::TALLY)
        .await
        .map_err(db)?;
    report.double_effects = (report.tally - report.tally_expected).max(0);
    report.missing_effects = (report.tally_expected - report.tally).max(0);

    let delivered = deliveries.snapshot();
    // Every webhook job in the table, acknowledged or not, with the attempts that were rescued.
    let webhooks: Vec<(i64, String, Vec<i32>)> = sqlx::query_as(
        "SELECT id, state::text,
                ARRAY(SELECT (e->>'attempt')::int FROM jsonb_array_elements(errors) e
                      WHERE e->>'message' LIKE 'rescued:%')
         FROM jobs WHERE kind = 'webhook'",
    )
    .fetch_all(pool)
    .await
    .map_err(db)?;
    let crashes: Vec<DateTime<Utc>> = disturbances
        .iter()
        .filter(|d| d.crash)
        .map(|d| d.at)
        .collect();
    report.webhook_jobs = webhooks.len();
    for (id, state, rescued) in webhooks {
        let calls = delivered.get(&id).cloned().unwrap_or_default();
        let n = calls.len() as u64;
        report.deliveries += n;
        if n > 1 {
            report.duplicate_deliveries += n - 1;
            report.unexplained_duplicates += unexplained(&calls, &rescued, &crashes);
        }
        if state == "completed" && n == 0 {
            report.undelivered += 1;
        }
    }

    report.questions = inserted.questions.len();
    report.questions_not_locked =
        sqlx::query_scalar("SELECT count(*) FROM questions WHERE id = ANY($1) AND status = 'open'")
            .bind(&inserted.questions)
            .fetch_one(pool)
            .await
            .map_err(db)?;

    // Healthy lateness: first attempts due away from every disturbance (from 1 s before it until
    // it settled).
    let lateness: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM attempted_at - scheduled_at)::float8 * 1000
         FROM jobs WHERE id = ANY($1) AND state = 'completed' AND attempt = 1
           AND NOT EXISTS (SELECT 1 FROM unnest($2::timestamptz[], $3::float8[]) AS d(at, settles)
                           WHERE scheduled_at BETWEEN d.at - interval '1 second'
                                                  AND d.at + d.settles * interval '1 second')
         ORDER BY 1",
    )
    .bind(&inserted.jobs)
    .bind(disturbances.iter().map(|d| d.at).collect::<Vec<_>>())
    .bind(
        disturbances
            .iter()
            .map(|d| d.settles.as_secs_f64())
            .collect::<Vec<_>>(),
    )
    .fetch_all(pool)
    .await
    .map_err(db)?;
    report.lateness_samples = lateness.len();
    let pick = |q: f64| -> f64 {
        if lateness.is_empty() {
            return 0.0;
        }
        let i = ((lateness.len() as f64 * q).ceil() as usize).clamp(1, lateness.len()) - 1;
        lateness[i].max(0.0)
    };
    report.lateness_p50_ms = pick(0.50);
    report.lateness_p99_ms = pick(0.99);
    report.lateness_max_ms = lateness.last().copied().unwrap_or(0.0).max(0.0);
    Ok(())
}
