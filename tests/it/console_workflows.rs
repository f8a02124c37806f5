//! The dashboard's workflow pages and server function in-process against real PostgreSQL: the
//! list and a run's page render on the server with the graph drawn as SVG and each step's wait in
//! a sentence; an operator cancels, retries, skips, signals, moves a time by a duration and runs
//! a settled run again from a step, each audited; a viewer reads and acts on nothing; a wrong
//! action changes nothing.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::common::dashboard::{dashboard, dashboard_as};
use kickoff::accounts::Role;

fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// A run whose first step waits on a queue no node runs, then a step that waits for `final`.
fn run_body() -> serde_json::Value {
    let kickoff = chrono::Utc::now() + chrono::Duration::hours(1);
    json!({"name": "game", "key": "game:console", "times": {"kickoff_at": kickoff},
           "steps": [
               {"name": "lock", "job": {"kind": "noop", "queue": "nobody"}},
               {"name": "await_final", "job": {"kind": "noop", "queue": "nobody"},
                "after": [{"step": "lock", "on_failure": "run"}], "signal": "final",
                "deadline": {"time": "kickoff_at", "offset_ms": 18_000_000}}]})
}

#[tokio::test]
async fn the_workflow_pages_draw_the_run_and_an_operator_acts_on_it() {
    let d = dashboard().await;
    let (status, body) = d.page("/workflows").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("No workflow runs yet"),
        "the empty list says so"
    );

    let made = d.api(Method::POST, "/workflows", run_body()).await;
    let id = made["run"]["id"].as_i64().unwrap().to_string();
    let (status, body) = d.page("/workflows").await;
    assert_eq!(status, StatusCode::OK);
    for shown in ["game", "game:console", "running", "0 of 2 done · 1 running"] {
        assert!(body.contains(shown), "/workflows lacks {shown:?}");
    }
    let (status, body) = d.page(&format!("/workflows/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    for shown in [
        "<svg",
        "wf-node state-ready",
        "wf-edge on-run",
        "waits for 1 of its 1 dependencies",
        "kickoff_at",
        "Cancel run",
        "Skip step lock",
        "No signal yet.",
    ] {
        assert!(body.contains(shown), "the run's page lacks {shown:?}");
    }
    let (status, _) = d.page("/workflows/999999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Skip the held step: the step after it waits for its signal, which a button sends.
    let (status, body) = d
        .server_fn(
            "workflow_action",
            &form(&[("id", &id), ("action", "skip"), ("detail", "lock")]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, page) = d.page(&format!("/workflows/{id}")).await;
    assert!(
        page.contains("waits for the signal &quot;final&quot; until")
            || page.contains("waits for the signal \"final\" until"),
        "{page}"
    );
    assert!(page.contains("Send the signal final"));
    for (pairs, want) in [
        (
            vec![("id", id.as_str()), ("action", "signal")],
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            vec![("id", id.as_str()), ("action", "sideways")],
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            vec![("id", id.as_str()), ("action", "retry"), ("detail", "some")],
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            vec![
                ("id", id.as_str()),
                ("action", "signal"),
                ("detail", "final"),
            ],
            StatusCode::OK,
        ),
        (
            vec![("id", id.as_str()), ("action", "retry")],
            StatusCode::CONFLICT,
        ),
        (
            vec![("id", id.as_str()), ("action", "cancel")],
            StatusCode::OK,
        ),
        (
            vec![("id", id.as_str()), ("action", "cancel")],
            StatusCode::CONFLICT,
        ),
    ] {
        let (status, body) = d.server_fn("workflow_action", &form(&pairs)).await;
        assert_eq!(status, want, "{pairs:?}: {body}");
    }
    let (_, page) = d.page(&format!("/workflows/{id}")).await;
    assert!(page.contains("console:"), "the signal's source: {page}");
    let actions: Vec<(String, bool)> = sqlx::query_as(
        "SELECT action, ok FROM audit_log WHERE action LIKE 'workflow.%' ORDER BY id",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            ("workflow.skip", true),
            ("workflow.signal", false),
            ("workflow.sideways", false),
            ("workflow.retry", false),
            ("workflow.signal", true),
            ("workflow.retry", false),
            ("workflow.cancel", true),
            ("workflow.cancel", false),
        ]
        .map(|(a, ok)| (a.to_string(), ok))
    );
}

#[tokio::test]
async fn a_viewer_reads_the_workflow_pages_and_acts_on_nothing() {
    let d = dashboard_as(Role::Viewer).await;
    let made = d.api(Method::POST, "/workflows", run_body()).await;
    let id = made["run"]["id"].as_i64().unwrap().to_string();
    let (status, body) = d.page(&format!("/workflows/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("<svg"));
    assert!(
        !body.contains("Cancel run"),
        "no action offered to a viewer"
    );
    let (status, _) = d
        .server_fn(
            "workflow_action",
            &form(&[("id", &id), ("action", "cancel")]),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let state: String = sqlx::query_scalar("SELECT state FROM workflow_runs WHERE id = $1")
        .bind(id.parse::<i64>().unwrap())
        .fetch_one(&d.pool)
        .await
        .unwrap();
    assert_eq!(state, "running");
}

#[tokio::test]
async fn an_operator_moves_a_runs_time_and_runs_it_again_from_a_step_on_the_page() {
    let d = dashboard().await;
    let made = d.api(Method::POST, "/workflows", run_body()).await;
    let id = made["run"]["id"].as_i64().unwrap();
    let kickoff: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(made["run"]["times"]["kickoff_at"].clone()).unwrap();
    let (_, page) = d.page(&format!("/workflows/{id}")).await;
    assert!(
        page.contains("Move a time") && page.contains("name=\"by\""),
        "{page}"
    );
    assert!(!page.contains("Run again from"), "not while it runs");
    let act = async |pairs: &[(&str, &str)]| d.server_fn("workflow_action", &form(pairs)).await;
    let id_text = id.to_string();
    // Refused, nothing moved: a time the run lacks, a duration that is none, none at all.
    for (detail, by) in [
        ("whistle", "30m"),
        ("kickoff_at", "soon"),
        ("kickoff_at", ""),
    ] {
        let (status, body) = act(&[
            ("id", &id_text),
            ("action", "move"),
            ("detail", detail),
            ("by", by),
        ])
        .await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{detail} {by}: {body}"
        );
    }
    let (status, body) = act(&[
        ("id", &id_text),
        ("action", "move"),
        ("detail", "kickoff_at"),
        ("by", "-15m"),
    ])
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let detail = d
        .api(Method::GET, &format!("/workflows/{id}"), json!(null))
        .await;
    let moved: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(detail["run"]["times"]["kickoff_at"].clone()).unwrap();
    assert_eq!(moved, kickoff - chrono::Duration::minutes(15));
    // Settled by its steps' jobs cancelled (a run cancelled whole is not run again): failed.
    let lock_job = detail["steps"][0]["job_id"].as_i64().unwrap();
    d.api(Method::POST, &format!("/jobs/{lock_job}/cancel"), json!({}))
        .await;
    d.api(
        Method::POST,
        &format!("/workflows/{id}/signals"),
        json!({"name": "final"}),
    )
    .await;
    let job_of = |detail: &serde_json::Value| detail["steps"][1]["job_id"].as_i64();
    let detail = d
        .api(Method::GET, &format!("/workflows/{id}"), json!(null))
        .await;
    d.api(
        Method::POST,
        &format!("/jobs/{}/cancel", job_of(&detail).unwrap()),
        json!({}),
    )
    .await;
    let (_, page) = d.page(&format!("/workflows/{id}")).await;
    assert!(page.contains("Run again from"), "{page}");
    let (status, body) = act(&[("id", &id_text), ("action", "rerun"), ("detail", "nowhere")]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = act(&[("id", &id_text), ("action", "rerun"), ("detail", "lock")]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let again: i64 = serde_json::from_str(&body).unwrap();
    let rerun = d
        .api(Method::GET, &format!("/workflows/{again}"), json!(null))
        .await;
    assert_eq!(rerun["run"]["rerun_of"], json!(id));
    assert_eq!(rerun["run"]["created_by"], json!("ops"));
    let actions: Vec<(String, bool)> = sqlx::query_as(
        "SELECT action, ok FROM audit_log WHERE action LIKE 'workflow.%' ORDER BY id",
    )
    .fetch_all(&d.pool)
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            ("workflow.move", false),
            ("workflow.move", false),
            ("workflow.move", false),
            ("workflow.move", true),
            ("workflow.rerun", false),
            ("workflow.rerun", true),
        ]
        .map(|(a, ok)| (a.to_string(), ok))
    );
}

/// A map step's progress on the run's page: its tasks done, failed (or cancelled) and items.
#[tokio::test]
async fn the_run_page_shows_a_map_steps_progress() {
    let d = dashboard().await;
    let made = d
        .api(
            Method::POST,
            "/workflows",
            json!({"name": "notify_players", "steps": [
                {"name": "notify", "job": {"kind": "noop", "queue": "nobody"}, "tasks": 3}]}),
        )
        .await;
    let id = made["run"]["id"].as_i64().unwrap();
    let step = made["steps"][0]["name"].as_str().unwrap().to_string();
    let jobs: Vec<i64> = sqlx::query_scalar(
        "SELECT t.job_id FROM workflow_tasks t JOIN workflow_steps s ON s.id = t.step_id
         WHERE s.run_id = $1 ORDER BY t.task",
    )
    .bind(id)
    .fetch_all(&d.pool)
    .await
    .unwrap();
    assert_eq!(jobs.len(), 3);
    sqlx::query("UPDATE workflow_tasks SET items = 500 WHERE job_id = $1")
        .bind(jobs[0])
        .execute(&d.pool)
        .await
        .unwrap();
    d.api(
        Method::POST,
        &format!("/jobs/{}/cancel", jobs[2]),
        json!(null),
    )
    .await;
    let (status, page) = d.page(&format!("/workflows/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    for shown in [
        "waits for its tasks: 0 of 3 done, 1 failed, 500 items",
        "0 of 3 tasks",
        " · 1 failed",
        "500 items",
        &format!("aria-label=\"Tasks of {step}\""),
    ] {
        assert!(page.contains(shown), "the run's page lacks {shown:?}");
    }
}

#[tokio::test]
async fn the_list_finds_the_running_runs_waiting_longer_than_a_duration() {
    let d = dashboard().await;
    let made = |key: &str| {
        let mut body = run_body();
        body["key"] = json!(key);
        body
    };
    let stuck = d.api(Method::POST, "/workflows", made("game:stuck")).await["run"]["id"]
        .as_i64()
        .unwrap();
    let fresh = d.api(Method::POST, "/workflows", made("game:fresh")).await["run"]["id"]
        .as_i64()
        .unwrap();
    // Nothing of the first changed for two hours.
    sqlx::query(
        "UPDATE workflow_runs SET progressed_at = now() - interval '2 hours' WHERE id = $1",
    )
    .bind(stuck)
    .execute(&d.pool)
    .await
    .unwrap();
    let ids = |page: serde_json::Value| -> Vec<i64> {
        page["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    let all = d.api(Method::GET, "/workflows", json!(null)).await;
    assert_eq!(ids(all), [fresh, stuck]);
    let waiting = d
        .api(Method::GET, "/workflows?waiting_ms=3600000", json!(null))
        .await;
    assert_eq!(ids(waiting), [stuck]);
    let (status, page) = d.page("/workflows?waiting=1h").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("game:stuck") && !page.contains("game:fresh"),
        "{page}"
    );
    let (status, _) = d.server_fn("workflows", "waiting=soon").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "not a duration");
    // A step of it changes (skipped by hand): it is no longer waiting.
    let (status, body) = d
        .server_fn(
            "workflow_action",
            &form(&[
                ("id", &stuck.to_string()),
                ("action", "skip"),
                ("detail", "lock"),
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let waiting = d
        .api(Method::GET, "/workflows?waiting_ms=3600000", json!(null))
        .await;
    assert_eq!(ids(waiting), Vec::<i64>::new());
    let (_, page) = d.page("/workflows?waiting=1h").await;
    assert!(page.contains("No running run waits that long."), "{page}");
}

/// The new question's form starts the game's workflow when asked, in the question's
/// transaction and its audit entry; a receiver webhooks may not call refuses both.
#[tokio::test]
async fn a_question_made_on_the_dashboard_can_start_its_games_run() {
    let d = dashboard().await;
    let in_an_hour = (chrono::Utc::now() + chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let ask = |game: &str, extra: &[(&str, &str)]| {
        let mut pairs = vec![
            ("game", game),
            ("prompt", "Who wins?"),
            ("choices", "Home\nAway"),
            ("game_time", in_an_hour.as_str()),
            ("zone", "UTC"),
        ];
        pairs.extend_from_slice(extra);
        form(&pairs)
    };
    let (status, text) = d
        .server_fn(
            "create_question",
            &ask("Gulls vs Terns", &[("workflow", "on")]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (status, text) = d
        .server_fn("create_question", &ask("Moles vs Voles", &[]))
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let (status, text) = d
        .server_fn(
            "create_question",
            &ask(
                "Pikes vs Carps",
                &[
                    ("workflow", "on"),
                    ("notify_url", "https://not-allowed.example/hook"),
                ],
            ),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    let runs: Vec<(Option<String>, Option<String>)> =
        sqlx::query_as("SELECT key, created_by FROM workflow_runs ORDER BY id")
            .fetch_all(&d.pool)
            .await
            .unwrap();
    assert_eq!(
        runs,
        [(
            Some("game:Gulls vs Terns".to_string()),
            Some("ops".to_string())
        )]
    );
    let games: Vec<String> = sqlx::query_scalar("SELECT game FROM questions ORDER BY id")
        .fetch_all(&d.pool)
        .await
        .unwrap();
    assert_eq!(games, ["Gulls vs Terns", "Moles vs Voles"]);
    let audited: Vec<bool> =
        sqlx::query_scalar("SELECT ok FROM audit_log WHERE action = 'question.create' ORDER BY id")
            .fetch_all(&d.pool)
            .await
            .unwrap();
    assert_eq!(audited, [true, true, false]);
}
