//! The engine against real PostgreSQL: timing, retries, cancellation, unique keys, rescue and
//! fencing, exactly-once database effects, graceful shutdown, leadership.
//!
//! Longer than 700 lines on purpose: one self-contained scenario per test, with the helpers they
//! share at the top; split it by area when a new area's tests arrive.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use crate::common::{state_of, test_db, wait_for};
use kickoff::engine::maintenance::rescuer::{JobRescuer, RescuerConfig};
use kickoff::engine::store::jobs as job_store;
use kickoff::engine::{
    BoxFuture, Engine, EngineConfig, JobContext, JobId, JobState, NewJob, OnConflict, WorkError,
    Worker, Workers,
};

/// What a probe attempt reports when it starts.
#[derive(Debug, Clone)]
struct Started {
    id: JobId,
    attempt: i32,
    at: DateTime<Utc>,
    scheduled_at: DateTime<Utc>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ProbeArgs {
    /// ok | fail | fatal | panic | cancel | snooze | hang | effect
    mode: String,
    /// fail while attempt <= this (mode fail)
    fail_attempts: i32,
}

/// A worker that reports each start on a channel and behaves as its args say.
struct Probe {
    started: mpsc::UnboundedSender<Started>,
}

impl Worker for Probe {
    fn kind(&self) -> &'static str {
        "probe"
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(3)
    }
    fn backoff(&self, _attempt: i32) -> Duration {
        Duration::from_millis(100)
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        let _ = self.started.send(Started {
            id: ctx.job.id,
            attempt: ctx.job.attempt,
            at: Utc::now(),
            scheduled_at: ctx.job.scheduled_at,
        });
        Box::pin(async move {
            let args: ProbeArgs = ctx.args()?;
            match args.mode.as_str() {
                "fail" if ctx.job.attempt <= args.fail_attempts || args.fail_attempts == 0 => {
                    Err(WorkError::Retryable(format!("boom {}", ctx.job.attempt)))
                }
                "fatal" => Err(WorkError::Fatal("no way".into())),
                "panic" => panic!("handler panicked on purpose"),
                "cancel" => Err(WorkError::Cancel("not needed".into())),
                // Once: a snooze does not count as an attempt, so the number stays; the
                // snoozes are counted in `meta`.
                "snooze" if ctx.job.meta.get("snoozes").is_none() => {
                    Err(WorkError::Snooze(Duration::from_millis(200)))
                }
                "hang" => {
                    ctx.cancelled().cancelled().await;
                    Err(WorkError::Retryable("stopped".into()))
                }
                "sleep" => {
                    tokio::time::sleep(Duration::from_millis(800)).await;
                    Ok(())
                }
                "effect" => {
                    // A database effect committed with the job's completion.
                    let mut tx = ctx.begin().await?;
                    sqlx::query("INSERT INTO probe_effects (job_id) VALUES ($1)")
                        .bind(ctx.job.id)
                        .execute(&mut *tx)
                        .await?;
                    ctx.complete_with(tx).await
                }
                _ => Ok(()),
            }
        })
    }
}

fn probe_workers() -> (Workers, mpsc::UnboundedReceiver<Started>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut w = Workers::new();
    w.register(Probe { started: tx });
    (w, rx)
}

fn config() -> EngineConfig {
    EngineConfig {
        queues: vec![("default".into(), 10)],
        lease: Duration::from_secs(2),
        heartbeat: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(2),
        ..EngineConfig::default()
    }
}

fn probe(mode: &str) -> NewJob {
    NewJob::new("probe", json!({ "mode": mode }))
}

async fn next_start(rx: &mut mpsc::UnboundedReceiver<Started>) -> Started {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a job should start within 10 s")
        .expect("channel open")
}

async fn wait_state(pool: &kickoff::engine::Db, id: JobId, want: JobState) {
    wait_for(
        &format!("job {id} to be {want:?}"),
        Duration::from_secs(15),
        || async { state_of(pool, id).await == want },
    )
    .await;
}

#[tokio::test]
async fn runs_an_immediate_job_and_completes_it() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let job = engine.client().insert(&probe("ok")).await.unwrap().job;
    assert_eq!(job.state, JobState::Available);
    let s = next_start(&mut rx).await;
    assert_eq!((s.id, s.attempt), (job.id, 1));
    wait_state(&db.pool, job.id, JobState::Completed).await;
    let done = engine.client().get(job.id).await.unwrap();
    assert!(done.finalized_at.is_some());
    assert!(done.lease_expires_at.is_none());
    engine.stop().await;
}

#[tokio::test]
async fn fires_scheduled_jobs_at_their_time_never_before() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let client = engine.client();
    let mut ids = Vec::new();
    for ms in [300u64, 600, 900] {
        let j = client
            .insert(&probe("ok").after(Duration::from_millis(ms)))
            .await
            .unwrap()
            .job;
        assert_eq!(j.state, JobState::Scheduled);
        ids.push(j.id);
    }
    for _ in 0..3 {
        let s = next_start(&mut rx).await;
        assert!(ids.contains(&s.id));
        assert!(
            s.at >= s.scheduled_at,
            "job {} started {} before its time",
            s.id,
            s.scheduled_at - s.at
        );
    }
    engine.stop().await;
}

#[tokio::test]
async fn a_job_scheduled_in_the_past_runs_at_once() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let at = Utc::now() - chrono::Duration::minutes(5);
    let j = engine
        .client()
        .insert(&probe("ok").at(at))
        .await
        .unwrap()
        .job;
    assert_eq!(j.state, JobState::Available);
    assert_eq!(next_start(&mut rx).await.id, j.id);
    engine.stop().await;
}

#[tokio::test]
async fn retries_with_backoff_then_discards_after_max_attempts() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let j = engine
        .client()
        .insert(&probe("fail").with_max_attempts(3))
        .await
        .unwrap()
        .job;
    let mut starts = Vec::new();
    for _ in 0..3 {
        starts.push(next_start(&mut rx).await);
    }
    assert_eq!(
        starts.iter().map(|s| s.attempt).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    // Each retry waited for its backoff (100 ms in this worker).
    for w in starts.windows(2) {
        assert!(w[1].at - w[0].at >= chrono::Duration::milliseconds(90));
    }
    wait_state(&db.pool, j.id, JobState::Discarded).await;
    let job = engine.client().get(j.id).await.unwrap();
    assert_eq!(job.errors.len(), 3);
    assert_eq!(job.errors[2].message, "boom 3");
    assert_eq!(job.errors[0].attempt, 1);
    engine.stop().await;
}

#[tokio::test]
async fn a_failure_then_success_completes_on_retry() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let j = engine
        .client()
        .insert(&NewJob::new(
            "probe",
            json!({"mode": "fail", "fail_attempts": 1}),
        ))
        .await
        .unwrap()
        .job;
    next_start(&mut rx).await;
    next_start(&mut rx).await;
    wait_state(&db.pool, j.id, JobState::Completed).await;
    assert_eq!(engine.client().get(j.id).await.unwrap().errors.len(), 1);
    engine.stop().await;
}

#[tokio::test]
async fn a_panicking_handler_fails_only_its_own_job() {
    let db = test_db().await;
    let (workers, _rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let client = engine.client();
    let bad = client
        .insert(&probe("panic").with_max_attempts(1))
        .await
        .unwrap()
        .job;
    let good = client.insert(&probe("ok")).await.unwrap().job;
    wait_state(&db.pool, bad.id, JobState::Discarded).await;
    wait_state(&db.pool, good.id, JobState::Completed).await;
    let bad = client.get(bad.id).await.unwrap();
    assert!(bad.errors[0]
        .message
        .contains("panicked: handler panicked on purpose"));
    engine.stop().await;
}

#[tokio::test]
async fn fatal_cancel_and_snooze_outcomes_move_the_job_as_asked() {
    let db = test_db().await;
    let (workers, _rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let client = engine.client();
    let fatal = client.insert(&probe("fatal")).await.unwrap().job;
    let cancel = client.insert(&probe("cancel")).await.unwrap().job;
    let snooze = client
        .insert(&probe("snooze").with_max_attempts(1))
        .await
        .unwrap()
        .job;
    wait_state(&db.pool, fatal.id, JobState::Discarded).await;
    wait_state(&db.pool, cancel.id, JobState::Cancelled).await;
    // Snoozed once (without spending its only attempt), then completed.
    wait_state(&db.pool, snooze.id, JobState::Completed).await;
    let s = client.get(snooze.id).await.unwrap();
    assert_eq!((s.attempt, s.max_attempts), (1, 1));
    assert_eq!(s.meta["snoozes"], 1);
    assert!(s.errors.is_empty());
    engine.stop().await;
}

#[tokio::test]
async fn a_handler_over_its_timeout_fails_the_attempt() {
    let db = test_db().await;
    let (workers, _rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let j = engine
        .client()
        .insert(&probe("hang").with_max_attempts(1))
        .await
        .unwrap()
        .job;
    wait_state(&db.pool, j.id, JobState::Discarded).await;
    let job = engine.client().get(j.id).await.unwrap();
    assert!(
        job.errors[0].message.contains("timed out after 3000 ms"),
        "{:?}",
        job.errors
    );
    engine.stop().await;
}

#[tokio::test]
async fn cancel_of_a_scheduled_job_means_it_never_runs() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let client = engine.client();
    let doomed = client
        .insert(&probe("ok").after(Duration::from_millis(300)))
        .await
        .unwrap()
        .job;
    let later = client
        .insert(&probe("ok").after(Duration::from_millis(600)))
        .await
        .unwrap()
        .job;
    let cancelled = client.cancel(doomed.id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    // The later job runs; the cancelled one, due before it, never did.
    assert_eq!(next_start(&mut rx).await.id, later.id);
    assert_eq!(state_of(&db.pool, doomed.id).await, JobState::Cancelled);
    // A second cancel is a conflict, not a silent success.
    assert!(matches!(
        client.cancel(doomed.id).await,
        Err(kickoff::engine::ClientError::Conflict(_))
    ));
    engine.stop().await;
}

#[tokio::test]
async fn cancel_of_an_executing_job_stops_its_handler() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let client = engine.client();
    let j = client.insert(&probe("hang")).await.unwrap().job;
    next_start(&mut rx).await;
    assert_eq!(state_of(&db.pool, j.id).await, JobState::Executing);
    client.cancel(j.id).await.unwrap();
    wait_for("the handler to stop", Duration::from_secs(5), || async {
        engine.running_count() == 0
    })
    .await;
    let job = client.get(j.id).await.unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert!(
        job.errors.is_empty(),
        "the stopped attempt wrote nothing: {:?}",
        job.errors
    );
    engine.stop().await;
}

#[tokio::test]
async fn unique_keys_return_the_live_job_or_reschedule_it() {
    let db = test_db().await;
    let (workers, _rx) = probe_workers();
    let client = kickoff::engine::Client::new(db.pool.clone(), Arc::new(workers));
    let first = client
        .insert(
            &probe("ok")
                .after(Duration::from_secs(60))
                .with_unique_key("game-1", OnConflict::Keep),
        )
        .await
        .unwrap();
    assert!(!first.existing);
    let again = client
        .insert(
            &probe("ok")
                .after(Duration::from_secs(120))
                .with_unique_key("game-1", OnConflict::Keep),
        )
        .await
        .unwrap();
    assert!(again.existing);
    assert_eq!(again.job.id, first.job.id);
    assert_eq!(again.job.scheduled_at, first.job.scheduled_at);
    let at = Utc::now() + chrono::Duration::seconds(300);
    let moved = client
        .insert(
            &probe("ok")
                .at(at)
                .with_unique_key("game-1", OnConflict::Reschedule),
        )
        .await
        .unwrap();
    assert!(moved.existing);
    assert_eq!(moved.job.id, first.job.id);
    assert_eq!(
        moved.job.scheduled_at.timestamp_micros(),
        at.timestamp_micros()
    );
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
    // Once the holder is final, the key is free again.
    client.cancel(first.job.id).await.unwrap();
    let fresh = client
        .insert(&probe("ok").with_unique_key("game-1", OnConflict::Keep))
        .await
        .unwrap();
    assert!(!fresh.existing);
    assert_ne!(fresh.job.id, first.job.id);
}

#[tokio::test]
async fn rescues_jobs_whose_lease_expired_and_fences_the_zombie() {
    let db = test_db().await;
    let (workers, _rx) = probe_workers();
    let client = kickoff::engine::Client::new(db.pool.clone(), Arc::new(workers));
    let j = client.insert(&probe("ok")).await.unwrap().job;
    // A node claims it, then dies (no heartbeat renews the lease).
    let claimed = job_store::job_claim(
        &db.pool,
        "default",
        10,
        "dead-node",
        Duration::from_millis(200),
    )
    .await
    .unwrap();
    assert_eq!(claimed.len(), 1);
    let rescuer = JobRescuer::new(db.pool.clone(), RescuerConfig::default());
    // Not yet expired: nothing to rescue.
    assert!(rescuer.run_once(None).await.unwrap().retryable.is_empty());
    let later = Utc::now() + chrono::Duration::seconds(1);
    let report = rescuer.run_once(Some(later)).await.unwrap();
    assert_eq!(report.retryable, vec![j.id]);
    let rescued = client.get(j.id).await.unwrap();
    assert_eq!(rescued.state, JobState::Retryable);
    assert!(rescued.errors[0].message.contains("dead-node"));
    // A new attempt takes it...
    job_store::job_stage_due(&db.pool, None, 10).await.unwrap();
    let second = job_store::job_claim(
        &db.pool,
        "default",
        10,
        "live-node",
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(second[0].attempt, 2);
    // ...and the zombie of attempt 1 wakes up: its completion and failure change nothing.
    let zombie = claimed[0].claim().unwrap();
    assert!(job_store::job_complete_many(&db.pool, &[zombie])
        .await
        .unwrap()
        .is_empty());
    let failed = job_store::job_fail(
        &db.pool,
        zombie,
        "dead-node",
        "late",
        job_store::FailAs::Discard,
    )
    .await
    .unwrap();
    assert_eq!(failed, None);
    assert_eq!(state_of(&db.pool, j.id).await, JobState::Executing);
    assert_eq!(
        job_store::job_complete_many(&db.pool, &[second[0].claim().unwrap()])
            .await
            .unwrap(),
        vec![j.id]
    );
}

#[tokio::test]
async fn a_rescued_job_out_of_attempts_is_discarded() {
    let db = test_db().await;
    let (workers, _rx) = probe_workers();
    let client = kickoff::engine::Client::new(db.pool.clone(), Arc::new(workers));
    let j = client
        .insert(&probe("ok").with_max_attempts(1))
        .await
        .unwrap()
        .job;
    job_store::job_claim(
        &db.pool,
        "default",
        10,
        "dead-node",
        Duration::from_millis(10),
    )
    .await
    .unwrap();
    let report = JobRescuer::new(db.pool.clone(), RescuerConfig::default())
        .run_once(Some(Utc::now() + chrono::Duration::seconds(1)))
        .await
        .unwrap();
    assert_eq!(report.discarded, vec![j.id]);
    assert_eq!(state_of(&db.pool, j.id).await, JobState::Discarded);
}

#[tokio::test]
async fn a_running_engine_rescues_a_dead_nodes_job_within_seconds() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let j = {
        let client = kickoff::engine::Client::new(db.pool.clone(), Arc::new(Workers::new()));
        let _ = client;
        job_store::job_insert_many(
            &db.pool,
            &[probe("ok")],
            &[],
            job_store::InsertRules::trusted(&["probe"]),
        )
        .await
        .unwrap();
        job_store::job_claim(
            &db.pool,
            "default",
            1,
            "dead-node",
            Duration::from_millis(500),
        )
        .await
        .unwrap()
        .remove(0)
    };
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let s = next_start(&mut rx).await;
    assert_eq!((s.id, s.attempt), (j.id, 2));
    wait_state(&db.pool, j.id, JobState::Completed).await;
    engine.stop().await;
}

#[tokio::test]
async fn database_effects_commit_exactly_once_with_the_completion() {
    let db = test_db().await;
    sqlx::query("CREATE TABLE probe_effects (job_id bigint NOT NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    let (workers, _rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let client = engine.client();
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(client.insert(&probe("effect")).await.unwrap().job.id);
    }
    for id in &ids {
        wait_state(&db.pool, *id, JobState::Completed).await;
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM probe_effects")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 20);
    engine.stop().await;

    // A fenced attempt (its job was rescued and re-claimed meanwhile) commits nothing.
    let (workers, _rx) = probe_workers();
    let client = kickoff::engine::Client::new(db.pool.clone(), Arc::new(workers));
    let j = client.insert(&probe("effect")).await.unwrap().job;
    let stale = job_store::job_claim(&db.pool, "default", 1, "n1", Duration::from_millis(10))
        .await
        .unwrap()
        .remove(0);
    JobRescuer::new(db.pool.clone(), RescuerConfig::default())
        .run_once(Some(Utc::now() + chrono::Duration::seconds(1)))
        .await
        .unwrap();
    job_store::job_stage_due(&db.pool, None, 10).await.unwrap();
    job_store::job_claim(&db.pool, "default", 1, "n2", Duration::from_secs(30))
        .await
        .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO probe_effects (job_id) VALUES ($1)")
        .bind(j.id)
        .execute(&mut *tx)
        .await
        .unwrap();
    let done = job_store::job_complete_many(&mut *tx, &[stale.claim().unwrap()])
        .await
        .unwrap();
    assert!(done.is_empty(), "the stale attempt must be fenced");
    tx.rollback().await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM probe_effects WHERE job_id = $1")
        .bind(j.id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn graceful_shutdown_hands_back_unfinished_work() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    // The grace (1.5 s) ends well before the hanging handler's own timeout (3 s).
    let short_grace = EngineConfig {
        shutdown_grace: Duration::from_millis(1500),
        ..config()
    };
    let engine = Engine::start(db.pool.clone(), workers, short_grace)
        .await
        .unwrap();
    let client = engine.client();
    let quick = client.insert(&probe("sleep")).await.unwrap().job; // finishes within the grace
    let stuck = client
        .insert(&probe("hang").with_max_attempts(1))
        .await
        .unwrap()
        .job; // does not
    next_start(&mut rx).await;
    next_start(&mut rx).await;
    engine.stop().await;
    assert_eq!(state_of(&db.pool, quick.id).await, JobState::Completed);
    let back = client.get(stuck.id).await.unwrap();
    assert_eq!(back.state, JobState::Available, "handed back, not lost");
    assert!(
        back.max_attempts > back.attempt,
        "the interrupted attempt does not use up the job"
    );
    // Another node picks it up.
    let (workers, mut rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    // The interrupted attempt was not counted: the next one has its number again.
    let s = next_start(&mut rx).await;
    assert_eq!((s.id, s.attempt), (stuck.id, 1));
    engine.stop().await;
}

#[tokio::test]
async fn a_paused_queue_claims_nothing_until_resumed() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let client = engine.client();
    client.set_queue_paused("default", true).await.unwrap();
    // Wait until the node has applied the setting (it arrives by notification).
    let marker = client.insert(&probe("ok")).await.unwrap().job;
    let first = tokio::time::timeout(Duration::from_millis(1500), rx.recv()).await;
    if let Ok(Some(s)) = first {
        // The insert raced the pause notification; the next one must wait.
        assert_eq!(s.id, marker.id);
    }
    let held = client.insert(&probe("ok")).await.unwrap().job;
    assert!(tokio::time::timeout(Duration::from_millis(1500), rx.recv())
        .await
        .is_err());
    assert_eq!(state_of(&db.pool, held.id).await, JobState::Available);
    client.set_queue_paused("default", false).await.unwrap();
    let mut seen = Vec::new();
    while !seen.contains(&held.id) {
        seen.push(next_start(&mut rx).await.id);
    }
    engine.stop().await;
}

#[tokio::test]
async fn two_engines_on_one_database_run_each_job_once_and_elect_one_leader() {
    let db = test_db().await;
    let (w1, mut rx1) = probe_workers();
    let (w2, mut rx2) = probe_workers();
    let a = Engine::start(db.pool.clone(), w1, config()).await.unwrap();
    let b = Engine::start(db.pool.clone(), w2, config()).await.unwrap();
    let jobs: Vec<NewJob> = (0..300).map(|_| probe("ok")).collect();
    a.client().insert_many(&jobs).await.unwrap();
    let mut starts = Vec::new();
    while starts.len() < 300 {
        tokio::select! {
            Some(s) = rx1.recv() => starts.push(s.id),
            Some(s) = rx2.recv() => starts.push(s.id),
            _ = tokio::time::sleep(Duration::from_secs(15)) => panic!("only {} jobs started", starts.len()),
        }
    }
    starts.sort();
    starts.dedup();
    assert_eq!(starts.len(), 300, "every job ran exactly once");
    wait_for("one leader", Duration::from_secs(5), || async {
        a.is_leader() != b.is_leader()
    })
    .await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn operator_actions_follow_the_state_machine() {
    let db = test_db().await;
    let (workers, _rx) = probe_workers();
    let client = kickoff::engine::Client::new(db.pool.clone(), Arc::new(workers));
    let j = client
        .insert(&probe("ok").after(Duration::from_secs(3600)))
        .await
        .unwrap()
        .job;
    // Reschedule and run-now apply to waiting jobs.
    let at = Utc::now() + chrono::Duration::hours(2);
    assert_eq!(
        client.reschedule(j.id, at).await.unwrap().state,
        JobState::Scheduled
    );
    assert_eq!(
        client.run_now(j.id).await.unwrap().state,
        JobState::Available
    );
    // Retry applies to finished jobs only.
    assert!(matches!(
        client.retry(j.id).await,
        Err(kickoff::engine::ClientError::Conflict(_))
    ));
    client.cancel(j.id).await.unwrap();
    let rerun = client.retry(j.id).await.unwrap();
    assert_eq!(rerun.state, JobState::Available);
    assert!(rerun.finalized_at.is_none());
    client.delete(j.id).await.unwrap();
    assert!(matches!(
        client.get(j.id).await,
        Err(kickoff::engine::ClientError::NotFound(_))
    ));
    assert!(matches!(
        client.delete(j.id).await,
        Err(kickoff::engine::ClientError::NotFound(_))
    ));
}

/// Review of issue 30: a batch keeps the order it was given (its ids follow it, and so does first
/// come first served among jobs due together), whether or not its queues have a partitioned rate
/// (the insert joins the queues' settings, and a join alone may reorder rows).
#[tokio::test]
async fn a_batch_insert_keeps_the_order_it_was_given() {
    let db = test_db().await;
    let queues = ["default", "limited", "other"];
    sqlx::query("INSERT INTO queues (name, rate_limit, rate_period_ms, rate_per) VALUES ('limited', 10, 1000, 'kind')")
        .execute(&db.pool)
        .await
        .unwrap();
    let batch: Vec<NewJob> = (0..300)
        .map(|i| NewJob::new("probe", json!({ "i": i })).with_queue(queues[i % 3]))
        .collect();
    job_store::job_insert_many(
        &db.pool,
        &batch,
        &[],
        job_store::InsertRules::trusted(&["probe"]),
    )
    .await
    .unwrap();
    let order: Vec<i64> = sqlx::query_scalar("SELECT (args ->> 'i')::bigint FROM jobs ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(order, (0..300).collect::<Vec<i64>>());
}

/// `listen_url` (`KICKOFF_LISTEN_DATABASE_URL`) gives the node's listening connection a URL of
/// its own (a direct one beside a transaction pooler): that connection is the one that
/// listens, named after it, and its notifications wake the node at once.
#[tokio::test]
async fn the_listening_connection_uses_its_own_url_when_given() {
    let db = test_db().await;
    let (workers, mut rx) = probe_workers();
    let separator = if db.direct_url.contains('?') {
        '&'
    } else {
        '?'
    };
    let engine = Engine::start(
        db.pool.clone(),
        workers,
        EngineConfig {
            listen_url: Some(format!(
                "{}{separator}application_name=direct",
                db.direct_url
            )),
            // Only a notification can start the job within the test's wait.
            backstop_poll: Duration::from_secs(30),
            ..config()
        },
    )
    .await
    .unwrap();
    let listening: Vec<String> = sqlx::query_scalar(
        "SELECT application_name FROM pg_stat_activity
         WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(listening, ["direct-listener"]);
    let job = engine.client().insert(&probe("ok")).await.unwrap().job;
    let s = tokio::time::timeout(Duration::from_secs(5), next_start(&mut rx))
        .await
        .expect("the notification did not wake the node");
    assert_eq!(s.id, job.id);
    engine.stop().await;

    let bad = EngineConfig {
        listen_url: Some("not a url".into()),
        ..config()
    };
    assert!(Engine::start(db.pool.clone(), probe_workers().0, bad)
        .await
        .is_err());
}

/// The database refuses exactly the queue names the engine refuses: its check (cheaper since
/// issue 48, without the regular expression's bounded repetition) states the same rule as
/// `is_valid_queue_name`, and is still checked on every row written.
#[tokio::test]
async fn the_database_refuses_the_queue_names_the_engine_refuses() {
    let db = test_db().await;
    let long = "q".repeat(64);
    let too_long = "q".repeat(65);
    let names = [
        "default",
        "a",
        "game-8812_lock",
        "0",
        "-",
        "_",
        &long,
        "",
        &too_long,
        "Default",
        "a b",
        "a.b",
        "é",
        "a\n",
        "\na",
        "queue/1",
        "ü-queue",
        "a$",
        "^a",
    ];
    for name in names {
        let inserted =
            sqlx::query("INSERT INTO jobs (queue, kind, state) VALUES ($1, 'probe', 'available')")
                .bind(name)
                .execute(&db.pool)
                .await;
        let valid = kickoff::engine::job::is_valid_queue_name(name);
        match inserted {
            Ok(_) => assert!(valid, "the database took the queue name {name:?}"),
            Err(e) => {
                assert!(!valid, "the database refused the queue name {name:?}: {e}");
                let constraint = e.as_database_error().and_then(|d| d.constraint());
                assert_eq!(constraint, Some("queue_name"), "{name:?}: {e}");
            }
        }
    }
    // A row written again is checked again (each claim and completion writes the row).
    let id: i64 = sqlx::query_scalar("SELECT id FROM jobs WHERE queue = 'default'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let renamed = sqlx::query("UPDATE jobs SET queue = 'Bad' WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert_eq!(
        renamed.as_database_error().and_then(|d| d.constraint()),
        Some("queue_name")
    );
}

/// The engine's own pools ping a connection before a checkout only when it sat idle longer than
/// a bound (`IDLE_BEFORE_PING`, a second; sqlx's ping before every checkout was a round trip
/// before every claim and every batch of outcomes). A connection the database dropped while the
/// node was quiet is still found out at its checkout, and replaced: the statement after it runs.
/// (A bound of 50 ms here: the rule, without a second's wait.)
#[tokio::test]
async fn a_pooled_connection_the_database_dropped_while_idle_is_replaced_before_use() {
    let db = test_db().await;
    let options: sqlx::postgres::PgConnectOptions = db.direct_url.parse().unwrap();
    let idle = Duration::from_millis(50);
    let pool = kickoff::db::ping_when_idle_over(sqlx::postgres::PgPoolOptions::new(), idle)
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let first: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&pool)
        .await
        .unwrap();
    let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(first)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(ended);
    // Idle past the bound: the checkout pings, finds the connection gone, and opens another.
    tokio::time::sleep(idle + Duration::from_millis(20)).await;
    let second: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&pool)
        .await
        .expect("the dropped connection was replaced at its checkout");
    assert_ne!(first, second);
}
