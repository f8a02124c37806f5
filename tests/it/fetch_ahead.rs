//! Fetch-ahead: a queue claims a few jobs more than it has free slots, and a slot that frees starts
//! the next one without a round trip. These tests hold the buffered jobs to the rules of any
//! claimed job: their rows say so (executing, this node, a lease the heartbeat renews), a cancel
//! stops them before they start, a stopping node hands them back with their attempt restored, a
//! dead node's are rescued, and a node never hoards jobs that another node's free slots could run.
//! A pause holds them as it holds the jobs in the table: a buffered job, or one claimed ahead of its
//! due time, of a queue or kind paused after its claim never starts, and goes back to the table.
//! A producer woken only to claim ahead does not ask again for available jobs it just found none
//! of, but claims at the next signal that may bring some.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kickoff::engine::Db;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, Notify};

use crate::common::{state_of, test_db, wait_for};
use kickoff::engine::executor::{Executor, ExecutorParts};
use kickoff::engine::maintenance::rescuer::RescuerConfig;
use kickoff::engine::metrics::Metrics;
use kickoff::engine::node::{Attempts, DbClock, Pools};
use kickoff::engine::producer::{ClaimSettings, Producer};
use kickoff::engine::queue_state::QueueState;
use kickoff::engine::{
    BoxFuture, Client, Engine, EngineConfig, JobContext, JobId, JobState, NewJob, WorkError,
    Worker, Workers,
};

/// A start of an attempt: which job, on which node.
#[derive(Debug, Clone)]
struct Start {
    id: JobId,
    node: String,
}

#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    changed: Notify,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.changed.notify_waiters();
    }

    async fn wait(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if *self.open.lock().unwrap() {
                return;
            }
            changed.await;
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Args {
    /// quick | hold | sleep
    mode: String,
    ms: u64,
}

struct Probe {
    starts: mpsc::UnboundedSender<Start>,
    gate: Arc<Gate>,
}

impl Worker for Probe {
    fn kind(&self) -> &'static str {
        "probe"
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        let _ = self.starts.send(Start {
            id: ctx.job.id,
            node: ctx.job.attempted_by.clone().unwrap_or_default(),
        });
        Box::pin(async move {
            let args: Args = ctx.args()?;
            match args.mode.as_str() {
                "hold" => {
                    tokio::select! {
                        _ = self.gate.wait() => {}
                        _ = ctx.cancelled().cancelled() => {}
                    }
                }
                "sleep" => tokio::time::sleep(Duration::from_millis(args.ms)).await,
                _ => {}
            }
            Ok(())
        })
    }
}

fn probe_workers() -> (Workers, mpsc::UnboundedReceiver<Start>, Arc<Gate>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let gate = Arc::new(Gate::default());
    let mut w = Workers::new();
    w.register(Probe {
        starts: tx,
        gate: gate.clone(),
    });
    (w, rx, gate)
}

fn probe(mode: &str) -> NewJob {
    NewJob::new("probe", json!({ "mode": mode }))
}

fn config(node: &str, concurrency: usize, fetch_ahead: usize) -> EngineConfig {
    EngineConfig {
        node_id: node.into(),
        queues: vec![("default".into(), concurrency)],
        lease: Duration::from_secs(2),
        heartbeat: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(2),
        fetch_ahead,
        rescuer: RescuerConfig {
            interval: Duration::from_millis(200),
            ..RescuerConfig::default()
        },
        ..EngineConfig::default()
    }
}

/// `(state, attempted_by, lease held, attempt)` of every job, by id.
async fn rows(pool: &Db) -> HashMap<JobId, (JobState, Option<String>, bool, i32)> {
    let rows: Vec<(JobId, JobState, Option<String>, bool, i32)> = sqlx::query_as(
        "SELECT id, state, attempted_by, lease_expires_at IS NOT NULL, attempt FROM jobs",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(id, s, by, lease, attempt)| (id, (s, by, lease, attempt)))
        .collect()
}

async fn count_in(pool: &Db, state: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state::text = $1")
        .bind(state)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Waits for the next start, within 10 s.
async fn next_start(rx: &mut mpsc::UnboundedReceiver<Start>) -> Start {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a start within 10 s")
        .expect("channel open")
}

/// Runs `n` quick jobs on the engine whose starts `starts` reports, until all completed: its
/// queue's pace then says "jobs far shorter than a claim".
async fn warm_up(
    pool: &Db,
    client: &Client,
    starts: &mut mpsc::UnboundedReceiver<Start>,
    n: usize,
) {
    let warm: Vec<NewJob> = (0..n).map(|_| probe("quick")).collect();
    client.insert_many(&warm).await.unwrap();
    for _ in 0..n {
        next_start(starts).await;
    }
    wait_for("the warm-up completed", Duration::from_secs(10), || async {
        count_in(pool, "completed").await == n as i64
    })
    .await;
}

/// A producer and executor of queue `default` on `pool`, without an engine around them (no
/// heartbeat, no completer, no notifier): the test drives each claim.
struct Solo {
    queue: Arc<QueueState>,
    producer: Producer,
    executor: Executor,
    attempts: Arc<Attempts>,
    pools: Pools,
    /// The attempts' outcomes (no completer writes them).
    outcomes: mpsc::UnboundedReceiver<kickoff::engine::completer::Completion>,
}

fn solo(
    pool: &Db,
    workers: Arc<Workers>,
    slots: usize,
    fetch_ahead: usize,
    lease: Duration,
) -> Solo {
    let pools = Pools::new(pool, 1, lease);
    let queue = Arc::new(QueueState::new("default".into(), slots).with_fetch_ahead(fetch_ahead));
    let attempts = Arc::new(Attempts::default());
    let metrics = Arc::new(Metrics::new());
    let (completions, outcomes) = mpsc::unbounded_channel();
    let executor = Executor::new(ExecutorParts {
        workers,
        pool: pool.clone(),
        attempts: attempts.clone(),
        clock: Arc::new(DbClock::default()),
        metrics: metrics.clone(),
        completions,
        node_id: "solo".into(),
        hooks: Default::default(),
    });
    let producer = Producer::new(
        queue.clone(),
        pools.claims.clone(),
        ClaimSettings {
            node_id: "solo".into(),
            lease,
            batch: 200,
            backstop_poll: Duration::from_secs(1),
        },
        executor.clone(),
        metrics,
    );
    Solo {
        queue,
        producer,
        executor,
        attempts,
        pools,
        outcomes,
    }
}

/// Makes the queue's pace say "jobs far shorter than a claim": its lead is then its fetch-ahead.
fn fast_pace(queue: &QueueState) {
    queue.attempt_took(Duration::from_micros(10));
    queue.claim_took(Duration::from_millis(1));
}

#[tokio::test]
async fn buffered_jobs_are_claimed_honestly_and_a_freed_slot_starts_one_without_a_claim() {
    let db = test_db().await;
    let (workers, mut starts, gate) = probe_workers();
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    let s = solo(&db.pool, workers, 1, 3, Duration::from_secs(30));
    fast_pace(&s.queue);
    assert_eq!(s.queue.lead(), 3);
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(client.insert(&probe("hold")).await.unwrap().job.id);
    }

    // One slot and a lead of three: four claimed, one running, three buffered; two left.
    assert!(!s.producer.run_once().await.unwrap());
    let first = next_start(&mut starts).await;
    assert_eq!(first.id, ids[0], "the oldest job runs first");
    assert_eq!(s.queue.buffered(), 3);
    let r = rows(&db.pool).await;
    for id in &ids[..4] {
        let (state, by, lease, attempt) = &r[id];
        assert_eq!(
            (state, by.as_deref(), *lease, *attempt),
            (&JobState::Executing, Some("solo"), true, 1),
            "job {id} is shown as claimed by its node, under a lease"
        );
    }
    for id in &ids[4..] {
        assert_eq!(r[id].0, JobState::Available);
    }
    // The heartbeat renews every claim the node holds: the buffered ones too.
    let held: HashSet<JobId> = s.attempts.held().iter().map(|c| c.id).collect();
    assert_eq!(held, ids[..4].iter().copied().collect());
    // Outstanding is at most the slots plus the lead: a second pass claims nothing.
    assert!(!s.producer.run_once().await.unwrap());
    assert_eq!(count_in(&db.pool, "available").await, 2);

    // The held job ends: the next buffered one starts in its slot, with no claim made.
    gate.open();
    let mut next = Vec::new();
    for _ in 0..3 {
        next.push(next_start(&mut starts).await.id);
    }
    assert_eq!(
        next,
        ids[1..4],
        "the buffered jobs ran in order, without a claim"
    );
    assert_eq!(s.queue.buffered(), 0);
    assert_eq!(count_in(&db.pool, "available").await, 2);
    assert!(s.executor.drain(Duration::from_secs(5)).await);
    s.pools.close().await;
}

#[tokio::test]
async fn a_buffered_job_cancelled_while_it_waits_never_starts() {
    let db = test_db().await;
    let (workers, mut starts, gate) = probe_workers();
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    let s = solo(&db.pool, workers, 1, 3, Duration::from_secs(30));
    fast_pace(&s.queue);
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(client.insert(&probe("hold")).await.unwrap().job.id);
    }
    s.producer.run_once().await.unwrap();
    assert_eq!(next_start(&mut starts).await.id, ids[0]);
    assert_eq!(s.queue.buffered(), 3);

    // An operator cancels a buffered job; the node hears of it (as its notifier would tell it).
    let cancelled = client.cancel(ids[2]).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    s.attempts.stop_jobs(&[ids[2]]);
    assert!(
        !s.attempts.held().iter().any(|c| c.id == ids[2]),
        "the lease of a cancelled job is no longer renewed"
    );

    gate.open();
    let mut ran = vec![next_start(&mut starts).await.id];
    ran.push(next_start(&mut starts).await.id);
    assert_eq!(ran, [ids[1], ids[3]]);
    assert!(s.executor.drain(Duration::from_secs(5)).await);
    assert!(
        starts.try_recv().is_err(),
        "the cancelled job started after all"
    );
    assert_eq!(s.attempts.running_count(), 0, "nothing left registered");
    assert_eq!(state_of(&db.pool, ids[2]).await, JobState::Cancelled);
    s.pools.close().await;
}

/// Makes the queue's pace say "short jobs, slow claims": its lead is its fetch-ahead, and a buffered
/// job may wait seconds for a slot before it is handed back for having waited too long (so a test
/// sees any other hand-back first).
fn patient_pace(queue: &QueueState) {
    queue.attempt_took(Duration::from_micros(10));
    queue.claim_took(Duration::from_secs(1));
}

/// Pauses `queue` on every node, and on this one at once (as its settings sync would).
async fn pause_queue_here(pool: &Db, queue: &QueueState, paused: bool) {
    let row = kickoff::engine::store::queues::queue_set_paused(pool, &queue.name, paused)
        .await
        .unwrap();
    assert!(queue.apply(&row), "the pause changed nothing");
}

/// Pauses `kind` on every node, and on this one at once (as its settings sync would).
async fn pause_kind_here(pool: &Db, queue: &QueueState, kind: &str) {
    use kickoff::engine::store::kinds;
    kinds::kind_pause(pool, kind, None).await.unwrap();
    let paused = kinds::kind_pause_snapshot(pool).await.unwrap();
    assert!(queue.kinds.set(paused.version, paused.kinds));
}

/// `(state, lease held, attempt)` of a job.
async fn row_of(pool: &Db, id: JobId) -> (JobState, bool, i32) {
    let (state, _, lease, attempt) = rows(pool).await[&id].clone();
    (state, lease, attempt)
}

/// Expects no start within 300 ms (after a slot freed, or a due time passed: a start would come
/// within microseconds).
async fn no_start_within_a_moment(starts: &mut mpsc::UnboundedReceiver<Start>, what: &str) {
    if let Ok(Some(s)) = tokio::time::timeout(Duration::from_millis(300), starts.recv()).await {
        panic!("{what}: job {} started", s.id);
    }
}

#[tokio::test]
async fn buffered_jobs_of_a_queue_paused_after_their_claim_never_start_and_go_back() {
    let db = test_db().await;
    let (workers, mut starts, gate) = probe_workers();
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    let mut s = solo(&db.pool, workers, 1, 3, Duration::from_secs(30));
    patient_pace(&s.queue);
    let mut ids = vec![client.insert(&probe("hold")).await.unwrap().job.id];
    for _ in 0..2 {
        ids.push(client.insert(&probe("quick")).await.unwrap().job.id);
    }
    s.producer.run_once().await.unwrap();
    assert_eq!(next_start(&mut starts).await.id, ids[0]);
    assert_eq!(s.queue.buffered(), 2);

    // The queue is paused; then the running job ends and its slot frees.
    pause_queue_here(&db.pool, &s.queue, true).await;
    gate.open();
    let outcome = tokio::time::timeout(Duration::from_secs(5), s.outcomes.recv())
        .await
        .expect("the running job ended")
        .unwrap();
    assert_eq!(outcome.claim.id, ids[0]);
    no_start_within_a_moment(
        &mut starts,
        "a buffered job of a paused queue took the freed slot",
    )
    .await;

    // The producer hands them back, as if never claimed.
    assert!(!s.producer.run_once().await.unwrap());
    assert_eq!(s.queue.buffered(), 0);
    for id in &ids[1..] {
        assert_eq!(
            row_of(&db.pool, *id).await,
            (JobState::Available, false, 0),
            "job {id} is back in the table"
        );
    }
    assert!(!s.attempts.held().iter().any(|c| ids[1..].contains(&c.id)));

    // Resumed: claimed again, and they run.
    pause_queue_here(&db.pool, &s.queue, false).await;
    s.producer.run_once().await.unwrap();
    let mut ran = vec![next_start(&mut starts).await.id];
    ran.push(next_start(&mut starts).await.id);
    assert_eq!(ran, ids[1..]);
    assert!(s.executor.drain(Duration::from_secs(5)).await);
    s.pools.close().await;
}

#[tokio::test]
async fn a_buffered_job_of_a_kind_paused_after_its_claim_never_starts_and_the_next_passes_it() {
    let db = test_db().await;
    let (mut workers, mut starts, gate) = probe_workers();
    let (tx, mut clocked_starts) = mpsc::unbounded_channel();
    workers.register(Clocked(tx));
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    let mut s = solo(&db.pool, workers, 1, 3, Duration::from_secs(30));
    patient_pace(&s.queue);
    let long = client.insert(&probe("hold")).await.unwrap().job.id;
    let paused = client.insert(&probe("quick")).await.unwrap().job.id;
    let other = client
        .insert(&NewJob::new("clocked", json!({})))
        .await
        .unwrap()
        .job
        .id;
    s.producer.run_once().await.unwrap();
    assert_eq!(next_start(&mut starts).await.id, long);
    assert_eq!(s.queue.buffered(), 2);

    // The kind `probe` is paused between the claim and the start.
    pause_kind_here(&db.pool, &s.queue, "probe").await;
    gate.open();
    s.outcomes.recv().await.unwrap();
    // The freed slot goes to the job behind it, of a kind not paused.
    let (started, _) = tokio::time::timeout(Duration::from_secs(5), clocked_starts.recv())
        .await
        .expect("the job of the kind not paused started")
        .unwrap();
    assert_eq!(started, other);
    no_start_within_a_moment(&mut starts, "a buffered job of a paused kind started").await;

    s.producer.run_once().await.unwrap();
    assert_eq!(s.queue.buffered(), 0);
    assert_eq!(
        row_of(&db.pool, paused).await,
        (JobState::Available, false, 0)
    );
    assert!(s.executor.drain(Duration::from_secs(5)).await);
    s.pools.close().await;
}

#[tokio::test]
async fn buffered_jobs_beyond_a_lowered_concurrency_wait_for_a_slot_under_it() {
    let db = test_db().await;
    let (workers, mut starts, gate) = probe_workers();
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    let s = solo(&db.pool, workers, 2, 3, Duration::from_secs(30));
    patient_pace(&s.queue);
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(client.insert(&probe("hold")).await.unwrap().job.id);
    }
    for _ in 0..3 {
        ids.push(client.insert(&probe("quick")).await.unwrap().job.id);
    }
    s.producer.run_once().await.unwrap();
    let mut running = vec![next_start(&mut starts).await.id];
    running.push(next_start(&mut starts).await.id);
    running.sort();
    assert_eq!(running, ids[..2]);
    assert_eq!(s.queue.buffered(), 3);

    // Down to one slot; one of the two running jobs ends (stopped: cancelled, as the notifier
    // would tell the node). One still runs: that is the whole new limit.
    let row = kickoff::engine::store::queues::queue_set_concurrency(&db.pool, "default", Some(1))
        .await
        .unwrap();
    assert!(s.queue.apply(&row));
    s.attempts.stop_jobs(&[ids[0]]);
    wait_for(
        "the stopped job's slot to free",
        Duration::from_secs(5),
        || async { s.queue.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 1 },
    )
    .await;
    // Its producer, woken by the freed slot, fills the slots.
    s.producer.run_once().await.unwrap();
    no_start_within_a_moment(&mut starts, "a buffered job started beyond the new limit").await;
    assert_eq!(s.queue.buffered(), 3);

    // The other ends: the buffered jobs run one at a time.
    gate.open();
    let mut ran = Vec::new();
    for _ in 0..3 {
        ran.push(next_start(&mut starts).await.id);
        assert!(s.queue.in_flight.load(std::sync::atomic::Ordering::SeqCst) <= 1);
    }
    assert_eq!(ran, ids[2..]);
    assert!(s.executor.drain(Duration::from_secs(5)).await);
    s.pools.close().await;
}

#[tokio::test]
async fn a_stopping_node_hands_its_buffered_jobs_back_with_their_attempt_restored() {
    let db = test_db().await;
    let (workers, mut starts, _gate) = probe_workers();
    let mut cfg = config("a", 1, 50);
    cfg.shutdown_grace = Duration::from_millis(200);
    let engine = Engine::start(db.pool.clone(), workers, cfg).await.unwrap();
    let client = engine.client();
    // Quick jobs first: the queue's pace says "short jobs", and its lead grows to 50.
    warm_up(&db.pool, &client, &mut starts, 100).await;

    // A job that holds the one slot, and 40 claimed behind it into the buffer.
    let mut batch = vec![probe("hold")];
    batch.extend((0..40).map(|_| probe("quick")));
    client.insert_many(&batch).await.unwrap();
    let ids: Vec<JobId> =
        sqlx::query_scalar("SELECT id FROM jobs WHERE state <> 'completed' ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(next_start(&mut starts).await.id, ids[0]);
    // (Stopped at once: well before a buffered job could wait long enough to be handed back.)
    engine.stop().await;
    assert!(
        starts.try_recv().is_err(),
        "a buffered job started while the node stopped"
    );

    let r = rows(&db.pool).await;
    for id in &ids {
        let (state, _, lease, attempt) = &r[id];
        assert_eq!(
            (*state, *lease, *attempt),
            (JobState::Available, false, 0),
            "job {id} is available again, as if never claimed"
        );
    }
}

#[tokio::test]
async fn the_buffered_jobs_of_a_node_that_died_are_rescued_and_run_once_elsewhere() {
    let db = test_db().await;
    let (workers, mut dead_starts, _gate) = probe_workers();
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    // The node that dies: a one-second lease that nothing renews (it has no heartbeat).
    let dead = solo(&db.pool, workers, 1, 5, Duration::from_secs(1));
    fast_pace(&dead.queue);
    let mut ids = vec![client.insert(&probe("hold")).await.unwrap().job.id];
    for _ in 0..5 {
        ids.push(client.insert(&probe("quick")).await.unwrap().job.id);
    }
    dead.producer.run_once().await.unwrap();
    assert_eq!(next_start(&mut dead_starts).await.id, ids[0]);
    assert_eq!(dead.queue.buffered(), 5);
    assert_eq!(count_in(&db.pool, "executing").await, 6);

    let (workers, mut starts, gate) = probe_workers();
    gate.open();
    let engine = Engine::start(db.pool.clone(), workers, config("b", 4, 10))
        .await
        .unwrap();
    let mut ran = Vec::new();
    while ran.len() < ids.len() {
        let s = tokio::time::timeout(Duration::from_secs(15), starts.recv())
            .await
            .expect("every job rescued and run within 15 s")
            .unwrap();
        assert_eq!(s.node, "b");
        ran.push(s.id);
    }
    wait_for("every job completed", Duration::from_secs(10), || async {
        count_in(&db.pool, "completed").await == ids.len() as i64
    })
    .await;
    ran.sort();
    assert_eq!(ran, ids, "each job ran once on the live node");
    assert!(
        dead_starts.try_recv().is_err(),
        "a buffered job started on the dead node"
    );
    engine.stop().await;
    dead.pools.close().await;
}

#[tokio::test]
async fn a_node_whose_pace_says_short_jobs_does_not_hoard_long_ones_from_another_node() {
    let db = test_db().await;
    let (workers, mut starts, _gate) = probe_workers();
    let a = Engine::start(db.pool.clone(), workers, config("a", 4, 100))
        .await
        .unwrap();
    let client = a.client();
    // Node a learns a fast pace from quick jobs: its lead grows to its fetch-ahead.
    warm_up(&db.pool, &client, &mut starts, 200).await;
    let (workers, mut b_starts, _gate) = probe_workers();
    let b = Engine::start(db.pool.clone(), workers, config("b", 4, 100))
        .await
        .unwrap();

    // Then 80 jobs of 25 ms each: four slots on each node.
    let slow: Vec<NewJob> = (0..80)
        .map(|_| NewJob::new("probe", json!({ "mode": "sleep", "ms": 25 })))
        .collect();
    client.insert_many(&slow).await.unwrap();
    wait_for(
        "the slow jobs completed",
        Duration::from_secs(20),
        || async { count_in(&db.pool, "completed").await == 280 },
    )
    .await;
    let mut by_b = 0;
    while b_starts.try_recv().is_ok() {
        by_b += 1;
    }
    let mut by_a = 0;
    while starts.try_recv().is_ok() {
        by_a += 1;
    }
    assert!(
        by_b >= 20,
        "node b ran {by_b} of the 80 slow jobs (node a {by_a}): a hoarded them in its buffer"
    );
    a.stop().await;
    b.stop().await;
}

// ---- claimed ahead of the due time --------------------------------------------------------------

/// When each job started, by the local clock (the test cluster runs on this machine: its clock is
/// the database's), and its row.
async fn started_at(
    rx: &mut mpsc::UnboundedReceiver<(JobId, chrono::DateTime<chrono::Utc>)>,
    n: usize,
) -> HashMap<JobId, chrono::DateTime<chrono::Utc>> {
    let mut out = HashMap::new();
    while out.len() < n {
        let (id, at) = tokio::time::timeout(Duration::from_secs(15), rx.recv())
            .await
            .expect("a start within 15 s")
            .unwrap();
        out.insert(id, at);
    }
    out
}

/// Records the local clock at each start.
struct Clocked(mpsc::UnboundedSender<(JobId, chrono::DateTime<chrono::Utc>)>);

impl Worker for Clocked {
    fn kind(&self) -> &'static str {
        "clocked"
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        let _ = self.0.send((ctx.job.id, chrono::Utc::now()));
        Box::pin(async { Ok(()) })
    }
}

fn clocked() -> (
    Workers,
    mpsc::UnboundedReceiver<(JobId, chrono::DateTime<chrono::Utc>)>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut w = Workers::new();
    w.register(Clocked(tx));
    (w, rx)
}

async fn db_now(pool: &Db) -> chrono::DateTime<chrono::Utc> {
    kickoff::engine::store::jobs::db_now(pool).await.unwrap()
}

/// A node of `slots` slots (no engine around it: the test drives each claim) whose one job, due
/// `in_ms` from now, it has claimed ahead of its due time.
async fn solo_claimed_ahead(
    pool: &Db,
    workers: Arc<Workers>,
    slots: usize,
    lease: Duration,
    job: NewJob,
    in_ms: i64,
) -> (Solo, kickoff::engine::Job, chrono::DateTime<chrono::Utc>) {
    let client = Client::new(pool.clone(), workers.clone());
    let node = solo(pool, workers, slots, 0, lease);
    let due = db_now(pool).await + chrono::Duration::milliseconds(in_ms);
    let job = client.insert(&job.at(due)).await.unwrap().job;
    node.queue.claim_soon(due);
    node.producer.run_once().await.unwrap();
    assert_eq!(state_of(pool, job.id).await, JobState::Executing);
    (node, job, due)
}

#[tokio::test]
async fn jobs_claimed_ahead_start_at_their_due_time_and_never_before() {
    let db = test_db().await;
    let (workers, mut rx) = clocked();
    let client = Client::new(db.pool.clone(), Arc::new(clocked().0));
    // A claim-ahead far longer than a claim, even a slow one of a loaded test run.
    let mut cfg = config("a", 10, 100);
    cfg.claim_ahead = Duration::from_millis(200);
    let engine = Engine::start(db.pool.clone(), workers, cfg).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = db_now(&db.pool).await + chrono::Duration::milliseconds(400);
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| {
            NewJob::new("clocked", json!({})).at(start + chrono::Duration::milliseconds(7 * i))
        })
        .collect();
    client.insert_many(&jobs).await.unwrap();
    let starts = started_at(&mut rx, 60).await;
    wait_for("every job completed", Duration::from_secs(10), || async {
        count_in(&db.pool, "completed").await == 60
    })
    .await;
    let rows: Vec<(
        JobId,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
    )> = sqlx::query_as("SELECT id, scheduled_at, attempted_at FROM jobs")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let mut ahead = 0;
    for (id, due, attempted_at) in &rows {
        let started = starts[id];
        assert!(
            started >= *due,
            "job {id} started {} µs before its due time",
            (*due - started).num_microseconds().unwrap_or(0)
        );
        if attempted_at == due {
            ahead += 1;
        }
    }
    // A claim made ahead records the due time as the attempt's start; a claim after the stage
    // records a later instant.
    assert!(
        ahead >= 30,
        "only {ahead} of 60 jobs were claimed ahead of their due time"
    );
    engine.stop().await;
}

/// An engine with `cfg` and one job due `in_ms` from now, waited for until it is claimed ahead.
async fn claimed_ahead(
    pool: &Db,
    cfg: EngineConfig,
    in_ms: i64,
) -> (
    Engine,
    Client,
    JobId,
    chrono::DateTime<chrono::Utc>,
    mpsc::UnboundedReceiver<(JobId, chrono::DateTime<chrono::Utc>)>,
) {
    let (workers, rx) = clocked();
    let client = Client::new(pool.clone(), Arc::new(clocked().0));
    let engine = Engine::start(pool.clone(), workers, cfg).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let due = db_now(pool).await + chrono::Duration::milliseconds(in_ms);
    let job = client
        .insert(&NewJob::new("clocked", json!({})).at(due))
        .await
        .unwrap()
        .job
        .id;
    wait_for("the job claimed ahead", Duration::from_secs(5), || async {
        state_of(pool, job).await == JobState::Executing
    })
    .await;
    (engine, client, job, due, rx)
}

#[tokio::test]
async fn a_job_claimed_ahead_and_cancelled_while_it_waits_never_starts() {
    let db = test_db().await;
    let mut cfg = config("a", 2, 10);
    cfg.claim_ahead = Duration::from_millis(300);
    let (engine, client, job, due, mut rx) = claimed_ahead(&db.pool, cfg, 600).await;
    assert!(db_now(&db.pool).await < due, "claimed only once due");
    client.cancel(job).await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(rx.try_recv().is_err(), "the cancelled job started");
    assert_eq!(state_of(&db.pool, job).await, JobState::Cancelled);
    engine.stop().await;
}

#[tokio::test]
async fn a_job_claimed_ahead_and_interrupted_at_shutdown_waits_for_its_due_time_again() {
    let db = test_db().await;
    let mut cfg = config("a", 2, 10);
    cfg.claim_ahead = Duration::from_millis(300);
    cfg.shutdown_grace = Duration::from_millis(20);
    let (engine, _client, job, due, mut rx) = claimed_ahead(&db.pool, cfg, 800).await;
    // The grace ends before the due time: the waiting attempt is interrupted and handed back.
    engine.stop().await;
    assert!(db_now(&db.pool).await < due, "stopped only once due");
    let (state, _, lease, attempt) = rows(&db.pool).await[&job].clone();
    assert_eq!(
        (state, lease, attempt),
        (JobState::Scheduled, false, 0),
        "handed back to wait for its due time, not to `available` (any node would start it early)"
    );
    assert!(rx.try_recv().is_err(), "it started on the stopping node");

    // Another node starts it at its due time.
    let (workers, mut rx) = clocked();
    let b = Engine::start(db.pool.clone(), workers, config("b", 2, 10))
        .await
        .unwrap();
    let started = started_at(&mut rx, 1).await[&job];
    assert!(started >= due, "started before its due time");
    b.stop().await;
}

/// An engine `a` with two slots and claim-ahead, one of them held by a long job, and a job
/// claimed ahead, due `in_ms` from now; then a second long job takes the other slot.
async fn claimed_ahead_with_every_slot_busy(
    pool: &Db,
    in_ms: i64,
) -> (
    Engine,
    JobId,
    chrono::DateTime<chrono::Utc>,
    mpsc::UnboundedReceiver<Start>,
) {
    let (workers, mut starts, _gate) = probe_workers();
    let client = Client::new(pool.clone(), Arc::new(probe_workers().0));
    let mut cfg = config("a", 2, 0);
    cfg.claim_ahead = Duration::from_millis(300);
    cfg.shutdown_grace = Duration::from_millis(1500);
    let engine = Engine::start(pool.clone(), workers, cfg).await.unwrap();
    let first = client.insert(&probe("hold")).await.unwrap().job;
    assert_eq!(next_start(&mut starts).await.id, first.id);
    // Claimed ahead while a slot is free; another long job takes that slot meanwhile.
    let due = db_now(pool).await + chrono::Duration::milliseconds(in_ms);
    let timed = client.insert(&probe("quick").at(due)).await.unwrap().job;
    wait_for("the job claimed ahead", Duration::from_secs(5), || async {
        state_of(pool, timed.id).await == JobState::Executing
    })
    .await;
    let second = client.insert(&probe("hold")).await.unwrap().job;
    assert_eq!(next_start(&mut starts).await.id, second.id);
    (engine, timed.id, due, starts)
}

#[tokio::test]
async fn a_job_claimed_ahead_whose_instant_finds_every_slot_busy_is_handed_back_for_other_nodes() {
    let db = test_db().await;
    let (engine, job, due, mut starts) = claimed_ahead_with_every_slot_busy(&db.pool, 400).await;
    // It waits in the buffer at its instant, and goes back once it waited longer than the
    // buffer allows: other nodes' free slots may run it.
    while db_now(&db.pool).await < due + chrono::Duration::milliseconds(200) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (state, _, lease, attempt) = rows(&db.pool).await[&job].clone();
    assert_eq!((state, lease, attempt), (JobState::Available, false, 0));
    assert!(starts.try_recv().is_err(), "it started without a slot");
    engine.stop().await;
}

#[tokio::test]
async fn a_stopping_node_hands_back_at_once_a_job_claimed_ahead_that_waits_for_its_due_time() {
    let db = test_db().await;
    let (engine, job, due, mut starts) = claimed_ahead_with_every_slot_busy(&db.pool, 800).await;
    let stopping = tokio::spawn(engine.stop());
    // Handed back long before the long jobs' grace is over, to wait for its due time.
    wait_for(
        "the job handed back",
        Duration::from_millis(500),
        || async { state_of(&db.pool, job).await == JobState::Scheduled },
    )
    .await;
    assert!(db_now(&db.pool).await < due, "handed back only once due");
    stopping.await.unwrap();
    let (state, _, lease, attempt) = rows(&db.pool).await[&job].clone();
    assert_eq!((state, lease, attempt), (JobState::Scheduled, false, 0));
    assert!(
        starts.try_recv().is_err(),
        "it started on the stopping node"
    );
}

#[tokio::test]
async fn a_job_claimed_ahead_by_a_node_that_died_is_rescued_and_runs_once_after_its_due_time() {
    let db = test_db().await;
    let (workers, mut dead_rx) = clocked();
    let clocked_job = NewJob::new("clocked", json!({}));
    let (dead, job, due) = solo_claimed_ahead(
        &db.pool,
        Arc::new(workers),
        1,
        Duration::from_secs(1),
        clocked_job,
        300,
    )
    .await;
    // The node dies while its attempt waits for the due time.
    assert_eq!(
        dead.queue.timed.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    dead.executor.interrupt().await;

    let (workers, mut rx) = clocked();
    let b = Engine::start(db.pool.clone(), workers, config("b", 2, 10))
        .await
        .unwrap();
    let started = started_at(&mut rx, 1).await[&job.id];
    assert!(started >= due, "started before its due time");
    wait_for("the job completed", Duration::from_secs(5), || async {
        state_of(&db.pool, job.id).await == JobState::Completed
    })
    .await;
    assert!(dead_rx.try_recv().is_err(), "it started on the dead node");
    assert!(rx.try_recv().is_err(), "it ran twice");
    b.stop().await;
    dead.pools.close().await;
}

#[tokio::test]
async fn a_job_claimed_ahead_waits_for_its_due_time_without_holding_a_slot() {
    let db = test_db().await;
    let (workers, mut rx) = clocked();
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    // One slot.
    let clocked_job = NewJob::new("clocked", json!({}));
    let (node, timed, due) = solo_claimed_ahead(
        &db.pool,
        workers,
        1,
        Duration::from_secs(5),
        clocked_job,
        600,
    )
    .await;
    // A job due now, while the first waits for its instant: the one slot is free for it.
    let now = client
        .insert(&NewJob::new("clocked", json!({})))
        .await
        .unwrap()
        .job;
    // Its notification, as the notifier hands it on (the solo has none).
    node.queue.wake_for_work();
    node.producer.run_once().await.unwrap();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a start within 5 s")
            .unwrap()
    };
    let (first, at) = next().await;
    assert_eq!(
        first, now.id,
        "the job claimed ahead started first: the due job waited for the slot it held"
    );
    assert!(at < due, "the due job waited until the other's due time");
    let (second, at) = next().await;
    assert_eq!(second, timed.id);
    assert!(at >= due, "started before its due time");
    node.pools.close().await;
}

#[tokio::test]
async fn a_job_claimed_ahead_whose_instant_finds_every_slot_busy_starts_when_one_frees() {
    let db = test_db().await;
    let (workers, mut starts, gate) = probe_workers();
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    let (node, timed, due) = solo_claimed_ahead(
        &db.pool,
        workers,
        1,
        Duration::from_secs(5),
        probe("quick"),
        300,
    )
    .await;
    // A long job takes the one slot while the first waits for its instant.
    let long = client.insert(&probe("hold")).await.unwrap().job;
    node.queue.wake_for_work();
    node.producer.run_once().await.unwrap();
    assert_eq!(next_start(&mut starts).await.id, long.id);
    while db_now(&db.pool).await < due + chrono::Duration::milliseconds(200) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(starts.try_recv().is_err(), "started without a slot");
    assert_eq!(node.queue.buffered(), 1, "not waiting in the buffer");
    assert_eq!(state_of(&db.pool, timed.id).await, JobState::Executing);
    // The slot frees: the job waiting in the buffer takes it.
    gate.open();
    assert_eq!(next_start(&mut starts).await.id, timed.id);
    node.pools.close().await;
}

/// What a test pauses.
enum Pause {
    Queue,
    Kind,
}

/// A node of one slot whose job, due 300 ms from now, it claimed ahead; then `pause` holds it.
/// At its due time it must not start, and the producer hands it back.
async fn claimed_ahead_then_paused(pause: Pause) {
    let db = test_db().await;
    let (workers, mut starts, _gate) = probe_workers();
    let (node, job, due) = solo_claimed_ahead(
        &db.pool,
        Arc::new(workers),
        1,
        Duration::from_secs(30),
        probe("quick"),
        300,
    )
    .await;
    match pause {
        Pause::Queue => pause_queue_here(&db.pool, &node.queue, true).await,
        Pause::Kind => pause_kind_here(&db.pool, &node.queue, "probe").await,
    }
    while db_now(&db.pool).await < due + chrono::Duration::milliseconds(100) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    no_start_within_a_moment(&mut starts, "a job claimed ahead started after a pause").await;
    assert_eq!(
        node.queue.timed.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "it no longer waits for its due time"
    );
    node.producer.run_once().await.unwrap();
    assert_eq!(
        row_of(&db.pool, job.id).await,
        (JobState::Available, false, 0),
        "handed back at its due time, as if never claimed"
    );
    assert_eq!(node.queue.buffered(), 0);
    assert_eq!(node.attempts.running_count(), 0, "nothing left registered");
    node.pools.close().await;
}

#[tokio::test]
async fn a_job_claimed_ahead_of_a_queue_paused_before_its_due_time_never_starts() {
    claimed_ahead_then_paused(Pause::Queue).await;
}

#[tokio::test]
async fn a_job_claimed_ahead_of_a_kind_paused_before_its_due_time_never_starts() {
    claimed_ahead_then_paused(Pause::Kind).await;
}

#[tokio::test]
async fn a_job_claimed_ahead_then_paused_through_the_api_goes_back_and_runs_after_the_resume() {
    let db = test_db().await;
    let mut cfg = config("a", 2, 10);
    cfg.claim_ahead = Duration::from_millis(300);
    let (engine, client, job, due, mut rx) = claimed_ahead(&db.pool, cfg, 600).await;
    assert!(db_now(&db.pool).await < due, "claimed only once due");
    // Paused as an operator would: the node hears of it by its notification.
    client.set_queue_paused("default", true).await.unwrap();
    wait_for(
        "the job handed back after its due time",
        Duration::from_secs(3),
        || async { state_of(&db.pool, job).await == JobState::Available },
    )
    .await;
    assert!(rx.try_recv().is_err(), "the job of a paused queue started");
    assert_eq!(row_of(&db.pool, job).await, (JobState::Available, false, 0));
    client.set_queue_paused("default", false).await.unwrap();
    let started = started_at(&mut rx, 1).await[&job];
    assert!(started >= due);
    engine.stop().await;
}

#[tokio::test]
async fn waiting_for_the_database_clock_never_ends_before_it() {
    // The database clock runs 500 ms behind this one, measured in a 4 ms round trip: by the
    // local clock, the instant has long passed.
    let clock = DbClock::default();
    let before = chrono::Utc::now();
    let after = before + chrono::Duration::milliseconds(4);
    clock.measured(before, before - chrono::Duration::milliseconds(498), after);
    let at = clock.now() + chrono::Duration::milliseconds(30);
    assert!(at < chrono::Utc::now());
    let waited = std::time::Instant::now();
    clock.wait_until(at).await;
    assert!(
        clock.surely_past() >= at,
        "woke before the database clock surely reached the instant"
    );
    assert!(waited.elapsed() >= Duration::from_millis(30));
    assert!(
        waited.elapsed() < Duration::from_secs(2),
        "waited far too long"
    );
}

#[tokio::test]
async fn the_database_clock_keeps_its_best_reading_and_follows_a_clock_that_was_set() {
    let clock = DbClock::default();
    let offset_ms = |clock: &DbClock| (clock.now() - chrono::Utc::now()).num_milliseconds();
    let read = |rtt_ms: i64, offset_ms: i64| {
        let before = chrono::Utc::now();
        let after = before + chrono::Duration::milliseconds(rtt_ms);
        let midpoint = before + chrono::Duration::milliseconds(rtt_ms / 2);
        clock.measured(
            before,
            midpoint + chrono::Duration::milliseconds(offset_ms),
            after,
        );
    };
    // A quick reading: 10 ms ahead, give or take 2 ms.
    read(4, 10);
    assert!((9..=11).contains(&offset_ms(&clock)));
    // A slow one (a busy database) that agrees within its 20 ms: the quick one stays.
    read(40, 28);
    assert!(
        (9..=11).contains(&offset_ms(&clock)),
        "a poor reading replaced a good one"
    );
    // One that disagrees beyond both uncertainties: the database's clock was set back.
    read(4, -500);
    assert!(
        (-501..=-499).contains(&offset_ms(&clock)),
        "the clock was not followed"
    );
}

/// A producer woken only to claim ahead of due times (a timed attempt started, a slot freed) does
/// not ask the table again for available jobs after a claim found none, until something that may
/// bring some came: a notification, a stage, a settings change, a hand-back, the backstop poll. A
/// stream of scheduled jobs then costs no empty claim per start (1,708 of them for 1,000 jobs in
/// `kickoff bench scheduled` before), and no such signal is passed by.
#[tokio::test]
async fn a_producer_that_found_no_available_job_claims_again_at_the_next_signal_of_work() {
    let db = test_db().await;
    let (workers, mut starts, _gate) = probe_workers();
    let workers = Arc::new(workers);
    let client = Client::new(db.pool.clone(), workers.clone());
    let s = solo(&db.pool, workers, 2, 0, Duration::from_secs(30));
    // Nothing available: the claim finds the queue drained.
    assert!(!s.producer.run_once().await.unwrap());
    // A job inserted with no signal reaching this producer (the solo has no notifier): a wake
    // to claim ahead passes the table by.
    let first = client.insert(&probe("quick")).await.unwrap().job.id;
    assert!(!s.producer.run_once().await.unwrap());
    assert_eq!(
        row_of(&db.pool, first).await.0,
        JobState::Available,
        "no claim of available jobs without a signal of work"
    );
    // The insert's notification, as the notifier hands it on: claimed and started.
    s.queue.wake_for_work();
    assert!(!s.producer.run_once().await.unwrap());
    assert_eq!(next_start(&mut starts).await.id, first);

    // A signal that comes while a claim is on its way is not lost with that claim's answer: the
    // claim finds the queue drained as of the signals it saw, not of those after.
    let seen = s.queue.work_seen();
    s.queue.wake_for_work();
    s.queue.claimed(seen, false);
    assert!(
        !s.queue.drained(),
        "a signal after the claim began keeps the queue claimable"
    );

    // Running, the producer claims on the backstop poll what no signal announced.
    assert!(!s.producer.run_once().await.unwrap());
    assert!(s.queue.drained());
    let second = client.insert(&probe("quick")).await.unwrap().job.id;
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(s.producer.run(stop.clone()));
    assert_eq!(
        next_start(&mut starts).await.id,
        second,
        "the backstop poll claims a job no signal announced"
    );
    stop.cancel();
    running.await.unwrap();
    assert!(s.executor.drain(Duration::from_secs(5)).await);
    s.pools.close().await;
}
