//! The attempts' rollups (`job_history_*`): after a mixed workload they equal what the jobs
//! table says (checked here with `count(*)`, which the product never runs), they outlive the
//! pruned jobs, and the leader coarsens old minutes into hours and drops hours past the
//! retention, the series' totals unchanged.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use crate::attempt_records::{config, recorder, Recorder};
use crate::common::{test_db, wait_for};
use kickoff::engine::maintenance::count_folder::{CountFolder, CountFolderConfig};
use kickoff::engine::store::history::{
    self, HistoryFilter, HistoryGroup, HistoryPoint, LATE_BUCKETS,
};
use kickoff::engine::{Db, Engine, Workers};

/// The totals of each series over every step: (completed, failed, discarded, cancelled, snoozed,
/// attempts in the histogram).
fn totals(points: &[HistoryPoint]) -> BTreeMap<String, [i64; 6]> {
    let mut t: BTreeMap<String, [i64; 6]> = BTreeMap::new();
    for p in points {
        let e = t.entry(p.series.clone()).or_default();
        e[0] += p.completed;
        e[1] += p.failed;
        e[2] += p.discarded;
        e[3] += p.cancelled;
        e[4] += p.snoozed;
        e[5] += p.late_buckets.iter().sum::<i64>();
    }
    t
}

/// What the jobs table says of the same attempts, per queue.
async fn from_jobs(db: &Db) -> BTreeMap<String, [i64; 6]> {
    let rows: Vec<(String, i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT queue,
                count(*) FILTER (WHERE state = 'completed'),
                sum(jsonb_array_length(errors))::bigint
                    - count(*) FILTER (WHERE state IN ('discarded', 'cancelled')),
                count(*) FILTER (WHERE state = 'discarded'),
                count(*) FILTER (WHERE state = 'cancelled'),
                sum(coalesce((meta->>'snoozes')::bigint, 0))::bigint
         FROM jobs GROUP BY queue",
    )
    .fetch_all(db)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(q, c, f, d, x, s)| (q, [c, f, d, x, s, c + f + d + x + s]))
        .collect()
}

async fn series(db: &Db, group: HistoryGroup, step: Duration, days: i64) -> Vec<HistoryPoint> {
    let to = Utc::now() + chrono::Duration::minutes(1);
    let from = to - chrono::Duration::days(days);
    history::job_history_series(db, &HistoryFilter::default(), group, from, to, step)
        .await
        .unwrap()
}

#[tokio::test]
async fn rollups_equal_the_jobs_table_and_outlive_pruned_jobs() {
    let db = test_db().await;
    let mut workers = Workers::new();
    workers.register(Recorder);
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let client = engine.client();
    let mut ids = Vec::new();
    for (queue, mode, n) in [
        ("default", "ok", 30),
        ("default", "fail_once", 10),
        ("default", "fatal", 5),
        ("other", "cancel", 5),
        ("other", "snooze_once", 5),
        ("other", "ok", 7),
    ] {
        for _ in 0..n {
            let j = recorder(json!({ "mode": mode })).with_queue(queue);
            ids.push(client.insert(&j).await.unwrap().job.id);
        }
    }
    wait_for("every job to be final", Duration::from_secs(30), || async {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE finalized_at IS NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        left == 0
    })
    .await;
    engine.stop().await;

    // Read before and after the fold: the deltas not folded yet count the same.
    let expected = from_jobs(&db.pool).await;
    assert_eq!(expected["default"][..5], [40, 10, 5, 0, 0]);
    assert_eq!(expected["other"][..5], [12, 0, 0, 5, 5]);
    let before = totals(&series(&db.pool, HistoryGroup::Queue, Duration::from_secs(60), 1).await);
    let folder = CountFolder::new(db.pool.clone(), CountFolderConfig::default());
    let report = folder.run_once().await.unwrap();
    assert!(report.history_deltas > 0);
    let after = totals(&series(&db.pool, HistoryGroup::Queue, Duration::from_secs(60), 1).await);
    assert_eq!(before, expected);
    assert_eq!(after, expected);
    // Split by kind, or not at all: the same attempts.
    let all = totals(&series(&db.pool, HistoryGroup::All, Duration::from_secs(3600), 1).await);
    assert_eq!(all[""][0], 52);
    let by_kind = totals(&series(&db.pool, HistoryGroup::Kind, Duration::from_secs(60), 1).await);
    assert_eq!(by_kind["recorder"], all[""]);

    // Pruned jobs take their attempts' records, not the rollups.
    sqlx::query("DELETE FROM jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    let records: i64 = sqlx::query_scalar("SELECT count(*) FROM job_attempts")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(records, 0);
    let kept = totals(&series(&db.pool, HistoryGroup::Queue, Duration::from_secs(60), 1).await);
    assert_eq!(kept, expected);

    // Two days later the minutes are hours, with the same totals; past the retention they go.
    sqlx::query("UPDATE job_history_minute SET minute = minute - interval '2 days'")
        .execute(&db.pool)
        .await
        .unwrap();
    let report = folder.run_once_coarsening().await.unwrap();
    assert!(report.history_coarsened > 0);
    let minutes: i64 = sqlx::query_scalar("SELECT count(*) FROM job_history_minute")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(minutes, 0);
    let hourly = series(&db.pool, HistoryGroup::Queue, Duration::from_secs(3600), 3).await;
    assert_eq!(totals(&hourly), expected);
    assert!(hourly.iter().all(|p| p.late_buckets.len() == LATE_BUCKETS));
    let short = CountFolder::new(
        db.pool.clone(),
        CountFolderConfig {
            history_retention: Duration::from_secs(24 * 3600),
            ..CountFolderConfig::default()
        },
    );
    let report = short.run_once_coarsening().await.unwrap();
    assert!(report.history_deleted > 0);
    assert!(
        series(&db.pool, HistoryGroup::Queue, Duration::from_secs(3600), 3)
            .await
            .is_empty()
    );
}
