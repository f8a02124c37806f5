//! The Queues page's view of the limits across every node: the current window's use and the
//! available jobs the limits hold back, as the dashboard's server function answers them.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::dashboard;

async fn queue(d: &crate::common::dashboard::Dashboard, name: &str) -> Value {
    let (status, text) = d.server_fn("queues", "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let all: Value = serde_json::from_str(&text).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == name)
        .unwrap_or_else(|| panic!("no queue {name} in {all}"))
        .clone()
}

/// What the job's page says holds it.
async fn held(d: &crate::common::dashboard::Dashboard, id: i64) -> String {
    let (status, text) = d.server_fn("job", &format!("id={id}")).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let job: Value = serde_json::from_str(&text).unwrap();
    job["held"].as_str().unwrap_or("(nothing)").to_string()
}

/// Marks `used` attempts started in the current window of `queue` for `key`.
async fn window_used(pool: &kickoff::engine::Db, queue: &str, key: &str, used: i32) {
    sqlx::query(
        "INSERT INTO queue_rate_windows (queue, key, window_start, used)
         SELECT $1, $2, kickoff_window_start(now(), rate_period_ms), $3 FROM queues WHERE name = $1
         ON CONFLICT (queue, key) DO UPDATE
            SET used = excluded.used, window_start = excluded.window_start",
    )
    .bind(queue)
    .bind(key)
    .bind(used)
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn the_queues_page_shows_a_limits_window_use_and_the_jobs_it_holds() {
    let d = dashboard().await;
    // No node serves this queue: what the page shows is what a claim now would do.
    d.api(Method::PATCH, "/queues/partners", json!({ "rate": "5/h" }))
        .await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(
            d.new_job(json!({ "kind": "noop", "queue": "partners" }))
                .await,
        );
    }
    let q = queue(&d, "partners").await;
    let first = held(&d, ids[0]).await;
    assert_eq!(
        first,
        "its queue partners has limits across every node (5/h): they leave room now, so it \
         starts at the next claim"
    );
    assert_eq!(q["available"], 20, "{q}");
    let window = q["window_use"].as_str().unwrap();
    assert!(
        window.starts_with("0 of 5 started, window ends in "),
        "{window}"
    );
    assert_eq!(q["held"], "15 available jobs held by the limits", "{q}");

    window_used(&d.pool, "partners", "", 4).await;
    let q = queue(&d, "partners").await;
    assert!(
        q["window_use"]
            .as_str()
            .unwrap()
            .starts_with("4 of 5 started"),
        "{q}"
    );
    assert_eq!(q["held"], "19 available jobs held by the limits", "{q}");

    window_used(&d.pool, "partners", "", 5).await;
    assert_eq!(
        queue(&d, "partners").await["held"],
        "20 available jobs held by the limits"
    );
    let first = held(&d, ids[0]).await;
    assert!(
        first.starts_with(
            "its queue partners has limits across every node (5/h): this window's rate is used \
             up (5 of 5 started); it waits for the next window, in "
        ),
        "{first}"
    );

    // A paused kind's jobs are held by the pause, not by the limit.
    d.api(Method::POST, "/kinds/noop/pause", json!({})).await;
    assert_eq!(
        queue(&d, "partners").await["held"],
        "none held by the limits"
    );
    d.api(Method::POST, "/kinds/noop/resume", json!({})).await;

    // The page itself says it, rendered on the server.
    let (status, html) = d.page("/queues").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("20 available jobs held by the limits"),
        "{html}"
    );
    assert!(html.contains("5 of 5 started"), "{html}");
}

#[tokio::test]
async fn a_partitioned_limit_shows_its_busiest_key_and_holds_only_full_keys() {
    let d = dashboard().await;
    d.api(
        Method::PATCH,
        "/queues/partners",
        json!({ "rate": "2/h", "per": "args.team" }),
    )
    .await;
    let mut ids = Vec::new();
    for team in ["bears", "bears", "bears", "wolves", "wolves", "owls"] {
        ids.push(
            d.new_job(json!({ "kind": "noop", "queue": "partners", "args": { "team": team } }))
                .await,
        );
    }
    // Bears have used their window: their three wait; wolves have room for one of two.
    window_used(&d.pool, "partners", "bears", 2).await;
    window_used(&d.pool, "partners", "wolves", 1).await;
    let q = queue(&d, "partners").await;
    let window = q["window_use"].as_str().unwrap();
    assert!(
        window.starts_with("busiest args.team 2 of 2, 2 keys, 3 started in all; window ends in "),
        "{window}"
    );
    assert_eq!(q["held"], "4 available jobs held by the limits", "{q}");
    let bears = held(&d, ids[0]).await;
    assert!(
        bears.contains("this window's rate is used up for its args.team `bears` (2 of 2 started)"),
        "{bears}"
    );
    let owls = held(&d, ids[5]).await;
    assert!(
        owls.ends_with("they leave room now, so it starts at the next claim"),
        "{owls}"
    );
}

#[tokio::test]
async fn a_global_concurrency_reached_holds_every_available_job() {
    let d = dashboard().await;
    d.api(
        Method::PATCH,
        "/queues/partners",
        json!({ "global_concurrency": 1 }),
    )
    .await;
    for _ in 0..3 {
        d.new_job(json!({ "kind": "noop", "queue": "partners" }))
            .await;
    }
    let q = queue(&d, "partners").await;
    assert_eq!(q["window_use"], Value::Null, "no rate, no window: {q}");
    assert_eq!(q["held"], "none held by the limits", "{q}");
    // One executing (as a node's claim would leave it): the other two wait for it.
    sqlx::query(
        "UPDATE jobs SET state = 'executing', attempt = 1, attempted_at = now(),
                attempted_by = 'elsewhere', lease_expires_at = now() + interval '1 hour',
                claim_token = 1
         WHERE id = (SELECT min(id) FROM jobs WHERE queue = 'partners')",
    )
    .execute(&d.pool)
    .await
    .unwrap();
    assert_eq!(
        queue(&d, "partners").await["held"],
        "2 available jobs held by the limits"
    );
    let waiting: i64 = sqlx::query_scalar(
        "SELECT max(id) FROM jobs WHERE queue = 'partners' AND state = 'available'",
    )
    .fetch_one(&d.pool)
    .await
    .unwrap();
    assert_eq!(
        held(&d, waiting).await,
        "its queue partners has limits across every node (1 on all nodes): 1 executing on all \
         nodes reach its global concurrency; it starts when one ends"
    );
}
