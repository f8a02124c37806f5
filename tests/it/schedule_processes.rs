//! Schedules with real processes: the leader killed with SIGKILL while a schedule fires every
//! second (no slot twice, none lost), and the `kickoff schedule` command against the database and
//! against a running server.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::server::{Server, TOKEN};
use crate::common::test_db;

/// `(slot_ms, runs of that slot, completed runs of it)` of schedule `name`, by slot.
async fn slots(pool: &kickoff::engine::Db, name: &str) -> Vec<(i64, i64, i64)> {
    sqlx::query_as(
        "SELECT (meta ->> 'slot_ms')::bigint AS slot, count(*),
                count(*) FILTER (WHERE state = 'completed')
         FROM jobs WHERE meta ->> 'schedule' = $1 AND NOT meta ? 'trigger'
         GROUP BY 1 ORDER BY 1",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn killing_the_leader_while_a_schedule_fires_every_second_neither_doubles_nor_drops_a_slot() {
    let db = test_db().await;
    let envs = [("DATABASE_URL", db.url.clone())];
    let mut servers: Vec<Option<Server>> = (0..3).map(|_| Some(Server::start(&envs))).collect();
    let first = servers[0].as_ref().unwrap().addr.clone();
    let created: Value = reqwest::Client::new()
        .post(format!("http://{first}/api/v1/schedules"))
        .bearer_auth(TOKEN)
        .json(&json!({ "name": "every-second", "every_ms": 1000,
                       "job": { "kind": "noop", "args": { "tally": "every-second" } } }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["name"], "every-second", "{created}");
    let start_ms = kickoff::engine::store::jobs::db_now(&db.pool)
        .await
        .unwrap()
        .timestamp_millis();

    // The leader dies (SIGKILL) a few seconds in; past the runs it inserted ahead (12 s), the new
    // leader must be inserting them.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let leader: String = sqlx::query_scalar("SELECT node_id FROM leader")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let victim = servers
        .iter()
        .position(|s| {
            s.as_ref()
                .is_some_and(|s| leader.contains(&format!("-{}-", s.child.id())))
        })
        .expect("the leader is one of the three");
    servers[victim].take().unwrap().kill9();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let end_ms = kickoff::engine::store::jobs::db_now(&db.pool)
        .await
        .unwrap()
        .timestamp_millis();
    for s in servers.iter_mut() {
        if let Some(s) = s.take() {
            s.terminate();
        }
    }

    let rows = slots(&db.pool, "every-second").await;
    let twice: Vec<_> = rows.iter().filter(|r| r.1 != 1).collect();
    assert!(twice.is_empty(), "slots with more than one run: {twice:?}");
    // Every slot from the first to two seconds before the end ran, once (a run whose node died
    // while it ran is rescued and completes once).
    let done: Vec<i64> = rows
        .iter()
        .filter(|r| r.0 > start_ms && r.0 < end_ms - 2_000)
        .map(|r| {
            assert_eq!(r.2, 1, "slot {} did not complete once: {r:?}", r.0);
            r.0
        })
        .collect();
    assert!(
        done.len() >= 20,
        "{} slots in {} ms",
        done.len(),
        end_ms - start_ms
    );
    assert!(
        done.windows(2).all(|w| w[1] - w[0] == 1000),
        "a slot was lost: {done:?}"
    );
    // Each effect happened once: the tally counts completions in their own transaction.
    let tally: i64 = sqlx::query_scalar("SELECT count FROM tallies WHERE name = 'every-second'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let completed: i64 = rows.iter().map(|r| r.2).sum();
    assert_eq!(tally, completed, "an effect happened twice or not at all");
}

fn kickoff(args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kickoff"));
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .env_remove("KICKOFF_SERVER_URL")
        .env_remove("KICKOFF_TOKEN")
        .env("RUST_LOG", "warn");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run kickoff");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_schedule_command_manages_schedules_on_the_database_and_through_a_server() {
    let db = test_db().await;
    let on_db = [("DATABASE_URL", db.url.as_str()), ("USER", "ops")];
    let (ok, out, err) = kickoff(
        &[
            "schedule",
            "add",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--zone",
            "Europe/London",
            "--kind",
            "noop",
            "--args",
            "{\"batch\": \"n\"}",
            "--missed",
            "skip",
        ],
        &on_db,
    );
    assert!(ok, "{out}{err}");
    let added: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(added["missed"], "skip");
    assert!(added["next_run_at"].is_string(), "{added}");
    let (ok, out, err) = kickoff(&["schedule", "list"], &on_db);
    assert!(
        ok && out.contains("nightly") && out.contains("Europe/London"),
        "{out}{err}"
    );
    let (ok, out, err) = kickoff(&["schedule", "show", "nightly"], &on_db);
    assert!(ok, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["next"].as_array().unwrap().len(), 5);
    // Refused with the reason, nothing stored.
    let (ok, _, err) = kickoff(
        &[
            "schedule",
            "add",
            "bad",
            "--cron",
            "0 25 * * *",
            "--kind",
            "noop",
        ],
        &on_db,
    );
    assert!(!ok && err.contains("hour"), "{err}");
    let (ok, _, err) = kickoff(&["schedule", "pause", "missing"], &on_db);
    assert!(!ok && err.contains("not found"), "{err}");
    for action in ["pause", "trigger", "resume"] {
        let (ok, out, err) = kickoff(&["schedule", action, "nightly"], &on_db);
        assert!(ok, "{action}: {out}{err}");
    }
    let actors: Vec<(String, String, bool)> =
        sqlx::query_as("SELECT actor, action, ok FROM audit_log ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for action in [
        "schedule.create",
        "schedule.pause",
        "schedule.trigger",
        "schedule.resume",
    ] {
        assert!(
            actors
                .iter()
                .any(|(who, a, ok)| who == "cli (ops)" && a == action && *ok),
            "{action}: {actors:?}"
        );
    }
    assert!(
        actors
            .iter()
            .any(|(_, a, ok)| a == "schedule.create" && !ok),
        "the refusal is audited"
    );

    // Through a running server's API.
    let server = Server::start(&[("DATABASE_URL", db.url.clone())]);
    let url = format!("http://{}", server.addr);
    let via = [
        ("KICKOFF_SERVER_URL", url.as_str()),
        ("KICKOFF_TOKEN", TOKEN),
    ];
    let (ok, out, err) = kickoff(
        &[
            "schedule", "add", "reminder", "--every", "1800", "--kind", "noop",
        ],
        &via,
    );
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kickoff(&["schedule", "list"], &via);
    assert!(
        ok && out.contains("reminder") && out.contains("nightly"),
        "{out}{err}"
    );
    let (ok, _, err) = kickoff(&["schedule", "delete", "reminder"], &via);
    assert!(ok, "{err}");
    let (ok, _, err) = kickoff(&["schedule", "show", "reminder"], &via);
    assert!(!ok && err.contains("404"), "{err}");
    let (ok, _, err) = kickoff(
        &["schedule", "list", "--server", &url],
        &[("KICKOFF_TOKEN", "wrong")],
    );
    assert!(!ok && err.contains("401"), "{err}");
    server.terminate();
}

/// `kickoff user add` on the database, like the dashboard's user creation: its audit entry names
/// the command line's user, a refusal (the name taken) is recorded too, and the password never is.
#[tokio::test]
async fn the_user_command_records_the_accounts_it_creates_in_the_audit_log() {
    use std::io::Write as _;
    use std::process::Stdio;
    let db = test_db().await;
    let add = |name: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kickoff"))
            .args(["user", "add", name, "--role", "admin"])
            .env_remove("KICKOFF_SERVER_URL")
            .env("DATABASE_URL", db.url.as_str())
            .env("USER", "ops")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kickoff");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"a long enough password\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, out) = add("ana");
    assert!(ok, "{out}");
    let (ok, out) = add("ana");
    assert!(!ok, "a second ana: {out}");
    let entries: Vec<(String, String, Option<String>, bool, String)> = sqlx::query_as(
        "SELECT actor, role, target, ok, result FROM audit_log WHERE action = 'user.create'
         ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].0, "cli (ops)");
    assert_eq!(entries[0].2.as_deref(), Some("user ana"));
    assert!(entries[0].3, "{entries:?}");
    assert!(!entries[1].3 && entries[1].4.contains("ana"), "{entries:?}");
    assert!(
        !entries
            .iter()
            .any(|e| format!("{e:?}").contains("long enough")),
        "{entries:?}"
    );
}
