//! The engine's rare paths, provoked on purpose instead of hoped for under load: slots that free one
//! at a time, a claim lost in a crash (the row rewound), transient errors raised once by a trigger,
//! a notification lost while the listener reconnects (a proxy holds the reconnect), handlers that
//! hold every pooled connection or lock a job row; and the node's
//! services driven one step at a time, without an engine.
//!
//! Longer than 700 lines on purpose: one self-contained scenario per test, with the helpers they
//! share at the top; split it by area when a new area's tests arrive.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kickoff::engine::Db;
use serde::Deserialize;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::{mpsc, Notify};

use crate::common::proxy::{Arrival, Proxy};
use crate::common::{state_of, test_db, wait_for, TestDb};
use kickoff::engine::executor::{Executor, ExecutorParts};
use kickoff::engine::maintenance::rescuer::{JobRescuer, RescuerConfig};
use kickoff::engine::metrics::Metrics;
use kickoff::engine::node::{Attempts, DbClock, Pools, TimerSignal};
use kickoff::engine::producer::{ClaimSettings, Producer};
use kickoff::engine::queue_settings::QueueSettingsSync;
use kickoff::engine::queue_state::Queues;
use kickoff::engine::store::jobs as job_store;
use kickoff::engine::store::kinds as kind_store;
use kickoff::engine::store::queues as queue_store;
use kickoff::engine::timer::{Tick, Timer};
use kickoff::engine::{
    BoxFuture, Client, Engine, EngineConfig, JobContext, JobId, JobState, NewJob, QueueRow,
    WorkError, Worker, Workers,
};

// ---- the worker these tests drive -------------------------------------------------------------

/// Lets held attempts finish when the test says so.
#[derive(Default)]
struct Gates {
    open: Mutex<HashSet<JobId>>,
    all: AtomicBool,
    changed: Notify,
}

impl Gates {
    fn release(&self, id: JobId) {
        self.open.lock().unwrap().insert(id);
        self.changed.notify_waiters();
    }

    fn release_all(&self) {
        self.all.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    async fn wait(&self, id: JobId) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.all.load(Ordering::SeqCst) || self.open.lock().unwrap().contains(&id) {
                return;
            }
            changed.await;
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Started {
        id: JobId,
        attempt: i32,
    },
    /// What the handler returned (after `complete_with` for the modes that use it).
    Finished {
        id: JobId,
        attempt: i32,
        result: Result<(), WorkError>,
    },
    /// The handler stopped running: it returned, or its task was aborted.
    Ended {
        id: JobId,
    },
}

/// Reports [`Event::Ended`] when the handler's future is dropped, however it ends.
struct EndGuard(mpsc::UnboundedSender<Event>, JobId);

impl Drop for EndGuard {
    fn drop(&mut self) {
        let _ = self.0.send(Event::Ended { id: self.1 });
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Args {
    /// quick | hold | hold_tx | hold_effect | fail | snooze_then_fail
    mode: String,
    /// snooze_then_fail: how many snoozes before the failure.
    times: usize,
}

struct Gated {
    gates: Arc<Gates>,
    events: mpsc::UnboundedSender<Event>,
    /// Attempts seen by snooze_then_fail.
    runs: Arc<AtomicUsize>,
}

impl Worker for Gated {
    fn kind(&self) -> &'static str {
        "gated"
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(120)
    }
    fn backoff(&self, _attempt: i32) -> Duration {
        Duration::from_millis(50)
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        let (id, attempt) = (ctx.job.id, ctx.job.attempt);
        let _ = self.events.send(Event::Started { id, attempt });
        let ended = EndGuard(self.events.clone(), id);
        Box::pin(async move {
            let _ended = ended;
            let args: Args = ctx.args()?;
            let result = match args.mode.as_str() {
                "hold" => {
                    tokio::select! {
                        _ = self.gates.wait(id) => Ok(()),
                        _ = ctx.cancelled().cancelled() => Err(WorkError::Retryable("stopped".into())),
                    }
                }
                // Holds a pooled connection (an open transaction) for as long as it runs.
                "hold_tx" => {
                    let mut tx = ctx.begin().await?;
                    sqlx::query("INSERT INTO effects (job_id) VALUES ($1)")
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    self.gates.wait(id).await;
                    ctx.complete_with(tx).await
                }
                // Waits, then commits an effect with the completion.
                "hold_effect" => {
                    tokio::select! {
                        _ = self.gates.wait(id) => {
                            let mut tx = ctx.begin().await?;
                            sqlx::query("INSERT INTO effects (job_id) VALUES ($1)")
                                .bind(id)
                                .execute(&mut *tx)
                                .await?;
                            ctx.complete_with(tx).await
                        }
                        _ = ctx.cancelled().cancelled() => Err(WorkError::Retryable("stopped".into())),
                    }
                }
                "fail" => Err(WorkError::Retryable("failed on purpose".into())),
                "snooze_then_fail" => {
                    let run = self.runs.fetch_add(1, Ordering::SeqCst);
                    if run < args.times {
                        Err(WorkError::Snooze(Duration::ZERO))
                    } else if run == args.times {
                        Err(WorkError::Retryable("the first real failure".into()))
                    } else {
                        Ok(())
                    }
                }
                _ => Ok(()),
            };
            let _ = self.events.send(Event::Finished {
                id,
                attempt,
                result: result.clone(),
            });
            result
        })
    }
}

struct Harness {
    gates: Arc<Gates>,
    events: mpsc::UnboundedReceiver<Event>,
    runs: Arc<AtomicUsize>,
}

fn gated_workers() -> (Workers, Harness) {
    let gates = Arc::new(Gates::default());
    let runs = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::unbounded_channel();
    let mut w = Workers::new();
    w.register(Gated {
        gates: gates.clone(),
        events: tx,
        runs: runs.clone(),
    });
    (
        w,
        Harness {
            gates,
            events: rx,
            runs,
        },
    )
}

impl Harness {
    /// The next event, within 15 s.
    async fn next(&mut self) -> Event {
        tokio::time::timeout(Duration::from_secs(15), self.events.recv())
            .await
            .expect("an event within 15 s")
            .expect("channel open")
    }

    /// Waits for the start of `id` (other events are dropped), within `timeout`.
    async fn started(&mut self, id: JobId, timeout: Duration) -> Option<i32> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(Event::Started { id: i, attempt })) if i == id => return Some(attempt),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Waits until every id in `ids` started once.
    async fn all_started(&mut self, ids: &[JobId]) {
        let mut waiting: HashSet<JobId> = ids.iter().copied().collect();
        while !waiting.is_empty() {
            if let Event::Started { id, .. } = self.next().await {
                waiting.remove(&id);
            }
        }
    }

    /// Waits until `id`'s handler stopped running, within `timeout`.
    async fn ended(&mut self, id: JobId, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(Event::Ended { id: i })) if i == id => return true,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return false,
            }
        }
    }

    /// Waits for `id`'s handler to return.
    async fn finished(&mut self, id: JobId) -> (i32, Result<(), WorkError>) {
        loop {
            if let Event::Finished {
                id: i,
                attempt,
                result,
            } = self.next().await
            {
                if i == id {
                    return (attempt, result);
                }
            }
        }
    }
}

fn gated(mode: &str) -> NewJob {
    NewJob::new("gated", json!({ "mode": mode }))
}

fn config(concurrency: usize) -> EngineConfig {
    EngineConfig {
        queues: vec![("default".into(), concurrency)],
        lease: Duration::from_secs(2),
        heartbeat: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(2),
        ..EngineConfig::default()
    }
}

async fn effects_table(pool: &Db) {
    sqlx::query("CREATE TABLE effects (job_id bigint NOT NULL)")
        .execute(pool)
        .await
        .unwrap();
}

async fn effects_of(pool: &Db, id: JobId) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM effects WHERE job_id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A pool of `size` connections to the test database, as an engine of its own would have.
async fn pool_of(db: &TestDb, size: u32) -> Db {
    db.other_pool(size).await
}

/// Puts a claimed job back as it was before its claim, as if the claim's commit (made with
/// `synchronous_commit = off`) had been lost in a database crash while its handler already ran.
async fn rewind_claim(conn: &mut sqlx::PgConnection, id: JobId) {
    let n = sqlx::query(
        "UPDATE jobs SET state = 'available', attempt = attempt - 1, attempted_at = NULL,
                attempted_by = NULL, lease_expires_at = NULL
         WHERE id = $1 AND state = 'executing'",
    )
    .bind(id)
    .execute(conn)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(n, 1, "the job was executing");
}

// ---- 4. free slots take due jobs ---------------------------------------------------------------

#[tokio::test]
async fn a_slot_freed_while_long_jobs_run_takes_the_next_due_job() {
    let db = test_db().await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(db.pool.clone(), workers, config(4))
        .await
        .unwrap();
    let client = engine.client();
    // Four jobs due at the same instant fill the four slots: three long ones and a quick one.
    let at = Utc::now() + chrono::Duration::milliseconds(300);
    let mut batch: Vec<NewJob> = (0..3).map(|_| gated("hold").at(at)).collect();
    batch.push(gated("quick").at(at));
    client.insert_many(&batch).await.unwrap();
    let mut quick_done = false;
    let mut started = 0;
    while started < 4 || !quick_done {
        match h.next().await {
            Event::Started { .. } => started += 1,
            Event::Finished { .. } => quick_done = true,
            Event::Ended { .. } => {}
        }
    }
    // One slot is free now, the other three stay busy: a new job must take the free one.
    let next = client.insert(&gated("quick")).await.unwrap().job;
    let attempt = h.started(next.id, Duration::from_secs(5)).await;
    h.gates.release_all();
    assert_eq!(
        attempt,
        Some(1),
        "a due job waited while a slot was free and long jobs ran"
    );
    engine.stop().await;
}

#[tokio::test]
async fn the_claim_batch_cap_does_not_strand_due_jobs_behind_long_ones() {
    let db = test_db().await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(
        db.pool.clone(),
        workers,
        EngineConfig {
            claim_batch: 200,
            ..config(500)
        },
    )
    .await
    .unwrap();
    let client = engine.client();
    let batch: Vec<NewJob> = (0..201).map(|_| gated("hold")).collect();
    client.insert_many(&batch).await.unwrap();
    let mut started = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while started < 201 {
        match tokio::time::timeout_at(deadline, h.events.recv()).await {
            Ok(Some(Event::Started { .. })) => started += 1,
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    h.gates.release_all();
    assert_eq!(
        started, 201,
        "201 due jobs and 500 slots: every job starts, not just the first claim batch"
    );
    engine.stop().await;
}

// ---- 5. queue settings without their notification ----------------------------------------------

#[tokio::test]
async fn queue_settings_reach_a_node_that_missed_their_notification() {
    let db = test_db().await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(db.pool.clone(), workers, config(4))
        .await
        .unwrap();
    let client = engine.client();
    // Paused with no notification (one lost while the listener reconnected, or plain SQL).
    sqlx::query("UPDATE queues SET paused = true WHERE name = 'default'")
        .execute(&db.pool)
        .await
        .unwrap();
    // The backstop poll (1 s) must have picked it up after a few of its periods.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let held = client.insert(&gated("quick")).await.unwrap().job;
    assert_eq!(
        h.started(held.id, Duration::from_millis(2500)).await,
        None,
        "the node never learnt that the queue was paused"
    );
    assert_eq!(state_of(&db.pool, held.id).await, JobState::Available);
    sqlx::query("UPDATE queues SET paused = false WHERE name = 'default'")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(h.started(held.id, Duration::from_secs(5)).await, Some(1));
    engine.stop().await;
}

/// A node's settings sync for the queue `default` (no engine around it), with the row applied once.
async fn settings_sync(pool: &Db) -> (QueueSettingsSync, Arc<Queues>) {
    let queues = Arc::new(Queues::new(&[("default".to_string(), 4)]));
    queue_store::queue_ensure(pool, &["default".to_string()])
        .await
        .unwrap();
    let sync = QueueSettingsSync::new(pool.clone(), queues.clone(), Duration::from_secs(1));
    sync.run_once().await.unwrap();
    (sync, queues)
}

/// Two writes of the queue's row whose commits come in the other order than their transactions
/// began: `first` begins (its `now()` is fixed then), `second` begins later and commits at once,
/// and the node applies it; then `first` writes and commits, and the node reads the row again.
/// Returns the `updated_at` of each write.
async fn settings_written_out_of_order(
    pool: &Db,
    sync: &QueueSettingsSync,
    first: impl AsyncFnOnce(&mut sqlx::PgConnection) -> QueueRow,
    second: impl AsyncFnOnce(&Db) -> QueueRow,
) -> (DateTime<Utc>, DateTime<Utc>) {
    // Held open on a connection of its own while the other write begins and commits.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT now()").execute(&mut *tx).await.unwrap();
    let later = second(pool).await;
    sync.run_once().await.unwrap();
    let earlier = first(&mut *tx).await;
    tx.commit().await.unwrap();
    sync.run_once().await.unwrap();
    (earlier.updated_at, later.updated_at)
}

#[tokio::test]
async fn a_pause_that_began_first_and_committed_last_is_applied() {
    let db = test_db().await;
    let (sync, queues) = settings_sync(&db.pool).await;
    let client = engine_free_client(&db.pool);
    let (paused_at, changed_at) = settings_written_out_of_order(
        &db.pool,
        &sync,
        async |tx: &mut sqlx::PgConnection| {
            client
                .set_queue_paused_with(tx, "default", true)
                .await
                .unwrap()
        },
        async |pool: &Db| {
            queue_store::queue_set_concurrency(pool, "default", Some(2))
                .await
                .unwrap()
        },
    )
    .await;
    // The stamps say the pause is the older write, though it committed last.
    assert!(paused_at < changed_at);
    let q = queues.get("default").unwrap();
    assert_eq!(q.limit.load(Ordering::SeqCst), 2);
    assert!(
        q.paused.load(Ordering::SeqCst),
        "the node skipped the pause, the newest settings: the paused queue keeps claiming"
    );
    // So does a notification's read of the row.
    assert!(client.queue("default").await.unwrap().unwrap().paused);
    sync.reload("default").await;
    assert!(q.paused.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_limit_that_began_first_and_committed_last_is_applied() {
    let db = test_db().await;
    let (sync, queues) = settings_sync(&db.pool).await;
    let client = engine_free_client(&db.pool);
    let limits = kickoff::engine::limits::QueueLimits {
        global: Some(5),
        ..Default::default()
    };
    settings_written_out_of_order(
        &db.pool,
        &sync,
        async |tx: &mut sqlx::PgConnection| {
            client
                .set_queue_limits_with(tx, "default", &limits)
                .await
                .unwrap()
        },
        async |pool: &Db| {
            queue_store::queue_set_concurrency(pool, "default", Some(2))
                .await
                .unwrap()
        },
    )
    .await;
    assert!(
        queues
            .get("default")
            .unwrap()
            .limited
            .load(Ordering::SeqCst),
        "the node skipped the new limit: the queue keeps the unlimited claim"
    );
}

#[tokio::test]
async fn an_older_read_of_the_paused_kinds_does_not_undo_a_newer_one() {
    let db = test_db().await;
    let queues = Queues::new(&[("default".to_string(), 4)]);
    // The backstop poll reads the paused kinds (none) ...
    let polled = kind_store::kind_pause_snapshot(&db.pool).await.unwrap();
    // ... a kind is paused, and the notification's read applies it first ...
    kind_store::kind_pause(&db.pool, "gated", None)
        .await
        .unwrap();
    let notified = kind_store::kind_pause_snapshot(&db.pool).await.unwrap();
    assert!(queues.kinds().set(notified.version, notified.kinds));
    // ... then the slower poll's older read arrives.
    queues.kinds().set(polled.version, polled.kinds);
    assert!(
        queues.kinds().holds("gated"),
        "an older read of the paused kinds resumed the kind on this node"
    );
}

// ---- 6. the attempt fence survives a lost claim ------------------------------------------------

#[tokio::test]
async fn a_claim_lost_in_a_crash_leaves_the_first_attempt_fenced_off() {
    let db = test_db().await;
    effects_table(&db.pool).await;
    let (workers, mut h) = gated_workers();
    // A slow heartbeat: the first attempt finishes before its node renews (or misses) a lease.
    let engine = Engine::start(
        db.pool.clone(),
        workers,
        EngineConfig {
            lease: Duration::from_secs(20),
            heartbeat: Duration::from_secs(5),
            ..config(1)
        },
    )
    .await
    .unwrap();
    let job = engine
        .client()
        .insert(&gated("hold_effect"))
        .await
        .unwrap()
        .job;
    assert_eq!(h.started(job.id, Duration::from_secs(5)).await, Some(1));
    // The claim is lost while its handler runs on, and another node claims the job again at
    // once: the same attempt number, 1, is issued a second time.
    let mut tx = db.pool.begin().await.unwrap();
    rewind_claim(&mut tx, job.id).await;
    let second = job_store::job_claim(&mut *tx, "default", 1, "node-b", Duration::from_secs(30))
        .await
        .unwrap()
        .remove(0);
    tx.commit().await.unwrap();
    assert_eq!((second.id, second.attempt), (job.id, 1));
    // The first attempt finishes: it must neither complete the second one's claim nor commit its
    // effect.
    h.gates.release(job.id);
    let (_, first) = h.finished(job.id).await;
    assert_ne!(
        first,
        Ok(()),
        "the first attempt completed the job the second one holds"
    );
    let row = engine.client().get(job.id).await.unwrap();
    assert_eq!(row.state, JobState::Executing);
    assert_eq!(row.attempted_by.as_deref(), Some("node-b"));
    assert_eq!(effects_of(&db.pool, job.id).await, 0);
    engine.stop().await;
    // Its node stopped without touching the second claim either.
    let row = engine_free_client(&db.pool).get(job.id).await.unwrap();
    assert_eq!(row.state, JobState::Executing);
    assert_eq!(row.attempted_by.as_deref(), Some("node-b"));
}

#[tokio::test]
async fn a_reclaimed_job_on_the_same_node_stays_registered_and_cancellable() {
    let db = test_db().await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(
        db.pool.clone(),
        workers,
        EngineConfig {
            lease: Duration::from_secs(20),
            heartbeat: Duration::from_secs(5),
            ..config(2)
        },
    )
    .await
    .unwrap();
    let client = engine.client();
    let job = client.insert(&gated("hold")).await.unwrap().job;
    assert_eq!(h.started(job.id, Duration::from_secs(5)).await, Some(1));
    let mut tx = db.pool.begin().await.unwrap();
    rewind_claim(&mut tx, job.id).await;
    tx.commit().await.unwrap();
    // The same node claims it again (it has a free slot); the older attempt is stopped.
    let (mut restarted, mut older_ended) = (false, false);
    while !(restarted && older_ended) {
        match h.next().await {
            Event::Started { id, attempt } if id == job.id => {
                assert_eq!(attempt, 1);
                restarted = true;
            }
            Event::Ended { id } if id == job.id => older_ended = true,
            _ => {}
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        state_of(&db.pool, job.id).await,
        JobState::Executing,
        "the older attempt's failure was written over the newer attempt's claim"
    );
    assert_eq!(
        engine.running_count(),
        1,
        "the newer attempt runs but is no longer registered (neither renewed nor cancellable)"
    );
    // A cancel stops it.
    client.cancel(job.id).await.unwrap();
    let stopped = h.ended(job.id, Duration::from_secs(5)).await;
    h.gates.release_all();
    assert!(stopped, "the cancel did not stop the newer attempt");
    assert_eq!(state_of(&db.pool, job.id).await, JobState::Cancelled);
    engine.stop().await;
}

#[tokio::test]
async fn cancelling_hundreds_of_executing_jobs_at_once_stops_every_attempt() {
    // A notification's payload holds at most 8000 bytes; the cancel tells the nodes which claims
    // to stop, and a single message naming 500 of them did not fit: the whole cancel failed.
    let db = test_db().await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(db.pool.clone(), workers, config(400))
        .await
        .unwrap();
    let client = engine.client();
    let batch: Vec<NewJob> = (0..400).map(|_| gated("hold")).collect();
    assert_eq!(client.insert_many(&batch).await.unwrap(), 400);
    let ids: Vec<JobId> = sqlx::query_scalar("SELECT id FROM jobs ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    h.all_started(&ids).await;
    let cancelled = client.cancel_many(&ids).await;
    assert_eq!(
        cancelled.as_ref().ok(),
        Some(&400),
        "the cancel of 400 executing jobs failed: {cancelled:?}"
    );
    wait_for(
        "every cancelled attempt to stop",
        Duration::from_secs(10),
        || async { engine.running_count() == 0 },
    )
    .await;
    let cancelled: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'cancelled'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(cancelled, 400);
    engine.stop().await;
}

// ---- 7. transient errors on outcomes -----------------------------------------------------------

/// Makes every update of a job into `state` fail with each of `codes` once, in order (a sequence
/// counts the calls: it is not rolled back with the failed statement).
async fn fail_updates_once(pool: &Db, state: &str, codes: &[&str]) {
    sqlx::query("CREATE SEQUENCE fail_calls")
        .execute(pool)
        .await
        .unwrap();
    let cases: String = codes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "WHEN {} THEN RAISE EXCEPTION 'injected {c}' USING ERRCODE = '{c}';",
                i + 1
            )
        })
        .collect();
    sqlx::query(&format!(
        "CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.state = '{state}' AND OLD.state = 'executing' THEN
                 CASE nextval('fail_calls') {cases} ELSE NULL; END CASE;
             END IF;
             RETURN NEW;
         END $$"
    ))
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "CREATE TRIGGER fail_once BEFORE UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION fail_once()",
    )
    .execute(pool)
    .await
    .unwrap();
}

const TRANSIENT: [&str; 5] = ["40001", "40P01", "57P01", "25006", "57014"];

#[tokio::test]
async fn a_completion_refused_by_transient_errors_is_retried_not_lost() {
    let db = test_db().await;
    fail_updates_once(&db.pool, "completed", &TRANSIENT).await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(db.pool.clone(), workers, config(2))
        .await
        .unwrap();
    // Its last attempt: if the success were dropped, the rescuer would discard it.
    let job = engine
        .client()
        .insert(&gated("quick").with_max_attempts(1))
        .await
        .unwrap()
        .job;
    h.started(job.id, Duration::from_secs(5)).await;
    wait_for("the job to be final", Duration::from_secs(20), || async {
        state_of(&db.pool, job.id).await.is_final()
    })
    .await;
    assert_eq!(state_of(&db.pool, job.id).await, JobState::Completed);
    let row = engine.client().get(job.id).await.unwrap();
    assert_eq!(row.attempt, 1, "it ran once");
    assert!(row.errors.is_empty(), "no rescue: {:?}", row.errors);
    engine.stop().await;
}

#[tokio::test]
async fn a_failure_refused_by_a_transient_error_is_recorded_as_the_handler_said() {
    let db = test_db().await;
    fail_updates_once(&db.pool, "retryable", &["40P01", "57P01"]).await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(db.pool.clone(), workers, config(2))
        .await
        .unwrap();
    let job = engine
        .client()
        .insert(&gated("fail").with_max_attempts(5))
        .await
        .unwrap()
        .job;
    h.started(job.id, Duration::from_secs(5)).await;
    wait_for(
        "the first error to be recorded",
        Duration::from_secs(20),
        || async { !engine.client().get(job.id).await.unwrap().errors.is_empty() },
    )
    .await;
    let row = engine.client().get(job.id).await.unwrap();
    assert_eq!(row.errors[0].message, "failed on purpose", "not a rescue");
    engine.stop().await;
}

// ---- 8. the engine's own connections and leases ------------------------------------------------

/// A client that runs nothing.
fn engine_free_client(pool: &Db) -> Client {
    Client::new(pool.clone(), Arc::new(Workers::new()))
}

fn client_of(pool: &Db) -> Client {
    let (workers, _h) = gated_workers();
    Client::new(pool.clone(), Arc::new(workers))
}

#[tokio::test]
async fn handlers_holding_every_pooled_connection_keep_their_leases() {
    let db = test_db().await;
    effects_table(&db.pool).await;
    let engine_pool = pool_of(&db, 4).await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(
        engine_pool,
        workers,
        EngineConfig {
            lease: Duration::from_secs(2),
            heartbeat: Duration::from_millis(300),
            ..config(4)
        },
    )
    .await
    .unwrap();
    let client = engine_free_client(&db.pool);
    let batch: Vec<NewJob> = (0..4).map(|_| gated("hold_tx")).collect();
    job_store::job_insert_many(
        &db.pool,
        &batch,
        &[],
        job_store::InsertRules::trusted(&[batch[0].kind.as_str()]),
    )
    .await
    .unwrap();
    let ids: Vec<JobId> = client
        .list(&Default::default(), None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    h.all_started(&ids).await;
    // Every connection of the pool is inside a handler's transaction for over two leases.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rescued = JobRescuer::new(db.pool.clone(), RescuerConfig::default())
        .run_once(None)
        .await
        .unwrap();
    h.gates.release_all();
    assert!(
        rescued.retryable.is_empty() && rescued.discarded.is_empty(),
        "busy handlers lost their leases: {rescued:?}"
    );
    for id in &ids {
        wait_for("completion", Duration::from_secs(10), || async {
            state_of(&db.pool, *id).await == JobState::Completed
        })
        .await;
        assert_eq!(effects_of(&db.pool, *id).await, 1);
    }
    engine.stop().await;
}

#[tokio::test]
async fn one_locked_job_row_does_not_stall_the_other_leases() {
    let db = test_db().await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(
        db.pool.clone(),
        workers,
        EngineConfig {
            lease: Duration::from_secs(2),
            heartbeat: Duration::from_millis(300),
            ..config(2)
        },
    )
    .await
    .unwrap();
    let client = engine.client();
    let locked = client.insert(&gated("hold")).await.unwrap().job;
    let other = client.insert(&gated("hold")).await.unwrap().job;
    h.all_started(&[locked.id, other.id]).await;
    // Someone holds the first job's row (an operator's open transaction, a handler's own).
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
        .bind(locked.id)
        .execute(&mut *tx)
        .await
        .unwrap();
    // Held for over two leases.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (state, lease): (JobState, Option<DateTime<Utc>>) =
        sqlx::query_as("SELECT state, lease_expires_at FROM jobs WHERE id = $1")
            .bind(other.id)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let now = job_store::db_now(&db.pool).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(
        state == JobState::Executing && lease.is_some_and(|l| l > now),
        "the other job's lease was not renewed while one row was locked: {state:?}, lease {lease:?}, now {now}"
    );
    // And the locked one, once its lock is gone, is renewed rather than rescued: both complete
    // after their single attempt.
    tokio::time::sleep(Duration::from_secs(1)).await;
    h.gates.release_all();
    for id in [locked.id, other.id] {
        wait_for("completion", Duration::from_secs(10), || async {
            state_of(&db.pool, id).await == JobState::Completed
        })
        .await;
        let row = client.get(id).await.unwrap();
        assert!(
            row.errors.is_empty() && row.attempt == 1,
            "{:?}",
            row.errors
        );
    }
    engine.stop().await;
}

/// A renewal writes only the leases near their end: each write is a new version of the job's row
/// in every index, and a node whose completions are backed up holds thousands of attempts. The
/// others are still reported held (their attempts go on).
#[tokio::test]
async fn a_renewal_writes_only_leases_near_their_end() {
    let db = test_db().await;
    let (workers, _h) = gated_workers();
    let client = Client::new(db.pool.clone(), Arc::new(workers));
    let job = client.insert(&gated("hold")).await.unwrap().job;
    let lease = Duration::from_secs(30);
    let claimed = job_store::job_claim(&db.pool, "default", 1, "node-a", lease)
        .await
        .unwrap();
    let claim = claimed[0].claim().unwrap();
    let lease_of = || async {
        sqlx::query_scalar::<_, DateTime<Utc>>("SELECT lease_expires_at FROM jobs WHERE id = $1")
            .bind(job.id)
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    let before = lease_of().await;
    let mut conn = db.pool.connection().await.unwrap();
    let fresh = job_store::job_renew_leases(&mut conn, &[claim], lease, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(fresh.holds(&claim), "a fresh lease was reported lost");
    assert_eq!(lease_of().await, before, "a fresh lease was written again");

    // Five seconds left, under the ten asked for: renewed to the whole lease.
    sqlx::query("UPDATE jobs SET lease_expires_at = now() + interval '5 seconds' WHERE id = $1")
        .bind(job.id)
        .execute(&db.pool)
        .await
        .unwrap();
    let now = job_store::db_now(&db.pool).await.unwrap();
    let lapsing = job_store::job_renew_leases(&mut conn, &[claim], lease, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(lapsing.holds(&claim));
    assert!(
        lease_of().await > now + chrono::Duration::seconds(25),
        "a lease near its end was not renewed"
    );

    // A claim whose job was claimed again is lost, fresh or not.
    sqlx::query("UPDATE jobs SET claim_token = claim_token + 1 WHERE id = $1")
        .bind(job.id)
        .execute(&db.pool)
        .await
        .unwrap();
    let lost = job_store::job_renew_leases(&mut conn, &[claim], lease, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        !lost.holds(&claim),
        "a claim that lost its job was reported held"
    );
}

// ---- 9. smaller ones ---------------------------------------------------------------------------

#[tokio::test]
async fn a_delay_counts_from_the_insert_not_from_its_transactions_start() {
    let db = test_db().await;
    let client = client_of(&db.pool);
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_sleep(1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let before_insert: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let job = client
        .insert_with(&mut tx, &gated("quick").after(Duration::from_millis(500)))
        .await
        .unwrap()
        .job;
    tx.commit().await.unwrap();
    assert!(
        job.scheduled_at >= before_insert + chrono::Duration::milliseconds(500),
        "due at {} although inserted at {before_insert} with a 500 ms delay",
        job.scheduled_at
    );
}

#[tokio::test]
async fn snoozes_never_use_up_a_jobs_attempts() {
    let db = test_db().await;
    let (workers, mut h) = gated_workers();
    let engine = Engine::start(db.pool.clone(), workers, config(2))
        .await
        .unwrap();
    // A thousand snoozes, then one failure of three allowed attempts: it must be retried.
    let job = engine
        .client()
        .insert(
            &NewJob::new(
                "gated",
                json!({ "mode": "snooze_then_fail", "times": 1000 }),
            )
            .with_max_attempts(3),
        )
        .await
        .unwrap()
        .job;
    wait_for(
        "the first real failure",
        Duration::from_secs(60),
        || async { h.runs.load(Ordering::SeqCst) > 1000 },
    )
    .await;
    wait_for("the job to finish", Duration::from_secs(20), || async {
        state_of(&db.pool, job.id).await.is_final()
    })
    .await;
    while h.events.try_recv().is_ok() {}
    let row = engine.client().get(job.id).await.unwrap();
    assert_eq!(
        row.state,
        JobState::Completed,
        "one failure discarded a job that had two attempts left: {:?}",
        row.errors
    );
    assert_eq!(row.errors.len(), 1);
    engine.stop().await;
}

#[tokio::test]
async fn a_notification_sent_while_the_listener_reconnects_is_not_lost() {
    let db = test_db().await;
    let direct: PgConnectOptions = db.direct_url.parse().unwrap();
    let upstream = format!("{}:{}", direct.get_host(), direct.get_port())
        .parse()
        .unwrap();
    let proxy = Proxy::start(upstream).await;
    let engine_pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(direct.clone().host("127.0.0.1").port(proxy.port))
        .await
        .unwrap();
    let (workers, mut h) = gated_workers();
    // No backstop poll within the test: only a notification, or the look at the table that
    // follows a reconnect, can start the job.
    let engine = Engine::start(
        Db::from(engine_pool),
        workers,
        EngineConfig {
            backstop_poll: Duration::from_secs(60),
            ..config(2)
        },
    )
    .await
    .unwrap();
    // The listener's connection drops. Its first reconnect is cut off on its way (the LISTEN is
    // lost with its connection); the second one's LISTEN is held on its way to the server.
    proxy.script_listens(&[Arrival::Close, Arrival::Hold]);
    let n: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(n, 1, "one listener connection");
    proxy.wait_for(1, 1, Duration::from_secs(10)).await;
    // Inserted while nothing listens; then the LISTEN goes through.
    let job = client_of(&db.pool)
        .insert(&gated("quick"))
        .await
        .unwrap()
        .job;
    proxy.release();
    assert_eq!(
        h.started(job.id, Duration::from_secs(10)).await,
        Some(1),
        "the job waited for the backstop poll: the nodes were woken before LISTEN was in force"
    );
    engine.stop().await;
}

// ---- the node's services, each driven on its own ------------------------------------------------

/// The parts a timer or a producer of queue `default` (with `concurrency` slots) uses.
struct Parts {
    pools: Pools,
    queues: Arc<Queues>,
    signal: Arc<TimerSignal>,
    clock: Arc<DbClock>,
}

impl Parts {
    /// A timer on these parts, with a backstop poll of 1 s.
    fn timer(&self) -> Timer {
        Timer::new(
            self.pools.claims.clone(),
            self.signal.clone(),
            self.clock.clone(),
            self.queues.clone(),
            Duration::from_secs(1),
        )
    }
}

fn parts(pool: &Db, concurrency: usize) -> Parts {
    Parts {
        pools: Pools::new(pool, 1, EngineConfig::default().lease),
        queues: Arc::new(Queues::new(&[("default".to_string(), concurrency)])),
        signal: Arc::new(TimerSignal::default()),
        clock: Arc::new(DbClock::default()),
    }
}

#[tokio::test]
async fn the_timer_stages_a_job_whose_due_time_moved_earlier_at_its_new_time() {
    let db = test_db().await;
    let (workers, _h) = gated_workers();
    let client = Client::new(db.pool.clone(), Arc::new(workers));
    let p = parts(&db.pool, 1);
    let mut timer = p.timer();
    let at = Utc::now() + chrono::Duration::seconds(60);
    let job = client.insert(&gated("quick").at(at)).await.unwrap().job;
    assert_eq!(
        timer.run_once().await.unwrap(),
        Tick::Wait(Some(job.scheduled_at))
    );

    // Moved 300 ms ahead; the notifier passes the new time on as a hint.
    let earlier = Utc::now() + chrono::Duration::milliseconds(300);
    let moved = client.reschedule(job.id, earlier).await.unwrap();
    p.signal.hint(moved.scheduled_at.timestamp_millis());
    let Tick::Wait(Some(next)) = timer.run_once().await.unwrap() else {
        panic!("the timer staged a job before it was due");
    };
    assert!(
        next <= moved.scheduled_at,
        "the timer still waits for the old due time"
    );
    assert_eq!(state_of(&db.pool, job.id).await, JobState::Scheduled);

    // At the new time (by the database clock), one pass stages it and wakes its producer.
    let wait = (moved.scheduled_at - p.clock.now())
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    let mut tick = timer.run_once().await.unwrap();
    loop {
        match tick {
            // A hair early by the database clock.
            Tick::Pause(pause) => tokio::time::sleep(pause).await,
            // The pass read the table again and, with it, the database's clock: a better reading
            // than the first (made under load) can put the new time a few ms ahead still. It
            // waits for the new time, never for the old one.
            Tick::Wait(Some(next)) if next <= moved.scheduled_at => {
                let left = (next - p.clock.now()).to_std().unwrap_or_default();
                assert!(left < Duration::from_secs(1), "waits {left:?} more");
                tokio::time::sleep(left + Duration::from_millis(1)).await;
            }
            _ => break,
        }
        tick = timer.run_once().await.unwrap();
    }
    assert_eq!(tick, Tick::Staged(vec!["default".to_string()]));
    assert_eq!(state_of(&db.pool, job.id).await, JobState::Available);
    p.pools.close().await;
}

/// Another node's timer (or claim ahead) takes most due jobs first under load: this node's stage
/// then finds nothing, a row locked by the other node's statement. That must not pile up into a
/// long pause for the *next* due time: the chaos suite saw every node's timer stop for up to a
/// second (2^n ms after n such races in a row), and the scheduled jobs of the whole cluster
/// waited. Only the same due time found locked again backs off.
#[tokio::test]
async fn due_jobs_taken_by_another_node_do_not_slow_the_timer_for_the_next_one() {
    let db = test_db().await;
    let (workers, _h) = gated_workers();
    let client = Client::new(db.pool.clone(), Arc::new(workers));
    let p = parts(&db.pool, 1);
    let mut timer = p.timer();
    let mut pauses = Vec::new();
    for round in 0..12 {
        let job = client
            .insert(&gated("quick").at(Utc::now() + chrono::Duration::seconds(60)))
            .await
            .unwrap()
            .job;
        // Due a second ago, a distinct time each round.
        sqlx::query(
            "UPDATE jobs SET scheduled_at = now() - interval '1 second' + $2 * interval '1 ms'
             WHERE id = $1",
        )
        .bind(job.id)
        .bind(round as f64)
        .execute(&db.pool)
        .await
        .unwrap();
        // The other node's stage holds the row while this node's timer looks.
        let mut other = db.pool.begin().await.unwrap();
        sqlx::query("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE")
            .bind(job.id)
            .execute(&mut *other)
            .await
            .unwrap();
        let Tick::Pause(pause) = timer.run_once().await.unwrap() else {
            panic!("round {round}: staged a row locked by another transaction");
        };
        pauses.push(pause);
        if round == 0 {
            // The same due time still locked: that one backs off.
            let Tick::Pause(again) = timer.run_once().await.unwrap() else {
                panic!("staged a locked row");
            };
            assert!(
                again > pause,
                "no back-off for a row that stays locked: {pause:?} then {again:?}"
            );
        }
        // ... and stages it.
        sqlx::query("UPDATE jobs SET state = 'available' WHERE id = $1")
            .bind(job.id)
            .execute(&mut *other)
            .await
            .unwrap();
        other.commit().await.unwrap();
    }
    assert!(
        pauses.iter().all(|p| *p <= Duration::from_millis(2)),
        "the timer paused longer and longer for new due times that other nodes took: {pauses:?}"
    );
    p.pools.close().await;
}

#[tokio::test]
async fn the_producer_claims_into_free_slots_and_no_more() {
    let db = test_db().await;
    let (workers, mut h) = gated_workers();
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    let p = parts(&db.pool, 3);
    let (completions, mut outcomes) = mpsc::unbounded_channel();
    let attempts = Arc::new(Attempts::default());
    let metrics = Arc::new(Metrics::new());
    let executor = Executor::new(ExecutorParts {
        workers,
        pool: db.pool.clone(),
        attempts: attempts.clone(),
        clock: p.clock.clone(),
        metrics: metrics.clone(),
        completions,
        node_id: "solo".into(),
        hooks: Default::default(),
    });
    let queue = p.queues.get("default").unwrap().clone();
    let producer = Producer::new(
        queue.clone(),
        p.pools.claims.clone(),
        ClaimSettings {
            node_id: "solo".into(),
            lease: Duration::from_secs(30),
            batch: 200,
            backstop_poll: Duration::from_secs(1),
        },
        executor.clone(),
        metrics,
    );
    let batch: Vec<NewJob> = (0..5).map(|_| gated("hold")).collect();
    client.insert_many(&batch).await.unwrap();
    let states = || async {
        sqlx::query_as::<_, (String, i64)>(
            "SELECT state::text, count(*) FROM jobs GROUP BY state ORDER BY state",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap()
    };

    // Three slots: three claimed and started, two left waiting; nothing more to claim at once.
    assert!(!producer.run_once().await.unwrap());
    assert_eq!(
        states().await,
        [("available".into(), 2), ("executing".into(), 3)]
    );
    let mut started = Vec::new();
    while started.len() < 3 {
        if let Event::Started { id, .. } = h.next().await {
            started.push(id);
        }
    }
    assert_eq!(attempts.running_count(), 3);
    assert!(
        !producer.run_once().await.unwrap(),
        "claimed with no slot free"
    );
    assert_eq!(
        states().await,
        [("available".into(), 2), ("executing".into(), 3)]
    );

    // One handler returns: its slot frees, and the next claim takes exactly one job.
    h.gates.release(started[0]);
    let outcome = tokio::time::timeout(Duration::from_secs(5), outcomes.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.claim.id, started[0]);
    wait_for("the slot to free", Duration::from_secs(5), || async {
        queue.free_slots() == 1
    })
    .await;
    producer.run_once().await.unwrap();
    // (The finished job stays executing: no completer runs here.)
    assert_eq!(
        states().await,
        [("available".into(), 1), ("executing".into(), 4)]
    );
    h.gates.release_all();
    assert!(executor.drain(Duration::from_secs(5)).await);
    p.pools.close().await;
}

/// Runs one query on the handlers' pool.
struct Queries;

impl Worker for Queries {
    fn kind(&self) -> &'static str {
        "query"
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            sqlx::query("SELECT 1").execute(ctx.pool()).await?;
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_handler_given_a_connection_the_database_dropped_runs_again_at_once_uncounted() {
    // After a database restart or a cut, the handlers' pool still holds the dropped connections
    // (no ping before a checkout, as the server's pools): the first queries to take them fail.
    // Such an attempt never reached the database: it must not cost an attempt and a backoff (a
    // question's lock would wait for its retry, past its game time).
    let db = test_db().await;
    let options: PgConnectOptions = db.direct_url.parse().unwrap();
    let handlers = PgPoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .connect_with(options.application_name("handlers-dropped"))
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(handlers.acquire().await.unwrap());
    }
    drop(held);
    let mut workers = Workers::new();
    workers.register(Queries);
    let engine = Engine::start(Db::from(handlers.clone()), workers, config(2))
        .await
        .unwrap();
    let dropped: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE application_name = 'handlers-dropped' AND state = 'idle'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(dropped >= 1, "no idle handler connection to drop");
    // Inserted on another pool: the client's shares the handlers'.
    let id = JobId(
        sqlx::query_scalar(
            "INSERT INTO jobs (kind, state) VALUES ('query', 'available') RETURNING id",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap(),
    );
    wait_for("the job to finish", Duration::from_secs(10), || async {
        state_of(&db.pool, id).await == JobState::Completed
    })
    .await;
    let (attempt, errors): (i32, serde_json::Value) =
        sqlx::query_as("SELECT attempt, errors FROM jobs WHERE id = $1")
            .bind(id.0)
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        (attempt, errors),
        (1, json!([])),
        "a dropped connection cost the job an attempt"
    );
    engine.stop().await;
}

/// A node whose outcomes cannot be written (the database stalls its completions) stops claiming
/// once a bounded number wait: the slot of a finished attempt frees before its outcome is
/// written, and before this bound the producer went on claiming every job of the queue, each
/// one's lease renewed by ever larger heartbeats until they lapsed and the jobs ran again.
#[tokio::test]
async fn a_node_whose_outcomes_cannot_be_written_stops_claiming() {
    use kickoff::engine::node::MAX_PENDING_OUTCOMES;
    use kickoff::engine::{Engine, EngineConfig, NewJob, Workers};
    let db = test_db().await;
    let total = MAX_PENDING_OUTCOMES * 3;
    let jobs: Vec<NewJob> = (0..total)
        .map(|i| NewJob::new("noop", json!({ "i": i })))
        .collect();
    for chunk in jobs.chunks(2_000) {
        kickoff::engine::store::jobs::job_insert_many(
            &db.pool,
            chunk,
            &[],
            kickoff::engine::store::jobs::InsertRules::trusted(&["noop"]),
        )
        .await
        .unwrap();
    }
    // Every completion writes an attempt record: a lock on their table holds them all.
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE job_attempts IN SHARE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let mut workers = Workers::new();
    workers.register(kickoff::workers::noop::NoopWorker);
    let engine = Engine::start(
        db.pool.clone(),
        workers,
        EngineConfig {
            queues: vec![("default".into(), 10)],
            lease: Duration::from_secs(30),
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let executing = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM jobs WHERE state = 'executing'")
            .fetch_one(&db.pool)
            .await
            .unwrap()
    };
    wait_for(
        "the outcomes to pile up",
        Duration::from_secs(30),
        || async { executing().await >= MAX_PENDING_OUTCOMES as i64 },
    )
    .await;
    // Three backstop polls later (the producer's every wake-up included) it claimed no more
    // than one claim's worth past the bound.
    let since = kickoff::engine::store::jobs::db_now(&db.pool)
        .await
        .unwrap();
    wait_for("three seconds", Duration::from_secs(10), || async {
        kickoff::engine::store::jobs::db_now(&db.pool)
            .await
            .unwrap()
            - since
            > chrono::Duration::seconds(3)
    })
    .await;
    let held = executing().await;
    assert!(
        held <= (MAX_PENDING_OUTCOMES + 10 + 1_000) as i64,
        "{held} jobs claimed with their outcomes unwritten"
    );
    // Once the writes go through, every job completes, each once.
    blocker.rollback().await.unwrap();
    wait_for("every job to complete", Duration::from_secs(60), || async {
        let done: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'completed'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        done == total as i64
    })
    .await;
    let twice: i64 = sqlx::query_scalar("SELECT count(*) FROM job_attempts WHERE attempt > 1")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(twice, 0);
    engine.stop().await;
}
