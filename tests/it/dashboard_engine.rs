//! What the dashboard reads and does, against real PostgreSQL: maintained counts that stay exact
//! through every kind of write (before and after folding), throughput per minute, the timers list,
//! filtered listings, bulk actions on ids and on filters (snapshots, batches, unique keys), and
//! cloning.
//!
//! Longer than 700 lines on purpose: one self-contained scenario per test, with the helpers they
//! share at the top; split it by area when a new area's tests arrive.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::postgres::PgListener;

use crate::common::{state_of, test_db, wait_for};
use kickoff::engine::maintenance::count_folder::{CountFolder, CountFolderConfig};
use kickoff::engine::maintenance::pruner::{JobPruner, PrunerConfig};
use kickoff::engine::maintenance::rescuer::{JobRescuer, RescuerConfig};
use kickoff::engine::store::jobs::{self as job_store, FailAs, JobFilter};
use kickoff::engine::store::{leader as leader_store, nodes as node_store};
use kickoff::engine::{
    BoxFuture, BulkAction, BulkReport, Claim, Client, ClientError, Engine, EngineConfig,
    JobContext, JobId, JobState, NewJob, OnConflict, WorkError, Worker, Workers,
};

/// A kind that takes any args and completes at once.
struct Item;

impl Worker for Item {
    fn kind(&self) -> &'static str {
        "item"
    }
    fn work(&self, _ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async { Ok(()) })
    }
}

fn workers() -> Workers {
    let mut w = Workers::new();
    w.register(Item);
    w
}

fn client(pool: &kickoff::engine::Db) -> Client {
    Client::new(pool.clone(), Arc::new(workers()))
}

fn item(args: Value) -> NewJob {
    NewJob::new("item", args)
}

fn later(job: NewJob) -> NewJob {
    job.after(Duration::from_secs(3600))
}

fn folder(pool: &kickoff::engine::Db) -> CountFolder {
    CountFolder::new(pool.clone(), CountFolderConfig::default())
}

/// Counts as `(queue, state, n)`, sorted, zero rows left out.
fn sorted(counts: Vec<(String, JobState, i64)>) -> Vec<(String, &'static str, i64)> {
    let mut v: Vec<_> = counts
        .into_iter()
        .filter(|(_, _, n)| *n != 0)
        .map(|(q, s, n)| (q, s.as_str(), n))
        .collect();
    v.sort();
    v
}

/// The maintained counts equal a real `count(*)` over the table.
async fn assert_counts_exact(client: &Client, step: &str) {
    let exact = job_store::job_count_by_queue_state(client.pool())
        .await
        .unwrap();
    let maintained = client.counts().await.unwrap();
    assert_eq!(sorted(maintained), sorted(exact), "counts after {step}");
}

/// Checks the counts, folds, and checks them again.
async fn assert_counts_exact_around_a_fold(client: &Client, step: &str) {
    assert_counts_exact(client, &format!("{step} (not folded)")).await;
    folder(client.pool()).run_once().await.unwrap();
    assert_counts_exact(client, &format!("{step} (folded)")).await;
}

async fn claim(pool: &kickoff::engine::Db, queue: &str, n: i64) -> Vec<kickoff::engine::Job> {
    job_store::job_claim(pool, queue, n, "node-a", Duration::from_secs(60))
        .await
        .unwrap()
}

async fn fail(pool: &kickoff::engine::Db, job: &kickoff::engine::Job, fail_as: FailAs) -> JobState {
    job_store::job_fail(pool, job.claim().unwrap(), "node-a", "boom", fail_as)
        .await
        .unwrap()
        .expect("attempt still current")
}

const RETRY_NOW: FailAs = FailAs::Retry {
    backoff: Duration::ZERO,
};

#[tokio::test]
async fn counts_stay_exact_through_every_kind_of_write_before_and_after_folding() {
    let db = test_db().await;
    let client = client(&db.pool);
    let pool = &db.pool;
    assert_counts_exact_around_a_fold(&client, "nothing").await;

    let now: Vec<NewJob> = (0..40).map(|i| item(json!({ "i": i }))).collect();
    let scheduled: Vec<NewJob> = (0..20)
        .map(|i| later(item(json!({ "i": i }))).with_queue("other"))
        .collect();
    client.insert_many(&now).await.unwrap();
    client.insert_many(&scheduled).await.unwrap();
    client
        .insert(&item(json!({})).with_unique_key("k", OnConflict::Keep))
        .await
        .unwrap();
    assert_counts_exact_around_a_fold(&client, "inserts").await;

    // Attempts: complete, retry, discard, cancel by the handler, snooze, hand back.
    let claimed = claim(pool, "default", 12).await;
    assert_counts_exact(&client, "claims").await;
    let done: Vec<Claim> = claimed[..4].iter().map(|j| j.claim().unwrap()).collect();
    job_store::job_complete_many(pool, &done).await.unwrap();
    fail(pool, &claimed[4], RETRY_NOW).await;
    fail(pool, &claimed[5], RETRY_NOW).await;
    fail(pool, &claimed[6], FailAs::Discard).await;
    fail(pool, &claimed[7], FailAs::Cancel).await;
    job_store::job_snooze(pool, claimed[8].claim().unwrap(), Duration::from_secs(600))
        .await
        .unwrap();
    job_store::job_hand_back(pool, &[claimed[9].claim().unwrap()], &[], "node-a")
        .await
        .unwrap();
    assert_counts_exact_around_a_fold(&client, "outcomes").await;

    // Staging, and an operator's actions one by one.
    job_store::job_stage_due(pool, None, 100).await.unwrap();
    let waiting = client
        .list(
            &JobFilter {
                queue: Some("other".into()),
                ..JobFilter::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    client.cancel(waiting[0].id).await.unwrap();
    client.cancel(claimed[10].id).await.unwrap();
    client.run_now(waiting[1].id).await.unwrap();
    client.delete(waiting[2].id).await.unwrap();
    client.retry(claimed[6].id).await.unwrap();
    client
        .reschedule(waiting[3].id, Utc::now() + chrono::Duration::hours(2))
        .await
        .unwrap();
    assert_counts_exact_around_a_fold(&client, "operator actions").await;

    // A dead node's job rescued, finished jobs pruned.
    JobRescuer::new(pool.clone(), RescuerConfig::default())
        .run_once(Some(Utc::now() + chrono::Duration::minutes(5)))
        .await
        .unwrap();
    assert_counts_exact(&client, "rescue").await;
    let pruned = JobPruner::new(pool.clone(), PrunerConfig::default())
        .run_once(Some(Utc::now() + chrono::Duration::days(2)))
        .await
        .unwrap();
    assert!(pruned.jobs_deleted > 0);
    assert_counts_exact_around_a_fold(&client, "rescue and prune").await;

    // Bulk actions.
    client
        .bulk_filter(
            BulkAction::Cancel,
            &JobFilter {
                queue: Some("other".into()),
                ..JobFilter::default()
            },
        )
        .await
        .unwrap();
    client
        .bulk_filter(BulkAction::Delete, &JobFilter::default())
        .await
        .unwrap();
    assert_counts_exact_around_a_fold(&client, "bulk cancel and delete").await;

    // A fold leaves nothing behind; the next one has nothing to do.
    assert_eq!(folder(pool).run_once().await.unwrap().deltas, 0);

    // TRUNCATE skips the row triggers: the counts start over.
    client.insert_many(&now[..3]).await.unwrap();
    sqlx::query("TRUNCATE jobs CASCADE")
        .execute(pool)
        .await
        .unwrap();
    assert_counts_exact(&client, "truncate").await;
    client.insert_many(&now[..3]).await.unwrap();
    assert_counts_exact_around_a_fold(&client, "inserts after truncate").await;
}

#[tokio::test]
async fn counts_stay_exact_while_writers_race_two_folders() {
    let db = test_db().await;
    let client = client(&db.pool);
    let stop = tokio_util::sync::CancellationToken::new();
    // Two folders at once, as during a leadership handover.
    let folders: Vec<_> = (0..2)
        .map(|_| {
            let folder = folder(&db.pool);
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut folded = 0;
                while !stop.is_cancelled() {
                    folded += folder.run_once().await.unwrap().deltas;
                }
                folded
            })
        })
        .collect();
    let writers: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|queue| {
            let client = client.clone();
            tokio::spawn(async move {
                let pool = client.pool().clone();
                for round in 0..15 {
                    let jobs: Vec<NewJob> = (0..20)
                        .map(|i| item(json!({ "i": i })).with_queue(queue))
                        .collect();
                    client.insert_many(&jobs).await.unwrap();
                    let claimed = claim(&pool, queue, 12).await;
                    let done: Vec<Claim> =
                        claimed[..6].iter().map(|j| j.claim().unwrap()).collect();
                    job_store::job_complete_many(&pool, &done).await.unwrap();
                    for job in &claimed[6..9] {
                        fail(&pool, job, RETRY_NOW).await;
                    }
                    let ids: Vec<JobId> = claimed[9..].iter().map(|j| j.id).collect();
                    client.cancel_many(&ids).await.unwrap();
                    if round % 5 == 4 {
                        job_store::job_stage_due(&pool, None, 1000).await.unwrap();
                        client
                            .bulk_filter(
                                BulkAction::Delete,
                                &JobFilter {
                                    queue: Some(queue.into()),
                                    states: vec![JobState::Cancelled],
                                    ..JobFilter::default()
                                },
                            )
                            .await
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    stop.cancel();
    let mut folded = 0;
    for f in folders {
        folded += f.await.unwrap();
    }
    assert!(folded > 0, "the folders ran while the writers wrote");
    assert_counts_exact_around_a_fold(&client, "racing writers and folders").await;
}

#[tokio::test]
async fn throughput_counts_completed_and_failed_attempts_per_minute() {
    let db = test_db().await;
    let client = client(&db.pool);
    let pool = &db.pool;
    let jobs: Vec<NewJob> = (0..8).map(|i| item(json!({ "i": i }))).collect();
    client.insert_many(&jobs).await.unwrap();
    let claimed = claim(pool, "default", 8).await;
    let done: Vec<Claim> = claimed[..3].iter().map(|j| j.claim().unwrap()).collect();
    job_store::job_complete_many(pool, &done).await.unwrap();
    fail(pool, &claimed[3], RETRY_NOW).await;
    fail(pool, &claimed[4], RETRY_NOW).await;
    fail(pool, &claimed[5], FailAs::Discard).await;
    // Neither a cancellation nor a snooze is a completion or a failure.
    fail(pool, &claimed[6], FailAs::Cancel).await;
    job_store::job_snooze(pool, claimed[7].claim().unwrap(), Duration::from_secs(60))
        .await
        .unwrap();

    let totals = |minutes: Vec<kickoff::engine::ThroughputMinute>| {
        (
            minutes.iter().map(|m| m.completed).sum::<i64>(),
            minutes.iter().map(|m| m.failed).sum::<i64>(),
        )
    };
    // Read before any fold: the deltas count.
    let minutes = client.throughput(5).await.unwrap();
    let db_now = job_store::db_now(pool).await.unwrap();
    assert_eq!(minutes.len(), 5);
    for pair in minutes.windows(2) {
        assert_eq!(
            pair[1].minute - pair[0].minute,
            chrono::Duration::minutes(1)
        );
    }
    let last = minutes.last().unwrap().minute;
    assert!(last <= db_now && db_now - last < chrono::Duration::minutes(1));
    assert_eq!(last.timestamp() % 60, 0);
    assert_eq!(totals(minutes), (3, 3));

    folder(pool).run_once().await.unwrap();
    assert_eq!(totals(client.throughput(5).await.unwrap()), (3, 3));

    // The retried jobs run again and complete: two more completions, folded or not.
    job_store::job_stage_due(pool, None, 10).await.unwrap();
    let again = claim(pool, "default", 10).await;
    assert_eq!(again.len(), 2);
    let done: Vec<Claim> = again.iter().map(|j| j.claim().unwrap()).collect();
    job_store::job_complete_many(pool, &done).await.unwrap();
    assert_eq!(totals(client.throughput(60).await.unwrap()), (5, 3));
    folder(pool).run_once().await.unwrap();
    assert_eq!(totals(client.throughput(60).await.unwrap()), (5, 3));

    // Minutes older than the retention are deleted; younger ones stay in the chart.
    sqlx::query(
        "INSERT INTO job_stats_minute (minute, queue, completed, failed) VALUES
             (date_trunc('minute', now()) - interval '3 hours', 'default', 100, 100),
             (date_trunc('minute', now()) - interval '30 minutes', 'default', 10, 1)",
    )
    .execute(pool)
    .await
    .unwrap();
    let report = folder(pool).run_once().await.unwrap();
    assert_eq!(report.minutes_deleted, 1);
    assert_eq!(totals(client.throughput(60).await.unwrap()), (15, 4));
    assert_eq!(totals(client.throughput(5).await.unwrap()), (5, 3));

    assert!(matches!(
        client.throughput(0).await,
        Err(ClientError::Invalid { .. })
    ));
    assert!(matches!(
        client.throughput(121).await,
        Err(ClientError::Invalid { .. })
    ));
}

#[tokio::test]
async fn the_leader_folds_deltas_in_the_background() {
    let db = test_db().await;
    let engine = Engine::start(
        db.pool.clone(),
        workers(),
        EngineConfig {
            count_folder: CountFolderConfig {
                interval: Duration::from_millis(100),
                ..CountFolderConfig::default()
            },
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    let client = engine.client();
    let jobs: Vec<NewJob> = (0..20).map(|i| item(json!({ "i": i }))).collect();
    client.insert_many(&jobs).await.unwrap();
    let pool = db.pool.clone();
    wait_for(
        "every job completed and every delta folded",
        Duration::from_secs(15),
        || async {
            let deltas: i64 = sqlx::query_scalar("SELECT count(*) FROM job_count_deltas")
                .fetch_one(&pool)
                .await
                .unwrap();
            let counts = client.counts().await.unwrap();
            deltas == 0 && counts == vec![("default".to_string(), JobState::Completed, 20)]
        },
    )
    .await;
    engine.stop().await;
}

#[tokio::test]
async fn job_list_filters_by_states_args_and_schedule_window_newest_first() {
    let db = test_db().await;
    let client = client(&db.pool);
    // Ids 1..=9 alternate between three states; args carry the id's remainder.
    let mut ids = Vec::new();
    for i in 0..9 {
        let job = client
            .insert(&item(json!({ "r": i % 3, "i": i })))
            .await
            .unwrap()
            .job;
        ids.push(job.id);
    }
    for (n, id) in ids.iter().enumerate() {
        match n % 3 {
            1 => {
                client.cancel(*id).await.unwrap();
            }
            2 => {
                client
                    .reschedule(*id, Utc::now() + chrono::Duration::hours(n as i64))
                    .await
                    .unwrap();
            }
            _ => {}
        }
    }
    let list = |filter: JobFilter, before: Option<JobId>, limit: i64| {
        let client = client.clone();
        async move {
            client
                .list(&filter, before, limit)
                .await
                .unwrap()
                .into_iter()
                .map(|j| j.id)
                .collect::<Vec<_>>()
        }
    };
    let two_states = JobFilter {
        states: vec![JobState::Cancelled, JobState::Scheduled],
        ..JobFilter::default()
    };
    assert_eq!(
        list(two_states.clone(), None, 10).await,
        vec![ids[8], ids[7], ids[5], ids[4], ids[2], ids[1]]
    );
    // Pages of two, by the keyset cursor, and a repeated state counted once.
    let page = list(two_states.clone(), None, 2).await;
    assert_eq!(page, vec![ids[8], ids[7]]);
    let repeated = JobFilter {
        states: vec![
            JobState::Scheduled,
            JobState::Cancelled,
            JobState::Scheduled,
        ],
        ..JobFilter::default()
    };
    assert_eq!(
        list(repeated, Some(ids[7]), 3).await,
        vec![ids[5], ids[4], ids[2]]
    );
    // Args containment, a snapshot, a scheduled_at window.
    let by_args = JobFilter {
        args: Some(json!({ "r": 0 })),
        ..JobFilter::default()
    };
    assert_eq!(
        list(by_args.clone(), None, 10).await,
        vec![ids[6], ids[3], ids[0]]
    );
    let snapshot = JobFilter {
        max_id: Some(ids[3]),
        ..by_args
    };
    assert_eq!(list(snapshot, None, 10).await, vec![ids[3], ids[0]]);
    let window = JobFilter {
        scheduled_from: Some(Utc::now() + chrono::Duration::minutes(90)),
        scheduled_to: Some(Utc::now() + chrono::Duration::minutes(330)),
        ..JobFilter::default()
    };
    assert_eq!(list(window, None, 10).await, vec![ids[5], ids[2]]);
    assert!(matches!(
        client
            .list(
                &JobFilter {
                    args: Some(json!([1])),
                    ..JobFilter::default()
                },
                None,
                10
            )
            .await,
        Err(ClientError::Invalid { .. })
    ));
}

#[tokio::test]
async fn count_matching_counts_up_to_the_cap() {
    let db = test_db().await;
    let client = client(&db.pool);
    let jobs: Vec<NewJob> = (0..30)
        .map(|i| item(json!({ "even": i % 2 == 0 })))
        .collect();
    client.insert_many(&jobs).await.unwrap();
    let all = JobFilter::default();
    assert_eq!(client.count_matching(&all, 10).await.unwrap(), 10);
    assert_eq!(client.count_matching(&all, 1000).await.unwrap(), 30);
    let even = JobFilter {
        args: Some(json!({ "even": true })),
        states: vec![JobState::Available, JobState::Scheduled],
        ..JobFilter::default()
    };
    assert_eq!(client.count_matching(&even, 1000).await.unwrap(), 15);
    let none = JobFilter {
        states: vec![JobState::Completed],
        ..JobFilter::default()
    };
    assert_eq!(client.count_matching(&none, 1000).await.unwrap(), 0);
    // States, queue and a snapshot alone are answered from the maintained counts, folded or not.
    let ids: Vec<JobId> = client
        .list(&all, None, 100)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    let mail: Vec<NewJob> = (0..5)
        .map(|i| later(item(json!({ "i": i }))).with_queue("mail"))
        .collect();
    client.insert_many(&mail).await.unwrap();
    let snapshot = JobFilter {
        states: vec![JobState::Available],
        max_id: Some(ids[10]),
        ..JobFilter::default()
    };
    let mail_only = JobFilter {
        queue: Some("mail".into()),
        ..JobFilter::default()
    };
    for fold in [false, true] {
        if fold {
            folder(&db.pool).run_once().await.unwrap();
        }
        assert_eq!(client.count_matching(&snapshot, 1000).await.unwrap(), 20);
        assert_eq!(client.count_matching(&snapshot, 7).await.unwrap(), 7);
        assert_eq!(client.count_matching(&mail_only, 1000).await.unwrap(), 5);
        assert_eq!(client.count_matching(&all, 1000).await.unwrap(), 35);
    }
    assert!(matches!(
        client.count_matching(&all, 0).await,
        Err(ClientError::Invalid { .. })
    ));
}

#[tokio::test]
async fn timers_list_waiting_jobs_overdue_first_with_the_database_clock() {
    let db = test_db().await;
    let client = client(&db.pool);
    let pool = &db.pool;
    let in_hour = client.insert(&later(item(json!({})))).await.unwrap().job;
    let in_minute = client
        .insert(&item(json!({})).after(Duration::from_secs(60)))
        .await
        .unwrap()
        .job;
    let due = client
        .insert(&item(json!({})).at(Utc::now() - chrono::Duration::minutes(5)))
        .await
        .unwrap()
        .job;
    // Executing and final jobs are not timers; a retryable one is.
    let running = client.insert(&item(json!({}))).await.unwrap().job;
    let failing = client
        .insert(&item(json!({})).at(Utc::now() - chrono::Duration::minutes(1)))
        .await
        .unwrap()
        .job;
    let claimed = claim(pool, "default", 10).await;
    assert_eq!(claimed.len(), 3);
    let failing = claimed.iter().find(|j| j.id == failing.id).unwrap();
    fail(
        pool,
        failing,
        FailAs::Retry {
            backoff: Duration::from_secs(600),
        },
    )
    .await;
    let due_claimed = claimed.iter().find(|j| j.id == due.id).unwrap();
    job_store::job_complete_many(pool, &[due_claimed.claim().unwrap()])
        .await
        .unwrap();
    let overdue = client
        .insert(&item(json!({})).at(Utc::now() - chrono::Duration::minutes(10)))
        .await
        .unwrap()
        .job;

    let before = Utc::now();
    let (timers, db_now) = client.timers(50).await.unwrap();
    let ids: Vec<JobId> = timers.iter().map(|j| j.id).collect();
    assert_eq!(ids, vec![overdue.id, in_minute.id, failing.id, in_hour.id]);
    assert!(!ids.contains(&running.id));
    assert!((db_now - before).num_seconds().abs() < 5);
    let (first_two, _) = client.timers(2).await.unwrap();
    assert_eq!(first_two.len(), 2);
    assert!(matches!(
        client.timers(0).await,
        Err(ClientError::Invalid { .. })
    ));
}

#[tokio::test]
async fn bulk_filter_acts_on_exactly_the_matching_jobs_up_to_the_snapshot() {
    let db = test_db().await;
    let client = client(&db.pool);
    let pool = &db.pool;
    let matching = |i: usize| later(item(json!({ "batch": 7, "i": i }))).with_queue("bulk");
    // More than two batches of matching jobs, and jobs that miss the filter by one condition.
    let many: Vec<NewJob> = (0..2100).map(matching).collect();
    client.insert_many(&many).await.unwrap();
    let other_args: Vec<NewJob> = (0..20)
        .map(|i| later(item(json!({ "batch": 8, "i": i }))).with_queue("bulk"))
        .collect();
    client.insert_many(&other_args).await.unwrap();
    let other_queue: Vec<NewJob> = (0..20)
        .map(|i| later(item(json!({ "batch": 7, "i": i }))).with_queue("other"))
        .collect();
    client.insert_many(&other_queue).await.unwrap();
    // Matching jobs that are executing (their nodes are told) and finished (skipped).
    let mut executing = Vec::new();
    for i in 0..5 {
        let now = item(json!({ "batch": 7, "i": 3000 + i })).with_queue("bulk");
        executing.push(client.insert(&now).await.unwrap().job.id);
    }
    assert_eq!(claim(pool, "bulk", 10).await.len(), 5);
    for i in 0..3 {
        let id = client.insert(&matching(4000 + i)).await.unwrap().job.id;
        client.cancel(id).await.unwrap();
    }
    let filter = JobFilter {
        queue: Some("bulk".into()),
        args: Some(json!({ "batch": 7 })),
        ..JobFilter::default()
    };
    assert_eq!(client.count_matching(&filter, 10_000).await.unwrap(), 2108);
    // The operator confirms; then more matching jobs arrive.
    let snapshot = job_store::job_max_id(pool).await.unwrap();
    let late: Vec<JobId> = {
        let mut v = Vec::new();
        for i in 0..10 {
            v.push(client.insert(&matching(5000 + i)).await.unwrap().job.id);
        }
        v
    };
    let mut control = PgListener::connect_with(pool.pool()).await.unwrap();
    control.listen("kickoff_control").await.unwrap();

    let report = client
        .bulk_filter(
            BulkAction::Cancel,
            &JobFilter {
                max_id: snapshot,
                ..filter.clone()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        report,
        BulkReport {
            changed: 2105,
            skipped: 3,
            ..BulkReport::default()
        }
    );
    let cancelled = JobFilter {
        states: vec![JobState::Cancelled],
        ..filter.clone()
    };
    assert_eq!(
        client.count_matching(&cancelled, 10_000).await.unwrap(),
        2108
    );
    for id in &late {
        assert_eq!(state_of(pool, *id).await, JobState::Scheduled);
    }
    let untouched = JobFilter {
        states: vec![JobState::Scheduled],
        ..JobFilter::default()
    };
    assert_eq!(client.count_matching(&untouched, 10_000).await.unwrap(), 50);
    // The executing jobs' nodes are told to stop them, as for a single cancel.
    let mut told: Vec<JobId> = Vec::new();
    while told.len() < executing.len() {
        let n = tokio::time::timeout(Duration::from_secs(5), control.recv())
            .await
            .expect("a control message")
            .unwrap();
        let payload: Value = serde_json::from_str(n.payload()).unwrap();
        told.extend(
            payload["cancel"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| JobId(v.as_i64().unwrap())),
        );
    }
    told.sort();
    assert_eq!(told, executing);

    // Without a snapshot, the action takes the newest id itself: the late jobs go too.
    let report = client
        .bulk_filter(BulkAction::Delete, &cancelled)
        .await
        .unwrap();
    assert_eq!(report.changed, 2108);
    let rest = client
        .bulk_filter(BulkAction::Cancel, &filter)
        .await
        .unwrap();
    assert_eq!(
        rest,
        BulkReport {
            changed: 10,
            skipped: 0,
            ..BulkReport::default()
        }
    );
}

#[tokio::test]
async fn bulk_actions_keep_the_state_rules_of_single_job_operations() {
    let db = test_db().await;
    let client = client(&db.pool);
    let pool = &db.pool;
    let executing = client.insert(&item(json!({}))).await.unwrap().job.id;
    claim(pool, "default", 1).await;
    let completed = client.insert(&item(json!({}))).await.unwrap().job.id;
    job_store::job_complete_many(pool, &[claim(pool, "default", 1).await[0].claim().unwrap()])
        .await
        .unwrap();
    let available = client.insert(&item(json!({}))).await.unwrap().job.id;
    let scheduled = client.insert(&later(item(json!({})))).await.unwrap().job.id;
    assert_eq!(state_of(pool, executing).await, JobState::Executing);
    assert_eq!(state_of(pool, completed).await, JobState::Completed);
    let missing = JobId(999_999);
    let all = [scheduled, available, executing, completed, missing];

    // Run now: waiting jobs only.
    let r = client.bulk_ids(BulkAction::RunNow, &all).await.unwrap();
    assert_eq!((r.changed, r.skipped), (2, 3));
    assert_eq!(state_of(pool, scheduled).await, JobState::Available);
    // Retry: finished (or retryable) jobs only; duplicates count once.
    let r = client
        .bulk_ids(BulkAction::Retry, &[completed, completed, executing])
        .await
        .unwrap();
    assert_eq!((r.changed, r.skipped), (1, 1));
    assert_eq!(state_of(pool, completed).await, JobState::Available);
    // Delete: anything but executing jobs.
    let r = client.bulk_ids(BulkAction::Delete, &all).await.unwrap();
    assert_eq!((r.changed, r.skipped), (3, 2));
    assert_eq!(state_of(pool, executing).await, JobState::Executing);
    // Cancel: anything not final.
    let r = client
        .bulk_ids(BulkAction::Cancel, &[executing])
        .await
        .unwrap();
    assert_eq!((r.changed, r.skipped), (1, 0));

    let too_many: Vec<JobId> = (1..=1001).map(JobId).collect();
    assert!(matches!(
        client.bulk_ids(BulkAction::Cancel, &too_many).await,
        Err(ClientError::Invalid { .. })
    ));
    assert_eq!(
        client.bulk_ids(BulkAction::Cancel, &[]).await.unwrap(),
        BulkReport::default()
    );
    for action in BulkAction::ALL {
        assert_eq!(action.as_str().parse::<BulkAction>(), Ok(action));
    }
    assert!("rerun".parse::<BulkAction>().is_err());
}

#[tokio::test]
async fn bulk_retry_skips_jobs_whose_unique_key_is_taken_and_retries_the_rest() {
    let db = test_db().await;
    let client = client(&db.pool);
    let pool = &db.pool;
    let keyed = |key: &str| later(item(json!({}))).with_unique_key(key, OnConflict::Keep);
    // k1: the cancelled job's key is now held by a live job.
    let held = client.insert(&keyed("k1")).await.unwrap().job.id;
    client.cancel(held).await.unwrap();
    client.insert(&keyed("k1")).await.unwrap();
    // k2: free again after its job was cancelled.
    let free = client.insert(&keyed("k2")).await.unwrap().job.id;
    client.cancel(free).await.unwrap();
    // k3: two finished jobs share it; only one can run again.
    let older = client.insert(&keyed("k3")).await.unwrap().job.id;
    client.cancel(older).await.unwrap();
    let newer = client.insert(&keyed("k3")).await.unwrap().job.id;
    client.cancel(newer).await.unwrap();
    // No key.
    let plain = client.insert(&later(item(json!({})))).await.unwrap().job.id;
    client.cancel(plain).await.unwrap();

    let report = client
        .bulk_filter(
            BulkAction::Retry,
            &JobFilter {
                states: vec![JobState::Cancelled],
                ..JobFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        report,
        BulkReport {
            changed: 3,
            skipped: 2,
            ..BulkReport::default()
        }
    );
    assert_eq!(state_of(pool, held).await, JobState::Cancelled);
    assert_eq!(state_of(pool, free).await, JobState::Available);
    assert_eq!(state_of(pool, older).await, JobState::Cancelled);
    assert_eq!(state_of(pool, newer).await, JobState::Available);
    assert_eq!(state_of(pool, plain).await, JobState::Available);
}

#[tokio::test]
async fn bulk_retry_skips_a_unique_key_taken_while_the_batch_runs() {
    let db = test_db().await;
    let client = client(&db.pool);
    let pool = &db.pool;
    let keyed = later(item(json!({}))).with_unique_key("race", OnConflict::Keep);
    let racing = client.insert(&keyed).await.unwrap().job.id;
    client.cancel(racing).await.unwrap();
    let plain = client.insert(&later(item(json!({})))).await.unwrap().job.id;
    client.cancel(plain).await.unwrap();
    // Another transaction takes the key but has not committed: the batch's statement cannot see
    // it, makes the cancelled job live again, and waits on the unique index.
    let mut other = pool.begin().await.unwrap();
    job_store::job_insert(
        &mut other,
        &keyed,
        None,
        job_store::InsertRules::trusted(&[keyed.kind.as_str()]),
    )
    .await
    .unwrap();
    let retry = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .bulk_ids(BulkAction::Retry, &[racing, plain])
                .await
                .unwrap()
        }
    });
    let name = db.name.clone();
    wait_for(
        "the retry to wait on the key",
        Duration::from_secs(10),
        || {
            let name = name.clone();
            async move {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = $1 AND wait_event_type = 'Lock'",
                )
                .bind(name)
                .fetch_one(pool)
                .await
                .unwrap();
                waiting > 0
            }
        },
    )
    .await;
    other.commit().await.unwrap();
    let report = retry.await.unwrap();
    assert_eq!(
        report,
        BulkReport {
            changed: 1,
            skipped: 1,
            ..BulkReport::default()
        }
    );
    assert_eq!(state_of(pool, racing).await, JobState::Cancelled);
    assert_eq!(state_of(pool, plain).await, JobState::Available);
}

#[tokio::test]
async fn clone_inserts_a_copy_due_now_without_the_unique_key() {
    let db = test_db().await;
    let client = client(&db.pool);
    let original = client
        .insert(
            &later(item(json!({ "to": "a@b.c" })))
                .with_queue("mail")
                .with_priority(3)
                .with_max_attempts(4)
                .with_tags(vec!["vip".into()])
                .with_meta(json!({ "by": "ops" }))
                .with_unique_key("mail-a", OnConflict::Keep),
        )
        .await
        .unwrap()
        .job;
    client.cancel(original.id).await.unwrap();
    let copy = client.clone_job(original.id).await.unwrap();
    assert_ne!(copy.id, original.id);
    assert_eq!(
        (
            &copy.queue,
            &copy.kind,
            &copy.args,
            copy.priority,
            copy.max_attempts,
            &copy.tags,
            &copy.meta
        ),
        (
            &original.queue,
            &original.kind,
            &original.args,
            original.priority,
            original.max_attempts,
            &original.tags,
            &original.meta
        )
    );
    assert_eq!(copy.state, JobState::Available);
    assert_eq!(copy.unique_key, None);
    assert_eq!(copy.attempt, 0);
    assert!(copy.errors.is_empty());
    assert!(matches!(
        client.clone_job(JobId(424_242)).await,
        Err(ClientError::NotFound(_))
    ));
}

#[tokio::test]
async fn failed_attempts_record_when_they_started() {
    let db = test_db().await;
    let client = client(&db.pool);
    let pool = &db.pool;
    client.insert(&item(json!({}))).await.unwrap();
    let claimed = claim(pool, "default", 1).await;
    fail(pool, &claimed[0], RETRY_NOW).await;
    let job = client.get(claimed[0].id).await.unwrap();
    let error = &job.errors[0];
    assert_eq!(error.started_at, claimed[0].attempted_at);
    assert!(error.started_at.unwrap() <= error.at);
    // Errors written before the field existed still read.
    let old: kickoff::engine::job::AttemptError = serde_json::from_value(json!({
        "attempt": 1, "at": "2026-11-30T12:00:00Z", "node": "n", "message": "m"
    }))
    .unwrap();
    assert_eq!(old.started_at, None::<DateTime<Utc>>);
}

#[tokio::test]
async fn nodes_lists_the_live_nodes_and_the_leader() {
    let db = test_db().await;
    let client = client(&db.pool);
    let pool = &db.pool;
    assert_eq!(client.nodes().await.unwrap(), (vec![], None));
    node_store::node_heartbeat(pool, "node-a", "host", 1, &json!({ "default": 10 }), true)
        .await
        .unwrap();
    node_store::node_heartbeat(pool, "node-b", "host", 2, &json!({}), true)
        .await
        .unwrap();
    assert!(leader_store::leader_attempt_elect(
        pool,
        kickoff::engine::store::leader::LEADER_NAME,
        "node-b",
        Duration::from_secs(5)
    )
    .await
    .unwrap());
    let (nodes, leader) = client.nodes().await.unwrap();
    let ids: Vec<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["node-a", "node-b"]);
    assert_eq!(leader.unwrap().node_id, "node-b");
}

#[tokio::test]
async fn filters_on_kind_queue_args_and_due_time_find_jobs_in_every_state_running_ones_included() {
    let db = test_db().await;
    let client = client(&db.pool);
    let mine = |q: &str| item(json!({ "game": 7 })).with_queue(q);
    // Waiting, due (available), claimed (executing), finished, and decoys of another game.
    let scheduled = client.insert(&later(mine("a"))).await.unwrap().job.id;
    let executing = client.insert(&mine("a")).await.unwrap().job.id;
    let claimed = job_store::job_claim(&db.pool, "a", 1, "n", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claimed[0].id, executing);
    let completed = client.insert(&mine("a")).await.unwrap().job.id;
    let claim = job_store::job_claim(&db.pool, "a", 1, "n", Duration::from_secs(60))
        .await
        .unwrap()[0]
        .claim()
        .unwrap();
    job_store::job_complete_many(&db.pool, &[claim])
        .await
        .unwrap();
    let available = client.insert(&mine("a")).await.unwrap().job.id;
    for _ in 0..3 {
        client
            .insert(&item(json!({ "game": 8 })).with_queue("b"))
            .await
            .unwrap();
    }
    assert_eq!(state_of(&db.pool, completed).await, JobState::Completed);
    assert_eq!(state_of(&db.pool, executing).await, JobState::Executing);
    let mut all = vec![scheduled, executing, completed, available];
    all.sort();
    all.reverse();
    let filters = [
        JobFilter {
            queue: Some("a".into()),
            ..JobFilter::default()
        },
        JobFilter {
            args: Some(json!({ "game": 7 })),
            ..JobFilter::default()
        },
        JobFilter {
            kind: Some("item".into()),
            args: Some(json!({ "game": 7 })),
            ..JobFilter::default()
        },
        JobFilter {
            queue: Some("a".into()),
            scheduled_from: Some(Utc::now() - chrono::Duration::hours(1)),
            scheduled_to: Some(Utc::now() + chrono::Duration::hours(2)),
            ..JobFilter::default()
        },
    ];
    for filter in filters {
        let listed: Vec<JobId> = client
            .list(&filter, None, 50)
            .await
            .unwrap()
            .into_iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(listed, all, "{filter:?}");
        // Pages of one, by the keyset cursor.
        let second: Vec<JobId> = client
            .list(&filter, Some(all[0]), 1)
            .await
            .unwrap()
            .into_iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(second, vec![all[1]], "{filter:?}");
        assert_eq!(client.count_matching(&filter, 1000).await.unwrap(), 4);
        assert_eq!(client.count_matching(&filter, 3).await.unwrap(), 3);
    }
}
