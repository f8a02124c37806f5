//! `kickoff bench`: figures, not tests. Each workload runs in a fresh database (created on the given
//! server, or in the embedded cluster) and prints one JSON line.

mod alerts;
mod cpu;
mod notify;
mod pages;
mod percentiles;
mod schedules;
mod streams;
mod worker;
mod workflows;

use std::collections::HashMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::db::{Db, PoolMode};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::ConnectOptions;
use tokio::sync::mpsc;

use crate::cli::BenchWorkload;
use crate::config::Config;
use crate::engine::store::jobs as job_store;
use crate::engine::{Engine, EngineConfig, JobId, JobState, NewJob, MIGRATOR};
use crate::postgres::{Durability, EmbeddedPostgres};

use self::percentiles::with_percentiles;
use self::worker::{workers, workers_reporting_to, Starts, KIND};

/// The rules the benchmark's own inserts are checked by (its one kind).
const BENCH_RULES: job_store::InsertRules<'static> = job_store::InsertRules {
    kinds: &[KIND],
    own_kinds: &[],
    as_kickoff: false,
};

/// Knobs of the workloads.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Concurrency of the throughput workload.
    pub concurrency: usize,
    /// Jobs in the table for the pages workload.
    pub rows: i64,
    /// Timed requests per address for the pages workload.
    pub samples: usize,
    /// Jobs overdue at start for the recovery workload.
    pub overdue: usize,
    /// Jobs the throughput and nodes workloads process.
    pub jobs: usize,
    /// The attempts' rollup trigger disabled in the bench's database.
    pub without_rollups: bool,
    /// Idle schedules for the schedules workload.
    pub schedules: usize,
    /// Open event streams for the streams workload, one run per count.
    pub streams: Vec<usize>,
    /// The engine's fetch-ahead and claim-ahead (from the server settings).
    pub fetch_ahead: usize,
    pub claim_ahead: Duration,
    /// Limits of the bench queue across every node (none by default).
    pub queue_limits: crate::engine::limits::QueueLimits,
    /// A transaction pooler in front of the bench's server (`HOST:PORT`), and whether the node
    /// then does without a direct connection for LISTEN (it polls every `poll_interval`).
    pub through_pooler: Option<String>,
    pub poll_only: bool,
    pub poll_interval: Duration,
    /// Set by [`run`]: the direct URL the node listens on, behind a pooler.
    pub listen_url: Option<String>,
}

pub async fn run(
    workload: BenchWorkload,
    url: Option<String>,
    options: BenchOptions,
    config: &Config,
) -> Result<(), String> {
    let mut embedded = None;
    let admin_url = match url.or_else(|| config.database_url.clone()) {
        Some(u) => u,
        None => {
            let dir = config.data_dir.clone();
            let pg = tokio::task::spawn_blocking(move || {
                EmbeddedPostgres::start(&dir, Durability::Durable)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
            let url = pg.admin_url();
            embedded = Some(pg);
            url
        }
    };
    let admin_opts = PgConnectOptions::from_str(&admin_url).map_err(|e| e.to_string())?;
    let mut admin = admin_opts.connect().await.map_err(|e| e.to_string())?;
    let db = format!("kickoff_bench_{}", std::process::id());
    sqlx::query(&format!("CREATE DATABASE {db}"))
        .execute(&mut admin)
        .await
        .map_err(|e| format!("creating the bench database: {e}"))?;
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .min_connections(4)
        .test_before_acquire(false)
        .connect_with(admin_opts.clone().database(&db))
        .await
        .map_err(|e| e.to_string())?;
    let result = async {
        MIGRATOR.run(&pool).await.map_err(|e| e.to_string())?;
        if options.without_rollups {
            sqlx::query("ALTER TABLE job_attempts DISABLE TRIGGER job_attempts_history")
                .execute(&pool)
                .await
                .map_err(|e| e.to_string())?;
        }
        let (pool, options) = match &options.through_pooler {
            None => (Db::from(pool.clone()), options.clone()),
            Some(pooler) => {
                let direct = admin_opts.clone().database(&db);
                let pooled = through(&direct, pooler)?;
                let listen_url = (!options.poll_only).then(|| direct.to_url_lossy().to_string());
                (
                    pooled,
                    BenchOptions {
                        listen_url,
                        ..options.clone()
                    },
                )
            }
        };
        match workload {
            BenchWorkload::Throughput => throughput(&pool, &options).await,
            BenchWorkload::Pages => pages::pages(&pool, options.rows, options.samples).await,
            BenchWorkload::Alerts => alerts::alerts(&pool, options.rows, options.samples).await,
            BenchWorkload::Streams => {
                let mut url = reqwest::Url::parse(&admin_url).map_err(|e| e.to_string())?;
                url.set_path(&db);
                streams::streams(&pool, url.as_str(), &options.streams).await
            }
            BenchWorkload::Latency => latency(&pool, &options).await,
            BenchWorkload::Scheduled => scheduled(&pool, &options).await,
            BenchWorkload::Schedule => schedule(&pool, &options).await,
            BenchWorkload::Schedules => {
                schedules::schedules(&pool, options.schedules, engine_config(10, &options)).await
            }
            BenchWorkload::Recovery => recovery(&pool, &options).await,
            BenchWorkload::Nodes => nodes(&pool, &options).await,
            BenchWorkload::Workflows => workflows::workflows(&pool, &options).await,
            BenchWorkload::Notify => {
                notify::notify(&pool, admin_opts.clone().database(&db), &options).await
            }
        }
    }
    .await;
    pool.close().await;
    // FORCE: a pooler in front (`--through-pooler`) still holds server connections to it.
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .execute(&mut admin)
        .await;
    drop(admin);
    if let Some(pg) = embedded {
        let _ = tokio::task::spawn_blocking(move || pg.stop()).await;
    }
    println!("{}", result?);
    Ok(())
}

/// Waits until `n` handlers started (60 s at most between two starts); returns when the first one
/// started, in seconds after `since`.
async fn until_started(rx: &mut Starts, n: usize, since: Instant) -> Result<f64, String> {
    let mut first = None;
    for seen in 0..n {
        match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
            Ok(Some(_)) => {
                first.get_or_insert_with(|| since.elapsed().as_secs_f64());
            }
            _ => {
                return Err(format!(
                    "only {seen} of {n} jobs started within the time limit"
                ))
            }
        }
    }
    Ok(first.unwrap_or(0.0))
}

/// A pool of 20 reaching the database `direct` names through the transaction pooler at
/// `pooler` (`HOST:PORT`).
fn through(direct: &PgConnectOptions, pooler: &str) -> Result<Db, String> {
    let (host, port) = pooler
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("--through-pooler {pooler:?}: expected HOST:PORT"))?;
    let options = PoolMode::Transaction.connect_options(direct.clone().host(host).port(port));
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .min_connections(4)
        .test_before_acquire(false)
        .connect_lazy_with(options);
    Ok(Db::new(pool, PoolMode::Transaction))
}

/// A node of `concurrency` slots on queue `default`, with the fetch-ahead and claim-ahead of the
/// server settings (`KICKOFF_FETCH_AHEAD`, `KICKOFF_CLAIM_AHEAD_MS`).
fn engine_config(concurrency: usize, o: &BenchOptions) -> EngineConfig {
    EngineConfig {
        listen_url: o.listen_url.clone(),
        poll_only_interval: o.poll_interval,
        queues: vec![("default".into(), concurrency)],
        fetch_ahead: o.fetch_ahead,
        claim_ahead: o.claim_ahead,
        queue_limits: if o.queue_limits.is_limited() {
            vec![("default".into(), o.queue_limits.clone())]
        } else {
            Vec::new()
        },
        ..EngineConfig::default()
    }
}

async fn throughput(pool: &Db, o: &BenchOptions) -> Result<Value, String> {
    let concurrency = o.concurrency;
    let n = o.jobs;
    let t = Instant::now();
    insert_due(pool, n, None).await?;
    let insert_s = t.elapsed().as_secs_f64();

    let (workers, mut rx) = workers();
    let cpu = self::cpu::CpuMeter::start(pool).await?;
    let t = Instant::now();
    let engine = Engine::start(pool.clone(), workers, engine_config(concurrency, o))
        .await
        .map_err(|e| e.to_string())?;
    until_started(&mut rx, n, t).await?;
    // Every handler ran; wait for the last completions to be written.
    until_all_completed(pool, t).await?;
    let process_s = t.elapsed().as_secs_f64();
    // Read before the engine's connections close.
    let cpu_us_per_job = cpu.per_job(pool, n).await?;
    engine.stop().await;
    Ok(json!({
        "bench": "throughput",
        "jobs": n,
        "concurrency": concurrency,
        "fetch_ahead": o.fetch_ahead,
        "insert_jobs_per_s": (n as f64 / insert_s).round(),
        "process_jobs_per_s": (n as f64 / process_s).round(),
        "cpu_us_per_job": cpu_us_per_job,
    }))
}

/// Inserts `n` jobs due at `due` (now when `None`), in bulk, before any engine runs.
async fn insert_due(pool: &Db, n: usize, due: Option<DateTime<Utc>>) -> Result<(), String> {
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| {
            let job = NewJob::new(KIND, json!({ "i": i }));
            match due {
                Some(at) => job.at(at),
                None => job,
            }
        })
        .collect();
    for chunk in jobs.chunks(5_000) {
        job_store::job_insert_many(pool, chunk, &[], BENCH_RULES)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Waits until no job is left unfinished; the time it took from `since`.
async fn until_all_completed(pool: &Db, since: Instant) -> Result<f64, String> {
    let deadline = since + Duration::from_secs(300);
    loop {
        let left: i64 = job_store::job_count_by_queue_state(pool)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|(_, state, _)| *state != JobState::Completed)
            .map(|(_, _, n)| n)
            .sum();
        if left == 0 {
            return Ok(since.elapsed().as_secs_f64());
        }
        if Instant::now() > deadline {
            return Err(format!("{left} jobs still unfinished after 300 s"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Jobs overdue when a node starts (10,000 unless `--overdue`; it was down while they came due):
/// the time from the engine's start until every one completed.
async fn recovery(pool: &Db, o: &BenchOptions) -> Result<Value, String> {
    let concurrency = o.concurrency;
    let n = o.overdue;
    let db_now = job_store::db_now(pool).await.map_err(|e| e.to_string())?;
    insert_due(pool, n, Some(db_now - chrono::Duration::minutes(10))).await?;
    let (workers, mut rx) = workers();
    let t = Instant::now();
    let engine = Engine::start(pool.clone(), workers, engine_config(concurrency, o))
        .await
        .map_err(|e| e.to_string())?;
    let first_start = until_started(&mut rx, n, t).await?;
    let all_started = t.elapsed().as_secs_f64();
    let all_completed = until_all_completed(pool, t).await?;
    engine.stop().await;
    Ok(json!({
        "bench": "recovery",
        "overdue_jobs": n,
        "concurrency": concurrency,
        "first_start_ms": (first_start * 1000.0).round(),
        "all_started_s": (all_started * 1000.0).round() / 1000.0,
        "all_completed_s": (all_completed * 1000.0).round() / 1000.0,
    }))
}

/// Throughput with 1, 2 and 3 nodes on one database (each `concurrency` slots), 20,000 jobs each
/// time (`--jobs`).
async fn nodes(pool: &Db, o: &BenchOptions) -> Result<Value, String> {
    let concurrency = o.concurrency;
    let n = o.jobs;
    let mut results = Vec::new();
    for count in 1..=3usize {
        insert_due(pool, n, None).await?;
        // Every node's handlers report to one channel: counting starts costs the database nothing
        // (polling counts while measuring would take CPU from the nodes on a small machine).
        let (tx, mut rx) = mpsc::unbounded_channel();
        let t = Instant::now();
        let mut engines = Vec::new();
        for _ in 0..count {
            engines.push(
                Engine::start(
                    pool.clone(),
                    workers_reporting_to(tx.clone()),
                    engine_config(concurrency, o),
                )
                .await
                .map_err(|e| e.to_string())?,
            );
        }
        until_started(&mut rx, n, t)
            .await
            .map_err(|e| format!("{count} nodes: {e}"))?;
        let took = until_all_completed(pool, t).await?;
        for e in engines {
            e.stop().await;
        }
        sqlx::query("DELETE FROM jobs")
            .execute(pool)
            .await
            .map_err(|e| e.to_string())?;
        results.push(json!({ "nodes": count, "jobs_per_s": (n as f64 / took).round() }));
    }
    Ok(json!({
        "bench": "nodes",
        "jobs": n,
        "concurrency_per_node": concurrency,
        "runs": results,
    }))
}

async fn latency(pool: &Db, o: &BenchOptions) -> Result<Value, String> {
    const N: usize = 500;
    let (workers, mut rx) = workers();
    let engine = Engine::start(pool.clone(), workers, engine_config(10, o))
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let client = engine.client();
    let mut inserted_at: HashMap<JobId, DateTime<Utc>> = HashMap::new();
    // When each insert returned (committed): splits the latency into the insert's own commit and
    // what the engine adds after it.
    let mut committed_at: HashMap<JobId, DateTime<Utc>> = HashMap::new();
    let mut started: HashMap<JobId, DateTime<Utc>> = HashMap::new();
    for i in 0..N {
        let t0 = Utc::now();
        let job = client
            .insert(&NewJob::new(KIND, json!({ "i": i })))
            .await
            .map_err(|e| e.to_string())?;
        inserted_at.insert(job.job.id, t0);
        committed_at.insert(job.job.id, Utc::now());
        while let Ok((id, at, _)) = rx.try_recv() {
            started.insert(id, at);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while started.len() < N {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some((id, at, _))) => {
                started.insert(id, at);
            }
            _ => return Err(format!("only {} of {N} jobs started", started.len())),
        }
    }
    engine.stop().await;
    let ms = |d: chrono::Duration| d.num_microseconds().unwrap_or(0) as f64 / 1000.0;
    let samples: Vec<f64> = started
        .iter()
        .map(|(id, at)| ms(*at - inserted_at[id]))
        .collect();
    let after_commit: Vec<f64> = started
        .iter()
        .map(|(id, at)| ms(*at - committed_at[id]))
        .collect();
    let mut out = with_percentiles(json!({ "bench": "latency", "jobs": N }), samples);
    let split = with_percentiles(json!({}), after_commit);
    out["after_commit_p50_ms"] = split["p50_ms"].clone();
    out["after_commit_p99_ms"] = split["p99_ms"].clone();
    // The insert's own share: from the call until it returned (its durable commit included).
    let inserts: Vec<f64> = committed_at
        .iter()
        .map(|(id, at)| ms(*at - inserted_at[id]))
        .collect();
    let inserts = with_percentiles(json!({}), inserts);
    out["insert_p50_ms"] = inserts["p50_ms"].clone();
    out["insert_p99_ms"] = inserts["p99_ms"].clone();
    Ok(out)
}

/// A schedule every second for a minute: how late each of its 60 runs started after its slot.
async fn schedule(pool: &Db, o: &BenchOptions) -> Result<Value, String> {
    use crate::engine::schedules::{JobTemplate, ScheduleSpec, Schedules};
    const RUNS: usize = 60;
    let (workers, mut rx) = workers();
    let engine = Engine::start(pool.clone(), workers, engine_config(10, o))
        .await
        .map_err(|e| e.to_string())?;
    let spec = ScheduleSpec::every(
        "bench",
        Duration::from_secs(1),
        JobTemplate::new(KIND, json!({})),
    );
    Schedules::new(engine.client())
        .create(&spec, None)
        .await
        .map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    let mut late = Vec::with_capacity(RUNS);
    while late.len() < RUNS {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some((_, at, scheduled_at))) => {
                late.push((at - scheduled_at).num_microseconds().unwrap_or(0) as f64 / 1000.0)
            }
            _ => return Err(format!("only {} of {RUNS} runs started", late.len())),
        }
    }
    let took = started.elapsed().as_secs_f64();
    engine.stop().await;
    let early = late.iter().filter(|l| **l < 0.0).count();
    Ok(with_percentiles(
        json!({
            "bench": "schedule",
            "runs": RUNS,
            "seconds": (took * 10.0).round() / 10.0,
            "started_early": early,
        }),
        late,
    ))
}

async fn scheduled(pool: &Db, o: &BenchOptions) -> Result<Value, String> {
    const N: usize = 1_000;
    let (workers, mut rx) = workers();
    let engine = Engine::start(pool.clone(), workers, engine_config(10, o))
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let db_now = job_store::db_now(pool).await.map_err(|e| e.to_string())?;
    let start = db_now + chrono::Duration::seconds(3);
    let window_us = 2_000_000i64;
    let jobs: Vec<NewJob> = (0..N)
        .map(|i| {
            let at = start + chrono::Duration::microseconds(window_us * i as i64 / N as i64);
            NewJob::new(KIND, json!({ "i": i })).at(at)
        })
        .collect();
    job_store::job_insert_many(pool, &jobs, &[], BENCH_RULES)
        .await
        .map_err(|e| e.to_string())?;
    let mut samples = Vec::with_capacity(N);
    while samples.len() < N {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some((id, at, scheduled_at))) => samples.push((
                (scheduled_at - start).num_microseconds().unwrap_or(0) as f64 / 1000.0,
                (at - scheduled_at).num_microseconds().unwrap_or(0) as f64 / 1000.0,
                id,
            )),
            _ => return Err(format!("only {} of {N} jobs started", samples.len())),
        }
    }
    engine.stop().await;
    // Which path each job took: claimed ahead of its due time (its attempt records the due time
    // as its start), or staged at its due time and claimed after it.
    let ahead: std::collections::HashSet<JobId> =
        sqlx::query_scalar("SELECT id FROM jobs WHERE attempted_at = scheduled_at")
            .fetch_all(pool)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
    let path_p99 = |claimed_ahead: bool| {
        let mut late: Vec<f64> = samples
            .iter()
            .filter(|s| ahead.contains(&s.2) == claimed_ahead)
            .map(|s| s.1)
            .collect();
        late.sort_by(|a, b| a.total_cmp(b));
        let p99 = late
            .get(((late.len() as f64 - 1.0) * 0.99).round() as usize)
            .map(|x| (x * 100.0).round() / 100.0);
        json!({ "jobs": late.len(), "p99_ms": p99 })
    };
    let (ahead_path, staged_path) = (path_p99(true), path_p99(false));
    // Where the lateness goes: each attempt's record holds when it began by the engine's reading
    // of the database clock (`late_ms`: its wait, the alarm and the runtime's poll); the rest is
    // the hop from the start to the handler.
    let begun: std::collections::HashMap<JobId, f64> =
        sqlx::query_as::<_, (JobId, f64)>("SELECT job_id, late_ms FROM job_attempts")
            .fetch_all(pool)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
    let hops = {
        let p = |mut v: Vec<f64>, q: f64| {
            v.sort_by(|a, b| a.total_cmp(b));
            v.get(((v.len() as f64 - 1.0) * q).round() as usize)
                .map(|x| (x * 100.0).round() / 100.0)
        };
        let began: Vec<f64> = samples
            .iter()
            .filter_map(|s| begun.get(&s.2).copied())
            .collect();
        let to_handler: Vec<f64> = samples
            .iter()
            .filter_map(|s| begun.get(&s.2).map(|b| s.1 - b))
            .collect();
        json!({
            "begun_p50_ms": p(began.clone(), 0.5),
            "begun_p99_ms": p(began, 0.99),
            "begin_to_handler_p50_ms": p(to_handler.clone(), 0.5),
            "begin_to_handler_p99_ms": p(to_handler, 0.99),
        })
    };
    let samples: Vec<(f64, f64)> = samples.into_iter().map(|(d, l, _)| (d, l)).collect();
    let early = samples.iter().filter(|s| s.1 < 0.0).count();
    // The latest starts with their place in the window (ms after its start), to tell a stall
    // (several late jobs due together) from scattered delays.
    let mut by_lateness: Vec<(f64, f64)> =
        samples.iter().map(|(due, late)| (*due, *late)).collect();
    by_lateness.sort_by(|a, b| b.1.total_cmp(&a.1));
    let worst: Vec<Value> = by_lateness
        .iter()
        .take(10)
        .map(|(due, late)| json!([due.round(), (late * 10.0).round() / 10.0]))
        .collect();
    let mut out = with_percentiles(
        json!({
            "bench": "scheduled",
            "jobs": N,
            "claim_ahead_ms": o.claim_ahead.as_millis() as u64,
            "started_early": early,
        }),
        samples.into_iter().map(|(_, late)| late).collect(),
    );
    out["worst_due_ms_late_ms"] = Value::Array(worst);
    out["claimed_ahead"] = ahead_path;
    out["staged"] = staged_path;
    out["hops"] = hops;
    // The same percentile without the jobs due in the window's first 50 ms, where the one stall
    // of a run sits (see docs/BENCHMARKS.md): reported beside the full figure, never instead.
    let mut later: Vec<f64> = by_lateness
        .iter()
        .filter(|(due, _)| *due >= 50.0)
        .map(|(_, late)| *late)
        .collect();
    later.sort_by(|a, b| a.total_cmp(b));
    if let Some(p99) = later.get(((later.len() as f64 - 1.0) * 0.99).round() as usize) {
        out["p99_after_first_50ms_ms"] = json!((p99 * 100.0).round() / 100.0);
    }
    Ok(out)
}
