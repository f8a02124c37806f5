//! Map steps (issue 49): a step that is many tasks, each an ordinary job retried alone, resumed
//! from the cursor its handler checkpointed in its own transaction; the step settles once every
//! task settled, in the transaction of the last, and the step after it starts there. Against
//! real PostgreSQL and a running engine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::common::rest::call;
use crate::common::{test_db, wait_for, TestDb};
use crate::workflows::{by_name, settled, step, StepWorker};
use axum::http::{Method, StatusCode};
use kickoff::engine::workflow::Workflow;
use kickoff::engine::workflow_actions::RetryMode;
use kickoff::engine::{
    BoxFuture, Engine, EngineConfig, JobContext, NewJob, WorkError, Worker, Workers,
};

/// A map task's handler: does items `cursor..items` of its task in batches of 5, each batch's
/// rows (`map_done`, no unique key: a second write of an item shows) and the cursor after it in
/// one transaction. On its task `flaky_task`'s first attempt it stops (retryable) after
/// `stop_after` items; on task `fail_task` it fails for good after `stop_after` items until
/// healed; on task `stall_task` it reports and waits for the test before its first checkpoint,
/// then reports what the checkpoint answered.
struct MapWorker {
    healed: Arc<AtomicBool>,
    stalled: mpsc::UnboundedSender<i64>,
    release: Arc<tokio::sync::Notify>,
    fenced: mpsc::UnboundedSender<bool>,
}

impl Worker for MapWorker {
    fn kind(&self) -> &'static str {
        "wf_map"
    }
    fn backoff(&self, _attempt: i32) -> Duration {
        Duration::from_millis(10)
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let task = ctx
                .task()
                .await?
                .ok_or_else(|| WorkError::fatal("not a task"))?;
            let args = &ctx.job.args;
            let items = args["items"].as_i64().unwrap_or(0);
            let stop_after = args["stop_after"].as_i64().unwrap_or(i64::MAX);
            let is = |k: &str| args[k].as_i64() == Some(task.task as i64);
            if args["hang"] == json!(true) {
                ctx.cancelled().cancelled().await;
                return Err(WorkError::retryable("stopped"));
            }
            if is("stall_task") && ctx.job.attempt == 1 {
                let _ = self.stalled.send(ctx.job.id.0);
                self.release.notified().await;
                let mut tx = ctx.begin().await?;
                let held = ctx.checkpoint_with(&mut tx, &json!(1), 1).await;
                tx.rollback().await?;
                let _ = self.fenced.send(matches!(held, Err(WorkError::Fenced)));
                return Err(WorkError::retryable("fenced"));
            }
            let mut cursor = task.cursor.as_ref().and_then(Value::as_i64).unwrap_or(0);
            assert_eq!(task.items, cursor, "the items kept are the cursor's");
            while cursor < items {
                if cursor >= stop_after
                    && ((is("flaky_task") && ctx.job.attempt == 1)
                        || (is("fail_task") && !self.healed.load(Ordering::SeqCst)))
                {
                    let e = format!("task {} stops at {cursor}", task.task);
                    return Err(if is("fail_task") {
                        WorkError::fatal(e)
                    } else {
                        WorkError::retryable(e)
                    });
                }
                let next = (cursor + 5).min(items);
                let mut tx = ctx.begin().await?;
                sqlx::query(
                    "INSERT INTO map_done (task, item, attempt)
                     SELECT $1, g, $4 FROM generate_series($2::bigint, $3::bigint - 1) g",
                )
                .bind(task.task)
                .bind(cursor)
                .bind(next)
                .bind(ctx.job.attempt)
                .execute(&mut *tx)
                .await?;
                ctx.checkpoint_with(&mut tx, &json!(next), next).await?;
                tx.commit().await?;
                cursor = next;
            }
            ctx.record(&json!({ "task": task.task, "of": task.tasks }))
                .map_err(|e| WorkError::fatal(e.to_string()))?;
            Ok(())
        })
    }
}

struct Harness {
    engine: Engine,
    started: mpsc::UnboundedReceiver<(String, Value)>,
    healed: Arc<AtomicBool>,
    stalled: mpsc::UnboundedReceiver<i64>,
    release: Arc<tokio::sync::Notify>,
    fenced: mpsc::UnboundedReceiver<bool>,
}

async fn harness(db: &TestDb) -> Harness {
    sqlx::query("CREATE TABLE map_done (task int NOT NULL, item bigint NOT NULL, attempt int)")
        .execute(&db.pool)
        .await
        .unwrap();
    let (started_tx, started) = mpsc::unbounded_channel();
    let (stalled_tx, stalled) = mpsc::unbounded_channel();
    let (fenced_tx, fenced) = mpsc::unbounded_channel();
    let healed = Arc::new(AtomicBool::new(false));
    let release = Arc::new(tokio::sync::Notify::new());
    let mut workers = Workers::new();
    workers.register(StepWorker {
        started: started_tx,
        healed: Arc::new(AtomicBool::new(false)),
    });
    workers.register(MapWorker {
        healed: healed.clone(),
        stalled: stalled_tx,
        release: release.clone(),
        fenced: fenced_tx,
    });
    let config = EngineConfig {
        queues: vec![("default".into(), 10)],
        ..EngineConfig::default()
    };
    let engine = Engine::start(db.pool.clone(), workers, config)
        .await
        .unwrap();
    Harness {
        engine,
        started,
        healed,
        stalled,
        release,
        fenced,
    }
}

const TOKEN: &str = "test-token-123";

fn map_job(args: Value) -> NewJob {
    NewJob::new("wf_map", args).with_max_attempts(3)
}

/// The items done, and those done more than once.
async fn done(db: &TestDb) -> (i64, i64) {
    sqlx::query_as("SELECT count(*), count(*) - count(DISTINCT (task, item)) FROM map_done")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// The jobs made for step `step` (its tasks' jobs, each retry's included).
async fn step_jobs(db: &TestDb, step: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE step_id = $1")
        .bind(step)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_map_steps_tasks_each_do_their_items_once_and_the_next_step_starts_with_the_last() {
    let db = test_db().await;
    let mut h = harness(&db).await;
    let client = h.engine.client();
    let flow = Workflow::new("notify_players")
        .step("prepare", step("prepare"))
        .step(
            "notify",
            map_job(json!({ "items": 25, "flaky_task": 3, "stop_after": 10 })),
        )
        .after("prepare")
        .map(8)
        .step(
            "leaderboard",
            NewJob::new(
                "wf_step",
                json!({ "name": "leaderboard", "read": ["notify"] }),
            ),
        )
        .after("notify");
    let run = client.insert_workflow(&flow).await.unwrap().run;
    assert_eq!(settled(&h.engine, run.id).await.state, "completed");

    // Every item of every task once, task 3's across its two attempts (resumed at 10).
    assert_eq!(done(&db).await, (200, 0));
    let steps = client.workflow_steps(run.id).await.unwrap();
    let notify = by_name(&steps, "notify");
    assert_eq!(notify.state, "completed");
    assert_eq!(
        (notify.tasks, notify.tasks_done, notify.items),
        (Some(8), 8, 200)
    );
    assert_eq!(notify.job_id, None, "a map step has no job of its own");
    assert_eq!(step_jobs(&db, notify.id).await, 8, "one job a task");
    let attempts: Vec<(i32, i32)> = sqlx::query_as(
        "SELECT t.task, j.attempt FROM workflow_tasks t JOIN jobs j ON j.id = t.job_id
         WHERE t.step_id = $1 ORDER BY t.task",
    )
    .bind(notify.id)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let retried: Vec<i32> = attempts.iter().filter(|a| a.1 > 1).map(|a| a.0).collect();
    assert_eq!(
        retried,
        vec![3],
        "only the flaky task ran twice: {attempts:?}"
    );
    let resumed: i64 =
        sqlx::query_scalar("SELECT min(item) FROM map_done WHERE task = 3 AND attempt = 2")
            .fetch_one(&db.pool)
            .await
            .unwrap_or(-1);
    assert_eq!(resumed, 10, "the second attempt resumed from the cursor");

    // The step after it read the step's output, and started in the last task's transaction.
    let mut reads = Vec::new();
    while let Ok((name, seen)) = h.started.try_recv() {
        reads.push((name, seen));
    }
    let leaderboard = reads.iter().find(|r| r.0 == "leaderboard").unwrap();
    assert_eq!(
        leaderboard.1["notify"],
        json!({ "tasks": 8, "completed": 8, "failed": 0, "cancelled": 0, "items": 200 })
    );
    let (last_task, next_made): (String, String) = sqlx::query_as(
        "SELECT (SELECT max(finalized_at) FROM jobs WHERE step_id = $1)::text,
                (SELECT inserted_at FROM jobs WHERE id = $2)::text",
    )
    .bind(notify.id)
    .bind(by_name(&steps, "leaderboard").job_id.unwrap().0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        last_task, next_made,
        "unblocked in the last task's transaction"
    );

    // The run's detail: the step's progress, and its tasks' attempts on the timeline.
    let app = crate::common::app(&db.pool, TOKEN);
    let (status, detail) = call(
        &app,
        Method::GET,
        &format!("/api/v1/workflows/{}", run.id),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(
        detail["steps"][1]["tasks"],
        json!({ "total": 8, "completed": 8, "failed": 0, "cancelled": 0, "items": 200 })
    );
    let mut on_timeline: Vec<&str> = detail["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["step"].as_str())
        .filter(|s| s.starts_with("notify"))
        .collect();
    on_timeline.sort();
    assert_eq!(
        on_timeline,
        [
            "notify[0]",
            "notify[1]",
            "notify[2]",
            "notify[3]",
            "notify[3]",
            "notify[4]",
            "notify[5]",
            "notify[6]",
            "notify[7]"
        ],
        "each task's attempts, task 3's two"
    );
    h.engine.stop().await;
}

/// A rerun keeps a completed map step (its output, its progress); a map step with a timer
/// says when its tasks are due; a run's map steps have at most 10,000 tasks in all.
#[tokio::test]
async fn a_rerun_keeps_a_completed_map_step_and_a_timer_says_when_its_tasks_are_due() {
    let db = test_db().await;
    let h = harness(&db).await;
    let client = h.engine.client();
    let flow = Workflow::new("notify_players")
        .step("notify", map_job(json!({ "items": 5 })))
        .map(3)
        .step(
            "leaderboard",
            NewJob::new("wf_step", json!({ "name": "leaderboard", "fail": true })),
        )
        .after("notify");
    let run = client.insert_workflow(&flow).await.unwrap().run;
    assert_eq!(settled(&h.engine, run.id).await.state, "failed");
    let again = client
        .rerun_workflow(run.id, "leaderboard", None)
        .await
        .unwrap();
    let again = settled(&h.engine, again.id).await;
    let steps = client.workflow_steps(again.id).await.unwrap();
    let notify = by_name(&steps, "notify");
    assert_eq!(notify.state, "completed");
    assert!(notify.kept_from.is_some());
    assert_eq!((notify.tasks_done, notify.items), (3, 15), "{notify:?}");
    assert_eq!(
        done(&db).await,
        (15, 0),
        "the kept step's tasks did not run again"
    );

    let kickoff = chrono::Utc::now() + chrono::Duration::hours(1);
    let flow = Workflow::new("notify_players")
        .time("kickoff_at", kickoff)
        .step("notify", map_job(json!({ "items": 5 })))
        .map(3)
        .at("kickoff_at", chrono::Duration::zero());
    let run = client.insert_workflow(&flow).await.unwrap().run;
    let notify = by_name(&client.workflow_steps(run.id).await.unwrap(), "notify");
    let due = notify.due_at.expect("its tasks wait for their time");
    assert!(
        (due - kickoff).num_milliseconds().abs() < 1,
        "{due} {kickoff}"
    );
    assert!(
        notify
            .wait(&[])
            .unwrap()
            .sentence()
            .starts_with("waits for its time: "),
        "{:?}",
        notify.wait(&[])
    );
    client.cancel_workflow(run.id).await.unwrap();

    let too_many = Workflow::new("x")
        .step("a", map_job(json!({})))
        .map(6_000)
        .step("b", map_job(json!({})))
        .map(6_000);
    let err = client.insert_workflow(&too_many).await.unwrap_err();
    assert!(err.to_string().contains("10000 tasks in all"), "{err}");
    h.engine.stop().await;
}

#[tokio::test]
async fn a_failed_task_fails_the_step_once_all_settled_and_a_retry_runs_only_it_from_its_cursor() {
    let db = test_db().await;
    let h = harness(&db).await;
    let client = h.engine.client();
    let flow = Workflow::new("notify_players")
        .step(
            "notify",
            map_job(json!({ "items": 20, "fail_task": 2, "stop_after": 10 })),
        )
        .map(6)
        .step("leaderboard", step("leaderboard"))
        .after("notify");
    let run = client.insert_workflow(&flow).await.unwrap().run;
    assert_eq!(settled(&h.engine, run.id).await.state, "failed");
    let steps = client.workflow_steps(run.id).await.unwrap();
    let notify = by_name(&steps, "notify");
    assert_eq!(notify.state, "failed");
    assert_eq!((notify.tasks_done, notify.tasks_failed), (5, 1));
    assert_eq!(by_name(&steps, "leaderboard").state, "failed");
    // The others finished: a failed task does not stop them.
    assert_eq!(done(&db).await, (5 * 20 + 10, 0));
    let wait = notify.wait(&[]);
    assert_eq!(wait, None, "a settled step waits for nothing");

    h.healed.store(true, Ordering::SeqCst);
    client
        .retry_workflow(run.id, RetryMode::Failed)
        .await
        .unwrap();
    assert_eq!(settled(&h.engine, run.id).await.state, "completed");
    assert_eq!(
        done(&db).await,
        (120, 0),
        "each item once: task 2 resumed at 10"
    );
    assert_eq!(
        step_jobs(&db, notify.id).await,
        7,
        "one new job, for the failed task"
    );
    let steps = client.workflow_steps(run.id).await.unwrap();
    let notify = by_name(&steps, "notify");
    assert_eq!(
        (notify.tasks_done, notify.tasks_failed, notify.items),
        (6, 0, 120)
    );
    assert_eq!(
        notify.output,
        Some(json!({ "tasks": 6, "completed": 6, "failed": 0, "cancelled": 0, "items": 120 }))
    );

    h.engine.stop().await;
}

#[tokio::test]
async fn a_cancel_or_a_skip_stops_a_map_steps_tasks() {
    let db = test_db().await;
    let h = harness(&db).await;
    let client = h.engine.client();
    let hanging = || {
        Workflow::new("notify_players")
            .step("notify", map_job(json!({ "hang": true })))
            .map(4)
            .step("leaderboard", step("leaderboard"))
            .after("notify")
    };
    let running = |db: &TestDb, step: i64| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM jobs WHERE step_id = $1 AND state = 'executing'",
            )
            .bind(step)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };

    let run = client.insert_workflow(&hanging()).await.unwrap().run;
    let notify = by_name(&client.workflow_steps(run.id).await.unwrap(), "notify");
    assert_eq!(
        notify.wait(&[]).unwrap().sentence(),
        "waits for its tasks: 0 of 4 done, 0 items"
    );
    wait_for("the tasks to run", Duration::from_secs(10), || async {
        running(&db, notify.id).await == 4
    })
    .await;
    client.cancel_workflow(run.id).await.unwrap();
    let run = settled(&h.engine, run.id).await;
    assert_eq!(run.state, "cancelled");
    let steps = client.workflow_steps(run.id).await.unwrap();
    assert_eq!(by_name(&steps, "notify").state, "cancelled");
    assert_eq!(by_name(&steps, "notify").tasks_cancelled, 4);
    assert_eq!(by_name(&steps, "leaderboard").state, "cancelled");
    let live: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE step_id = $1 AND finalized_at IS NULL")
            .bind(notify.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(live, 0, "every task's job cancelled");

    let run = client.insert_workflow(&hanging()).await.unwrap().run;
    let notify = by_name(&client.workflow_steps(run.id).await.unwrap(), "notify");
    wait_for("the tasks to run", Duration::from_secs(10), || async {
        running(&db, notify.id).await == 4
    })
    .await;
    client.skip_workflow_step(run.id, "notify").await.unwrap();
    assert_eq!(settled(&h.engine, run.id).await.state, "completed");
    let steps = client.workflow_steps(run.id).await.unwrap();
    assert_eq!(by_name(&steps, "notify").state, "skipped");
    assert_eq!(by_name(&steps, "leaderboard").state, "completed");
    let cancelled: i64 =
        sqlx::query_scalar("SELECT count(*) FROM jobs WHERE step_id = $1 AND state = 'cancelled'")
            .bind(notify.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(cancelled, 4);
    h.engine.stop().await;
}

#[tokio::test]
async fn a_checkpoint_of_an_attempt_that_lost_its_job_is_refused() {
    let db = test_db().await;
    let mut h = harness(&db).await;
    let client = h.engine.client();
    let flow = Workflow::new("notify_players")
        .step("notify", map_job(json!({ "items": 10, "stall_task": 0 })))
        .map(1);
    let run = client.insert_workflow(&flow).await.unwrap().run;
    let job = tokio::time::timeout(Duration::from_secs(10), h.stalled.recv())
        .await
        .unwrap()
        .unwrap();
    // Another claim of the job (as after a rescue) while the first attempt still runs.
    sqlx::query("UPDATE jobs SET claim_token = claim_token + 1 WHERE id = $1")
        .bind(job)
        .execute(&db.pool)
        .await
        .unwrap();
    h.release.notify_one();
    let fenced = tokio::time::timeout(Duration::from_secs(10), h.fenced.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(fenced, "the stale attempt's checkpoint was refused");
    let cursor: Option<Value> =
        sqlx::query_scalar("SELECT cursor FROM workflow_tasks WHERE job_id = $1")
            .bind(job)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(cursor, None, "nothing kept");
    drop(run);
    h.engine.stop().await;
}

/// `POST /api/v1/workflows` takes a step's `tasks` (1 to 10,000, else 422 and nothing written)
/// and the run's detail shows its progress and what it waits for.
#[tokio::test]
async fn a_map_steps_tasks_are_checked_and_shown_by_the_api() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let run = |tasks: Value| {
        json!({
            "name": "notify_players",
            "steps": [{ "name": "notify", "job": { "kind": "noop" }, "tasks": tasks }],
        })
    };
    for bad in [json!(0), json!(10_001), json!(-1), json!("many")] {
        let (status, body) = call(
            &app,
            Method::POST,
            "/api/v1/workflows",
            Some(TOKEN),
            Some(&run(bad.clone())),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
    }
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_runs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(runs, 0, "nothing written");
    let (status, made) = call(
        &app,
        Method::POST,
        "/api/v1/workflows",
        Some(TOKEN),
        Some(&run(json!(4))),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let notify = &made["steps"][0];
    assert_eq!(notify["state"], "ready");
    assert_eq!(
        notify["tasks"],
        json!({ "total": 4, "completed": 0, "failed": 0, "cancelled": 0, "items": 0 })
    );
    assert_eq!(notify["waits"], "waits for its tasks: 0 of 4 done, 0 items");
    assert!(notify["job_id"].is_null(), "{notify}");
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE kind = 'noop'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(jobs, 4, "a job a task");
}
