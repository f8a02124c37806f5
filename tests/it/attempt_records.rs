//! Every attempt's record in `job_attempts`: when it was due and started, how late, how long, its
//! outcome and error, the output its handler recorded and the lines it logged, bounded; written
//! by the statement that writes the outcome, and gone with the job.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::common::{test_db, wait_for};
use kickoff::engine::attempt_log::{CaptureLayer, MAX_LOG_LINES, MAX_OUTPUT_BYTES};
use kickoff::engine::{
    BoxFuture, Db, Engine, EngineConfig, JobContext, JobId, NewJob, WorkError, Worker, Workers,
};

/// A worker that behaves as its args say, recording output and logging lines on the way.
pub(crate) struct Recorder;

impl Worker for Recorder {
    fn kind(&self) -> &'static str {
        "recorder"
    }
    fn backoff(&self, _attempt: i32) -> Duration {
        Duration::from_millis(50)
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let mode = ctx.job.args["mode"].as_str().unwrap_or("ok").to_string();
            let lines = ctx.job.args["lines"].as_u64().unwrap_or(0);
            for i in 0..lines {
                tracing::info!(line = i, "working");
            }
            match mode.as_str() {
                "fail_once" if ctx.job.attempt == 1 => {
                    tracing::warn!("the partner said no");
                    Err(WorkError::Retryable("no answer".into()))
                }
                "fatal" => Err(WorkError::Fatal("bad args".into())),
                "cancel" => Err(WorkError::Cancel("not needed".into())),
                "snooze_once" if ctx.job.meta.get("snoozes").is_none() => {
                    Err(WorkError::Snooze(Duration::from_millis(50)))
                }
                "too_big" => {
                    ctx.record(&json!({"small": true})).unwrap();
                    let refused = ctx.record(&"x".repeat(MAX_OUTPUT_BYTES)).unwrap_err();
                    tracing::info!(%refused, "kept the small output");
                    Ok(())
                }
                "hold" => {
                    tracing::info!("holding until cancelled");
                    ctx.cancelled().cancelled().await;
                    Err(WorkError::Cancel("stopped".into()))
                }
                "in_tx" => {
                    ctx.record(&json!({"frozen": 3})).unwrap();
                    tracing::info!("freezing");
                    let tx = ctx.begin().await?;
                    ctx.complete_with(tx).await
                }
                _ => {
                    ctx.record(&json!({"attempt": ctx.job.attempt, "mode": mode}))
                        .unwrap();
                    Ok(())
                }
            }
        })
    }
}

pub(crate) fn config() -> EngineConfig {
    EngineConfig {
        queues: vec![("default".into(), 10), ("other".into(), 10)],
        lease: Duration::from_secs(2),
        heartbeat: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(2),
        ..EngineConfig::default()
    }
}

async fn start(db: &Db) -> Engine {
    let mut workers = Workers::new();
    workers.register(Recorder);
    Engine::start(db.clone(), workers, config()).await.unwrap()
}

/// Catches the attempts' log lines in this test's process, as the server's logging does.
fn capture_logs() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let _ = tracing_subscriber::registry().with(CaptureLayer).try_init();
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct Row {
    attempt: i32,
    queue: String,
    kind: String,
    node: String,
    due_at: DateTime<Utc>,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    late_ms: f64,
    duration_ms: f64,
    outcome: String,
    error: Option<String>,
    output: Option<Value>,
    logs: Option<Value>,
    logs_dropped: i32,
}

pub(crate) async fn records(db: &Db, id: JobId) -> Vec<Row> {
    sqlx::query_as(
        "SELECT attempt, queue, kind, node, due_at, started_at, finished_at, late_ms, duration_ms,
                outcome, error, output, logs, logs_dropped
         FROM job_attempts WHERE job_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(db)
    .await
    .unwrap()
}

/// Waits until the job has `n` attempt records and returns them.
pub(crate) async fn wait_records(db: &Db, id: JobId, n: usize) -> Vec<Row> {
    wait_for(
        &format!("{n} attempt records of job {id}"),
        Duration::from_secs(15),
        || async { records(db, id).await.len() >= n },
    )
    .await;
    records(db, id).await
}

pub(crate) fn recorder(args: Value) -> NewJob {
    NewJob::new("recorder", args)
}

/// Inserts a `recorder` job with these args.
async fn insert(client: &kickoff::engine::Client, args: Value) -> kickoff::engine::Job {
    client.insert(&recorder(args)).await.unwrap().job
}

#[tokio::test]
async fn a_job_started_late_on_purpose_records_how_late() {
    let db = test_db().await;
    let engine = start(&db.pool).await;
    let client = engine.client();
    client.set_queue_paused("default", true).await.unwrap();
    let job = insert(&client, json!({"mode": "ok"})).await;
    // Held by the pause for at least 400 ms of the database's clock.
    let paused_at = client.db_now().await.unwrap();
    wait_for("400 ms to pass", Duration::from_secs(5), || async {
        client.db_now().await.unwrap() - paused_at > chrono::Duration::milliseconds(400)
    })
    .await;
    client.set_queue_paused("default", false).await.unwrap();
    let rows = wait_records(&db.pool, job.id, 1).await;
    let r = &rows[0];
    assert_eq!((r.attempt, r.outcome.as_str()), (1, "completed"));
    assert_eq!((r.queue.as_str(), r.kind.as_str()), ("default", "recorder"));
    assert_eq!(r.due_at, job.scheduled_at);
    assert!(r.late_ms >= 400.0, "late by {} ms", r.late_ms);
    assert!(r.late_ms < 10_000.0, "late by {} ms", r.late_ms);
    let expected = (r.started_at - r.due_at).num_microseconds().unwrap() as f64 / 1000.0;
    assert!((r.late_ms - expected).abs() < 0.01);
    assert!(r.finished_at >= r.started_at);
    assert!(r.duration_ms >= 0.0 && r.duration_ms < 5_000.0);
    assert!(!r.node.is_empty());
    assert_eq!(r.output, Some(json!({"attempt": 1, "mode": "ok"})));
    // A job that was not held starts within moments of its due time.
    let prompt = insert(&client, json!({"mode": "ok"})).await;
    let prompt_late = wait_records(&db.pool, prompt.id, 1).await[0].late_ms;
    assert!(
        prompt_late < r.late_ms,
        "the held job was {} ms late, the prompt one {prompt_late} ms",
        r.late_ms
    );
    engine.stop().await;
}

#[tokio::test]
async fn each_outcome_is_recorded_once_with_its_error() {
    let db = test_db().await;
    let engine = start(&db.pool).await;
    let client = engine.client();
    let mut ids = Vec::new();
    for mode in ["fail_once", "fatal", "cancel", "snooze_once", "in_tx"] {
        let j = insert(&client, json!({ "mode": mode })).await;
        ids.push(j.id);
    }
    let failed_once = wait_records(&db.pool, ids[0], 2).await;
    let summary: Vec<_> = failed_once
        .iter()
        .map(|r| (r.attempt, r.outcome.as_str(), r.error.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [(1, "failed", Some("no answer")), (2, "completed", None)]
    );
    // The retry was due after the backoff, and its record says so.
    assert!(failed_once[1].due_at > failed_once[0].due_at);
    let fatal = wait_records(&db.pool, ids[1], 1).await;
    assert_eq!(fatal[0].outcome, "discarded");
    assert_eq!(fatal[0].error.as_deref(), Some("fatal: bad args"));
    let cancelled = wait_records(&db.pool, ids[2], 1).await;
    assert_eq!(cancelled[0].outcome, "cancelled");
    let snoozed = wait_records(&db.pool, ids[3], 2).await;
    let summary: Vec<_> = snoozed
        .iter()
        .map(|r| (r.attempt, r.outcome.as_str()))
        .collect();
    // A snooze spends no attempt: both runs are attempt 1.
    assert_eq!(summary, [(1, "snoozed"), (1, "completed")]);
    // Completed inside the handler's own transaction: the record was written there, once.
    let in_tx = wait_records(&db.pool, ids[4], 1).await;
    assert_eq!(in_tx.len(), 1);
    assert_eq!(in_tx[0].outcome, "completed");
    assert_eq!(in_tx[0].output, Some(json!({"frozen": 3})));
    engine.stop().await;
    for id in &ids {
        let n = records(&db.pool, *id).await.len();
        assert!(n <= 2, "job {id} has {n} records");
    }
}

#[tokio::test]
async fn output_and_log_lines_are_kept_and_bounded() {
    capture_logs();
    let db = test_db().await;
    let engine = start(&db.pool).await;
    let client = engine.client();
    let chatty = insert(&client, json!({"mode": "ok", "lines": 10_000})).await;
    let failing = insert(&client, json!({"mode": "fail_once", "lines": 2})).await;
    let too_big = insert(&client, json!({"mode": "too_big"})).await;
    let in_tx = insert(&client, json!({"mode": "in_tx"})).await;

    let r = &wait_records(&db.pool, chatty.id, 1).await[0];
    let lines = r.logs.as_ref().unwrap().as_array().unwrap();
    assert_eq!(lines.len(), MAX_LOG_LINES);
    assert_eq!(r.logs_dropped as usize, 10_000 - MAX_LOG_LINES);
    assert_eq!(lines[0]["message"], "working line=0");
    assert_eq!(lines[0]["level"], "INFO");
    assert!(lines[0]["at"].as_str().is_some());

    let rows = wait_records(&db.pool, failing.id, 2).await;
    let first: Vec<&str> = rows[0]
        .logs
        .as_ref()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        first,
        ["working line=0", "working line=1", "the partner said no"]
    );
    assert_eq!(rows[0].logs_dropped, 0);
    // Each attempt keeps its own lines.
    assert_eq!(rows[1].logs.as_ref().unwrap().as_array().unwrap().len(), 2);

    let r = &wait_records(&db.pool, too_big.id, 1).await[0];
    assert_eq!(r.output, Some(json!({"small": true})));
    let said = r.logs.as_ref().unwrap()[0]["message"].as_str().unwrap();
    assert!(said.contains("at most 65536 are kept"), "{said}");

    let r = &wait_records(&db.pool, in_tx.id, 1).await[0];
    assert_eq!(r.logs.as_ref().unwrap()[0]["message"], "freezing");
    engine.stop().await;
}

#[tokio::test]
async fn a_lost_attempt_is_recorded_and_records_go_with_their_job() {
    let db = test_db().await;
    let mut workers = Workers::new();
    workers.register(Recorder);
    let client = kickoff::engine::Client::new(db.pool.clone(), std::sync::Arc::new(workers));
    let job = insert(&client, json!({"mode": "ok"})).await;
    // Claimed by a node that then died: its lease ran out.
    let claimed = kickoff::engine::store::jobs::job_claim(
        &db.pool,
        "default",
        1,
        "dead-node",
        Duration::from_millis(10),
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 1);
    let later = Utc::now() + chrono::Duration::seconds(5);
    let rescued = kickoff::engine::store::jobs::job_rescue_expired(&db.pool, Some(later), 10)
        .await
        .unwrap();
    assert_eq!(rescued.len(), 1);
    let rows = records(&db.pool, job.id).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].outcome, "lost");
    assert_eq!(rows[0].node, "dead-node");
    assert_eq!(
        rows[0].error.as_deref(),
        Some("the lease of node dead-node expired")
    );
    assert_eq!(rows[0].due_at, job.scheduled_at);

    client.delete(job.id).await.unwrap();
    assert!(records(&db.pool, job.id).await.is_empty());
}

#[tokio::test]
async fn the_late_start_policy_runs_skips_or_discards_in_each_mode() {
    use kickoff::engine::{JobState, LatePolicy, OnLate};
    let db = test_db().await;
    let engine = start(&db.pool).await;
    let client = engine.client();
    client.set_queue_paused("default", true).await.unwrap();
    let policy = |after_ms, then| LatePolicy { after_ms, then };
    let mut ids = Vec::new();
    for p in [
        policy(100, OnLate::Run),
        policy(100, OnLate::Skip),
        policy(100, OnLate::Discard),
        // Late, but within its limit: it runs.
        policy(60_000, OnLate::Skip),
    ] {
        let j = recorder(json!({"mode": "ok"})).with_late_policy(p);
        ids.push(client.insert(&j).await.unwrap().job.id);
    }
    let held_since = client.db_now().await.unwrap();
    wait_for("300 ms to pass", Duration::from_secs(5), || async {
        client.db_now().await.unwrap() - held_since > chrono::Duration::milliseconds(300)
    })
    .await;
    client.set_queue_paused("default", false).await.unwrap();
    let mut seen = Vec::new();
    for id in &ids {
        let r = wait_records(&db.pool, *id, 1).await.remove(0);
        let state = client.get(*id).await.unwrap().state;
        seen.push((state, r.outcome.clone(), r.output.is_some()));
        assert!(r.late_ms >= 300.0, "late by {} ms", r.late_ms);
        if r.outcome != "completed" {
            let error = r.error.unwrap();
            assert!(error.contains("past its limit of 100 ms"), "{error}");
        }
    }
    // The handler ran only where the policy let it (its output is the sign).
    assert_eq!(
        seen,
        [
            (JobState::Completed, "completed".to_string(), true),
            (JobState::Cancelled, "cancelled".to_string(), false),
            (JobState::Discarded, "discarded".to_string(), false),
            (JobState::Completed, "completed".to_string(), true),
        ]
    );
    // A malformed policy is refused at insert, and nothing is written.
    let bad = recorder(json!({})).with_meta(json!({"late": {"after_ms": 5, "then": "later"}}));
    let refused = client.insert(&bad).await.unwrap_err().to_string();
    assert!(refused.starts_with("meta: late:"), "{refused}");
    engine.stop().await;
}

/// An attempt cancelled while it ran (by an operator, one at a time or in bulk) ended: its record
/// says so, how long it ran and how late it started, written by the statement that cancelled it
/// (the handler's own write comes after its claim was taken, and is fenced off).
#[tokio::test]
async fn an_attempt_cancelled_while_it_runs_is_recorded() {
    use kickoff::engine::{BulkAction, JobFilter, JobState};
    let db = test_db().await;
    let engine = start(&db.pool).await;
    let client = engine.client();
    let one = insert(&client, json!({"mode": "hold", "n": 1})).await;
    let bulk = insert(&client, json!({"mode": "hold", "n": 2})).await;
    for id in [one.id, bulk.id] {
        wait_for("the job to run", Duration::from_secs(10), || async {
            client.get(id).await.unwrap().state == JobState::Executing
        })
        .await;
    }
    client.cancel(one.id).await.unwrap();
    let filter = JobFilter {
        kind: Some("recorder".into()),
        args: Some(json!({"n": 2})),
        ..JobFilter::default()
    };
    let report = client
        .bulk_filter(BulkAction::Cancel, &filter)
        .await
        .unwrap();
    assert_eq!(report.changed, 1);
    for (id, due) in [(one.id, one.scheduled_at), (bulk.id, bulk.scheduled_at)] {
        let rows = wait_records(&db.pool, id, 1).await;
        assert_eq!(rows.len(), 1, "job {id}: {rows:?}");
        let r = &rows[0];
        assert_eq!((r.attempt, r.outcome.as_str()), (1, "cancelled"));
        assert_eq!(r.error.as_deref(), Some("cancelled while it ran"));
        assert_eq!(r.due_at, due);
        assert!(r.duration_ms > 0.0 && r.finished_at > r.started_at, "{r:?}");
        assert_eq!(client.get(id).await.unwrap().state, JobState::Cancelled);
    }
    // The handlers saw the cancel and stopped; their own writes changed nothing.
    engine.stop().await;
    assert_eq!(records(&db.pool, one.id).await.len(), 1);
    assert_eq!(records(&db.pool, bulk.id).await.len(), 1);
}

/// A schedule's template carries a late-start policy to each run: the runs a paused queue held
/// past it are skipped (cancelled, their records saying how late), the later ones run on time,
/// and the schedule's history counts both.
#[tokio::test]
async fn a_schedules_late_policy_skips_the_runs_a_pause_held() {
    use kickoff::engine::maintenance::count_folder::{CountFolder, CountFolderConfig};
    use kickoff::engine::schedules::{JobTemplate, ScheduleSpec, Schedules};
    use kickoff::engine::store::history::{self, HistoryFilter, HistoryGroup};
    let db = test_db().await;
    let engine = start(&db.pool).await;
    let client = engine.client();
    client.set_queue_paused("default", true).await.unwrap();
    let mut template = JobTemplate::new("recorder", json!({"mode": "ok"}));
    template.meta = json!({"late": {"after_ms": 300, "then": "skip"}});
    let spec = ScheduleSpec::every("reminder", Duration::from_secs(1), template);
    let schedules = Schedules::new(client.clone());
    schedules.create(&spec, None).await.unwrap();
    let id: i64 = sqlx::query_scalar("SELECT id FROM schedules WHERE name = 'reminder'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let overdue_runs = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM jobs
             WHERE kind = 'recorder' AND scheduled_at < now() - interval '400 ms'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    wait_for("a run held 400 ms", Duration::from_secs(10), || async {
        overdue_runs().await >= 1
    })
    .await;
    client.set_queue_paused("default", false).await.unwrap();
    let outcomes = || async {
        sqlx::query_as::<_, (String, f64, Option<String>)>(
            "SELECT outcome, late_ms, error FROM job_attempts WHERE schedule_id = $1 ORDER BY id",
        )
        .bind(id)
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };
    wait_for(
        "a skipped run and one on time",
        Duration::from_secs(15),
        || async {
            let seen = outcomes().await;
            seen.iter().any(|o| o.0 == "cancelled") && seen.iter().any(|o| o.0 == "completed")
        },
    )
    .await;
    schedules.set_paused("reminder", true).await.unwrap();
    engine.stop().await;
    let seen = outcomes().await;
    for (outcome, late_ms, error) in &seen {
        match outcome.as_str() {
            "cancelled" => {
                assert!(*late_ms > 300.0, "{seen:?}");
                assert!(
                    error
                        .as_deref()
                        .unwrap()
                        .contains("past its limit of 300 ms"),
                    "{seen:?}"
                );
            }
            "completed" => assert!(*late_ms <= 300.0, "{seen:?}"),
            _ => panic!("{seen:?}"),
        }
    }
    let skipped = seen.iter().filter(|o| o.0 == "cancelled").count() as i64;
    let ran = seen.len() as i64 - skipped;
    // The schedule's own series, folded.
    CountFolder::new(db.pool.clone(), CountFolderConfig::default())
        .run_once()
        .await
        .unwrap();
    let to = Utc::now() + chrono::Duration::minutes(1);
    let points = history::job_history_series(
        &db.pool,
        &HistoryFilter {
            schedule_id: Some(id),
            ..HistoryFilter::default()
        },
        HistoryGroup::All,
        to - chrono::Duration::hours(1),
        to,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let sum = |f: fn(&history::HistoryPoint) -> i64| points.iter().map(f).sum::<i64>();
    assert_eq!((sum(|p| p.cancelled), sum(|p| p.completed)), (skipped, ran));
}

/// A running attempt's lines show while it runs: its node writes them once it ran a beat, and
/// deletes them once it ended (its record holds them); a short attempt writes nothing.
#[tokio::test]
async fn a_running_attempts_lines_show_while_it_runs() {
    use kickoff::engine::JobState;
    capture_logs();
    let db = test_db().await;
    let engine = start(&db.pool).await;
    let client = engine.client();
    let quick = insert(&client, json!({"mode": "ok", "lines": 3})).await;
    let held = insert(&client, json!({"mode": "hold", "lines": 2})).await;
    wait_records(&db.pool, quick.id, 1).await;
    let so_far = || async {
        let job = client.get(held.id).await.unwrap();
        client.attempt_so_far(&job).await.unwrap()
    };
    wait_for(
        "the running attempt's lines",
        Duration::from_secs(10),
        || async { so_far().await.is_some() },
    )
    .await;
    let r = so_far().await.unwrap();
    assert_eq!((r.attempt, r.outcome.as_str()), (1, "running"));
    let lines: Vec<&str> = r
        .logs
        .as_ref()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            "working line=0",
            "working line=1",
            "holding until cancelled"
        ]
    );
    let live: Vec<i64> = sqlx::query_scalar("SELECT job_id FROM job_attempt_live")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(live, [held.id.0], "only the long attempt wrote its lines");
    client.cancel(held.id).await.unwrap();
    assert_eq!(
        client.get(held.id).await.unwrap().state,
        JobState::Cancelled
    );
    assert!(so_far().await.is_none());
    wait_for(
        "its node to delete the lines",
        Duration::from_secs(10),
        || async {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM job_attempt_live")
                .fetch_one(&db.pool)
                .await
                .unwrap();
            n == 0
        },
    )
    .await;
    engine.stop().await;
}

/// A running attempt's lines are those of its own claim: an attempt number comes again after a
/// hand-back or a snooze, and lines an earlier run left (its node stopped before deleting them)
/// are never shown as the new run's.
#[tokio::test]
async fn lines_left_by_an_earlier_run_of_the_same_attempt_number_are_not_shown() {
    let db = test_db().await;
    let mut workers = Workers::new();
    workers.register(Recorder);
    let client = kickoff::engine::Client::new(db.pool.clone(), std::sync::Arc::new(workers));
    sqlx::query(
        "INSERT INTO jobs (id, queue, kind, state, attempt, attempted_at, attempted_by,
                           lease_expires_at, claim_token, scheduled_at)
         VALUES (7001, 'default', 'recorder', 'executing', 1, now(), 'b', now() + interval '1 min',
                 22, now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job_attempt_live (job_id, attempt, claim_token, node, logs)
         VALUES (7001, 1, 11, 'a', '[{\"message\": \"the earlier run\"}]')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let job = client.get(JobId(7001)).await.unwrap();
    assert_eq!(client.attempt_so_far(&job).await.unwrap(), None);
    sqlx::query("UPDATE job_attempt_live SET claim_token = 22, node = 'b'")
        .execute(&db.pool)
        .await
        .unwrap();
    let shown = client.attempt_so_far(&job).await.unwrap().unwrap();
    assert_eq!(shown.logs.unwrap()[0]["message"], "the earlier run");
}

fn messages(logs: &Option<Value>) -> Vec<String> {
    logs.as_ref()
        .and_then(Value::as_array)
        .map(|lines| {
            lines
                .iter()
                .map(|l| l["message"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// An attempt cancelled while it runs keeps, in its record, the lines its page showed while it
/// ran (they were deleted with the live row, and the record had none).
#[tokio::test]
async fn a_cancelled_attempt_keeps_the_lines_its_page_showed() {
    use kickoff::engine::JobState;
    capture_logs();
    let db = test_db().await;
    let engine = start(&db.pool).await;
    let client = engine.client();
    let held = insert(&client, json!({"mode": "hold", "lines": 2})).await;
    wait_for(
        "the running attempt's lines",
        Duration::from_secs(10),
        || async {
            let job = client.get(held.id).await.unwrap();
            job.state == JobState::Executing && client.attempt_so_far(&job).await.unwrap().is_some()
        },
    )
    .await;
    client.cancel(held.id).await.unwrap();
    let rows = wait_records(&db.pool, held.id, 1).await;
    assert_eq!(rows[0].outcome, "cancelled");
    assert_eq!(
        messages(&rows[0].logs),
        [
            "working line=0",
            "working line=1",
            "holding until cancelled"
        ],
        "{rows:?}"
    );
    engine.stop().await;
}

/// An attempt rescued after its node died keeps the output and lines its node last wrote, and
/// their live row goes with the rescue.
#[tokio::test]
async fn a_lost_attempt_keeps_the_output_and_lines_its_node_last_wrote() {
    let db = test_db().await;
    let mut workers = Workers::new();
    workers.register(Recorder);
    let client = kickoff::engine::Client::new(db.pool.clone(), std::sync::Arc::new(workers));
    let job = insert(&client, json!({"mode": "ok"})).await;
    let claimed = kickoff::engine::store::jobs::job_claim(
        &db.pool,
        "default",
        1,
        "dead-node",
        Duration::from_millis(10),
    )
    .await
    .unwrap();
    let claim = claimed[0].claim().unwrap();
    sqlx::query(
        r#"INSERT INTO job_attempt_live (job_id, attempt, claim_token, node, output, logs, logs_dropped)
           VALUES ($1, 1, $2, 'dead-node', '{"step": 2}', '[{"message": "half way", "level": "INFO"}]', 3)"#,
    )
    .bind(job.id)
    .bind(claim.token)
    .execute(&db.pool)
    .await
    .unwrap();
    let later = Utc::now() + chrono::Duration::seconds(5);
    kickoff::engine::store::jobs::job_rescue_expired(&db.pool, Some(later), 10)
        .await
        .unwrap();
    let rows = records(&db.pool, job.id).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].outcome, "lost");
    assert_eq!(rows[0].output, Some(json!({"step": 2})), "{rows:?}");
    assert_eq!(messages(&rows[0].logs), ["half way"]);
    assert_eq!(rows[0].logs_dropped, 3);
    let live: i64 = sqlx::query_scalar("SELECT count(*) FROM job_attempt_live")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(live, 0, "the dead node's lines went with the rescue");
}

/// An attempt interrupted at a graceful stop (handed back, not counted) has a record of its own
/// with what it logged, and its rerun is counted late from the hand-back, not from the original
/// due time: a late-start policy does not skip it for the time the stop took.
#[tokio::test]
async fn an_attempt_handed_back_at_shutdown_is_recorded_and_its_rerun_starts_on_time() {
    use kickoff::engine::{LatePolicy, OnLate};
    capture_logs();
    let db = test_db().await;
    let mut workers = Workers::new();
    workers.register(Recorder);
    let quick_stop = EngineConfig {
        shutdown_grace: Duration::from_millis(200),
        ..config()
    };
    let engine = Engine::start(db.pool.clone(), workers, quick_stop.clone())
        .await
        .unwrap();
    let client = engine.client();
    let late = LatePolicy {
        after_ms: 1_000,
        then: OnLate::Skip,
    };
    let job = client
        .insert(&recorder(json!({"mode": "hold", "lines": 1})).with_late_policy(late))
        .await
        .unwrap()
        .job;
    wait_for("the job to run", Duration::from_secs(10), || async {
        client.get(job.id).await.unwrap().state == kickoff::engine::JobState::Executing
    })
    .await;
    // Long enough that the rerun would count as late from the original due time.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    engine.stop().await;
    let rows = records(&db.pool, job.id).await;
    assert_eq!(
        rows.len(),
        1,
        "the interrupted attempt is recorded: {rows:?}"
    );
    assert_eq!(
        (rows[0].attempt, rows[0].outcome.as_str()),
        (1, "interrupted")
    );
    assert_eq!(rows[0].due_at, job.scheduled_at);
    assert!(
        messages(&rows[0].logs).contains(&"holding until cancelled".to_string()),
        "{rows:?}"
    );
    let back = client.get(job.id).await.unwrap();
    assert_eq!(back.attempt, 0, "the interruption does not count");
    sqlx::query(r#"UPDATE jobs SET args = '{"mode": "ok"}' WHERE id = $1"#)
        .bind(job.id)
        .execute(&db.pool)
        .await
        .unwrap();
    let mut workers = Workers::new();
    workers.register(Recorder);
    let engine = Engine::start(db.pool.clone(), workers, quick_stop)
        .await
        .unwrap();
    let rows = wait_records(&db.pool, job.id, 2).await;
    assert_eq!(
        (rows[1].attempt, rows[1].outcome.as_str()),
        (1, "completed"),
        "{rows:?}"
    );
    assert!(rows[1].late_ms < 1_000.0, "{rows:?}");
    engine.stop().await;
}
