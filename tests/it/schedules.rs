//! Schedules in the engine, on real PostgreSQL: one run per slot, the missed-run policies after
//! every node was down, the overlap policies, pause, resume, trigger, delete, declarations in
//! code, and two leaders filling at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kickoff::engine::Db;
use serde_json::{json, Value};

use crate::common::test_db;
use kickoff::engine::schedules::{JobTemplate, Missed, Overlap, ScheduleSpec, Schedules};
use kickoff::engine::{
    BoxFuture, Client, Engine, EngineConfig, JobContext, JobState, WorkError, Worker, Workers,
};

/// A start of a run: its slot (ms, from its meta) and when it started.
#[derive(Debug, Clone)]
struct Start {
    slot_ms: Option<i64>,
    at: DateTime<Utc>,
}

/// Records every start; holds each run `hold_ms` (its args), unless cancelled.
struct Tick {
    starts: Arc<Mutex<Vec<Start>>>,
}

impl Worker for Tick {
    fn kind(&self) -> &'static str {
        "tick"
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            self.starts.lock().unwrap().push(Start {
                slot_ms: ctx.job.meta.get("slot_ms").and_then(Value::as_i64),
                at: Utc::now(),
            });
            let hold = ctx
                .job
                .args
                .get("hold_ms")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(hold)) => Ok(()),
                _ = ctx.cancelled().cancelled() => Err(WorkError::Cancel("stopped".into())),
            }
        })
    }
}

fn tick_workers() -> (Workers, Arc<Mutex<Vec<Start>>>) {
    let starts = Arc::new(Mutex::new(Vec::new()));
    let mut w = Workers::new();
    w.register(Tick {
        starts: starts.clone(),
    });
    (w, starts)
}

fn schedules_on(pool: &Db) -> Schedules {
    let (w, _) = tick_workers();
    Schedules::new(Client::new(pool.clone(), Arc::new(w)))
}

fn every(name: &str, ms: i64, args: Value) -> ScheduleSpec {
    ScheduleSpec::every(
        name,
        Duration::from_millis(ms as u64),
        JobTemplate::new("tick", args),
    )
}

fn config(node: &str) -> EngineConfig {
    EngineConfig {
        node_id: node.into(),
        queues: vec![("default".into(), 10)],
        lease: Duration::from_secs(2),
        heartbeat: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(1),
        leader_ttl: Duration::from_secs(2),
        ..EngineConfig::default()
    }
}

/// `(slot_ms, state, live)` of every run of schedule `name`, by slot.
async fn runs(pool: &Db, name: &str) -> Vec<(i64, String, Option<String>)> {
    sqlx::query_as(
        "SELECT (meta ->> 'slot_ms')::bigint, state::text, errors -> -1 ->> 'message' FROM jobs
         WHERE meta ->> 'schedule' = $1 AND NOT meta ? 'trigger' ORDER BY 1, id",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn db_now(pool: &Db) -> DateTime<Utc> {
    kickoff::engine::store::jobs::db_now(pool).await.unwrap()
}

#[tokio::test]
async fn a_schedule_gets_one_run_per_slot_even_with_two_leaders_filling_at_once() {
    let db = test_db().await;
    let a = schedules_on(&db.pool);
    a.create(&every("tick", 1000, json!({})), Some("ops"))
        .await
        .unwrap();
    // Two leaders (an old one that has not noticed it lost the lease, and the new one) fill
    // together, again and again.
    let b = schedules_on(&db.pool);
    for _ in 0..5 {
        let (x, y) = tokio::join!(a.fill_all(), b.fill_all());
        x.unwrap();
        y.unwrap();
    }
    let slots = runs(&db.pool, "tick").await;
    let mut seen: Vec<i64> = slots.iter().map(|r| r.0).collect();
    let n = seen.len();
    seen.dedup();
    assert_eq!(seen.len(), n, "a slot got two runs: {slots:?}");
    // Every slot of the horizon (12 s by default) is there, one second apart, none skipped.
    assert!(n >= 12, "runs ahead: {n}");
    assert!(seen.windows(2).all(|w| w[1] - w[0] == 1000), "{seen:?}");
    let view = a.get("tick").await.unwrap();
    assert_eq!(view.runs_enqueued as usize, n);
    // The next run is the first still waiting for its slot: a slot that came while the fill
    // inserted its run was inserted due already (nothing stages runs here: the states read
    // are the states the view reads).
    let first_waiting = slots.iter().find(|r| r.1 == "scheduled").map(|r| r.0);
    assert_eq!(
        view.next_run_at.map(|t| t.timestamp_millis()),
        first_waiting
    );
}

#[tokio::test]
async fn runs_fire_on_their_slot_and_the_leader_keeps_them_coming() {
    let db = test_db().await;
    let (workers, starts) = tick_workers();
    let engine = Engine::start(db.pool.clone(), workers, config("solo"))
        .await
        .unwrap();
    let schedules = Schedules::new(engine.client());
    let created = db_now(&db.pool).await;
    schedules
        .create(&every("each-second", 1000, json!({})), None)
        .await
        .unwrap();
    // Past the 12 s inserted at creation: the leader must have inserted the later ones.
    tokio::time::sleep(Duration::from_millis(14_500)).await;
    // The latest run's start is recorded with how late it started, by the node's clock (a moment
    // after the run starts: the read may fall between a run's claim and that record, and the
    // next second's run may start between two reads, so the run checked is the one read).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let last = loop {
        let view = schedules.get("each-second").await.unwrap();
        let last = view.last_run.expect("a run came due");
        if last.late_ms.is_some() {
            break last;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no run's lateness recorded: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        last.late_ms.is_some_and(|ms| (0.0..1000.0).contains(&ms)),
        "{last:?}"
    );
    engine.stop().await;
    let starts = starts.lock().unwrap().clone();
    let mut slots: Vec<i64> = starts.iter().filter_map(|s| s.slot_ms).collect();
    slots.sort();
    let n = slots.len();
    slots.dedup();
    assert_eq!(slots.len(), n, "a slot ran twice");
    assert!(n >= 13, "{n} runs in 14.5 s");
    assert!(
        slots.windows(2).all(|w| w[1] - w[0] == 1000),
        "a slot was lost: {slots:?}"
    );
    assert!(slots[0] > created.timestamp_millis());
    for s in &starts {
        let slot = DateTime::from_timestamp_millis(s.slot_ms.unwrap()).unwrap();
        assert!(s.at >= slot, "a run started before its slot: {s:?}");
    }
}

/// A cron rule with a seconds field fires on each of the 60 seconds of a minute: once each, in
/// order, never before its second. (How late each starts is a figure, not a timed test:
/// `kickoff bench schedule`, in docs/BENCHMARKS.md.)
#[tokio::test]
async fn a_schedule_every_second_runs_sixty_times_in_a_minute() {
    let db = test_db().await;
    let (workers, starts) = tick_workers();
    let engine = Engine::start(db.pool.clone(), workers, config("solo"))
        .await
        .unwrap();
    let created = db_now(&db.pool).await.timestamp_millis();
    Schedules::new(engine.client())
        .create(
            &ScheduleSpec::cron("sixty", "* * * * * *", JobTemplate::new("tick", json!({}))),
            None,
        )
        .await
        .unwrap();
    let in_minute = |starts: &[Start]| -> Vec<Start> {
        let first = starts.iter().filter_map(|s| s.slot_ms).min();
        starts
            .iter()
            .filter(|s| first.is_some_and(|f| s.slot_ms.is_some_and(|ms| ms < f + 60_000)))
            .cloned()
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(75);
    while in_minute(&starts.lock().unwrap()).len() < 60 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // A moment more, so a second run of a slot would show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    engine.stop().await;
    let minute = in_minute(&starts.lock().unwrap());
    let mut slots: Vec<i64> = minute.iter().filter_map(|s| s.slot_ms).collect();
    slots.sort();
    assert!(
        slots[0] > created && slots[0] <= created + 2_000,
        "the first slot {} is not the first second after creation {created}",
        slots[0]
    );
    assert_eq!(slots.len(), 60, "runs in the minute: {slots:?}");
    assert!(
        slots.windows(2).all(|w| w[1] - w[0] == 1000),
        "a second ran twice or not at all: {slots:?}"
    );
    for s in &minute {
        let slot = DateTime::from_timestamp_millis(s.slot_ms.unwrap()).unwrap();
        assert!(s.at >= slot, "a run started before its second: {s:?}");
    }
}

/// Creates one schedule per missed-run policy (every 2 s, only the next run inserted ahead), lets
/// three slots pass with no node running, then starts a node.
#[tokio::test]
async fn after_every_node_was_down_across_three_slots_each_missed_run_policy_holds() {
    let db = test_db().await;
    let (w, _) = tick_workers();
    let setup =
        Schedules::new(Client::new(db.pool.clone(), Arc::new(w))).with_horizon(Duration::ZERO);
    for (name, missed) in [
        ("skip", Missed::Skip),
        ("once", Missed::RunOnce),
        ("all", Missed::RunAll),
    ] {
        let mut spec = every(name, 2000, json!({}));
        spec.missed = missed;
        setup.create(&spec, None).await.unwrap();
    }
    let down_from = db_now(&db.pool).await.timestamp_millis();
    // Down across three slots (over 6 s); back 1.5 s after a slot, so that the last missed slot is
    // past its grace (1 s) and the next one is 0.5 s away whenever the node reconciles.
    tokio::time::sleep(Duration::from_millis(6_200)).await;
    let up_at = loop {
        let now = db_now(&db.pool).await.timestamp_millis();
        if (1450..1550).contains(&now.rem_euclid(2000)) {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let missed_slots: Vec<i64> = (down_from / 2000 + 1..=(up_at - 1000) / 2000)
        .map(|k| k * 2000)
        .collect();
    assert!(missed_slots.len() >= 3, "{missed_slots:?}");

    let (workers, starts) = tick_workers();
    let engine = Engine::start(db.pool.clone(), workers, config("back"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    engine.stop().await;

    let started: Vec<i64> = starts
        .lock()
        .unwrap()
        .iter()
        .filter_map(|s| s.slot_ms)
        .collect();
    for name in ["skip", "once", "all"] {
        let ran: Vec<i64> = runs(&db.pool, name)
            .await
            .into_iter()
            .filter(|(slot, state, _)| missed_slots.contains(slot) && state == "completed")
            .map(|r| r.0)
            .collect();
        match name {
            "skip" => assert!(ran.is_empty(), "skip ran {ran:?}"),
            "once" => assert_eq!(ran, [*missed_slots.last().unwrap()], "run_once"),
            _ => assert_eq!(ran, missed_slots, "run_all"),
        }
    }
    // No slot of any of them ran twice (the three share their slots: count by schedule).
    assert!(!started.is_empty());
    for name in ["skip", "once", "all"] {
        let mut slots: Vec<i64> = runs(&db.pool, name)
            .await
            .into_iter()
            .filter(|r| r.1 == "completed")
            .map(|r| r.0)
            .collect();
        let n = slots.len();
        slots.dedup();
        assert_eq!(slots.len(), n, "{name}: a slot ran twice");
    }
    let s = setup.get("skip").await.unwrap();
    assert!(s.runs_skipped >= 3, "{s:?}");
    assert!(s
        .next_run_at
        .is_some_and(|t| t.timestamp_millis() > up_at - 1000));
}

#[tokio::test]
async fn overlap_policies_skip_or_cancel_a_run_that_overlaps_the_previous_one() {
    let db = test_db().await;
    let (workers, starts) = tick_workers();
    let engine = Engine::start(db.pool.clone(), workers, config("overlap"))
        .await
        .unwrap();
    let schedules = Schedules::new(engine.client());
    // Each run holds 2.5 s; a slot every second.
    for (name, overlap) in [
        ("allow", Overlap::Allow),
        ("skip", Overlap::Skip),
        ("cancel", Overlap::CancelPrevious),
    ] {
        let mut spec = every(name, 1000, json!({ "hold_ms": 2500 }));
        spec.overlap = overlap;
        schedules.create(&spec, None).await.unwrap();
    }
    let from = db_now(&db.pool).await.timestamp_millis();
    tokio::time::sleep(Duration::from_millis(5_200)).await;
    schedules.set_paused("allow", true).await.unwrap();
    schedules.set_paused("skip", true).await.unwrap();
    schedules.set_paused("cancel", true).await.unwrap();
    engine.stop().await;
    drop(starts);

    let due = |r: &(i64, String, Option<String>)| r.0 > from && r.0 < from + 5_000;
    let allow: Vec<_> = runs(&db.pool, "allow")
        .await
        .into_iter()
        .filter(due)
        .collect();
    assert!(
        allow.iter().all(|r| r.1 != "cancelled"),
        "allow cancelled a run: {allow:?}"
    );
    let skip: Vec<_> = runs(&db.pool, "skip")
        .await
        .into_iter()
        .filter(due)
        .collect();
    let skipped = skip
        .iter()
        .filter(|r| r.1 == "cancelled" && r.2.as_deref().is_some_and(|m| m.contains("skipped")))
        .count();
    let kept = skip.iter().filter(|r| r.1 == "completed").count();
    assert!(skipped >= 2 && kept >= 1, "skip: {skip:?}");
    let cancel: Vec<_> = runs(&db.pool, "cancel")
        .await
        .into_iter()
        .filter(due)
        .collect();
    // Each run was cancelled by the next one (the last may still have been running at the stop).
    let cancelled = cancel.iter().filter(|r| r.1 == "cancelled").count();
    assert!(cancelled >= 3, "cancel_previous: {cancel:?}");
    assert!(
        cancel.iter().all(|r| r.1 != "completed"),
        "a run outlived the next one: {cancel:?}"
    );
    // Each attempt has its record, under its schedule: a skipped run's says why, a run the next
    // one cancelled says it ran until then (written by the cancel: its handler's own write came
    // too late).
    let recorded = |name: &'static str| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_as::<_, (String, Option<String>)>(
                "SELECT a.outcome, a.error FROM job_attempts a
                 JOIN schedules s ON s.id = a.schedule_id
                 WHERE s.name = $1 AND a.outcome = 'cancelled'",
            )
            .bind(name)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    let skip_records = recorded("skip").await;
    // (The runs ahead that the pause cancelled never started: no record.)
    let skipped_all = runs(&db.pool, "skip")
        .await
        .iter()
        .filter(|r| r.1 == "cancelled" && r.2.as_deref().is_some_and(|m| m.contains("skipped")))
        .count();
    assert_eq!(skip_records.len(), skipped_all, "{skip_records:?}");
    assert!(
        skip_records.iter().all(|r| r
            .1
            .as_deref()
            .is_some_and(|e| e.contains("overlap policy `skip`"))),
        "{skip_records:?}"
    );
    let cancel_records = recorded("cancel").await;
    assert!(cancel_records.len() >= cancelled, "{cancel_records:?}");
    assert!(
        cancel_records
            .iter()
            .all(|r| r.1.as_deref() == Some("cancelled while it ran")),
        "{cancel_records:?}"
    );
}

#[tokio::test]
async fn pause_resume_trigger_and_delete() {
    let db = test_db().await;
    let s = schedules_on(&db.pool);
    let spec = ScheduleSpec::cron("nightly", "0 3 * * *", JobTemplate::new("tick", json!({})))
        .in_zone("Europe/London");
    let view = s.create(&spec, Some("ops")).await.unwrap();
    assert!(view.rule_text.contains("Europe/London"), "{view:?}");
    let next = view.next_run_at.expect("the next run exists");
    let local = next.with_timezone(&chrono_tz::Europe::London);
    assert_eq!(local.format("%H:%M").to_string(), "03:00");

    let paused = s.set_paused("nightly", true).await.unwrap();
    assert!(paused.paused && paused.next_run_at.is_none(), "{paused:?}");
    let triggered = s.trigger("nightly", Some("alice")).await.unwrap();
    // The run is the schedule's (its creator sees its secrets); who ran it is in its meta.
    assert_eq!(triggered.created_by.as_deref(), Some("ops"));
    assert_eq!(triggered.meta["triggered_by"], json!("alice"));
    assert_eq!(triggered.meta["trigger"], json!(true));
    let resumed = s.set_paused("nightly", false).await.unwrap();
    assert_eq!(resumed.next_run_at, Some(next), "the same next slot again");

    // A change of rule cancels the run ahead and inserts the new one.
    let mut changed = spec.clone();
    changed.cron = Some("0 4 * * *".into());
    let after = s.replace(&changed, "api").await.unwrap();
    assert_eq!(after.version, view.version + 1);
    let local = after
        .next_run_at
        .unwrap()
        .with_timezone(&chrono_tz::Europe::London);
    assert_eq!(local.format("%H:%M").to_string(), "04:00");
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE meta ->> 'schedule' = 'nightly' AND state = 'scheduled'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(live, 1, "one run ahead after the change");

    s.delete("nightly").await.unwrap();
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE meta ->> 'schedule' = 'nightly' AND state = 'scheduled'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(live, 0, "the run ahead went with the schedule");
    assert!(s.get("nightly").await.is_err());
}

#[tokio::test]
async fn schedules_declared_in_code_are_upserted_by_name_and_the_flag_says_who_wins() {
    let db = test_db().await;
    let s = schedules_on(&db.pool);
    let code = ScheduleSpec::cron("import", "0 2 * * *", JobTemplate::new("tick", json!({})));
    assert_eq!(
        s.declare(std::slice::from_ref(&code), true).await.unwrap(),
        1
    );
    assert_eq!(s.get("import").await.unwrap().source, "code");
    // Unchanged: nothing to do.
    assert_eq!(
        s.declare(std::slice::from_ref(&code), true).await.unwrap(),
        0
    );
    // An operator changes it and pauses it.
    let mut edited = code.clone();
    edited.cron = Some("0 5 * * *".into());
    s.replace(&edited, "api").await.unwrap();
    s.set_paused("import", true).await.unwrap();
    // The database wins: left as it is.
    assert_eq!(
        s.declare(std::slice::from_ref(&code), false).await.unwrap(),
        0
    );
    assert_eq!(
        s.get("import").await.unwrap().cron.as_deref(),
        Some("0 5 * * *")
    );
    // The code wins: the rule comes back, the pause stays.
    assert_eq!(
        s.declare(std::slice::from_ref(&code), true).await.unwrap(),
        1
    );
    let v = s.get("import").await.unwrap();
    assert_eq!((v.cron.as_deref(), v.paused), (Some("0 2 * * *"), true));
}

#[tokio::test]
async fn a_slot_whose_run_already_completed_is_not_given_another_by_a_later_leader() {
    let db = test_db().await;
    let leader_b = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    leader_b
        .create(&every("tick", 1000, json!({})), None)
        .await
        .unwrap();
    let first = runs(&db.pool, "tick").await[0].0;
    // Run T comes due, runs and completes; its unique key no longer guards anything (it only
    // covers live jobs).
    while db_now(&db.pool).await.timestamp_millis() <= first {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sqlx::query(
        "UPDATE jobs SET state = 'completed', finalized_at = now()
         WHERE (meta ->> 'slot_ms')::bigint = $1",
    )
    .bind(first)
    .execute(&db.pool)
    .await
    .unwrap();
    // Another leader (a stalled one waking up, or the next one) fills the schedule.
    let leader_a = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    leader_a.fill_all().await.unwrap();
    leader_b.fill_all().await.unwrap();
    let of_t = runs(&db.pool, "tick")
        .await
        .into_iter()
        .filter(|r| r.0 == first)
        .count();
    assert_eq!(of_t, 1, "slot T was given a second run after it completed");
}

#[tokio::test]
async fn slots_that_passed_with_no_leader_follow_the_missed_policy_not_a_burst() {
    let db = test_db().await;
    let s = schedules_on(&db.pool);
    let mut spec = every("pulse", 1000, json!({}));
    spec.missed = Missed::Skip;
    s.create(&spec, None).await.unwrap();
    // No leader for a minute (nodes alive, so nothing reconciled at a start): the schedule's
    // last slot is a minute behind and no run ahead is left (a run the create inserted due at
    // once, `available`, goes too: under load its slot fell within its second of grace).
    sqlx::query(
        "UPDATE jobs SET state = 'cancelled', finalized_at = now()
         WHERE state IN ('scheduled', 'available')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // (Its next slot, which the tick reads, passed with it.)
    sqlx::query(
        "UPDATE schedules SET last_slot = now() - interval '60 seconds', next_slot_at = NULL",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // The fill's own clock reads at or after this: a slot it inserted is within its second of
    // grace of that clock, so newer than a second before this (read after the fill, under load
    // a slot the fill inserted rightly at 0.98 s behind was more than a second behind).
    let before_fill = db_now(&db.pool).await.timestamp_millis();
    let (inserted, skipped, failed) = s.fill_all().await.unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    assert!((58..=61).contains(&skipped), "{skipped} slots skipped");
    let live: Vec<i64> = runs(&db.pool, "pulse")
        .await
        .into_iter()
        .filter(|r| r.1 != "cancelled")
        .map(|r| r.0)
        .collect();
    // (A slot within its second of grace is inserted due: `available`.)
    assert_eq!(live.len(), inserted);
    assert!(
        live.iter().all(|slot| *slot > before_fill - 1_000),
        "runs of past slots were inserted: {live:?} (the fill began after {before_fill})"
    );
}

#[tokio::test]
async fn one_schedule_that_fails_to_insert_its_runs_does_not_stop_the_others() {
    let db = test_db().await;
    let s = schedules_on(&db.pool);
    s.create(&every("good", 60_000, json!({})), None)
        .await
        .unwrap();
    // A schedule whose kind no worker of this leader runs (written by another service's nodes).
    sqlx::query(
        "INSERT INTO schedules (name, every_ms, kind, last_slot)
         VALUES ('stranger', 1000, 'unknown_kind', now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("UPDATE schedules SET last_slot = now() WHERE name = 'good'")
        .execute(&db.pool)
        .await
        .unwrap();
    let (_, _, failed) = s.fill_all().await.unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, "stranger");
    assert!(failed[0].1.contains("unknown_kind"), "{failed:?}");
    assert!(
        s.get("good").await.unwrap().next_run_at.is_some(),
        "the good schedule still has its next run"
    );
}

/// Moves run `id` of a schedule back in time: due (and its slot) `secs_ago` seconds ago, in
/// `state`, as if time had passed.
async fn move_run_back(pool: &Db, id: i64, secs_ago: f64, state: &str) {
    sqlx::query(
        "UPDATE jobs SET scheduled_at = now() - make_interval(secs => $2), state = $3::job_state,
                meta = meta || jsonb_build_object('slot_ms',
                    (extract(epoch FROM now() - make_interval(secs => $2)) * 1000)::bigint)
         WHERE id = $1",
    )
    .bind(id)
    .bind(secs_ago)
    .bind(state)
    .execute(pool)
    .await
    .unwrap();
}

/// The ids of the runs of schedule `name` not final (triggered ones included), oldest first.
async fn live_runs(pool: &Db, name: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT id FROM jobs WHERE meta ->> 'schedule' = $1 AND finalized_at IS NULL ORDER BY id",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn state_of_run(pool: &Db, id: i64) -> String {
    sqlx::query_scalar("SELECT state::text FROM jobs WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Issue 30, point 1: the missed-run policy is for slots that passed while no node was there to
/// start them, not for runs that waited because something held them (a paused queue or kind, a
/// limit, a backlog), nor for a run triggered by hand, nor for a snoozed run (in progress).
#[tokio::test]
async fn a_restart_cancels_only_runs_whose_slot_passed_with_no_node_not_runs_held_or_triggered() {
    let db = test_db().await;
    let s = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    // One schedule a case, each with its one run ahead (every minute, missed: skip).
    for name in ["held", "triggered", "snoozed", "missed"] {
        let mut spec = every(name, 60_000, json!({}));
        spec.missed = Missed::Skip;
        s.create(&spec, Some("ops")).await.unwrap();
    }
    // Came due while a node ran and the queue was paused: the timer staged it (`available`),
    // nothing started it.
    let held = live_runs(&db.pool, "held").await[0];
    move_run_back(&db.pool, held, 30.0, "available").await;
    // Triggered by hand, held by the pause too.
    let triggered = s.trigger("triggered", Some("alice")).await.unwrap().id.0;
    move_run_back(&db.pool, triggered, 20.0, "available").await;
    // Started, snoozed (a 429), and its snooze ended during the downtime.
    let snoozed = live_runs(&db.pool, "snoozed").await[0];
    move_run_back(&db.pool, snoozed, 10.0, "scheduled").await;
    sqlx::query("UPDATE jobs SET meta = meta || '{\"snoozes\": 1}' WHERE id = $1")
        .bind(snoozed)
        .execute(&db.pool)
        .await
        .unwrap();
    // Inserted ahead, and its slot passed while no node ran: never staged.
    let missed = live_runs(&db.pool, "missed").await[0];
    move_run_back(&db.pool, missed, 5.0, "scheduled").await;

    s.reconcile_missed("restarted", Duration::from_secs(5))
        .await
        .unwrap();
    for (what, id) in [
        ("the staged run", held),
        ("the triggered run", triggered),
        ("the snoozed run", snoozed),
    ] {
        assert_ne!(
            state_of_run(&db.pool, id).await,
            "cancelled",
            "{what} was treated as missed"
        );
    }
    assert_eq!(
        state_of_run(&db.pool, missed).await,
        "cancelled",
        "the run whose slot passed with no node is missed (skip)"
    );
}

/// Issue 30, point 1: pausing or changing a schedule cancels its runs ahead, never a snoozed run
/// (it started: it is in progress, not ahead).
#[tokio::test]
async fn pausing_or_changing_a_schedule_keeps_a_snoozed_run() {
    let db = test_db().await;
    let s = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    let spec = every("snoozy", 60_000, json!({}));
    s.create(&spec, None).await.unwrap();
    let run = live_runs(&db.pool, "snoozy").await[0];
    // Its attempt was snoozed for a minute: back to `scheduled`, its attempt number given back.
    sqlx::query(
        "UPDATE jobs SET scheduled_at = now() + interval '60 seconds',
                meta = meta || '{\"snoozes\": 1}' WHERE id = $1",
    )
    .bind(run)
    .execute(&db.pool)
    .await
    .unwrap();
    s.set_paused("snoozy", true).await.unwrap();
    assert_eq!(state_of_run(&db.pool, run).await, "scheduled", "pause");
    s.set_paused("snoozy", false).await.unwrap();
    let mut changed = spec.clone();
    changed.every_ms = Some(30_000);
    s.replace(&changed, "api").await.unwrap();
    assert_eq!(state_of_run(&db.pool, run).await, "scheduled", "change");
    s.delete("snoozy").await.unwrap();
    assert_eq!(state_of_run(&db.pool, run).await, "scheduled", "delete");
}

/// A run triggered by hand is an operator's, not one of the runs a schedule inserts ahead for
/// its slots: moved to a later time by an operator (back in `scheduled`), it still runs when the
/// schedule is paused, changed or deleted (the history checker's hour: seed 13248 saw a delete
/// cancel one).
#[tokio::test]
async fn pausing_changing_or_deleting_a_schedule_keeps_a_run_triggered_by_hand() {
    let db = test_db().await;
    let s = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    let spec = every("handy", 60_000, json!({}));
    s.create(&spec, None).await.unwrap();
    let triggered = s.trigger("handy", Some("alice")).await.unwrap().id;
    let later = db_now(&db.pool).await + chrono::Duration::seconds(60);
    let moved = s.client().reschedule(triggered, later).await.unwrap();
    assert_eq!(moved.state, JobState::Scheduled);
    s.set_paused("handy", true).await.unwrap();
    assert_eq!(
        state_of_run(&db.pool, triggered.0).await,
        "scheduled",
        "pause"
    );
    s.set_paused("handy", false).await.unwrap();
    let mut changed = spec.clone();
    changed.every_ms = Some(30_000);
    s.replace(&changed, "api").await.unwrap();
    assert_eq!(
        state_of_run(&db.pool, triggered.0).await,
        "scheduled",
        "change"
    );
    s.delete("handy").await.unwrap();
    assert_eq!(
        state_of_run(&db.pool, triggered.0).await,
        "scheduled",
        "delete"
    );
}

/// Issue 30, point 1, as reported: a paused queue, a schedule every second (missed: skip), a run
/// triggered by hand, a graceful stop and a start of the only node, then the queue resumed: the
/// runs that waited for the pause, the triggered one included, run.
#[tokio::test]
async fn runs_held_by_a_paused_queue_run_after_a_restart_and_a_resume() {
    let db = test_db().await;
    let (workers, _) = tick_workers();
    let engine = Engine::start(db.pool.clone(), workers, config("first"))
        .await
        .unwrap();
    let client = engine.client();
    client.set_queue_paused("default", true).await.unwrap();
    let s = Schedules::new(client.clone());
    let mut spec = every("paused", 1000, json!({}));
    spec.missed = Missed::Skip;
    s.create(&spec, Some("ops")).await.unwrap();
    let triggered = s.trigger("paused", None).await.unwrap().id.0;
    // Two slots come due and are held by the pause.
    let held = |pool: Db| async move {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM jobs WHERE meta ->> 'schedule' = 'paused'
               AND NOT meta ? 'trigger' AND state = 'available'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
            >= 2
    };
    crate::common::wait_for(
        "two runs held by the pause",
        Duration::from_secs(10),
        || held(db.pool.clone()),
    )
    .await;
    engine.stop().await;
    let waiting: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM jobs WHERE meta ->> 'schedule' = 'paused' AND state = 'available'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(waiting.contains(&triggered), "{waiting:?}");

    let (workers, _) = tick_workers();
    let engine = Engine::start(db.pool.clone(), workers, config("second"))
        .await
        .unwrap();
    engine
        .client()
        .set_queue_paused("default", false)
        .await
        .unwrap();
    let pool = db.pool.clone();
    let ids = waiting.clone();
    crate::common::wait_for(
        "the held runs to complete",
        Duration::from_secs(10),
        move || {
            let (pool, ids) = (pool.clone(), ids.clone());
            async move {
                let done: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM jobs WHERE id = ANY($1) AND state = 'completed'",
                )
                .bind(&ids)
                .fetch_one(&pool)
                .await
                .unwrap();
                done == ids.len() as i64
            }
        },
    )
    .await;
    engine.stop().await;
}

/// Issue 30, point 7: nodes that start together each see the other alive; before, each skipped
/// the reconciliation (runs of slots missed during the downtime then started late). Now one
/// reconciles at a time, the others wait for it, and the runs are reconciled once.
#[tokio::test]
async fn nodes_starting_together_reconcile_the_missed_slots_once_and_wait_for_each_other() {
    let db = test_db().await;
    let s = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    let mut spec = every("together", 60_000, json!({}));
    spec.missed = Missed::Skip;
    s.create(&spec, None).await.unwrap();
    let missed = live_runs(&db.pool, "together").await[0];
    move_run_back(&db.pool, missed, 5.0, "scheduled").await;
    // Both nodes registered (each started its heartbeat before reconciling).
    for node in ["a", "b"] {
        kickoff::engine::store::nodes::node_heartbeat(&db.pool, node, "host", 1, &json!({}), true)
            .await
            .unwrap();
    }
    // A reconciliation in progress elsewhere: the second node waits for it.
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(kickoff::engine::schedules::service::RECONCILE_LOCK)
        .execute(&mut *holder)
        .await
        .unwrap();
    let b = {
        let s = s.clone();
        tokio::spawn(async move { s.reconcile_missed("b", Duration::from_secs(5)).await })
    };
    let pool = db.pool.clone();
    crate::common::wait_for(
        "node b to wait for the reconciliation",
        Duration::from_secs(5),
        move || {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, bool>(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
                                      AND NOT granted)",
                )
                .fetch_one(&pool)
                .await
                .unwrap()
            }
        },
    )
    .await;
    assert!(!b.is_finished(), "node b did not wait");
    holder.commit().await.unwrap();
    let a = s
        .reconcile_missed("a", Duration::from_secs(5))
        .await
        .unwrap();
    let b = b.await.unwrap().unwrap();
    assert_eq!(
        a.1 + b.1,
        1,
        "the missed run is skipped once: a {a:?}, b {b:?}"
    );
    assert_eq!(state_of_run(&db.pool, missed).await, "cancelled");
}

/// Issue 30, point 7: one schedule that fails to reconcile does not stop the others.
#[tokio::test]
async fn one_schedule_that_fails_to_reconcile_does_not_stop_the_others() {
    let db = test_db().await;
    let s = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    let mut spec = every("zz_good", 60_000, json!({}));
    spec.missed = Missed::Skip;
    s.create(&spec, None).await.unwrap();
    let missed = live_runs(&db.pool, "zz_good").await[0];
    move_run_back(&db.pool, missed, 5.0, "scheduled").await;
    // Sorted first, and its rule cannot be read.
    sqlx::query(
        "INSERT INTO schedules (name, cron, kind, last_slot)
         VALUES ('aa_broken', 'not a cron', 'tick', now() - interval '1 hour')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let done = s.reconcile_missed("n", Duration::from_secs(5)).await;
    assert!(done.is_ok(), "{done:?}");
    assert_eq!(state_of_run(&db.pool, missed).await, "cancelled");
}

/// Issue 30, point 9: a run triggered by hand gets a higher id than the next slot's run inserted
/// ahead; the overlap policy must still see it when that slot's run starts.
#[tokio::test]
async fn the_overlap_policy_sees_a_run_triggered_by_hand() {
    let db = test_db().await;
    let s = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    for (name, overlap) in [("skip", Overlap::Skip), ("cancel", Overlap::CancelPrevious)] {
        let mut spec = every(name, 60_000, json!({}));
        spec.overlap = overlap;
        s.create(&spec, None).await.unwrap();
        let ahead = live_runs(&db.pool, name).await[0];
        let triggered = s.trigger(name, None).await.unwrap();
        assert!(triggered.id.0 > ahead);
        // The triggered run is running when the slot's run starts.
        sqlx::query(
            "UPDATE jobs SET state = 'executing', attempt = 1, attempted_at = now(),
                    attempted_by = 'elsewhere', lease_expires_at = now() + interval '1 minute',
                    claim_token = 7
             WHERE id = $1",
        )
        .bind(triggered.id.0)
        .execute(&db.pool)
        .await
        .unwrap();
        let slot_run =
            kickoff::engine::store::jobs::job_get(&db.pool, kickoff::engine::JobId(ahead))
                .await
                .unwrap()
                .unwrap();
        // Through the hook the executor calls before the run's handler.
        use kickoff::engine::attempt_hook::AttemptHook as _;
        let hook = kickoff::engine::schedules::gate::ScheduleRuns::new(db.pool.clone());
        let gate = hook
            .gate(&slot_run)
            .expect("a run with an overlap policy is gated")
            .await;
        match overlap {
            Overlap::Skip => assert!(
                matches!(gate, Err(WorkError::Cancel(_))),
                "skip let the slot's run start beside the triggered one: {gate:?}"
            ),
            _ => {
                assert!(gate.is_ok(), "{gate:?}");
                assert_eq!(state_of_run(&db.pool, triggered.id.0).await, "cancelled");
            }
        }
    }
}

/// Issue 30, point 11: after a downtime longer than the walk's bound, `run_once` runs the latest
/// missed slot, not one near the start of the downtime.
#[tokio::test]
async fn after_a_very_long_downtime_the_latest_missed_slot_runs() {
    let db = test_db().await;
    let s = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    let mut spec = every("ages", 1000, json!({}));
    spec.missed = Missed::RunOnce;
    s.create(&spec, None).await.unwrap();
    sqlx::query(
        "UPDATE jobs SET state = 'cancelled', finalized_at = now() WHERE state = 'scheduled'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // Down for three days: 259,200 slots.
    sqlx::query("UPDATE schedules SET last_slot = now() - interval '3 days', next_slot_at = NULL")
        .execute(&db.pool)
        .await
        .unwrap();
    let (_, skipped, failed) = s.fill_all().await.unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let now = db_now(&db.pool).await.timestamp_millis();
    let live: Vec<i64> = runs(&db.pool, "ages")
        .await
        .into_iter()
        .filter(|r| r.1 != "cancelled")
        .map(|r| r.0)
        .collect();
    let caught_up = live.iter().min().copied().unwrap();
    assert!(
        caught_up > now - 3_000,
        "the run for the missed slots is for {caught_up}, {} s before now",
        (now - caught_up) / 1000
    );
    assert!(
        (259_190..=259_205).contains(&skipped),
        "{skipped} slots counted as skipped"
    );
}

/// Issue 30, point 8: the leader's tick touches only the schedules whose next slot enters its
/// horizon. Before, it locked every schedule's row each second (a commit each): a schedule whose
/// next run is hours away, its row held by another transaction, stalled the whole tick.
#[tokio::test]
async fn the_leaders_tick_leaves_schedules_whose_next_slot_is_far_alone() {
    let db = test_db().await;
    let s = schedules_on(&db.pool);
    s.create(
        &ScheduleSpec::cron("daily", "0 3 * * *", JobTemplate::new("tick", json!({}))),
        None,
    )
    .await
    .unwrap();
    s.create(&every("often", 1000, json!({})), None)
        .await
        .unwrap();
    s.fill_all().await.unwrap();
    let mut holder = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM schedules WHERE name = 'daily' FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let before = runs(&db.pool, "often").await.len();
    let tick = tokio::time::timeout(Duration::from_secs(5), s.fill_all()).await;
    holder.rollback().await.unwrap();
    let (_, _, failed) = tick
        .expect("the tick waited on an idle schedule's row")
        .unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    // The frequent one is still kept ahead: its next slot entered the horizon.
    let pool = db.pool.clone();
    crate::common::wait_for(
        "the frequent schedule's next run",
        Duration::from_secs(5),
        || {
            let (pool, s) = (pool.clone(), s.clone());
            async move {
                s.fill_all().await.unwrap();
                runs(&pool, "often").await.len() > before
            }
        },
    )
    .await;
}

/// Review of issue 30: the markers the missed-run policy, the overlap policy and a pause read on a
/// run (`trigger`, `snoozes`, ...) are Kickoff's: a template may not set them (`{"trigger": true}`
/// would exempt every run from the missed-run policy, `{"snoozes": 0}` keep runs ahead through a
/// pause), and a template stored with one does not pass it on.
#[tokio::test]
async fn a_template_may_not_forge_the_markers_of_a_run() {
    let db = test_db().await;
    let s = schedules_on(&db.pool).with_horizon(Duration::ZERO);
    for key in [
        "trigger",
        "snoozes",
        "triggered_by",
        "slot_ms",
        "schedule_id",
    ] {
        let mut spec = every("forged", 60_000, json!({}));
        spec.job.meta = json!({ key: true });
        let refused = s.create(&spec, None).await;
        assert!(
            matches!(&refused, Err(kickoff::engine::schedules::ScheduleError::Invalid { field, .. }) if *field == "job.meta"),
            "{key}: {refused:?}"
        );
    }
    let mut spec = every("stored", 60_000, json!({}));
    spec.missed = Missed::Skip;
    s.create(&spec, None).await.unwrap();
    sqlx::query("UPDATE schedules SET meta = '{\"trigger\": true, \"team\": \"blue\"}', next_slot_at = NULL, last_slot = now()")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET state = 'cancelled', finalized_at = now() WHERE finalized_at IS NULL",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    s.fill_all().await.unwrap();
    let metas: Vec<Value> = sqlx::query_scalar(
        "SELECT meta FROM jobs WHERE meta ->> 'schedule' = 'stored' AND finalized_at IS NULL",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(!metas.is_empty());
    for meta in metas {
        assert!(meta.get("trigger").is_none(), "{meta}");
        assert_eq!(meta["team"], "blue");
    }
}
