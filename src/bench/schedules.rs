//! `kickoff bench schedules`: what idle schedules cost the database, and whether a frequent
//! schedule among them keeps its precision. Makes `--count` daily schedules (10,000 by default;
//! their slots hours away), starts one node, and reads the database's commits a second while
//! nothing is due, with and without them; then adds a schedule every second and times the start
//! of 30 of its runs after their slots.
//!
//! The fixture SQL lives here, as in `pages` and `alerts`: it makes rows only for this
//! measurement.

use std::time::{Duration, Instant};

use crate::db::Db;
use chrono::Timelike;
use serde_json::{json, Value};

use crate::engine::schedules::{JobTemplate, ScheduleSpec, Schedules};
use crate::engine::{Engine, EngineConfig};

/// How long each idle reading lasts.
const IDLE: Duration = Duration::from_secs(10);
/// Runs of the every-second schedule timed.
const RUNS: usize = 30;

/// The database's committed transactions so far (PostgreSQL's statistics, flushed by each
/// backend about once a second: over [`IDLE`] the error is a second's worth at most).
async fn commits(pool: &Db) -> Result<i64, String> {
    sqlx::query_scalar(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .map_err(|e| format!("reading pg_stat_database: {e}"))
}

async fn commits_per_second(pool: &Db) -> Result<f64, String> {
    let (before, started) = (commits(pool).await?, Instant::now());
    tokio::time::sleep(IDLE).await;
    let after = commits(pool).await?;
    Ok(((after - before) as f64 / started.elapsed().as_secs_f64() * 10.0).round() / 10.0)
}

/// `count` daily schedules whose slots are 2 to 20 hours away, made in one statement.
async fn seed(pool: &Db, count: usize) -> Result<(), String> {
    let first_hour = (chrono::Utc::now().hour() as i64 + 3) % 24;
    sqlx::query(
        "INSERT INTO schedules (name, cron, kind, args)
         SELECT 'daily-' || i, (i % 60) || ' ' || (($2 + (i / 60) % 18) % 24) || ' * * *',
                $3, '{}'
         FROM generate_series(0, $1 - 1) AS i",
    )
    .bind(count as i64)
    .bind(first_hour)
    .bind(super::worker::KIND)
    .execute(pool)
    .await
    .map_err(|e| format!("seeding schedules: {e}"))?;
    Ok(())
}

pub async fn schedules(pool: &Db, count: usize, config: EngineConfig) -> Result<Value, String> {
    let (workers, mut started) = super::worker::workers();
    let engine = Engine::start(pool.clone(), workers, config)
        .await
        .map_err(|e| e.to_string())?;
    let baseline = commits_per_second(pool).await?;

    seed(pool, count).await?;
    // The leader gives each its next run once (their next slot is not known yet), then leaves
    // them alone until it comes near.
    let filled_at = Instant::now();
    loop {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM schedules WHERE next_slot_at IS NULL")
                .fetch_one(pool)
                .await
                .map_err(|e| e.to_string())?;
        if left == 0 {
            break;
        }
        if filled_at.elapsed() > Duration::from_secs(600) {
            return Err(format!(
                "{left} schedules still without their next run after 10 min"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let first_fill_s = filled_at.elapsed().as_secs_f64();
    // The backends flush their statistics about once a second: the fill's commits must not count
    // as idle ones.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = commits_per_second(pool).await?;

    let spec = ScheduleSpec::every(
        "every-second",
        Duration::from_secs(1),
        JobTemplate::new(super::worker::KIND, json!({})),
    );
    Schedules::new(engine.client())
        .create(&spec, None)
        .await
        .map_err(|e| e.to_string())?;
    let mut late = Vec::with_capacity(RUNS);
    while late.len() < RUNS {
        match tokio::time::timeout(Duration::from_secs(5), started.recv()).await {
            Ok(Some((_, at, due))) => {
                late.push((at - due).num_microseconds().unwrap_or(0) as f64 / 1000.0)
            }
            _ => {
                engine.stop().await;
                return Err(format!("only {} of {RUNS} runs started", late.len()));
            }
        }
    }
    engine.stop().await;
    Ok(super::percentiles::with_percentiles(
        json!({
            "bench": "schedules",
            "idle_schedules": count,
            "first_fill_s": (first_fill_s * 10.0).round() / 10.0,
            "commits_per_s_without": baseline,
            "commits_per_s_idle": idle,
            "runs": RUNS,
            "early": late.iter().filter(|l| **l < 0.0).count(),
        }),
        late,
    ))
}
