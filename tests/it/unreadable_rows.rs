//! One row never fails a claim, a list, a page or the export. A job inserted with plain SQL, or by
//! an older release, may hold a number no float can read back (`1e400`: PostgreSQL's jsonb keeps
//! it): its row is read all the same, shown with the number as text, and a claim of it ends it
//! (discarded, with an error naming the field) while the rest of its batch runs. New rows are held
//! to the bound by the database itself.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::dashboard::dashboard_as;
use crate::common::wait_for;
use kickoff::accounts::Role;
use kickoff::engine::{Engine, EngineConfig, NewJob};

#[tokio::test]
async fn a_row_holding_a_number_out_of_range_is_listed_and_ended_and_new_ones_are_refused() {
    let d = dashboard_as(Role::Admin).await;
    // As an older release (or a script) wrote it: without today's checks.
    let mut conn = d.pool.pool().acquire().await.unwrap();
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut *conn)
        .await
        .unwrap();
    let bad: i64 = sqlx::query_scalar(
        r#"INSERT INTO jobs (queue, kind, args, meta, state)
           VALUES ('default', 'noop', '{"n": 1e400, "team": "lions"}', '{"deep": [1, -1e999]}',
                   'available')
           RETURNING id"#,
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    sqlx::query("RESET session_replication_role")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let good = d.new_job(json!({"kind": "noop", "args": {"n": 1}})).await;

    // Every list, page and export reads it.
    let page = d.api(Method::GET, "/jobs", Value::Null).await;
    let ids: Vec<i64> = page["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert!(ids.contains(&bad) && ids.contains(&good), "{page}");
    let shown = d
        .api(Method::GET, &format!("/jobs/{bad}"), Value::Null)
        .await;
    assert_eq!(shown["args"]["team"], "lions", "{shown}");
    assert!(
        shown["args"]["n"].as_str().is_some_and(|n| n.len() > 400),
        "the number as text: {shown}"
    );
    let (status, html) = d.page("/jobs").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(html.contains(&format!("/jobs/{bad}")));
    let (status, html) = d.page(&format!("/jobs/{bad}")).await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let (status, export) = crate::common::rest::send(
        &d.app,
        Method::GET,
        "/api/v1/jobs/export?format=jsonl",
        Some(crate::common::dashboard::TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(export.lines().count(), 2, "{export}");
    assert!(export.contains(&format!("\"id\":{bad},")), "{export}");

    // A claim ends it, naming the field; the good job of the same batch runs.
    let engine = Engine::start(
        d.pool.clone(),
        kickoff::workers::builtin(vec![]),
        EngineConfig {
            queues: vec![("default".into(), 4)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    wait_for("both jobs to end", Duration::from_secs(15), || async {
        d.state_of(good).await == "completed" && d.state_of(bad).await == "discarded"
    })
    .await;
    let ended = d
        .api(Method::GET, &format!("/jobs/{bad}"), Value::Null)
        .await;
    let error = ended["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(error.contains("args.n"), "{ended}");
    assert!(error.contains("meta.deep[1]"), "{ended}");
    engine.stop().await;

    // New rows are held to the bound by the database, whoever writes them.
    for (args, field) in [
        (r#"{"a": {"b": [0, {"n": 1e301}]}}"#, "args.a.b[1].n"),
        (r#"{"n": -1e400}"#, "args.n"),
    ] {
        let refused = sqlx::query(
            "INSERT INTO jobs (queue, kind, args) VALUES ('default', 'noop', $1::jsonb)",
        )
        .bind(args)
        .execute(&d.pool)
        .await
        .unwrap_err();
        let message = refused.to_string();
        assert!(message.contains(field), "{args}: {message}");
    }
    let refused = sqlx::query(r#"UPDATE jobs SET meta = '{"x": 1e400}' WHERE id = $1"#)
        .bind(good)
        .execute(&d.pool)
        .await;
    assert!(refused.is_err(), "an update is held too");
    // A row stored before the bound still changes state (its args are not written again).
    sqlx::query("UPDATE jobs SET state = 'available', finalized_at = NULL WHERE id = $1")
        .bind(bad)
        .execute(&d.pool)
        .await
        .unwrap();
    let ok = NewJob::new("noop", json!({"n": 1e300}));
    kickoff::engine::Client::new(
        d.pool.clone(),
        std::sync::Arc::new(kickoff::workers::builtin(vec![])),
    )
    .insert(&ok)
    .await
    .unwrap();
}
