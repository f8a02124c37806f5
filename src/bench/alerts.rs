//! `kickoff bench alerts`: what the leader's alert evaluation costs with a large jobs table. Fills
//! `jobs` as the pages workload does (1,000,000 by default: `--rows`), adds 20,000 questions (a
//! quarter of them open past game time) and 10,000 overdue jobs, makes one rule of each of the
//! seven conditions, and times `Evaluator::run_once` (`--samples` times): the first evaluation,
//! which opens the incidents and inserts their notifications, and the steady state after it,
//! which is what the leader pays every 2 seconds; then each rule alone, to show where it goes.
//!
//! The fixture SQL lives here, as in `pages`: it makes rows (and switches rules) only for this
//! measurement.

use std::time::Instant;

use crate::db::Db;
use serde_json::{json, Value};

use crate::alerts::{Alerts, Condition, Evaluator, RuleSpec};
use crate::engine::Client;

/// Questions in the fixture.
const QUESTIONS: i64 = 20_000;
/// Jobs overdue (due a minute to an hour ago, never started).
const OVERDUE: i64 = 10_000;

async fn seed_game(pool: &Db) -> Result<(), String> {
    // A quarter still open past game time (the `question_open` and `late_lock` reads), the rest
    // locked or ahead.
    sqlx::query(
        "INSERT INTO questions (game, prompt, choices, game_time, status, locked_at)
         SELECT 'game ' || (i % 2000), 'who scores first?', ARRAY['home', 'away'],
                now() + make_interval(secs => (i % 4 - 1) * 600 + i % 500),
                CASE WHEN i % 4 = 1 THEN 'locked' ELSE 'open' END::question_status,
                CASE WHEN i % 4 = 1 THEN now() END
         FROM generate_series(1, $1::bigint) AS i",
    )
    .bind(QUESTIONS)
    .execute(pool)
    .await
    .map_err(|e| format!("seeding questions: {e}"))?;
    sqlx::query(
        "INSERT INTO jobs (queue, kind, args, state, scheduled_at)
         SELECT 'default', 'noop', jsonb_build_object('seq', i), 'available',
                now() - make_interval(secs => 60 + i % 3600)
         FROM generate_series(1, $1::bigint) AS i",
    )
    .bind(OVERDUE)
    .execute(pool)
    .await
    .map_err(|e| format!("seeding overdue jobs: {e}"))?;
    sqlx::query("ANALYZE")
        .execute(pool)
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// One rule of each condition, with thresholds that hold on the fixture.
fn rules() -> Vec<RuleSpec> {
    let rule = |name: &str, condition: Condition| RuleSpec {
        name: name.to_string(),
        condition: Some(condition),
        ..RuleSpec::default()
    };
    vec![
        rule("late locks", Condition::LateLock),
        rule("open questions", Condition::QuestionOpen),
        rule("discarded", Condition::JobDiscarded),
        RuleSpec {
            threshold_n: Some(1_000),
            for_secs: Some(0),
            ..rule("backlog", Condition::QueueBacklog)
        },
        RuleSpec {
            percent: Some(5.0),
            ..rule("failures", Condition::FailureRate)
        },
        rule("lost nodes", Condition::NodeLost),
        rule("overdue", Condition::Overdue),
    ]
}

pub async fn alerts(pool: &Db, rows: i64, samples: usize) -> Result<Value, String> {
    let seed_started = Instant::now();
    super::pages::seed(pool, rows).await?;
    seed_game(pool).await?;
    let seed_secs = seed_started.elapsed().as_secs_f64();

    // A client (the evaluator inserts its notifications with it); no engine runs, so nothing
    // drains the fixture while it is measured.
    let client = Client::new(
        pool.clone(),
        std::sync::Arc::new(crate::workers::builtin(Vec::new())),
    );
    let alerts = Alerts::new(pool.clone(), client.clone());
    {
        let mut conn = pool.pool().acquire().await.map_err(|e| e.to_string())?;
        for spec in rules() {
            alerts
                .create_rule_with(&mut conn, spec, Some("bench"))
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    let evaluator = Evaluator::new(pool.clone(), client, "default");

    let started = Instant::now();
    let first = evaluator.run_once().await.map_err(|e| e.to_string())?;
    let first_ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut times = Vec::with_capacity(samples);
    let mut changes = 0;
    for _ in 0..samples {
        let started = Instant::now();
        let report = evaluator.run_once().await.map_err(|e| e.to_string())?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        changes += report.fired.len() + report.resolved.len();
    }
    times.sort_by(f64::total_cmp);
    let p = |q: f64| (super::percentiles::percentile(&times, q) * 100.0).round() / 100.0;
    // Where the steady state's time goes: each rule alone (the others switched off in the table,
    // leaving their incidents as they are), its median over a fifth of the samples.
    let mut per_rule = serde_json::Map::new();
    for spec in rules() {
        sqlx::query("UPDATE alert_rules SET enabled = (name = $1)")
            .bind(&spec.name)
            .execute(pool)
            .await
            .map_err(|e| e.to_string())?;
        let mut alone = Vec::new();
        for _ in 0..(samples / 5).max(1) {
            let started = Instant::now();
            evaluator.run_once().await.map_err(|e| e.to_string())?;
            alone.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        alone.sort_by(f64::total_cmp);
        let median = (super::percentiles::percentile(&alone, 0.5) * 100.0).round() / 100.0;
        per_rule.insert(spec.name.clone(), json!(median));
    }
    Ok(json!({
        "workload": "alerts",
        "rows": rows,
        "questions": QUESTIONS,
        "overdue": OVERDUE,
        "rules": rules().len(),
        "seed_s": (seed_secs * 10.0).round() / 10.0,
        "first_evaluation_ms": (first_ms * 100.0).round() / 100.0,
        "first_fired": first.fired.len(),
        "samples": samples,
        "steady_ms": { "p50": p(0.5), "p95": p(0.95), "max": p(1.0) },
        "steady_changes": changes,
        "p50_ms_per_rule_alone": per_rule,
    }))
}
