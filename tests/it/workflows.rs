//! Workflows (issue 49) against real PostgreSQL and a running engine: steps start only when
//! their dependencies allow, in the transaction that settles the last of them; a dependency that
//! failed does what its edge says; outputs pass to the steps after; a run's key is unique among
//! the live runs; a refused or rolled-back run writes nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::common::{test_db, wait_for, TestDb};
use kickoff::engine::workflow::{OnDepFailure, RunRow, StepRow, Workflow};
use kickoff::engine::{
    BoxFuture, ClientError, Engine, EngineConfig, JobContext, NewJob, WorkError, Worker, Workers,
};

/// A step's handler: reports its start with what its dependencies recorded, records its own
/// name, and fails (for good) when its args say so.
pub(crate) struct StepWorker {
    pub(crate) started: mpsc::UnboundedSender<(String, Value)>,
    /// Steps whose args say `flaky` fail (for good) until this is set.
    pub(crate) healed: Arc<AtomicBool>,
}

impl Worker for StepWorker {
    fn kind(&self) -> &'static str {
        "wf_step"
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let name = ctx.job.args["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let mut seen = serde_json::Map::new();
            for dep in ctx.job.args["read"].as_array().cloned().unwrap_or_default() {
                let dep = dep.as_str().unwrap_or_default();
                seen.insert(
                    dep.into(),
                    ctx.dep_output(dep).await?.unwrap_or(Value::Null),
                );
            }
            if let Some(signal) = ctx.job.args["signal"].as_str() {
                seen.insert(
                    format!("signal:{signal}"),
                    ctx.signal(signal).await?.unwrap_or(Value::Null),
                );
            }
            let _ = self.started.send((name.clone(), Value::Object(seen)));
            if ctx.job.args["hang"] == json!(true) {
                ctx.cancelled().cancelled().await;
                return Err(WorkError::Retryable(format!("{name} stopped")));
            }
            let flaky = ctx.job.args["flaky"] == json!(true) && !self.healed.load(Ordering::SeqCst);
            if ctx.job.args["fail"] == json!(true) || flaky {
                return Err(WorkError::Fatal(format!("{name} failed on purpose")));
            }
            ctx.record(&json!({ "by": name }))
                .map_err(|e| WorkError::Fatal(e.to_string()))?;
            Ok(())
        })
    }
}

pub(crate) fn step(name: &str) -> NewJob {
    NewJob::new("wf_step", json!({ "name": name }))
}

fn failing(name: &str) -> NewJob {
    NewJob::new("wf_step", json!({ "name": name, "fail": true }))
}

/// The step's worker, what it reports of each start, and the switch that heals flaky steps.
fn workers() -> (
    Workers,
    mpsc::UnboundedReceiver<(String, Value)>,
    Arc<AtomicBool>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let healed = Arc::new(AtomicBool::new(false));
    let mut workers = Workers::new();
    workers.register(StepWorker {
        started: tx,
        healed: healed.clone(),
    });
    (workers, rx, healed)
}

/// A client that knows the step's kind, without an engine running the steps.
pub(crate) fn client(db: &TestDb) -> kickoff::engine::Client {
    kickoff::engine::Client::new(db.pool.clone(), Arc::new(workers().0))
}

async fn engine(db: &TestDb) -> (Engine, mpsc::UnboundedReceiver<(String, Value)>) {
    let (engine, rx, _) = engine_healable(db).await;
    (engine, rx)
}

/// [`engine`], with the switch that heals its flaky steps.
pub(crate) async fn engine_healable(
    db: &TestDb,
) -> (
    Engine,
    mpsc::UnboundedReceiver<(String, Value)>,
    Arc<AtomicBool>,
) {
    let (workers, rx, healed) = workers();
    let config = EngineConfig {
        queues: vec![("default".into(), 10)],
        ..EngineConfig::default()
    };
    let engine = Engine::start(db.pool.clone(), workers, config)
        .await
        .unwrap();
    (engine, rx, healed)
}

pub(crate) async fn settled(engine: &Engine, id: i64) -> RunRow {
    let client = engine.client();
    wait_for("the run to settle", Duration::from_secs(20), || async {
        client.workflow_run(id).await.unwrap().state != "running"
    })
    .await;
    client.workflow_run(id).await.unwrap()
}

/// The audit log's entries of `POST /workflows/{id}/<action>` for the actions named (`retry|skip`),
/// in order: each action and its result.
pub(crate) async fn audited_actions(db: &TestDb, actions: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT split_part(action, '/', 4), result FROM audit_log
         WHERE action ~ ('^api.POST /workflows/\\{id\\}/(' || $1 || ')$') ORDER BY id",
    )
    .bind(actions)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

/// Each of `pairs` as owned strings, to compare with [`audited_actions`].
pub(crate) fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, r)| (a.to_string(), r.to_string()))
        .collect()
}

pub(crate) fn by_name(steps: &[StepRow], name: &str) -> StepRow {
    steps.iter().find(|s| s.name == name).unwrap().clone()
}

/// When the step's job settled, and when the job of the step after it was inserted: the same
/// transaction's clock (`now()`) when the step was unblocked by the settle.
async fn settled_and_next_inserted(db: &TestDb, dep: &StepRow, next: &StepRow) -> (String, String) {
    sqlx::query_as(
        "SELECT d.finalized_at::text, n.inserted_at::text FROM jobs d, jobs n
         WHERE d.id = $1 AND n.id = $2",
    )
    .bind(dep.job_id.unwrap().0)
    .bind(next.job_id.unwrap().0)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_chain_runs_each_step_in_the_transaction_that_completed_the_one_before() {
    let db = test_db().await;
    let (engine, mut started) = engine(&db).await;
    let flow = Workflow::new("chain")
        .step("a", step("a"))
        .step(
            "b",
            NewJob::new("wf_step", json!({ "name": "b", "read": ["a"] })),
        )
        .after("a")
        .step(
            "c",
            NewJob::new(
                "wf_step",
                json!({ "name": "c", "read": ["a", "b", "nope"] }),
            ),
        )
        .after("b");
    let inserted = engine.client().insert_workflow(&flow).await.unwrap();
    assert!(!inserted.existing);
    assert_eq!(
        (inserted.run.steps, inserted.run.blocked, inserted.run.ready),
        (3, 2, 1),
        "only the first step has a job at the insert"
    );
    let run = settled(&engine, inserted.run.id).await;
    assert_eq!(run.state, "completed");
    assert_eq!((run.completed, run.blocked, run.ready), (3, 0, 0));

    let mut order = Vec::new();
    while let Ok((name, seen)) = started.try_recv() {
        order.push((name, seen));
    }
    assert_eq!(
        order,
        vec![
            ("a".into(), json!({})),
            ("b".into(), json!({ "a": { "by": "a" } })),
            (
                "c".into(),
                json!({ "a": { "by": "a" }, "b": { "by": "b" }, "nope": null })
            ),
        ],
        "each step starts after the one before, and reads what the steps before recorded"
    );
    let steps = engine
        .client()
        .workflow_steps(inserted.run.id)
        .await
        .unwrap();
    for (dep, next) in [("a", "b"), ("b", "c")] {
        let (finalized, inserted_at) =
            settled_and_next_inserted(&db, &by_name(&steps, dep), &by_name(&steps, next)).await;
        assert_eq!(
            finalized, inserted_at,
            "{next}'s job was made in the transaction that completed {dep}'s"
        );
    }
    engine.stop().await;
}

#[tokio::test]
async fn a_step_waits_for_every_one_of_its_dependencies() {
    let db = test_db().await;
    let (engine, mut started) = engine(&db).await;
    let flow = Workflow::new("fan-in")
        .step("a", step("a"))
        .step("b", step("b"))
        .step("c", step("c"))
        .step("last", step("last"))
        .after("a")
        .after("b")
        .after("c");
    let inserted = engine.client().insert_workflow(&flow).await.unwrap();
    assert_eq!(inserted.run.ready, 3);
    let run = settled(&engine, inserted.run.id).await;
    assert_eq!((run.state.as_str(), run.completed), ("completed", 4));
    let mut names = Vec::new();
    while let Ok((name, _)) = started.try_recv() {
        names.push(name);
    }
    assert_eq!(names.len(), 4);
    assert_eq!(names.last().unwrap(), "last", "{names:?}");
    let steps = engine
        .client()
        .workflow_steps(inserted.run.id)
        .await
        .unwrap();
    let last = by_name(&steps, "last");
    // Made in the transaction that settled one of its dependencies (the last to commit), and
    // started after every one of them settled.
    let (made_by_one, started_after_all): (bool, bool) = sqlx::query_as(
        "SELECT l.inserted_at IN (SELECT finalized_at FROM jobs WHERE id = ANY($1)),
                l.attempted_at >= (SELECT max(finalized_at) FROM jobs WHERE id = ANY($1))
         FROM jobs l WHERE l.id = $2",
    )
    .bind(
        ["a", "b", "c"]
            .map(|n| by_name(&steps, n).job_id.unwrap().0)
            .to_vec(),
    )
    .bind(last.job_id.unwrap().0)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(made_by_one, "made when one of its dependencies completed");
    assert!(
        started_after_all,
        "started after every dependency completed"
    );
    engine.stop().await;
}

#[tokio::test]
async fn a_failed_dependency_does_to_each_step_what_its_edge_says() {
    let db = test_db().await;
    let (engine, mut started) = engine(&db).await;
    let flow = Workflow::new("policies")
        .step("bad", failing("bad"))
        .step("fails", step("fails"))
        .after("bad")
        .step("after_fails", step("after_fails"))
        .after_or("fails", OnDepFailure::Skip)
        .step("skips", step("skips"))
        .after_or("bad", OnDepFailure::Skip)
        .step("after_skip", step("after_skip"))
        .after("skips")
        .step("skips_following", step("skips_following"))
        .after_or("bad", OnDepFailure::SkipFollowing)
        .step("after_skipped_following", step("after_skipped_following"))
        .after_or("skips_following", OnDepFailure::Run)
        .step("runs", step("runs"))
        .after_or("bad", OnDepFailure::Run);
    let inserted = engine.client().insert_workflow(&flow).await.unwrap();
    let run = settled(&engine, inserted.run.id).await;
    let steps = engine
        .client()
        .workflow_steps(inserted.run.id)
        .await
        .unwrap();
    let states: Vec<(String, String)> = steps
        .iter()
        .map(|s| (s.name.clone(), s.state.clone()))
        .collect();
    let want = [
        ("bad", "failed"),
        ("fails", "failed"),
        ("after_fails", "skipped"),
        ("skips", "skipped"),
        ("after_skip", "completed"),
        ("skips_following", "skipped"),
        ("after_skipped_following", "skipped"),
        ("runs", "completed"),
    ]
    .map(|(n, s)| (n.to_string(), s.to_string()))
    .to_vec();
    assert_eq!(states, want);
    assert_eq!(run.state, "failed", "a step failed");
    assert_eq!(
        (
            run.completed,
            run.failed,
            run.skipped,
            run.blocked,
            run.ready
        ),
        (2, 2, 4, 0, 0),
        "the counters equal the steps' states"
    );
    let mut ran = Vec::new();
    while let Ok((name, _)) = started.try_recv() {
        ran.push(name);
    }
    ran.sort();
    assert_eq!(
        ran,
        ["after_skip", "bad", "runs"],
        "no step that did not run started"
    );
    for s in &steps {
        let has_job = s.job_id.is_some();
        assert_eq!(
            has_job,
            ["bad", "after_skip", "runs"].contains(&s.name.as_str()),
            "{}: a job only for the steps that ran",
            s.name
        );
    }
    engine.stop().await;
}

#[tokio::test]
async fn a_live_run_holds_its_key_until_it_settles() {
    let db = test_db().await;
    let client = client(&db);
    let flow = Workflow::new("game").key("game:8812").step("a", step("a"));
    let first = client.insert_workflow(&flow).await.unwrap();
    let again = client.insert_workflow(&flow).await.unwrap();
    assert!(again.existing);
    assert_eq!(again.run.id, first.run.id);
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_runs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(runs, 1, "the second insert wrote nothing");

    let (engine, _started) = engine(&db).await;
    assert_eq!(settled(&engine, first.run.id).await.state, "completed");
    let next = client.insert_workflow(&flow).await.unwrap();
    assert!(!next.existing, "a settled run frees its key");
    assert_ne!(next.run.id, first.run.id);
    engine.stop().await;
}

#[tokio::test]
async fn a_refused_or_rolled_back_run_writes_nothing() {
    let db = test_db().await;
    let client = client(&db);
    let refused = [
        (Workflow::new("x"), "steps"),
        (Workflow::new("").step("a", step("a")), "name"),
        (
            Workflow::new("x")
                .step("a", step("a"))
                .after("b")
                .step("b", step("b")),
            "not a step declared before it",
        ),
        (
            Workflow::new("x").step("a", step("a")).after("a"),
            "not a step declared before it",
        ),
        (
            Workflow::new("x").step("a", step("a")).step("a", step("a")),
            "two steps are named",
        ),
        (
            Workflow::new("x")
                .step("a", step("a"))
                .step("b", step("b"))
                .after("a")
                .after("a"),
            "twice",
        ),
        (
            Workflow::new("x").step("a", NewJob::new("nope", json!({}))),
            "unknown job kind",
        ),
        (
            Workflow::new("x").step(
                "a",
                step("a").with_unique_key("k", kickoff::engine::OnConflict::Keep),
            ),
            "no unique key",
        ),
        (
            Workflow::new("x").step("a", step("a").with_priority(42)),
            "step \"a\": priority",
        ),
        (
            (0..51).fold(
                (0..51)
                    .fold(Workflow::new("x"), |w, n| {
                        w.step(format!("s{n}"), step("s"))
                    })
                    .step("join", step("join")),
                |w, n| w.after(format!("s{n}")),
            ),
            "at most 50 dependencies",
        ),
    ];
    for (flow, why) in refused {
        let err = client.insert_workflow(&flow).await.unwrap_err();
        assert!(err.is_refusal(), "{why}: {err}");
        assert!(err.to_string().contains(why), "{why}: {err}");
    }

    let mut tx = db.pool.begin().await.unwrap();
    let inside = client
        .insert_workflow_with(&mut tx, &Workflow::new("x").step("a", step("a")))
        .await
        .unwrap();
    assert_eq!(inside.run.ready, 1);
    tx.rollback().await.unwrap();
    let (runs, steps, jobs): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM workflow_runs), (SELECT count(*) FROM workflow_steps),
                (SELECT count(*) FROM jobs)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((runs, steps, jobs), (0, 0, 0));
}

#[tokio::test]
async fn a_step_job_deleted_or_cancelled_before_it_ran_counts_as_cancelled() {
    let db = test_db().await;
    let client = client(&db);
    let flow = Workflow::new("x")
        .step("a", step("a"))
        .step("b", step("b"))
        .step("after_a", step("after_a"))
        .after_or("a", OnDepFailure::Run)
        .step("after_b", step("after_b"))
        .after("b");
    let run = client.insert_workflow(&flow).await.unwrap().run;
    let steps = client.workflow_steps(run.id).await.unwrap();
    client
        .cancel(by_name(&steps, "a").job_id.unwrap())
        .await
        .unwrap();
    sqlx::query("DELETE FROM jobs WHERE id = $1")
        .bind(by_name(&steps, "b").job_id.unwrap().0)
        .execute(&db.pool)
        .await
        .unwrap();
    let steps = client.workflow_steps(run.id).await.unwrap();
    let states: Vec<(&str, &str)> = steps
        .iter()
        .map(|s| (s.name.as_str(), s.state.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("a", "cancelled"),
            ("b", "cancelled"),
            ("after_a", "ready"),
            ("after_b", "failed")
        ]
    );
    let run = client.workflow_run(run.id).await.unwrap();
    assert_eq!(
        (run.state.as_str(), run.cancelled, run.failed, run.ready),
        ("running", 2, 1, 1)
    );
}

/// A settled step's job is not run again on its own (its step would stay settled, its run
/// finished with its key freed, the steps after it already decided): the job's retry refuses it
/// and a filter's retry leaves it; a step's job that only waits for its next attempt is retried.
#[tokio::test]
async fn a_settled_steps_job_is_not_retried_on_its_own() {
    let db = test_db().await;
    let (engine, _started) = engine(&db).await;
    let client = engine.client();
    let flow = Workflow::new("x")
        .step("bad", failing("bad"))
        .step("after", step("after"))
        .after("bad");
    let run = client.insert_workflow(&flow).await.unwrap().run;
    assert_eq!(settled(&engine, run.id).await.state, "failed");
    let bad = by_name(&client.workflow_steps(run.id).await.unwrap(), "bad")
        .job_id
        .unwrap();
    let err = client.retry(bad).await.unwrap_err();
    assert!(
        matches!(err, ClientError::Conflict(_)) && err.to_string().contains("workflow step"),
        "{err}"
    );
    let listed = client
        .bulk_ids(kickoff::engine::BulkAction::Retry, &[bad])
        .await
        .unwrap();
    assert_eq!(listed.changed, 0, "{listed:?}");
    let filter = kickoff::engine::JobFilter {
        kind: Some("wf_step".into()),
        ..Default::default()
    };
    let moved = client
        .bulk_filter(kickoff::engine::BulkAction::Retry, &filter)
        .await
        .unwrap();
    assert_eq!(moved.changed, 0, "{moved:?}");
    let state: String = sqlx::query_scalar("SELECT state::text FROM jobs WHERE id = $1")
        .bind(bad.0)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(state, "discarded");
    let steps = client.workflow_steps(run.id).await.unwrap();
    assert_eq!(by_name(&steps, "bad").state, "failed");
    assert_eq!(by_name(&steps, "after").state, "failed");
    engine.stop().await;
}

const TOKEN: &str = "test-token-123";

/// `/api/v1/workflows`: an operator inserts a run (201, or 200 with `existing` for a live key),
/// anyone with a token reads it and lists it; a run the rules refuse is a 422 with its code and
/// writes nothing; a reader may not insert; every insert, refused ones included, is audited.
#[tokio::test]
async fn the_api_inserts_reads_and_lists_runs_and_refuses_bad_ones() {
    use crate::common::rest::call;
    use axum::http::{Method, StatusCode};
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let body = json!({
        "name": "game", "key": "game:1",
        "steps": [
            { "name": "settle", "job": { "kind": "noop", "args": { "game": 1 } } },
            { "name": "notify", "job": { "kind": "noop" },
              "after": [{ "step": "settle", "on_failure": "skip" }] },
        ],
    });
    let (status, made) = call(
        &app,
        Method::POST,
        "/api/v1/workflows",
        Some(TOKEN),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let id = made["run"]["id"].as_i64().unwrap();
    assert_eq!(made["run"]["state"], "running");
    assert_eq!(
        (
            made["run"]["ready"].as_i64(),
            made["run"]["blocked"].as_i64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(made["steps"][0]["state"], "ready");
    assert!(made["steps"][0]["job_id"].is_i64());
    assert_eq!(made["steps"][1]["state"], "blocked");
    assert!(made["steps"][1]["job_id"].is_null());
    assert!(
        made["steps"][0].get("args").is_none(),
        "a step's args are its job's to show"
    );

    let (status, again) = call(
        &app,
        Method::POST,
        "/api/v1/workflows",
        Some(TOKEN),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(
        (again["run"]["id"].as_i64(), &again["existing"]),
        (Some(id), &json!(true))
    );

    let (status, read) = call(
        &app,
        Method::GET,
        &format!("/api/v1/workflows/{id}"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read["steps"], made["steps"]);
    let (status, page) = call(
        &app,
        Method::GET,
        "/api/v1/workflows?state=running&limit=10",
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["runs"][0]["id"].as_i64(), Some(id));
    for (path, want) in [
        ("/api/v1/workflows?state=completed", StatusCode::OK),
        ("/api/v1/workflows/999999", StatusCode::NOT_FOUND),
        (
            "/api/v1/workflows?limit=0",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let (status, answer) = call(&app, Method::GET, path, Some(TOKEN), None).await;
        assert_eq!(status, want, "{path}: {answer}");
    }

    let refused = [
        (
            json!({ "name": "x", "steps": [{ "name": "a", "job": { "kind": "noop" },
                                          "after": [{ "step": "b" }] },
                                        { "name": "b", "job": { "kind": "noop" } }] }),
            "inconsistent",
        ),
        (
            json!({ "name": "x", "steps": [{ "name": "a", "job": { "kind": "noop" } },
                                        { "name": "a", "job": { "kind": "noop" } }] }),
            "inconsistent",
        ),
        (
            json!({ "name": "x", "steps": [{ "name": "a", "job": { "kind": "nope" } }] }),
            "unknown_kind",
        ),
        (json!({ "name": "x", "steps": [] }), "invalid"),
        (
            json!({ "name": "", "steps": [{ "name": "a", "job": { "kind": "noop" } }] }),
            "invalid",
        ),
        (
            json!({ "name": "x", "steps": [{ "name": "a", "job": { "kind": "noop", "priority": 12 } }] }),
            "invalid",
        ),
        (
            json!({ "name": "x", "steps": [{ "name": "a", "job": { "kind": "noop" },
                                          "after": [{ "step": "a", "on_failure": "maybe" }] }] }),
            "invalid",
        ),
    ];
    for (bad, code) in &refused {
        let (status, answer) = call(
            &app,
            Method::POST,
            "/api/v1/workflows",
            Some(TOKEN),
            Some(bad),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {answer}");
        assert_eq!(answer["error"]["code"], *code, "{bad}: {answer}");
    }
    let (runs, steps): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM workflow_runs), (SELECT count(*) FROM workflow_steps)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((runs, steps), (1, 2), "the refused runs wrote nothing");

    let path = format!("/api/v1/workflows/{id}/cancel");
    let (status, gone) = call(&app, Method::POST, &path, Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK, "{gone}");
    assert_eq!(gone["run"]["state"], "cancelled");
    assert!(gone["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["state"] == "cancelled"));
    let (status, again) = call(&app, Method::POST, &path, Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");

    let read_only =
        crate::common::operator_token_of(&db.pool, "viewer", kickoff::accounts::TokenScope::Read)
            .await;
    let (status, _) = call(
        &app,
        Method::POST,
        "/api/v1/workflows",
        Some(&read_only),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &app,
        Method::GET,
        &format!("/api/v1/workflows/{id}"),
        Some(&read_only),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action LIKE 'api.POST %/workflows'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        audited,
        2 + refused.len() as i64 + 1,
        "every insert, refused ones included"
    );
}

/// A run's cancel: nothing of it starts once the cancel commits (not the step whose dependency's
/// cancel lets it run, not a step waiting), the running step's attempt is stopped, the ready
/// step's job cancelled; the run ends `cancelled`, and a second cancel is a conflict.
#[tokio::test]
async fn a_cancelled_run_starts_nothing_more_and_stops_what_runs() {
    let db = test_db().await;
    let (engine, mut started) = engine(&db).await;
    let client = engine.client();
    let flow = Workflow::new("x")
        .step(
            "slow",
            NewJob::new("wf_step", json!({ "name": "slow", "hang": true })),
        )
        .step("after", step("after"))
        .after_or("slow", OnDepFailure::Run)
        // A queue no node runs: its job waits, ready.
        .step("elsewhere", step("elsewhere").with_queue("nobody"))
        .step("last", step("last"))
        .after_or("elsewhere", OnDepFailure::Run)
        .after_or("after", OnDepFailure::Run);
    let run = client.insert_workflow(&flow).await.unwrap().run;
    let (name, _) = tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(name, "slow");
    let cancelled = client.cancel_workflow(run.id).await.unwrap();
    assert_eq!(cancelled.state, "cancelled");
    assert_eq!(
        (cancelled.cancelled, cancelled.blocked, cancelled.ready),
        (4, 0, 0)
    );
    let steps = client.workflow_steps(run.id).await.unwrap();
    for s in &steps {
        assert_eq!(s.state, "cancelled", "{}", s.name);
    }
    assert!(
        by_name(&steps, "after").job_id.is_none(),
        "nothing started after"
    );
    assert!(by_name(&steps, "last").job_id.is_none());
    let slow = by_name(&steps, "slow").job_id.unwrap();
    wait_for(
        "the slow attempt to stop",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM job_attempts WHERE job_id = $1 AND outcome = 'cancelled'",
            )
            .bind(slow.0)
            .fetch_one(&db.pool)
            .await
            .unwrap()
                == 1
        },
    )
    .await;
    let err = client.cancel_workflow(run.id).await.unwrap_err();
    assert!(matches!(err, ClientError::Conflict(_)), "{err}");
    let err = client.cancel_workflow(987_654).await.unwrap_err();
    assert!(matches!(err, ClientError::NotFound(_)), "{err}");
    assert!(
        started.try_recv().is_err(),
        "no step started after the cancel"
    );
    engine.stop().await;
}
