//! `KICKOFF_READ_DATABASE_URL`: the dashboard's lists, charts and counts read a standby, and say
//! how far behind it is once that passes the bound; a job's own page reads the primary.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use kickoff::accounts::{Accounts, Role};
use kickoff::engine::{Client, Db, NewJob, Workers, MIGRATOR};
use kickoff::http::reader::Reader;
use kickoff::postgres::{Durability, EmbeddedPostgres, DATABASE};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

use crate::common::dashboard::{get_as, sign_in, PASSWORD, TOKEN};
use crate::common::{app_changed, wait_for};

const NOTICE: &str = "Read from a replica";

async fn pool(url: &str) -> Db {
    Db::from(
        PgPoolOptions::new()
            .max_connections(5)
            .connect(url)
            .await
            .unwrap(),
    )
}

async fn rows_on(db: &Db) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM jobs")
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboards_lists_read_the_standby_and_say_when_it_falls_behind() {
    let dir = std::env::temp_dir().join(format!("kickoff-replica-test-{}", fastrand::u64(..)));
    // Made first, so the clusters' user may pass through it.
    std::fs::create_dir_all(&dir).unwrap();
    let primary = EmbeddedPostgres::start(&dir.join("primary"), Durability::Throwaway).unwrap();
    let db = pool(&primary.url_for(DATABASE)).await;
    MIGRATOR.run(db.pool()).await.unwrap();
    let standby = primary.replica_of(&dir.join("standby")).unwrap();
    let replica = pool(&standby.url_for(DATABASE)).await;
    let reader = Reader::replica(
        Client::new(replica.clone(), Arc::new(Workers::new())),
        Duration::from_millis(300),
    );
    let app = app_changed(&db, TOKEN, |state| state.with_reader(reader));
    Accounts::new(db.clone())
        .create("ops", PASSWORD, Role::Viewer)
        .await
        .unwrap();
    let (cookie, _) = sign_in(&app, "ops", PASSWORD, None).await;
    let writer = Client::new(db.clone(), Arc::new(kickoff::workers::builtin(Vec::new())));
    let insert = |n: usize| {
        let writer = writer.clone();
        async move {
            let mut ids = Vec::new();
            for _ in 0..n {
                let new = NewJob::new("noop", json!({})).after(Duration::from_secs(3600));
                ids.push(writer.insert(&new).await.unwrap().job.id.0);
            }
            ids
        }
    };
    let listed = |body: &str, id: i64| body.contains(&format!("href=\"/jobs/{id}\""));

    // Caught up: the list shows what the primary holds, and no notice.
    let first = insert(3).await;
    wait_for(
        "the standby to replay the inserts",
        Duration::from_secs(10),
        || async { rows_on(&replica).await == 3 },
    )
    .await;
    let (status, page) = get_as(&app, &cookie, "/jobs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(first.iter().all(|id| listed(&page, *id)), "{page}");
    assert!(!page.contains(NOTICE));

    // Replay paused: the list is the standby's (the new jobs missing), and once the lag passes
    // the bound the list and the overview say so; the new job's own page reads the primary.
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(&replica)
        .await
        .unwrap();
    let later = insert(2).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let stale = loop {
        let page = get_as(&app, &cookie, "/jobs").await.1;
        if page.contains(NOTICE) {
            break page;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the list never said the replica is behind"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!later.iter().any(|id| listed(&stale, *id)), "{stale}");
    assert!(first.iter().all(|id| listed(&stale, *id)));
    let (_, overview) = get_as(&app, &cookie, "/").await;
    assert!(overview.contains(NOTICE), "{overview}");
    let (status, detail) = get_as(&app, &cookie, &format!("/jobs/{}", later[0])).await;
    assert_eq!(status, StatusCode::OK, "{detail}");

    // Replay resumed: the list catches up and the notice goes.
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&replica)
        .await
        .unwrap();
    wait_for("the list to catch up", Duration::from_secs(10), || async {
        let page = get_as(&app, &cookie, "/jobs").await.1;
        later.iter().all(|id| listed(&page, *id)) && !page.contains(NOTICE)
    })
    .await;

    drop((replica, db));
    let _ = standby.stop();
    let _ = primary.stop();
    let _ = std::fs::remove_dir_all(dir);
}
