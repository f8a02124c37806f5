//! The attempts' rollups (`job_history_*`): after a mixed workload they equal what the jobs
//! table says (checked here with `count(*)`, which the product never runs), they outlive the
//! pruned jobs, and the leader drops minutes after a day (the hours hold them, the series'
//! totals unchanged) and hours past the retention; a schedule's runs count in their queue's
//! totals once, and in their schedule's own series.

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
    // The leader's own folds wait: the test folds once itself, after reading the deltas unfolded
    // (with its 1 s default, a fold between the last completion and the stop left none, under
    // the full suite's load).
    let unfolded = kickoff::engine::EngineConfig {
        count_folder: CountFolderConfig {
            interval: Duration::from_secs(3600),
            ..CountFolderConfig::default()
        },
        ..config()
    };
    let engine = Engine::start(db.pool.clone(), workers, unfolded)
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
        for i in 0..n {
            let j = recorder(json!({ "mode": mode })).with_queue(queue);
            if mode == "ok" && i < 3 {
                // Runs of a schedule (written as the scheduler writes them: the client refuses
                // Kickoff's own meta keys): counted in their queue once, and in the schedule's
                // series.
                let run = j.with_meta(json!({ "schedule_id": 77 }));
                let mut conn = db.pool.pool().acquire().await.unwrap();
                let inserted = kickoff::engine::store::jobs::job_insert(
                    &mut conn,
                    &run,
                    None,
                    kickoff::engine::store::jobs::InsertRules::trusted(&[run.kind.as_str()]),
                )
                .await
                .unwrap();
                ids.push(inserted.job.id);
                continue;
            }
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
    // The engine reads the histogram with the database's bucket bounds.
    let bounds: Vec<f64> = sqlx::query_scalar("SELECT kickoff_late_bounds()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(bounds, history::LATE_BOUNDS_MS);
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
    let to = Utc::now() + chrono::Duration::minutes(1);
    let schedule = HistoryFilter {
        schedule_id: Some(77),
        ..HistoryFilter::default()
    };
    let runs = history::job_history_series(
        &db.pool,
        &schedule,
        HistoryGroup::Queue,
        to - chrono::Duration::hours(1),
        to,
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let runs = totals(&runs);
    assert_eq!((runs["default"][0], runs["other"][0]), (3, 3));

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

    // Two days later the minutes are gone, and the hours hold the same totals; past the
    // retention the hours go too.
    sqlx::query("UPDATE job_history_minute SET minute = minute - interval '2 days'")
        .execute(&db.pool)
        .await
        .unwrap();
    let report = folder.run_once_pruning_history().await.unwrap();
    assert!(report.history_minutes_deleted > 0);
    let minutes: i64 = sqlx::query_scalar("SELECT count(*) FROM job_history_minute")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(minutes, 0);
    let hourly = series(&db.pool, HistoryGroup::Queue, Duration::from_secs(3600), 3).await;
    assert_eq!(totals(&hourly), expected);
    assert!(hourly.iter().all(|p| p.late_buckets.len() == LATE_BUCKETS));
    sqlx::query("UPDATE job_history_hour SET minute = minute - interval '2 days'")
        .execute(&db.pool)
        .await
        .unwrap();
    let short = CountFolder::new(
        db.pool.clone(),
        CountFolderConfig {
            history_retention: Duration::from_secs(24 * 3600),
            ..CountFolderConfig::default()
        },
    );
    let report = short.run_once_pruning_history().await.unwrap();
    assert!(report.history_deleted > 0);
    assert!(
        series(&db.pool, HistoryGroup::Queue, Duration::from_secs(3600), 3)
            .await
            .is_empty()
    );
}

const TOKEN: &str = "history-token-1";

async fn get(app: &axum::Router, path: &str) -> (axum::http::StatusCode, serde_json::Value) {
    crate::common::rest::call(app, axum::http::Method::GET, path, Some(TOKEN), None).await
}

#[tokio::test]
async fn the_history_api_answers_series_and_refuses_what_the_rollups_cannot_answer() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let mut workers = Workers::new();
    workers.register(Recorder);
    let engine = Engine::start(db.pool.clone(), workers, config())
        .await
        .unwrap();
    let client = engine.client();
    // One job held for 300 ms by a paused queue, three that start at once.
    client.set_queue_paused("other", true).await.unwrap();
    let late = client
        .insert(&recorder(json!({"mode": "ok"})).with_queue("other"))
        .await
        .unwrap()
        .job;
    let mut prompt = Vec::new();
    for _ in 0..3 {
        prompt.push(
            client
                .insert(&recorder(json!({"mode": "ok"})))
                .await
                .unwrap()
                .job
                .id,
        );
    }
    let held_since = client.db_now().await.unwrap();
    wait_for("300 ms to pass", Duration::from_secs(5), || async {
        client.db_now().await.unwrap() - held_since > chrono::Duration::milliseconds(300)
    })
    .await;
    client.set_queue_paused("other", false).await.unwrap();
    crate::attempt_records::wait_records(&db.pool, late.id, 1).await;
    for id in &prompt {
        crate::attempt_records::wait_records(&db.pool, *id, 1).await;
    }

    // Its attempts, through the API.
    let (status, body) = get(&app, &format!("/api/v1/jobs/{}/attempts", late.id)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0]["outcome"], "completed");
    assert!(body[0]["late_ms"].as_f64().unwrap() >= 300.0, "{body}");
    assert_eq!(body[0]["output"], json!({"attempt": 1, "mode": "ok"}));
    let (status, _) = get(&app, "/api/v1/jobs/999999/attempts").await;
    assert_eq!(status, 404);

    // The list's "late by more than" filter finds the held job only.
    let (status, body) = get(&app, "/api/v1/jobs?late_by_ms=250").await;
    assert_eq!(status, 200, "{body}");
    let ids: Vec<i64> = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [late.id.0]);
    let (status, body) = get(&app, "/api/v1/jobs?late_by_ms=-1").await;
    assert_eq!(status, 422, "{body}");

    // The series, one per queue: the held job's lateness in its queue's p50.
    let (status, body) = get(&app, "/api/v1/stats/history?group=queue").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["step"], 60);
    let series = body["series"].as_array().unwrap();
    let names: Vec<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["default", "other"]);
    let sum = |s: &serde_json::Value, f: &str| -> i64 {
        s["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[f].as_i64().unwrap())
            .sum()
    };
    assert_eq!(sum(&series[0], "completed"), 3);
    assert_eq!(sum(&series[1], "completed"), 1);
    let held = series[1]["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["completed"] == 1)
        .unwrap();
    assert!(held["late_p50_ms"].as_f64().unwrap() >= 200.0, "{held}");
    assert_eq!(
        body["late_bounds_ms"].as_array().unwrap().len() + 1,
        LATE_BUCKETS
    );
    // One series of everything when not grouped, zeros included.
    let (_, body) = get(&app, "/api/v1/stats/history?kind=nothing-ran").await;
    assert_eq!(body["series"].as_array().unwrap().len(), 1);
    assert_eq!(sum(&body["series"][0], "completed"), 0);
    assert_eq!(body["series"][0]["points"].as_array().unwrap().len(), 60);

    // What the rollups cannot answer: 422, naming the field.
    let now = Utc::now();
    let iso = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for (query, field) in [
        (
            format!(
                "from={}&to={}",
                iso(now),
                iso(now - chrono::Duration::hours(1))
            ),
            "from",
        ),
        ("step=90".to_string(), "step"),
        ("step=30".to_string(), "step"),
        ("step=172800".to_string(), "step"),
        (
            format!("from={}&step=60", iso(now - chrono::Duration::days(3))),
            "step",
        ),
        (
            format!("from={}&step=3600", iso(now - chrono::Duration::days(500))),
            "from",
        ),
    ] {
        let (status, body) = get(&app, &format!("/api/v1/stats/history?{query}")).await;
        assert_eq!(status, 422, "{query}: {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(field),
            "{query}: {body}"
        );
    }
    let (status, _) = get(&app, "/api/v1/stats/history?schedule=none-such").await;
    assert_eq!(status, 404);
    let (status, _) = get(&app, "/api/v1/stats/history?step=abc").await;
    assert_eq!(status, 400);
    engine.stop().await;
}

#[tokio::test]
async fn a_job_posted_with_a_late_start_policy_keeps_it_and_a_bad_one_is_refused() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let post = |body: serde_json::Value| {
        let app = app.clone();
        async move {
            crate::common::rest::call(
                &app,
                axum::http::Method::POST,
                "/api/v1/jobs",
                Some(TOKEN),
                Some(&body),
            )
            .await
        }
    };
    let (status, body) =
        post(json!({"kind": "noop", "on_late": {"after_ms": 60000, "then": "skip"}})).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        body["job"]["meta"]["late"],
        json!({"after_ms": 60000, "then": "skip"})
    );
    for bad in [
        json!({"kind": "noop", "on_late": {"after_ms": 60000, "then": "later"}}),
        json!({"kind": "noop", "on_late": {"after_ms": 86_400_001u64, "then": "skip"}}),
        json!({"kind": "noop", "meta": {"late": {"after_ms": "soon", "then": "skip"}}}),
        json!({"kind": "noop", "on_late": {"after_ms": 1, "then": "skip"}, "meta": {"late": {"after_ms": 1, "then": "skip"}}}),
    ] {
        let (status, body) = post(bad.clone()).await;
        assert_eq!(status, 422, "{bad}: {body}");
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

/// A long series' closed steps (ended ten minutes ago or more) are read once and kept a while;
/// its open steps are read on every call; the two joined equal one read of the whole range.
#[tokio::test]
async fn a_long_series_reads_its_closed_steps_once_and_its_open_ones_each_time() {
    use kickoff::engine::{Client, HistoryQuery};
    let db = test_db().await;
    let client = Client::new(db.pool.clone(), std::sync::Arc::new(Workers::new()));
    // Three kinds, every hour of 30 days; the rows written now go to the deltas.
    sqlx::query(
        "INSERT INTO job_history_hour
         SELECT t, 'q', 'kind_' || k, 0, 10 + k, 1, 0, 0, 0, 0, 5, 3, 2, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 1, 100, 20
         FROM generate_series(date_trunc('hour', now()) - interval '30 days',
                              date_trunc('hour', now()) - interval '1 hour', interval '1 hour') t,
              generate_series(0, 2) k",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let now = client.db_now().await.unwrap();
    let step = Duration::from_secs(4 * 3600);
    let to = chrono::DateTime::from_timestamp(
        (now.timestamp() / step.as_secs() as i64 + 1) * step.as_secs() as i64,
        0,
    )
    .unwrap();
    let q = HistoryQuery {
        filter: HistoryFilter::default(),
        group: HistoryGroup::Kind,
        from: to - chrono::Duration::days(30),
        to,
        step,
    };
    let whole = || async {
        history::job_history_series(&db.pool, &q.filter, q.group, q.from, q.to, q.step)
            .await
            .unwrap()
    };
    let first = client.history(&q).await.unwrap();
    assert_eq!(first, whole().await);
    assert_eq!(first.len(), 3 * 180);
    // An attempt that ends now counts in the open step at once.
    sqlx::query(
        "INSERT INTO job_history_deltas
         SELECT date_trunc('minute', now()), 'q', 'kind_1', 0, 7, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 70, 10",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let second = client.history(&q).await.unwrap();
    assert_eq!(second, whole().await);
    assert_ne!(second, first);
    // A closed step is not read again while its entry lasts: a change written into one
    // directly (no attempt ends that long after it ended) shows in a whole read, not here.
    sqlx::query(
        "UPDATE job_history_hour SET completed = completed + 1000
         WHERE minute = date_trunc('hour', now()) - interval '10 days' AND kind = 'kind_0'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let third = client.history(&q).await.unwrap();
    assert_eq!(third, second);
    assert_ne!(third, whole().await);
    let fresh = Client::new(db.pool.clone(), std::sync::Arc::new(Workers::new()));
    assert_eq!(fresh.history(&q).await.unwrap(), whole().await);
}

/// A client on a standby's pool (the dashboard's reader) keeps its own closed steps: the API's
/// history, read on the primary, never answers steps a lagging standby read first.
#[tokio::test]
async fn a_client_on_another_pool_keeps_its_own_closed_steps() {
    use kickoff::engine::{Client, HistoryQuery};
    let primary = test_db().await;
    // A standby that has not replayed the history yet: a database without it.
    let standby = test_db().await;
    sqlx::query(
        "INSERT INTO job_history_hour
         SELECT t, 'q', 'kind_a', 0, 10, 1, 0, 0, 0, 0, 5, 3, 2, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 1, 100, 20
         FROM generate_series(date_trunc('hour', now()) - interval '3 days',
                              date_trunc('hour', now()) - interval '1 hour', interval '1 hour') t",
    )
    .execute(&primary.pool)
    .await
    .unwrap();
    let client = Client::new(primary.pool.clone(), std::sync::Arc::new(Workers::new()));
    let reader = client.with_pool(standby.pool.clone());
    let now = client.db_now().await.unwrap();
    let step = Duration::from_secs(3600);
    let to = chrono::DateTime::from_timestamp((now.timestamp() / 3600 + 1) * 3600, 0).unwrap();
    let q = HistoryQuery {
        filter: HistoryFilter::default(),
        group: HistoryGroup::Kind,
        from: to - chrono::Duration::days(3),
        to,
        step,
    };
    let on_standby = reader.history(&q).await.unwrap();
    assert!(
        on_standby.iter().all(|p| p.attempts() == 0),
        "the standby has none yet"
    );
    let on_primary = client.history(&q).await.unwrap();
    let whole =
        history::job_history_series(&primary.pool, &q.filter, q.group, q.from, q.to, q.step)
            .await
            .unwrap();
    assert_eq!(on_primary, whole);
    assert!(on_primary.iter().any(|p| p.attempts() > 0));
}
