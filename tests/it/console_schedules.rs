//! The dashboard's schedule pages and server functions in-process against real PostgreSQL: the
//! pages render their data on the server, the form creates and edits, its preview explains a bad
//! rule, viewers read and act on nothing, and every action is audited.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::common::dashboard::{dashboard, dashboard_as};
use kickoff::accounts::Role;

fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

const NEW: &[(&str, &str)] = &[
    ("original", ""),
    ("name", "nightly-fixtures"),
    ("rule_type", "cron"),
    ("cron", "0 3 * * *"),
    ("every_secs", ""),
    ("time_zone", "Europe/London"),
    ("kind", "webhook"),
    ("queue", "webhooks"),
    ("args", "{\"url\": \"https://hooks.example.com/import\"}"),
    ("overlap", "skip"),
    ("missed", "run_once"),
];

#[tokio::test]
async fn the_schedule_pages_show_each_schedule_and_the_form_creates_and_edits() {
    let d = dashboard().await;
    let (status, body) = d.page("/schedules").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("No schedules yet"), "the empty list says so");

    let (status, body) = d.server_fn("save_schedule", &form(NEW)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("nightly-fixtures"), "{body}");

    // Unfiltered, signed in, rendered on the server with its data.
    let (status, body) = d.page("/schedules").await;
    assert_eq!(status, StatusCode::OK);
    for shown in [
        "nightly-fixtures",
        "03:00",
        "Europe/London",
        "0 3 * * *",
        "active",
    ] {
        assert!(body.contains(shown), "/schedules lacks {shown:?}");
    }
    let (status, body) = d.page("/schedules/nightly-fixtures").await;
    assert_eq!(status, StatusCode::OK);
    for shown in ["Next slots", "GMT", "Edit", "Runs", "skip", "Created by"] {
        assert!(body.contains(shown), "the detail lacks {shown:?}");
    }
    let (status, body) = d.page("/schedules/new").await;
    assert_eq!(
        (status, body.contains("Create schedule")),
        (StatusCode::OK, true)
    );

    // Edit: an interval now; the args shown are sent back unchanged.
    let mut edit: Vec<(&str, &str)> = NEW.to_vec();
    edit[0] = ("original", "nightly-fixtures");
    edit[2] = ("rule_type", "every");
    edit[4] = ("every_secs", "90");
    let (status, body) = d.server_fn("save_schedule", &form(&edit)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (every, version): (Option<i64>, i32) =
        sqlx::query_as("SELECT every_ms, version FROM schedules WHERE name = 'nightly-fixtures'")
            .fetch_one(&d.pool)
            .await
            .unwrap();
    assert_eq!((every, version), (Some(90_000), 2));

    // Run now, pause, resume, delete.
    for action in ["trigger", "pause", "resume", "delete"] {
        let (status, body) = d
            .server_fn(
                "schedule_action",
                &form(&[("name", "nightly-fixtures"), ("action", action)]),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{action}: {body}");
    }
    let (status, _) = d.page("/schedules/nightly-fixtures").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let actions: Vec<String> =
        sqlx::query_scalar("SELECT action FROM audit_log WHERE ok ORDER BY id")
            .fetch_all(&d.pool)
            .await
            .unwrap();
    for action in [
        "schedule.create",
        "schedule.update",
        "schedule.trigger",
        "schedule.pause",
        "schedule.resume",
        "schedule.delete",
    ] {
        assert!(actions.iter().any(|a| a == action), "{action}: {actions:?}");
    }
}

#[tokio::test]
async fn the_preview_lists_the_next_slots_and_explains_a_bad_rule() {
    let d = dashboard().await;
    let (status, body) = d
        .server_fn(
            "preview_rule",
            &form(&[
                ("rule_type", "cron"),
                ("cron", "30 2 * * *"),
                ("every_secs", ""),
                ("time_zone", "America/New_York"),
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("02:30:00 E"), "{body}");
    for (cron, zone, says) in [
        ("0 25 * * *", "UTC", "hour"),
        ("0 6 * * *", "Mars/Olympus", "IANA"),
    ] {
        let (status, body) = d
            .server_fn(
                "preview_rule",
                &form(&[
                    ("rule_type", "cron"),
                    ("cron", cron),
                    ("every_secs", ""),
                    ("time_zone", zone),
                ]),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body.contains(says), "{body}");
    }
}

#[tokio::test]
async fn bad_forms_are_refused_and_store_nothing() {
    let d = dashboard().await;
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![("cron", "0 0 * FOO *")], "month"),
        (vec![("time_zone", "Nowhere/Else")], "IANA"),
        (vec![("kind", "no_such_kind")], "no_such_kind"),
        (vec![("args", "{not json")], "not JSON"),
        (vec![("overlap", "sometimes")], "overlap"),
        (vec![("rule_type", "every"), ("every_secs", "0.1")], "every"),
        (vec![("name", "spaces are not allowed")], "name"),
    ];
    for (changes, says) in cases {
        let mut f: Vec<(&str, &str)> = NEW.to_vec();
        for (k, v) in &changes {
            f.iter_mut().find(|(fk, _)| fk == k).unwrap().1 = v;
        }
        let (status, body) = d.server_fn("save_schedule", &form(&f)).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{changes:?}: {body}"
        );
        assert!(body.contains(says), "{changes:?}: {body}");
    }
    let (status, _) = d
        .server_fn(
            "schedule_action",
            &form(&[("name", "missing"), ("action", "pause")]),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM schedules")
        .fetch_one(&d.pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(d.job_count().await, 0);
}

#[tokio::test]
async fn a_viewer_sees_the_schedules_and_acts_on_none() {
    let d = dashboard_as(Role::Viewer).await;
    d.api(
        Method::POST,
        "/schedules",
        json!({ "name": "reminders", "cron": "30 * * * *",
                "job": { "kind": "webhook", "queue": "webhooks",
                         "args": { "url": "https://hooks.example.com/r",
                                   "headers": { "Authorization": "Bearer s3cret" } } } }),
    )
    .await;
    let (status, body) = d.page("/schedules").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("reminders"));
    assert!(!body.contains("New schedule"), "no form for a viewer");
    let (status, body) = d.page("/schedules/reminders").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !body.contains("s3cret"),
        "a viewer sees no secret of the template"
    );
    for (f, what) in [
        ("save_schedule", form(NEW)),
        (
            "schedule_action",
            form(&[("name", "reminders"), ("action", "trigger")]),
        ),
    ]
    .map(|(f, body)| (f, body))
    {
        let (status, body) = d.server_fn(f, &what).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{f}: {body}");
    }
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE meta ? 'trigger'")
        .fetch_one(&d.pool)
        .await
        .unwrap();
    assert_eq!(runs, 0);
    let refused: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE NOT ok AND action LIKE 'schedule.%'",
    )
    .fetch_one(&d.pool)
    .await
    .unwrap();
    assert_eq!(refused, 2, "each refused attempt is audited");
}

/// The hydrated pages call their read functions without a form, so without the CSRF token; the
/// actions still need it.
#[tokio::test]
async fn the_schedule_reads_answer_the_hydrated_browser_and_the_actions_need_the_token() {
    use axum::body::Body;
    use axum::http::{header, Request};
    let d = dashboard().await;
    let (status, body) = d.server_fn("save_schedule", &form(NEW)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let post = |function: &str, body: String| {
        Request::post(format!("/_console/{function}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .body(Body::from(body))
            .unwrap()
    };
    for (function, body, shows) in [
        ("schedules", String::new(), "nightly-fixtures"),
        (
            "schedule",
            form(&[("name", "nightly-fixtures")]),
            "Europe/London",
        ),
        ("schedule_kinds", String::new(), "webhook"),
        (
            "preview_rule",
            form(&[
                ("rule_type", "cron"),
                ("cron", "0 6 * * *"),
                ("every_secs", ""),
                ("time_zone", "UTC"),
            ]),
            "06:00",
        ),
    ] {
        let (status, _, text) = d.send(post(function, body)).await;
        assert_eq!(status, StatusCode::OK, "{function}: {text}");
        assert!(text.contains(shows), "{function}: {text}");
    }
    let (status, _, _) = d
        .send(post(
            "schedule_action",
            form(&[("name", "nightly-fixtures"), ("action", "pause")]),
        ))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "an action without the token");
    let paused: bool = sqlx::query_scalar("SELECT paused FROM schedules")
        .fetch_one(&d.pool)
        .await
        .unwrap();
    assert!(!paused);
}
