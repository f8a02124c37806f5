//! `kickoff bench pages`: the dashboard and the API at scale. Fills the jobs table with synthetic
//! jobs in mixed states (1,000,000 by default), serves the real router over loopback HTTP, and
//! times whole responses (the server-rendered page, data included) with percentiles per address.
//! Also reports the table's and its indexes' size, the server's RSS, and the time to prune the
//! finished jobs.
//!
//! The fixture SQL lives here, not in `engine/store`: it makes rows no engine path would (already
//! finished jobs with errors, in bulk), only for this measurement.

use std::time::{Duration, Instant};

use super::percentiles::percentile;

use crate::db::Db;
use serde_json::{json, Value};

use crate::engine::store::jobs as job_store;
use crate::engine::{Engine, EngineConfig};
use crate::http::{
    self,
    state::{AppState, StateParts},
};

/// Rows per fixture statement.
const SEED_CHUNK: i64 = 100_000;

/// Fills `jobs` with `rows` jobs: 80 % completed, 5 % discarded, 3 % cancelled, 2 % retryable,
/// 10 % scheduled over the next day; three queues and kinds; args with a `game_id` (5,000 games).
pub(super) async fn seed(pool: &Db, rows: i64) -> Result<(), String> {
    let mut done = 0;
    while done < rows {
        let n = SEED_CHUNK.min(rows - done);
        sqlx::query(
            "INSERT INTO jobs (queue, kind, args, state, attempt, max_attempts, scheduled_at,
                               attempted_at, attempted_by, finalized_at, errors, inserted_at)
             SELECT (ARRAY['default', 'webhooks', 'questions'])[1 + i % 3],
                    (ARRAY['noop', 'webhook', 'lock_question'])[1 + i % 3],
                    jsonb_build_object('game_id', i % 5000, 'seq', i),
                    s.state, a.attempt, 3, a.at, a.started, 'bench-node',
                    CASE WHEN s.state IN ('completed', 'discarded', 'cancelled') THEN a.at END,
                    CASE WHEN s.state IN ('discarded', 'retryable')
                         THEN jsonb_build_array(jsonb_build_object(
                                  'attempt', 1, 'at', a.at, 'started_at', a.started,
                                  'node', 'bench-node', 'message', 'connection refused'))
                         ELSE '[]'::jsonb END,
                    a.at - interval '1 minute'
             FROM generate_series($1::bigint + 1, $1::bigint + $2::bigint) AS i,
                  LATERAL (SELECT CASE WHEN i % 100 < 80 THEN 'completed'
                                       WHEN i % 100 < 85 THEN 'discarded'
                                       WHEN i % 100 < 88 THEN 'cancelled'
                                       WHEN i % 100 < 90 THEN 'retryable'
                                       ELSE 'scheduled' END::job_state AS state) s,
                  LATERAL (SELECT CASE WHEN s.state IN ('scheduled', 'retryable')
                                       THEN now() + make_interval(secs => 60 + (i % 86400))
                                       ELSE now() - make_interval(secs => (i % 86400)) END AS at,
                                  CASE WHEN s.state = 'scheduled' THEN 0 ELSE 1 END AS attempt,
                                  CASE WHEN s.state = 'scheduled' THEN NULL
                                       ELSE now() - make_interval(secs => (i % 86400) + 1) END
                                       AS started) a",
        )
        .bind(done)
        .bind(n)
        .execute(pool)
        .await
        .map_err(|e| format!("seeding jobs: {e}"))?;
        done += n;
    }
    sqlx::query("ANALYZE jobs")
        .execute(pool)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The attempts' side of a table of `seed`ed jobs: a record for each job that was attempted, and
/// 30 days of rollups as a busy deployment keeps them (20 queue and kind pairs every minute of
/// the last day and every hour of 30 days, and 50 hourly schedules).
async fn seed_history(pool: &Db) -> Result<(), String> {
    let run = |sql: &'static str| async move {
        sqlx::query(sql)
            .execute(pool)
            .await
            .map_err(|e| format!("seeding the history: {e}"))
    };
    run(
        "INSERT INTO job_attempts (job_id, attempt, queue, kind, node, due_at, started_at,
                                   finished_at, duration_ms, outcome, error)
         SELECT id, attempt, queue, kind, 'bench-node', attempted_at - interval '2 ms',
                attempted_at, attempted_at + interval '5 ms', 5,
                CASE state WHEN 'completed' THEN 'completed' WHEN 'discarded' THEN 'discarded'
                           WHEN 'cancelled' THEN 'cancelled' ELSE 'failed' END,
                CASE WHEN state IN ('discarded', 'retryable') THEN 'connection refused' END
         FROM jobs WHERE attempt > 0 AND attempted_at IS NOT NULL",
    )
    .await?;
    // A histogram of 100 attempts a step: most within 5 ms, a few later.
    let late_columns = (0..16)
        .map(|k| format!("late_{k}"))
        .collect::<Vec<_>>()
        .join(", ");
    let buckets = "10, 20, 40, 15, 8, 4, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0";
    let on_time = "1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0";
    let rollups = format!(
        "INSERT INTO {{table}} (minute, queue, kind, schedule_id, completed, failed, discarded,
                                cancelled, snoozed, lost, {late_columns}, duration_sum_ms,
                                duration_max_ms)
         SELECT t, 'q' || (p % 5), 'kind_' || p, 0, 95, 3, 1, 1, 0, 0, {buckets}, 500, 40
         FROM generate_series({{from}}, {{to}}, {{step}}) AS t, generate_series(0, 19) AS p
         UNION ALL
         SELECT t, 'default', 'noop', 1000 + s, 1, 0, 0, 0, 0, 0, {on_time}, 5, 5
         FROM generate_series({{from}}, {{to}}, {{step}}) AS t, generate_series(0, 49) AS s
         WHERE {{hourly}}"
    );
    let minutes = rollups
        .replace("{table}", "job_history_minute")
        .replace("{from}", "date_trunc('minute', now()) - interval '1 day'")
        .replace("{to}", "date_trunc('minute', now()) - interval '1 minute'")
        .replace("{step}", "interval '1 minute'")
        .replace("{hourly}", "extract(minute FROM t) = 0");
    let hours = rollups
        .replace("{table}", "job_history_hour")
        .replace("{from}", "date_trunc('hour', now()) - interval '30 days'")
        .replace("{to}", "date_trunc('hour', now()) - interval '1 hour'")
        .replace("{step}", "interval '1 hour'")
        .replace("{hourly}", "true");
    for sql in [minutes, hours] {
        sqlx::query(&sql)
            .execute(pool)
            .await
            .map_err(|e| format!("seeding the rollups: {e}"))?;
    }
    run("ANALYZE job_attempts").await?;
    run("ANALYZE job_history_minute").await?;
    run("ANALYZE job_history_hour").await?;
    Ok(())
}

fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

pub async fn pages(pool: &Db, rows: i64, samples: usize) -> Result<Value, String> {
    let seed_started = Instant::now();
    seed(pool, rows).await?;
    seed_history(pool).await?;
    let seed_secs = seed_started.elapsed().as_secs_f64();

    let engine = Engine::start(
        pool.clone(),
        crate::workers::builtin(Vec::new()),
        EngineConfig::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let token = "bench-token";
    let shutdown = tokio_util::sync::CancellationToken::new();
    let state = AppState::new(StateParts {
        shutdown: shutdown.clone(),
        client: engine.client(),
        accounts: crate::accounts::Accounts::new(pool.clone()),
        secure_cookies: false,
        pool: pool.clone(),
        events: engine.events(),
        api_token: std::sync::Arc::new(crate::accounts::bootstrap_token::BootstrapToken::fixed(
            token,
        )),
        node_id: std::sync::Arc::from(engine.node_id()),
        metrics: engine.metrics(),
        leptos_options: leptos::config::LeptosOptions::builder()
            .output_name("kickoff")
            .site_root("target/site")
            .build(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            axum::serve(listener, http::router(state))
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        }
    });

    let some_id: i64 = sqlx::query_scalar("SELECT max(id) / 2 FROM jobs")
        .fetch_one(pool)
        .await
        .map_err(|e| e.to_string())?;
    let window_from = (chrono::Utc::now() - chrono::Duration::hours(3))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let window_to = (chrono::Utc::now() - chrono::Duration::hours(2))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let addresses: Vec<(String, bool)> = vec![
        ("/".into(), false),
        ("/jobs".into(), false),
        ("/jobs?state=completed".into(), false),
        ("/jobs?state=scheduled".into(), false),
        ("/jobs?queue=webhooks".into(), false),
        ("/jobs?kind=lock_question".into(), false),
        ("/jobs?args=game_id%3D42".into(), false),
        (
            format!("/jobs?from={window_from}&to={window_to}&zone=UTC"),
            false,
        ),
        (format!("/jobs?before={some_id}"), false),
        (format!("/jobs/{some_id}"), false),
        ("/failures".into(), false),
        ("/timers".into(), false),
        ("/queues".into(), false),
        ("/questions".into(), false),
        ("/api/v1/jobs".into(), true),
        ("/api/v1/jobs?state=discarded".into(), true),
        ("/api/v1/stats".into(), true),
        ("/jobs?late=1000".into(), false),
        ("/jobs?late=100".into(), false),
        ("/history".into(), false),
        ("/history?range=24h".into(), false),
        ("/history?range=7d".into(), false),
        ("/history?range=30d".into(), false),
        ("/history?range=30d&by=kind".into(), false),
        ("/api/v1/stats/history?group=queue".into(), true),
        (
            format!(
                "/api/v1/stats/history?group=kind&step=3600&from={}",
                (chrono::Utc::now() - chrono::Duration::days(30)).format("%Y-%m-%dT%H:%M:%SZ")
            ),
            true,
        ),
        (format!("/api/v1/jobs/{some_id}/attempts"), true),
    ];
    let client = reqwest::Client::new();
    // The dashboard wants a signed-in operator: sign in once, as a browser would.
    let password = "bench-password-not-secret";
    crate::accounts::Accounts::new(pool.clone())
        .create("bench", password, crate::accounts::Role::Viewer)
        .await
        .map_err(|e| e.to_string())?;
    let signed_in = client
        .post(format!("http://{addr}/_console/login"))
        .form(&[("name", "bench"), ("password", password)])
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let cookie = signed_in
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(crate::http::session::COOKIE))
        .and_then(|v| v.split(';').next())
        .map(String::from)
        .ok_or_else(|| format!("signing in failed: {}", signed_in.status()))?;
    let mut results = serde_json::Map::new();
    let mut worst_p95: f64 = 0.0;
    for (address, api) in &addresses {
        let url = format!("http://{addr}{address}");
        let mut times = Vec::with_capacity(samples);
        for i in 0..samples + 3 {
            let mut req = client.get(&url);
            if *api {
                req = req.bearer_auth(token);
            } else {
                req = req.header(reqwest::header::COOKIE, &cookie);
            }
            let started = Instant::now();
            let res = req.send().await.map_err(|e| e.to_string())?;
            let status = res.status();
            let body = res.text().await.map_err(|e| e.to_string())?;
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            if !status.is_success() {
                return Err(format!("{address}: {status}: {body}"));
            }
            if i >= 3 {
                times.push(ms);
            }
        }
        times.sort_by(|a, b| a.total_cmp(b));
        let p95 = percentile(&times, 0.95);
        worst_p95 = worst_p95.max(p95);
        results.insert(
            address.clone(),
            json!({
                "p50_ms": (percentile(&times, 0.5) * 100.0).round() / 100.0,
                "p95_ms": (p95 * 100.0).round() / 100.0,
                "max_ms": (times.last().copied().unwrap_or(0.0) * 100.0).round() / 100.0,
            }),
        );
    }
    let (table_bytes, index_bytes): (i64, i64) =
        sqlx::query_as("SELECT pg_table_size('jobs'), pg_indexes_size('jobs')")
            .fetch_one(pool)
            .await
            .map_err(|e| e.to_string())?;
    let (attempts, attempts_bytes, rollup_bytes): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM job_attempts), pg_total_relation_size('job_attempts'),
                pg_total_relation_size('job_history_minute')
                    + pg_total_relation_size('job_history_hour')",
    )
    .fetch_one(pool)
    .await
    .map_err(|e| e.to_string())?;
    let rss = rss_kib();

    shutdown.cancel();
    let _ = server.await;
    engine.stop().await;

    // Pruning every finished job, as the pruner does: batches of 10,000.
    let prune_started = Instant::now();
    let cutoff = chrono::Utc::now() + chrono::Duration::days(1);
    let mut pruned = 0;
    loop {
        let n = job_store::job_prune_finalized(pool, Some(cutoff), Duration::ZERO, 10_000)
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        pruned += n;
    }
    let prune_secs = prune_started.elapsed().as_secs_f64();

    Ok(json!({
        "workload": "pages",
        "jobs": rows,
        "samples_per_address": samples,
        "seed_secs": (seed_secs * 10.0).round() / 10.0,
        "worst_p95_ms": (worst_p95 * 100.0).round() / 100.0,
        "addresses": results,
        "jobs_table_mib": table_bytes / (1024 * 1024),
        "attempt_records": attempts,
        "attempt_records_mib": attempts_bytes / (1024 * 1024),
        "attempt_record_bytes_each": attempts_bytes / attempts.max(1),
        "rollups_mib": rollup_bytes / (1024 * 1024),
        "jobs_indexes_mib": index_bytes / (1024 * 1024),
        "server_rss_mib": rss.map(|k| k / 1024),
        "pruned": pruned,
        "prune_secs": (prune_secs * 10.0).round() / 10.0,
    }))
}
