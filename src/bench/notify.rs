//! `kickoff bench notify`: a million players notified by a workflow's map step (issue 49,
//! docs/BENCHMARKS.md): 1,000 tasks of `--rows / 1000` players each, every task a job of a queue
//! limited to a push provider's rate (5,000 players a second: a task of 1,000 every 200 ms),
//! each doing its players in batches of 100 (a provider's call of 10 ms each), each batch's
//! rows and the task's cursor in one transaction. Halfway, while a task is between two batches, the node running it dies at once (its runtime dropped: its connections
//! close mid-transaction, as a kill -9 leaves them), and a second node takes over: its rescue
//! hands the dead node's tasks back, each resumes from its cursor. Prints how long it took, how
//! many players were notified and how many twice (none, or the figure is a defect).

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::{engine_config, BenchOptions};
use crate::db::Db;
use crate::engine::limits::QueueLimits;
use crate::engine::workflow::Workflow;
use crate::engine::{BoxFuture, Engine, JobContext, NewJob, WorkError, Worker, Workers};

const KIND: &str = "bench_notify";
const TASKS: u32 = 1_000;
const BATCH: i64 = 100;
/// What the push provider's call for a batch takes.
const PROVIDER_CALL: Duration = Duration::from_millis(10);

/// Notifies its task's players (`per_task` from `task * per_task`) from its cursor on.
struct NotifyWorker;

impl Worker for NotifyWorker {
    fn kind(&self) -> &'static str {
        KIND
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            // The step after the map (the leaderboard) has nothing to do here.
            let Some(task) = ctx.task().await? else {
                return Ok(());
            };
            let per_task = ctx.job.args["per_task"].as_i64().unwrap_or(0);
            let first = i64::from(task.task) * per_task;
            let mut cursor = task.cursor.as_ref().and_then(Value::as_i64).unwrap_or(0);
            while cursor < per_task {
                let next = (cursor + BATCH).min(per_task);
                let mut tx = ctx.begin().await?;
                sqlx::query(
                    "INSERT INTO bench_notified (player)
                     SELECT generate_series($1::bigint, $2::bigint - 1)",
                )
                .bind(first + cursor)
                .bind(first + next)
                .execute(&mut *tx)
                .await?;
                // The provider's call for the batch.
                tokio::time::sleep(PROVIDER_CALL).await;
                ctx.checkpoint_with(&mut tx, &json!(next), next).await?;
                tx.commit().await?;
                cursor = next;
            }
            Ok(())
        })
    }
}

fn workers() -> Workers {
    let mut w = Workers::new();
    w.register(NotifyWorker);
    w
}

async fn notified(pool: &Db) -> Result<(i64, i64), String> {
    sqlx::query_as("SELECT count(*), count(*) - count(DISTINCT player) FROM bench_notified")
        .fetch_one(pool)
        .await
        .map_err(|e| e.to_string())
}

pub(super) async fn notify(
    pool: &Db,
    direct: PgConnectOptions,
    o: &BenchOptions,
) -> Result<Value, String> {
    let players = (o.rows.max(i64::from(TASKS)) / i64::from(TASKS)) * i64::from(TASKS);
    let per_task = players / i64::from(TASKS);
    sqlx::query("CREATE TABLE bench_notified (player bigint NOT NULL)")
        .execute(pool)
        .await
        .map_err(|e| e.to_string())?;
    // The provider's 5,000 players a second: one task of `per_task` every `per_task / 5` ms.
    let mut limits = QueueLimits::default();
    let every_ms = (per_task / 5).max(1);
    limits
        .set_option(&format!("rate=1/{every_ms}ms"))
        .and_then(|()| limits.check())?;
    let options = BenchOptions {
        queue_limits: limits,
        ..o.clone()
    };
    let config = engine_config(10, &options);

    // The first node, on a runtime of its own that can be dropped at once.
    let (kill_tx, kill_rx) = std::sync::mpsc::channel::<()>();
    let (up_tx, up_rx) = tokio::sync::oneshot::channel::<Result<(), String>>();
    let first_config = config.clone();
    let first = std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = up_tx.send(Err(e.to_string()));
                return;
            }
        };
        let started = rt.block_on(async move {
            let pool = PgPoolOptions::new()
                .max_connections(12)
                .connect_with(direct)
                .await
                .map_err(|e| e.to_string())?;
            Engine::start(Db::from(pool), workers(), first_config)
                .await
                .map_err(|e| e.to_string())
        });
        match started {
            Ok(engine) => {
                let _ = up_tx.send(Ok(()));
                let _ = kill_rx.recv();
                // As a kill -9: every task and connection of the node dropped where it is.
                std::mem::forget(engine);
                rt.shutdown_background();
            }
            Err(e) => {
                let _ = up_tx.send(Err(e));
            }
        }
    });
    up_rx.await.map_err(|e| e.to_string())??;

    let t = Instant::now();
    let flow = Workflow::new("notify_players")
        .step(
            "notify",
            NewJob::new(KIND, json!({ "per_task": per_task })).with_max_attempts(5),
        )
        .map(TASKS)
        .step("leaderboard", NewJob::new(KIND, json!({ "per_task": 0 })))
        .after("notify");
    // The client only inserts: a client of a node that runs nothing yet.
    let client = crate::engine::Client::new(pool.clone(), std::sync::Arc::new(workers()));
    let run = client
        .insert_workflow(&flow)
        .await
        .map_err(|e| e.to_string())?
        .run
        .id;
    // Halfway, while a task is between two of its batches (its players partly notified).
    loop {
        let (done, _) = notified(pool).await?;
        if done >= players / 2 && done % per_task != 0 {
            break;
        }
        if t.elapsed() > Duration::from_secs(3_600) {
            return Err(format!("only {done} players notified in an hour"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed_at = t.elapsed().as_secs_f64();
    let _ = kill_tx.send(());
    let _ = tokio::task::spawn_blocking(move || first.join()).await;
    let (at_kill, _) = notified(pool).await?;
    let second = Engine::start(pool.clone(), workers(), config)
        .await
        .map_err(|e| e.to_string())?;
    loop {
        let state: String = sqlx::query_scalar("SELECT state FROM workflow_runs WHERE id = $1")
            .bind(run)
            .fetch_one(pool)
            .await
            .map_err(|e| e.to_string())?;
        if state != "running" {
            if state != "completed" {
                return Err(format!("the run ended {state}"));
            }
            break;
        }
        if t.elapsed() > Duration::from_secs(7_200) {
            return Err("the run did not end in two hours".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = t.elapsed().as_secs_f64();
    second.stop().await;
    let (total, twice) = notified(pool).await?;
    let (jobs, retried): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE attempt > 1) FROM jobs
         WHERE step_id IN (SELECT id FROM workflow_steps WHERE run_id = $1 AND tasks IS NOT NULL)",
    )
    .bind(run)
    .fetch_one(pool)
    .await
    .map_err(|e| e.to_string())?;
    Ok(json!({
        "workload": "notify",
        "players": players,
        "tasks": TASKS,
        "rate_players_per_s": 5_000,
        "took_s": (took * 10.0).round() / 10.0,
        "floor_s": players / 5_000,
        "killed_at_s": (killed_at * 10.0).round() / 10.0,
        "notified_at_kill": at_kill,
        "notified": total,
        "notified_twice": twice,
        "task_jobs": jobs,
        "task_jobs_run_again": retried,
    }))
}
