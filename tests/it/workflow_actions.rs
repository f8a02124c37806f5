//! What an operator does to a workflow run (issue 49), against real PostgreSQL and a running
//! engine: a retry of the failed steps never runs a completed one again, the retry of what
//! follows them and of all do; a skipped step lets the steps after it go on and stops its running
//! attempt; a rerun from a step is a new run keeping the completions before it; each is refused
//! with a clear error where it does not apply, changing nothing, and audited through the API.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::workflows::{audited_actions, by_name, engine_healable, owned, settled, step};
use crate::common::{test_db, wait_for, TestDb};
use kickoff::engine::sight::Sight;
use kickoff::engine::workflow::{OnDepFailure, StepRow, Workflow};
use kickoff::engine::workflow_actions::RetryMode;
use kickoff::engine::{ClientError, NewJob};

/// `a → flaky → c`, `a → d`, `flaky → e` (run anyway): until healed, a, d and e complete, flaky
/// fails and c fails with it.
fn game() -> Workflow {
    Workflow::new("retry")
        .step("a", step("a"))
        .step(
            "flaky",
            NewJob::new("wf_step", json!({ "name": "flaky", "flaky": true })),
        )
        .after("a")
        .step(
            "c",
            NewJob::new("wf_step", json!({ "name": "c", "read": ["flaky"] })),
        )
        .after("flaky")
        .step("d", step("d"))
        .after("a")
        .step("e", step("e"))
        .after_or("flaky", OnDepFailure::Run)
}

/// The names of the steps that started since the last call, once the run settled (every start
/// was reported before its job completed).
fn starts(started: &mut mpsc::UnboundedReceiver<(String, Value)>) -> Vec<String> {
    let mut names = Vec::new();
    while let Ok((name, _)) = started.try_recv() {
        names.push(name);
    }
    names.sort();
    names
}

fn job_of(steps: &[StepRow], name: &str) -> Option<i64> {
    by_name(steps, name).job_id.map(|j| j.0)
}

/// A viewer who did not make the runs, as their pages see them.
fn a_reader(client: &kickoff::engine::Client) -> Sight<'_> {
    Sight {
        name: "someone-else",
        admin: false,
        reader: true,
        workers: client.workers(),
    }
}

async fn jobs_of_step(db: &TestDb, step: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE step_id = $1")
        .bind(step)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn retrying_the_failed_steps_runs_them_again_and_never_a_completed_one() {
    let db = test_db().await;
    let (engine, mut started, healed) = engine_healable(&db).await;
    let client = engine.client();
    let run = client.insert_workflow(&game()).await.unwrap().run;
    let failed = settled(&engine, run.id).await;
    assert_eq!(
        (
            failed.state.as_str(),
            failed.completed,
            failed.failed,
            failed.blocked
        ),
        ("failed", 3, 2, 0)
    );
    assert_eq!(starts(&mut started), ["a", "d", "e", "flaky"]);
    let before = client.workflow_steps(run.id).await.unwrap();

    healed.store(true, Ordering::SeqCst);
    let retried = client
        .retry_workflow(run.id, RetryMode::Failed)
        .await
        .unwrap();
    assert_eq!(retried.state, "running");
    assert!(retried.finished_at.is_none());
    assert_eq!(
        (
            retried.completed,
            retried.ready,
            retried.blocked,
            retried.failed
        ),
        (3, 1, 1, 0),
        "flaky's job made at once (its dependency completed), c waits for it"
    );
    let done = settled(&engine, run.id).await;
    assert_eq!((done.state.as_str(), done.completed), ("completed", 5));
    assert_eq!(
        starts(&mut started),
        ["c", "flaky"],
        "only the steps that did not complete ran"
    );
    let after = client.workflow_steps(run.id).await.unwrap();
    for name in ["a", "d", "e"] {
        assert_eq!(
            job_of(&after, name),
            job_of(&before, name),
            "{name} kept its job"
        );
    }
    assert_ne!(job_of(&after, "flaky"), job_of(&before, "flaky"));
    assert_eq!(
        jobs_of_step(&db, by_name(&after, "flaky").id).await,
        2,
        "the failed job stays, with its attempts"
    );
    assert_eq!(
        by_name(&after, "flaky").output,
        Some(json!({ "by": "flaky" }))
    );
    // The run's timeline: the failed job's attempts beside the new one's, each named by its job.
    let sight = a_reader(&client);
    let seen = client.workflow_seen(&retried, &sight).await.unwrap();
    let flaky: Vec<(i64, &str)> = seen
        .attempts
        .iter()
        .filter(|(step, _)| step == "flaky")
        .map(|(_, r)| (r.job_id.0, r.outcome.as_str()))
        .collect();
    let (first, second) = (
        job_of(&before, "flaky").unwrap(),
        job_of(&after, "flaky").unwrap(),
    );
    assert_eq!(
        flaky.first(),
        Some(&(first, "discarded")),
        "the first job's failure is on the timeline: {flaky:?}"
    );
    assert_eq!(flaky.last(), Some(&(second, "completed")), "{flaky:?}");
    assert!(
        flaky.iter().all(|&(job, _)| job == first || job == second),
        "{flaky:?}"
    );

    let err = client
        .retry_workflow(run.id, RetryMode::Failed)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Conflict(m) if m.contains("none of its steps failed")),
        "{err}"
    );
    let err = client
        .retry_workflow(987_654, RetryMode::All)
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::NotFound(_)), "{err}");
    engine.stop().await;
}

#[tokio::test]
async fn retrying_all_reruns_every_step_and_the_failed_and_following_what_follows_them() {
    let db = test_db().await;
    let (engine, mut started, healed) = engine_healable(&db).await;
    let client = engine.client();
    let one = client.insert_workflow(&game()).await.unwrap().run;
    settled(&engine, one.id).await;
    let two = client.insert_workflow(&game()).await.unwrap().run;
    settled(&engine, two.id).await;
    starts(&mut started);
    let before = client.workflow_steps(two.id).await.unwrap();

    // All, still flaky: every step runs again, and the run fails again as it did.
    client.retry_workflow(two.id, RetryMode::All).await.unwrap();
    let again = settled(&engine, two.id).await;
    assert_eq!((again.state.as_str(), again.failed), ("failed", 2));
    assert_eq!(starts(&mut started), ["a", "d", "e", "flaky"]);
    let after = client.workflow_steps(two.id).await.unwrap();
    for name in ["a", "d", "e"] {
        assert_ne!(
            job_of(&after, name),
            job_of(&before, name),
            "{name} ran again"
        );
    }

    // The failed and what follows them: e (completed after flaky failed) runs again, a and d not.
    healed.store(true, Ordering::SeqCst);
    let before = client.workflow_steps(one.id).await.unwrap();
    client
        .retry_workflow(one.id, RetryMode::FailedAndFollowing)
        .await
        .unwrap();
    let done = settled(&engine, one.id).await;
    assert_eq!(done.state, "completed");
    assert_eq!(starts(&mut started), ["c", "e", "flaky"]);
    let after = client.workflow_steps(one.id).await.unwrap();
    assert_eq!(job_of(&after, "a"), job_of(&before, "a"));
    assert_eq!(job_of(&after, "d"), job_of(&before, "d"));
    assert_ne!(job_of(&after, "e"), job_of(&before, "e"));
    engine.stop().await;
}

#[tokio::test]
async fn a_retried_step_keeps_its_earlier_attempts_on_the_timeline_while_it_waits_to_start_again() {
    let db = test_db().await;
    let (engine, _started, _healed) = engine_healable(&db).await;
    let client = engine.client();
    let run = client.insert_workflow(&game()).await.unwrap().run;
    settled(&engine, run.id).await;
    // Nothing runs again: the steps wait as the retry left them.
    engine.stop().await;
    let retried = client.retry_workflow(run.id, RetryMode::All).await.unwrap();
    let steps = client.workflow_steps(run.id).await.unwrap();
    let waiting: Vec<(&str, &str, bool)> = steps
        .iter()
        .map(|s| (s.name.as_str(), s.state.as_str(), s.job_id.is_some()))
        .collect();
    assert_eq!(
        waiting,
        [
            ("a", "ready", true),
            ("flaky", "blocked", false),
            ("c", "blocked", false),
            ("d", "blocked", false),
            ("e", "blocked", false)
        ]
    );
    let sight = a_reader(&client);
    let seen = client.workflow_seen(&retried, &sight).await.unwrap();
    let mut on_timeline: Vec<(&str, &str)> = seen
        .attempts
        .iter()
        .map(|(step, r)| (step.as_str(), r.outcome.as_str()))
        .collect();
    on_timeline.sort();
    assert_eq!(
        on_timeline,
        [
            ("a", "completed"),
            ("d", "completed"),
            ("e", "completed"),
            ("flaky", "discarded")
        ],
        "every attempt of the first try (c failed without running)"
    );
}

#[tokio::test]
async fn a_retry_is_refused_for_a_cancelled_run_a_taken_key_and_running_steps_under_all() {
    let db = test_db().await;
    let (engine, mut started, _) = engine_healable(&db).await;
    let client = engine.client();
    let keyed = client
        .insert_workflow(&game().key("game:1"))
        .await
        .unwrap()
        .run;
    settled(&engine, keyed.id).await;
    // The key is free once the run settled: a new live run takes it (its step waits on a
    // queue no node runs).
    let holder = Workflow::new("holder")
        .key("game:1")
        .step("held", step("held").with_queue("nobody"));
    let holder = client.insert_workflow(&holder).await.unwrap();
    assert!(!holder.existing);
    let before = client.workflow_run(keyed.id).await.unwrap();
    let err = client
        .retry_workflow(keyed.id, RetryMode::Failed)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Conflict(m) if m.contains("holds its key")),
        "{err}"
    );
    assert_eq!(
        client.workflow_run(keyed.id).await.unwrap(),
        before,
        "nothing changed"
    );

    client.cancel_workflow(holder.run.id).await.unwrap();
    let err = client
        .retry_workflow(holder.run.id, RetryMode::All)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Conflict(m) if m.contains("cancelled")),
        "{err}"
    );

    // A running run with a failed step: all waits for what runs; the failed alone may go again.
    let busy = Workflow::new("busy")
        .step(
            "bad",
            NewJob::new("wf_step", json!({ "name": "bad", "fail": true })),
        )
        .step(
            "slow",
            NewJob::new("wf_step", json!({ "name": "slow", "hang": true })),
        );
    let busy = client.insert_workflow(&busy).await.unwrap().run;
    wait_for("bad to fail", Duration::from_secs(10), || async {
        client.workflow_run(busy.id).await.unwrap().failed == 1
    })
    .await;
    let err = client
        .retry_workflow(busy.id, RetryMode::All)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Conflict(m) if m.contains("running")),
        "{err}"
    );
    starts(&mut started);
    let retried = client
        .retry_workflow(busy.id, RetryMode::Failed)
        .await
        .unwrap();
    assert_eq!((retried.state.as_str(), retried.ready), ("running", 2));
    wait_for("bad to fail again", Duration::from_secs(10), || async {
        client.workflow_run(busy.id).await.unwrap().failed == 1
    })
    .await;
    assert_eq!(
        starts(&mut started),
        ["bad"],
        "the running step was left alone"
    );
    client.cancel_workflow(busy.id).await.unwrap();
    engine.stop().await;
}

#[tokio::test]
async fn a_skipped_step_lets_the_steps_after_it_go_on_and_stops_its_attempt() {
    let db = test_db().await;
    let (engine, mut started, _) = engine_healable(&db).await;
    let client = engine.client();
    let flow = Workflow::new("skips")
        // A queue no node runs: its job waits, ready.
        .step("held", step("held").with_queue("nobody"))
        .step("after_held", step("after_held"))
        .after("held")
        .step(
            "slow",
            NewJob::new("wf_step", json!({ "name": "slow", "hang": true })),
        )
        .step("later", step("later"))
        .after("slow")
        .step("after_later", step("after_later"))
        .after("later")
        .step("after_slow", step("after_slow"))
        .after("slow");
    let run = client.insert_workflow(&flow).await.unwrap().run;
    let (name, _) = tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(name, "slow");

    // A ready step: skipped, its job cancelled, the step after it made and run.
    let held_job = job_of(&client.workflow_steps(run.id).await.unwrap(), "held").unwrap();
    client.skip_workflow_step(run.id, "held").await.unwrap();
    let state: String = sqlx::query_scalar("SELECT state::text FROM jobs WHERE id = $1")
        .bind(held_job)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(state, "cancelled");
    let err = client.skip_workflow_step(run.id, "held").await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Conflict(m) if m.contains("the step is skipped")),
        "{err}"
    );

    // A blocked step: skipped without a job, and the step after it goes on.
    client.skip_workflow_step(run.id, "later").await.unwrap();
    let err = client.skip_workflow_step(run.id, "nope").await.unwrap_err();
    assert!(matches!(err, ClientError::Inconsistent { .. }), "{err}");

    // A running step: its attempt stopped, the step skipped (not cancelled), the run goes on.
    client.skip_workflow_step(run.id, "slow").await.unwrap();
    let done = settled(&engine, run.id).await;
    assert_eq!(
        (done.state.as_str(), done.completed, done.skipped),
        ("completed", 3, 3),
        "skipped steps do not fail the run"
    );
    let steps = client.workflow_steps(run.id).await.unwrap();
    assert!(by_name(&steps, "later").job_id.is_none());
    for name in ["held", "later", "slow"] {
        assert_eq!(by_name(&steps, name).state, "skipped", "{name}");
    }
    let slow = job_of(&steps, "slow").unwrap();
    wait_for(
        "the slow attempt to stop",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM job_attempts WHERE job_id = $1 AND outcome = 'cancelled'",
            )
            .bind(slow)
            .fetch_one(&db.pool)
            .await
            .unwrap()
                == 1
        },
    )
    .await;
    let mut ran: BTreeSet<String> = BTreeSet::new();
    while let Ok((name, _)) = started.try_recv() {
        ran.insert(name);
    }
    assert_eq!(
        ran,
        ["after_held", "after_later", "after_slow"]
            .map(String::from)
            .into()
    );
    let err = client
        .retry_workflow(run.id, RetryMode::Failed)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Conflict(m) if m.contains("none of its steps failed")),
        "a step skipped by hand is the operator's decision, not a failure to retry: {err}"
    );
    assert!(steps
        .iter()
        .filter(|s| s.state == "skipped")
        .all(|s| s.skipped_by_hand));
    let err = client
        .skip_workflow_step(run.id, "after_slow")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Conflict(m) if m.contains("the run is completed")),
        "{err}"
    );
    engine.stop().await;
}

#[tokio::test]
async fn a_rerun_keeps_what_completed_before_its_step_and_runs_the_rest() {
    let db = test_db().await;
    let (engine, mut started, healed) = engine_healable(&db).await;
    let client = engine.client();
    let chain = Workflow::new("chain")
        .key("game:2")
        .step("a", step("a"))
        .step(
            "b",
            NewJob::new("wf_step", json!({ "name": "b", "flaky": true })),
        )
        .after("a")
        .step(
            "c",
            NewJob::new("wf_step", json!({ "name": "c", "read": ["a", "b"] })),
        )
        .after("b");
    let old = client.insert_workflow(&chain).await.unwrap().run;
    assert_eq!(settled(&engine, old.id).await.state, "failed");
    starts(&mut started);
    let old_steps = client.workflow_steps(old.id).await.unwrap();

    let err = client
        .rerun_workflow(old.id, "nope", None)
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Inconsistent { .. }), "{err}");
    let live = Workflow::new("live").step("held", step("held").with_queue("nobody"));
    let live = client.insert_workflow(&live).await.unwrap().run;
    let err = client
        .rerun_workflow(live.id, "held", None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Conflict(m) if m.contains("running")),
        "{err}"
    );

    // A rerun that fails again, retried whole: the step it kept runs in it now.
    let failing = client.rerun_workflow(old.id, "b", None).await.unwrap();
    assert_eq!(settled(&engine, failing.id).await.state, "failed");
    let kept = by_name(&client.workflow_steps(failing.id).await.unwrap(), "a");
    assert_eq!(kept.kept_from, Some(by_name(&old_steps, "a").id));
    client
        .retry_workflow(failing.id, RetryMode::All)
        .await
        .unwrap();
    assert_eq!(settled(&engine, failing.id).await.state, "failed");
    let ran = by_name(&client.workflow_steps(failing.id).await.unwrap(), "a");
    assert_eq!(ran.kept_from, None, "it ran in this run");
    assert_ne!(ran.job_id, kept.job_id);
    starts(&mut started);

    healed.store(true, Ordering::SeqCst);
    let new = client
        .rerun_workflow(old.id, "b", Some("ops"))
        .await
        .unwrap();
    assert_ne!(new.id, old.id);
    assert_eq!(
        (new.rerun_of, new.key.as_deref(), new.created_by.as_deref()),
        (Some(old.id), Some("game:2"), Some("ops"))
    );
    assert_eq!((new.completed, new.ready, new.blocked), (1, 1, 1));
    let done = settled(&engine, new.id).await;
    assert_eq!(done.state, "completed");
    let mut seen = Vec::new();
    while let Ok(start) = started.try_recv() {
        seen.push(start);
    }
    assert_eq!(
        seen.iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
        ["b", "c"],
        "a kept its completion"
    );
    assert_eq!(
        seen[1].1,
        json!({ "a": { "by": "a" }, "b": { "by": "b" } }),
        "c read a's kept output"
    );
    let steps = client.workflow_steps(new.id).await.unwrap();
    let a = by_name(&steps, "a");
    assert_eq!(
        (a.kept_from, a.job_id),
        (
            Some(by_name(&old_steps, "a").id),
            by_name(&old_steps, "a").job_id
        )
    );
    assert_eq!(by_name(&steps, "b").kept_from, None);
    assert_eq!(
        client.workflow_run(old.id).await.unwrap().state,
        "failed",
        "the run rerun stays as it was"
    );

    // While a live run holds the key, a rerun waits for it.
    let holder = Workflow::new("holder")
        .key("game:2")
        .step("held", step("held").with_queue("nobody"));
    client.insert_workflow(&holder).await.unwrap();
    let err = client.rerun_workflow(old.id, "a", None).await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Conflict(m) if m.contains("holds its key")),
        "{err}"
    );
    engine.stop().await;
}

const TOKEN: &str = "test-token-123";

#[tokio::test]
async fn the_api_retries_skips_and_reruns_audited_and_for_operators_only() {
    use crate::common::rest::call;
    use axum::http::{Method, StatusCode};
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let body = json!({
        "name": "game",
        "steps": [
            { "name": "one", "job": { "kind": "noop", "queue": "nobody" } },
            { "name": "two", "job": { "kind": "noop", "queue": "nobody" },
              "after": [{ "step": "one" }] },
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
    let first = made["steps"][0]["job_id"].as_i64().unwrap();
    let (status, _) = call(
        &app,
        Method::POST,
        &format!("/api/v1/jobs/{first}/cancel"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let path = |action: &str| format!("/api/v1/workflows/{id}/{action}");

    let tries: [(&str, Value, StatusCode); 9] = [
        (
            "retry",
            json!({ "mode": "sideways" }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("skip", json!({}), StatusCode::UNPROCESSABLE_ENTITY),
        ("retry", json!({}), StatusCode::OK),
        ("retry", json!({}), StatusCode::CONFLICT),
        (
            "skip",
            json!({ "step": "nope" }),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("skip", json!({ "step": "one" }), StatusCode::OK),
        ("skip", json!({ "step": "one" }), StatusCode::CONFLICT),
        ("rerun", json!({ "from": "one" }), StatusCode::CONFLICT),
        ("cancel", json!({}), StatusCode::OK),
    ];
    for (action, body, want) in &tries {
        let (status, answer) =
            call(&app, Method::POST, &path(action), Some(TOKEN), Some(body)).await;
        assert_eq!(status, *want, "{action} {body}: {answer}");
    }
    let (status, unknown) = call(
        &app,
        Method::POST,
        &path("skip"),
        Some(TOKEN),
        Some(&json!({ "step": "two" })),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a cancelled run has nothing to skip: {unknown}"
    );
    assert!(unknown["error"]["message"]
        .as_str()
        .unwrap()
        .contains("the run is cancelled"));

    let (status, rerun) = call(
        &app,
        Method::POST,
        &path("rerun"),
        Some(TOKEN),
        Some(&json!({ "from": "two" })),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{rerun}");
    assert_eq!(rerun["run"]["rerun_of"], json!(id));
    assert_eq!(rerun["run"]["state"], "running");
    assert_eq!(
        (
            rerun["steps"][0]["state"].as_str(),
            rerun["steps"][1]["state"].as_str()
        ),
        (Some("ready"), Some("blocked")),
        "one was skipped, not completed: it runs again"
    );
    let (status, error) = call(
        &app,
        Method::POST,
        &format!("/api/v1/workflows/{}/rerun", rerun["run"]["id"]),
        Some(TOKEN),
        Some(&json!({ "from": "two" })),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("it is running"),
        "{error}"
    );

    let read_only =
        crate::common::operator_token_of(&db.pool, "reader", kickoff::accounts::TokenScope::Read)
            .await;
    for (action, body) in [
        ("retry", json!({})),
        ("skip", json!({ "step": "one" })),
        ("rerun", json!({ "from": "one" })),
    ] {
        let (status, _) = call(
            &app,
            Method::POST,
            &path(action),
            Some(&read_only),
            Some(&body),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{action}");
    }
    let audited = audited_actions(&db, "retry|skip|rerun").await;
    let want = owned(&[
        ("retry", "HTTP 422"),
        ("skip", "HTTP 422"),
        ("retry", "ok"),
        ("retry", "HTTP 409"),
        ("skip", "HTTP 422"),
        ("skip", "ok"),
        ("skip", "HTTP 409"),
        ("rerun", "HTTP 409"),
        ("skip", "HTTP 409"),
        ("rerun", "ok"),
        ("rerun", "HTTP 409"),
        ("retry", "HTTP 403"),
        ("skip", "HTTP 403"),
        ("rerun", "HTTP 403"),
    ]);
    assert_eq!(
        audited, want,
        "every call, refused ones included, with its outcome"
    );
}

/// A run's cancel while its ready step's job completes: the completion holds the job and then
/// takes the run (its settle); the cancel takes the jobs it will cancel before the run, so it
/// waits for the completion instead of holding the run against it (which PostgreSQL broke as a
/// deadlock after a second, failing one of them).
#[tokio::test]
async fn a_cancel_waits_for_a_completion_of_its_runs_step_instead_of_deadlocking() {
    let db = test_db().await;
    let client = super::workflows::client(&db);
    // No engine: the step's job waits, ready, and this test completes it by hand.
    let flow = Workflow::new("race")
        .step("first", step("first"))
        .step("second", step("second"))
        .after("first");
    let run = client.insert_workflow(&flow).await.unwrap().run;
    let job = job_of(&client.workflow_steps(run.id).await.unwrap(), "first").unwrap();

    // The completion's transaction holds the job's row.
    let mut completion = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(job)
        .execute(&mut *completion)
        .await
        .unwrap();
    let cancelling = {
        let client = client.clone();
        tokio::spawn(async move { client.cancel_workflow(run.id).await })
    };
    wait_for(
        "the cancel to wait for the job",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_locks WHERE NOT granted")
                .fetch_one(&db.pool)
                .await
                .unwrap()
                > 0
        },
    )
    .await;
    // It completes the job: its settle takes the run's lock.
    sqlx::query("UPDATE jobs SET state = 'completed', finalized_at = now() WHERE id = $1")
        .bind(job)
        .execute(&mut *completion)
        .await
        .expect("the completion is not aborted");
    completion.commit().await.unwrap();
    let cancelled = cancelling
        .await
        .unwrap()
        .expect("the cancel is not aborted");
    assert_eq!(
        (
            cancelled.state.as_str(),
            cancelled.completed,
            cancelled.cancelled
        ),
        ("cancelled", 1, 1),
        "the step completed first, the one it unblocked was cancelled"
    );
}
