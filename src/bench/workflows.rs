//! `kickoff bench workflows`: how soon a workflow's step follows what it waits for, and what the
//! graph costs (issue 49, docs/BENCHMARKS.md):
//! - `chain`: runs of `a → b`, one after another on an idle engine: from `a`'s completion (its
//!   job's `finalized_at`, the completing transaction's clock) to `b`'s handler start;
//! - `signal`: runs of one step waiting for a signal: from the signal's storing (`received_at`)
//!   to the step's handler start;
//! - `fan_in`: runs of 50 parallel steps (a step's most dependencies) into one: from the last of
//!   them to complete to the join's handler start;
//! - `map_fan_in`: runs of a map step of 1,000 tasks into one step: from the last task to
//!   complete to the step's handler start;
//! - `throughput`: 10,000 runs of 5 chained steps against 50,000 plain jobs, each batch inserted
//!   before the engine starts: steps a second against jobs a second;
//! - `parked`: the same 50,000 plain jobs again beside 10,000 runs parked (a step waiting for a
//!   signal that never comes: a step row, no job row): what a parked run costs the claim.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::percentiles::with_percentiles;
use super::worker::{workers, Starts, KIND};
use super::{engine_config, insert_due, until_all_completed, BenchOptions};
use crate::db::Db;
use crate::engine::workflow::{Workflow, MAX_DEPS};
use crate::engine::{Client, Engine, JobId, NewJob};

const CHAINS: usize = 300;
const SIGNALS: usize = 300;
const FAN_INS: usize = 20;
const MAP_FAN_INS: usize = 10;
const MAP_TASKS: u32 = 1_000;
const RUNS: usize = 10_000;
const PARKED: usize = 10_000;
const CHAIN_STEPS: usize = 5;

fn step() -> NewJob {
    NewJob::new(KIND, json!({}))
}

/// The next `n` starts reported: (job, when its handler started).
async fn starts(rx: &mut Starts, n: usize) -> Result<Vec<(JobId, DateTime<Utc>)>, String> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some((id, at, _))) => out.push((id, at)),
            _ => return Err(format!("only {} of {n} steps started", out.len())),
        }
    }
    Ok(out)
}

fn ms(d: chrono::Duration) -> f64 {
    d.num_microseconds().unwrap_or(0) as f64 / 1000.0
}

/// When job `id` settled (its completing transaction's clock).
async fn finalized(pool: &Db, ids: &[i64]) -> Result<HashMap<i64, DateTime<Utc>>, String> {
    sqlx::query_as::<_, (i64, DateTime<Utc>)>(
        "SELECT id, finalized_at FROM jobs WHERE id = ANY($1) AND finalized_at IS NOT NULL",
    )
    .bind(ids)
    .fetch_all(pool)
    .await
    .map(|rows| rows.into_iter().collect())
    .map_err(|e| e.to_string())
}

/// The job of step `name` of run `run`.
async fn job_of(client: &Client, run: i64, name: &str) -> Result<i64, String> {
    client
        .workflow_steps(run)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|s| s.name == name)
        .and_then(|s| s.job_id)
        .map(|j| j.0)
        .ok_or_else(|| format!("run {run}: step {name} has no job"))
}

pub(super) async fn workflows(pool: &Db, o: &BenchOptions) -> Result<Value, String> {
    let (kinds, mut rx) = workers();
    let engine = Engine::start(pool.clone(), kinds, engine_config(10, o))
        .await
        .map_err(|e| e.to_string())?;
    let client = engine.client();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A chain's step after its dependency's completion, and where the time goes: from `a`'s
    // completing statement until `b`'s job is made in it (its `scheduled_at`, the trigger's
    // clock), from then to `b`'s claim (the commit, the notification, the claim), and from the
    // claim to the handler.
    let mut chain = Vec::with_capacity(CHAINS);
    let (mut chain_made, mut chain_claimed, mut chain_started) =
        (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..CHAINS {
        let flow = Workflow::new("chain")
            .step("a", step())
            .step("b", step())
            .after("a");
        let run = client
            .insert_workflow(&flow)
            .await
            .map_err(|e| e.to_string())?
            .run
            .id;
        let started = starts(&mut rx, 2).await?;
        let (a, b) = (
            job_of(&client, run, "a").await?,
            job_of(&client, run, "b").await?,
        );
        let done = finalized(pool, &[a]).await?;
        let b_start = started.iter().find(|s| s.0 .0 == b).map(|s| s.1);
        if let (Some(done), Some(start)) = (done.get(&a), b_start) {
            chain.push(ms(start - *done));
            let (made, claimed): (DateTime<Utc>, Option<DateTime<Utc>>) =
                sqlx::query_as("SELECT scheduled_at, attempted_at FROM jobs WHERE id = $1")
                    .bind(b)
                    .fetch_one(pool)
                    .await
                    .map_err(|e| e.to_string())?;
            chain_made.push(ms(made - *done));
            if let Some(claimed) = claimed {
                chain_claimed.push(ms(claimed - made));
                chain_started.push(ms(start - claimed));
            }
        }
    }

    // A waiting step after its signal.
    let mut waiting = Vec::with_capacity(SIGNALS);
    let deadline = chrono::Duration::hours(1);
    let mut runs = Vec::with_capacity(SIGNALS);
    for _ in 0..SIGNALS {
        let flow = Workflow::new("await")
            .time("kickoff_at", Utc::now())
            .step("final", step())
            .signal("go", "kickoff_at", deadline);
        runs.push(
            client
                .insert_workflow(&flow)
                .await
                .map_err(|e| e.to_string())?
                .run
                .id,
        );
    }
    for run in runs {
        let (signal, _) = client
            .signal_workflow(run, "go", &Value::Null, "bench")
            .await
            .map_err(|e| e.to_string())?;
        let started = starts(&mut rx, 1).await?;
        waiting.push(ms(started[0].1 - signal.received_at));
    }

    // A join after the last of its 50 dependencies.
    let mut fan_in = Vec::with_capacity(FAN_INS);
    for _ in 0..FAN_INS {
        let mut flow = Workflow::new("fan-in");
        for i in 0..MAX_DEPS {
            flow = flow.step(format!("t{i}"), step());
        }
        flow = flow.step("join", step());
        for i in 0..MAX_DEPS {
            flow = flow.after(format!("t{i}"));
        }
        let run = client
            .insert_workflow(&flow)
            .await
            .map_err(|e| e.to_string())?
            .run
            .id;
        let started = starts(&mut rx, MAX_DEPS + 1).await?;
        let steps = client
            .workflow_steps(run)
            .await
            .map_err(|e| e.to_string())?;
        let tasks: Vec<i64> = steps
            .iter()
            .filter(|s| s.name != "join")
            .filter_map(|s| s.job_id.map(|j| j.0))
            .collect();
        let join = job_of(&client, run, "join").await?;
        let last = finalized(pool, &tasks).await?.into_values().max();
        let join_start = started.iter().find(|s| s.0 .0 == join).map(|s| s.1);
        if let (Some(last), Some(start)) = (last, join_start) {
            fan_in.push(ms(start - last));
        }
    }

    // A step after the last of a map step's 1,000 tasks.
    let mut map_fan_in = Vec::with_capacity(MAP_FAN_INS);
    // Where it goes: the last task's completing statement until the join's job is made in it
    // (its `scheduled_at`, the clock inside the trigger), and from then to the claim.
    let (mut in_settle, mut to_claim) = (Vec::new(), Vec::new());
    for _ in 0..MAP_FAN_INS {
        let flow = Workflow::new("map-fan-in")
            .step("tasks", step())
            .map(MAP_TASKS)
            .step("join", step())
            .after("tasks");
        let run = client
            .insert_workflow(&flow)
            .await
            .map_err(|e| e.to_string())?
            .run
            .id;
        let started = starts(&mut rx, MAP_TASKS as usize + 1).await?;
        type Parts = (
            Option<DateTime<Utc>>,
            i64,
            DateTime<Utc>,
            Option<DateTime<Utc>>,
        );
        let (last, join, made, claimed): Parts = sqlx::query_as(
            "SELECT (SELECT max(j.finalized_at) FROM jobs j JOIN workflow_tasks t ON t.job_id = j.id
                     JOIN workflow_steps s ON s.id = t.step_id
                     WHERE s.run_id = $1 AND s.name = 'tasks'),
                    j.id, j.scheduled_at, j.attempted_at
             FROM workflow_steps s JOIN jobs j ON j.id = s.job_id
             WHERE s.run_id = $1 AND s.name = 'join'",
        )
        .bind(run)
        .fetch_one(pool)
        .await
        .map_err(|e| e.to_string())?;
        let join_start = started.iter().find(|s| s.0 .0 == join).map(|s| s.1);
        if let (Some(last), Some(start)) = (last, join_start) {
            map_fan_in.push(ms(start - last));
            in_settle.push(ms(made - last));
        }
        if let Some(claimed) = claimed {
            to_claim.push(ms(claimed - made));
        }
    }
    engine.stop().await;

    // Steps a second against jobs a second, each batch inserted before an engine starts.
    for _ in 0..RUNS {
        let mut flow = Workflow::new("five");
        for i in 0..CHAIN_STEPS {
            flow = flow.step(format!("s{i}"), step());
            if i > 0 {
                flow = flow.after(format!("s{}", i - 1));
            }
        }
        client
            .insert_workflow(&flow)
            .await
            .map_err(|e| e.to_string())?;
    }
    let steps_s = engine_until(pool, o, until_runs_done(pool)).await?;
    let plain = RUNS * CHAIN_STEPS;
    // Both plain runs start from an empty jobs table (a table grown by the runs before would
    // slow the second one for another reason).
    emptied(pool).await?;
    insert_due(pool, plain, None).await?;
    let jobs_s = engine_until(pool, o, until_all_completed(pool, Instant::now())).await?;
    let steps_per_s = (RUNS * CHAIN_STEPS) as f64 / steps_s;
    let jobs_per_s = plain as f64 / jobs_s;

    // The same plain jobs beside parked runs.
    emptied(pool).await?;
    for _ in 0..PARKED {
        let flow = Workflow::new("parked")
            .time("kickoff_at", Utc::now())
            .step("never", step())
            .signal("never", "kickoff_at", chrono::Duration::days(1));
        client
            .insert_workflow(&flow)
            .await
            .map_err(|e| e.to_string())?;
    }
    insert_due(pool, plain, None).await?;
    let parked_jobs_s = engine_until(pool, o, until_all_completed(pool, Instant::now())).await?;
    let parked_jobs_per_s = plain as f64 / parked_jobs_s;
    Ok(json!({
        "workload": "workflows",
        "chain": with_percentiles(
            json!({ "runs": chain.len(),
                    "made": with_percentiles(json!({}), chain_made),
                    "claimed": with_percentiles(json!({}), chain_claimed),
                    "started": with_percentiles(json!({}), chain_started) }),
            chain
        ),
        "signal": with_percentiles(json!({ "runs": waiting.len() }), waiting),
        "fan_in": with_percentiles(json!({ "runs": fan_in.len(), "tasks": MAX_DEPS }), fan_in),
        "map_fan_in": with_percentiles(
            json!({ "runs": map_fan_in.len(), "tasks": MAP_TASKS,
                    "in_settle": with_percentiles(json!({}), in_settle),
                    "to_claim": with_percentiles(json!({}), to_claim) }),
            map_fan_in
        ),
        "throughput": {
            "runs": RUNS,
            "steps_per_run": CHAIN_STEPS,
            "steps_per_s": steps_per_s.round(),
            "plain_jobs_per_s": jobs_per_s.round(),
            "ratio": (steps_per_s / jobs_per_s * 100.0).round() / 100.0,
        },
        "parked": {
            "runs": PARKED,
            "plain_jobs_per_s": parked_jobs_per_s.round(),
            "ratio_to_without": (parked_jobs_per_s / jobs_per_s * 100.0).round() / 100.0,
        },
    }))
}

/// Starts an engine of concurrency 10 on what the table holds, waits for `done`, stops it: the
/// seconds from its start until `done` said so.
async fn engine_until<T>(
    pool: &Db,
    o: &BenchOptions,
    done: impl std::future::Future<Output = Result<T, String>>,
) -> Result<f64, String> {
    let (kinds, rx) = workers();
    drop(rx);
    let engine = Engine::start(pool.clone(), kinds, engine_config(10, o))
        .await
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    let finished = done.await;
    let took = t.elapsed().as_secs_f64();
    engine.stop().await;
    finished.map(|_| took)
}

/// Deletes every job (the finished runs' with them: their steps keep their states) and vacuums
/// the table.
async fn emptied(pool: &Db) -> Result<(), String> {
    for sql in ["DELETE FROM jobs", "VACUUM ANALYZE jobs"] {
        sqlx::query(sql)
            .execute(pool)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Waits until no workflow run is running (5 minutes at most).
async fn until_runs_done(pool: &Db) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let running: i64 =
            sqlx::query_scalar("SELECT count(*) FROM workflow_runs WHERE state = 'running'")
                .fetch_one(pool)
                .await
                .map_err(|e| e.to_string())?;
        if running == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{running} runs still running after 5 minutes"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
