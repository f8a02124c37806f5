//! Jobs inserted from SQL in the application's own transaction (issue 50, docs/embedding.md):
//! `kickoff_add_job` called from psql, Python (psycopg) and Node (node-postgres), the examples of
//! `examples/sql/`, beside a real `kickoff serve`. A rolled-back transaction leaves neither the
//! game nor its job; a committed one's job starts at the game's time, woken by the commit. And
//! the rules a SQL insert applies are the API's, written once (`kickoff_check_job`): the same
//! bad inputs are refused alike both ways, with the same field and message, and the same inputs
//! at the bounds accepted both ways.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::receiver::Receiver;
use crate::common::server::{Server, TOKEN};
use crate::common::{test_db, venv_python};

fn example(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/sql")
        .join(path)
}

/// Runs the example of `language` for game `game`: its job calls `url`, and its transaction ends
/// with `finish` (`commit`, `rollback`, or `refused`: a priority Kickoff refuses). What it
/// printed, as JSON (psql's `id|state|scheduled_at` line as `{"job": id}`).
fn run(language: &str, db_url: &str, game: i64, url: &str, finish: &str) -> Value {
    let mut cmd = match language {
        "psql" => {
            let mut cmd = Command::new("psql");
            cmd.args(["-X", "-q", "-t", "-A"])
                .arg("-v")
                .arg(format!("game={game}"))
                .arg("-v")
                .arg(format!("url={url}"))
                .arg("-v")
                .arg(format!("finish={}", finish.to_uppercase()))
                .arg("-f")
                .arg(example("add_job.sql"));
            cmd
        }
        "python" => {
            let mut cmd = venv_python();
            cmd.arg(example("python/add_job.py"));
            cmd
        }
        _ => {
            assert!(
                example("node/node_modules/pg").exists(),
                "examples/sql/node/node_modules is missing: run scripts/bootstrap.sh --e2e \
                 (scripts/test does)"
            );
            let mut cmd = Command::new("node");
            cmd.arg(example("node/add_job.mjs"));
            cmd
        }
    };
    if language != "psql" {
        cmd.arg(game.to_string()).arg(url).arg(finish);
    }
    // libpq's clients read no parameter of sqlx's own (`statement-cache-capacity`).
    let db_url = db_url.split('?').next().unwrap();
    if language == "psql" {
        cmd.arg(db_url);
    }
    let out = cmd
        .env("DATABASE_URL", db_url)
        .output()
        .unwrap_or_else(|e| panic!("run the {language} example: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{language}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if language == "psql" {
        let id: i64 = line
            .split('|')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("psql printed {stdout:?}"));
        return json!({ "job": id });
    }
    serde_json::from_str(line).unwrap_or_else(|_| panic!("{language} printed {stdout:?}"))
}

#[tokio::test]
async fn a_job_added_from_psql_python_and_node_commits_with_the_games_row_and_starts_at_its_time() {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let _server = Server::start(&[
        ("DATABASE_URL", db.url.clone()),
        ("KICKOFF_WEBHOOK_ALLOWED_HOSTS", receiver.addr.to_string()),
    ]);
    sqlx::raw_sql(include_str!("../../examples/sql/schema.sql"))
        .execute(db.pool.pool())
        .await
        .unwrap();
    let url = receiver.url("/kickoff");
    let held = |game: i64| {
        let pool = db.pool.pool().clone();
        async move {
            sqlx::query_as::<_, (bool, bool)>(
                "SELECT EXISTS (SELECT FROM games WHERE id = $1),
                        EXISTS (SELECT FROM jobs WHERE unique_key = 'game-kickoff:' || $1)",
            )
            .bind(game)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let mut committed = Vec::new();
    for (i, language) in ["psql", "python", "node"].into_iter().enumerate() {
        let game = 8800 + 10 * i as i64;
        let printed = run(language, &db.url, game, &url, "rollback");
        assert!(printed["job"].is_i64(), "{language}: {printed}");
        assert_eq!(
            held(game).await,
            (false, false),
            "{language}: a rolled-back transaction leaves neither the game nor its job"
        );
        let printed = run(language, &db.url, game + 1, &url, "commit");
        let id = printed["job"]
            .as_i64()
            .unwrap_or_else(|| panic!("{language}: {printed}"));
        assert_eq!(held(game + 1).await, (true, true), "{language}");
        committed.push((language, game + 1, id));
        if language != "psql" {
            let refused = run(language, &db.url, game + 2, &url, "refused");
            assert_eq!(
                (
                    &refused["sqlstate"],
                    &refused["column"],
                    &refused["message"]
                ),
                (
                    &json!("KO001"),
                    &json!("priority"),
                    &json!("priority: must be a whole number from 0 (highest) to 9")
                ),
                "{language}: {refused}"
            );
            assert_eq!(held(game + 2).await, (false, false), "{language}");
        }
    }
    // Each committed job starts at its game's time, not before, and at once: the commit woke
    // a node (a node that missed it would find the job at its next poll of the database, up to
    // a second late).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for (language, game, id) in committed {
        let (state, late_ms): (String, Option<f64>) = loop {
            let row: (String, Option<f64>) = sqlx::query_as(
                "SELECT state::text,
                        extract(epoch FROM attempted_at - scheduled_at)::float8 * 1000
                 FROM jobs WHERE id = $1",
            )
            .bind(id)
            .fetch_one(db.pool.pool())
            .await
            .unwrap();
            if row.0 == "completed" || std::time::Instant::now() > deadline {
                break row;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(state, "completed", "{language}: job {id}");
        let late_ms = late_ms.unwrap();
        assert!(
            (0.0..500.0).contains(&late_ms),
            "{language}: job {id} started {late_ms} ms after its time"
        );
        let calls = receiver.calls_to("/kickoff");
        assert!(
            calls
                .iter()
                .any(|c| serde_json::from_slice::<Value>(&c.body).ok()
                    == Some(json!({ "game": game, "event": "kickoff" }))),
            "{language}: the partner was called for game {game}"
        );
    }
}

/// What `POST /api/v1/jobs` answered `body`: its status, the error's code and message.
async fn through_the_api(server: &Server, body: &Value) -> (u16, String, String) {
    let res = reqwest::Client::new()
        .post(format!("http://{}/api/v1/jobs", server.addr))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let answer: Value = res.json().await.unwrap_or(Value::Null);
    let error = &answer["error"];
    (
        status,
        error["code"].as_str().unwrap_or_default().to_string(),
        error["message"].as_str().unwrap_or_default().to_string(),
    )
}

/// What `kickoff_add_job` answered the same job: `Ok` or its SQLSTATE, column and message. In a
/// transaction rolled back: what it accepted is not kept.
async fn through_sql(pool: &sqlx::PgPool, body: &Value) -> Result<(), (String, String, String)> {
    let mut tx = pool.begin().await.unwrap();
    let r = sqlx::query(
        "SELECT kickoff_add_job($1, coalesce($2, '{}'), coalesce($3, 'default'),
                                scheduled_at => $4, priority => coalesce($5, 0),
                                max_attempts => coalesce($6, 20), unique_key => $7,
                                tags => coalesce($8, '{}'), meta => coalesce($9, '{}'))",
    )
    .bind(body["kind"].as_str())
    .bind(body.get("args"))
    .bind(body["queue"].as_str())
    .bind(
        body["scheduled_at"]
            .as_str()
            .map(|t| t.parse::<chrono::DateTime<chrono::Utc>>().unwrap()),
    )
    .bind(body["priority"].as_i64().map(|p| p as i32))
    .bind(body["max_attempts"].as_i64().map(|p| p as i32))
    .bind(body["unique_key"].as_str())
    .bind(body["tags"].as_array().map(|t| {
        t.iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    }))
    .bind(body.get("meta"))
    .execute(&mut *tx)
    .await;
    tx.rollback().await.ok();
    match r {
        Ok(_) => Ok(()),
        Err(e) => {
            let db = e.as_database_error().unwrap_or_else(|| panic!("{e}"));
            let pg = db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .unwrap();
            Err((
                pg.code().to_string(),
                pg.column().unwrap_or_default().to_string(),
                pg.message().to_string(),
            ))
        }
    }
}

#[tokio::test]
async fn the_same_bad_inputs_are_refused_alike_through_the_api_and_through_sql() {
    let db = test_db().await;
    let receiver = Receiver::start().await;
    let server = Server::start(&[
        ("DATABASE_URL", db.url.clone()),
        ("KICKOFF_WEBHOOK_ALLOWED_HOSTS", receiver.addr.to_string()),
    ]);
    let url = receiver.url("/x");
    let job = |patch: Value| {
        let mut body = json!({ "kind": "webhook", "args": { "url": url, "body": {} } });
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let in_hours = |h: i64| (chrono::Utc::now() + chrono::Duration::hours(h)).to_rfc3339();
    let mut refused = vec![
        job(json!({ "kind": "no_such_kind" })),
        job(json!({ "kind": "lock_question", "args": {} })),
        job(json!({ "args": { "url": url, "body": { "n": 1e301 } } })),
        job(json!({ "args": { "url": url, "body": [-2e300, { "deep": [1.5e305] }] } })),
        job(json!({ "meta": { "note": "x".repeat(17_000) } })),
        job(json!({ "meta": { "n": -1e301 } })),
        job(json!({ "meta": { "late": { "after_ms": 5 } } })),
        job(json!({ "meta": { "late": { "after_ms": 86_400_001u64, "then": "skip" } } })),
        job(json!({ "meta": { "late": { "after_ms": 5, "then": "later" } } })),
        job(json!({ "meta": { "late": { "after_ms": 5, "then": "skip", "x": 1 } } })),
        job(json!({ "queue": "Not A Queue" })),
        job(json!({ "queue": "q".repeat(65) })),
        job(json!({ "priority": 10 })),
        job(json!({ "priority": -1 })),
        job(json!({ "max_attempts": 0 })),
        job(json!({ "max_attempts": 1001 })),
        job(json!({ "unique_key": "" })),
        job(json!({ "unique_key": "k".repeat(256) })),
        job(json!({ "unique_key": "schedule:1:0" })),
        job(json!({ "unique_key": "lock_question:42" })),
        job(json!({ "tags": vec!["t"; 21] })),
        job(json!({ "tags": [""] })),
        job(json!({ "tags": ["t".repeat(101)] })),
        job(json!({ "scheduled_at": in_hours(-25) })),
        job(json!({ "scheduled_at": in_hours(3651 * 24) })),
    ];
    // Every meta key only Kickoff writes, in Rust's list: the SQL's must hold each.
    for key in kickoff::engine::job::RESERVED_META {
        refused.push(job(json!({ "meta": { key: 1 } })));
    }
    let mut unlike = Vec::new();
    for body in &refused {
        let api = through_the_api(&server, body).await;
        let sql = through_sql(db.pool.pool(), body).await;
        let Err((sqlstate, column, message)) = sql else {
            panic!("SQL accepted what the API answered {api:?}: {body}");
        };
        let (status, code) = match sqlstate.as_str() {
            "KO001" => (422, "invalid"),
            "KO002" => (422, "unknown_kind"),
            "KO003" => (409, "conflict"),
            "KO004" => (422, "out_of_window"),
            other => panic!("SQLSTATE {other} ({message}) for {body}"),
        };
        // The API's message is the SQL's, or the SQL's after its `column: ` (a conflict's and
        // an unknown kind's message name no field through the API); or the request check of the
        // API's document (its schema, stating the same bounds) answered first, in its words,
        // naming the same field.
        let bare = message
            .strip_prefix(&format!("{column}: "))
            .unwrap_or(&message);
        let same = api.2 == message || api.2 == bare || api.2.starts_with(&format!("{column}: "));
        if (api.0, api.1.as_str()) != (status, code) || !same {
            unlike.push(format!(
                "{}\n  API: {api:?}\n  SQL: {sqlstate} {message}",
                &body.to_string()[..body.to_string().len().min(200)]
            ));
        }
    }
    assert!(unlike.is_empty(), "{}", unlike.join("\n"));
    // A late policy's `after_ms` written as a float is no whole number to the policy, which
    // would drop it (the API turns `500.0` into `500` before the rules see it; SQL cannot).
    let float_ms = job(json!({ "meta": { "late": { "after_ms": 500.0, "then": "skip" } } }));
    assert!(
        matches!(through_sql(db.pool.pool(), &float_ms).await, Err((code, _, _)) if code == "KO001"),
        "{float_ms}"
    );
    // At the bounds: accepted both ways.
    let accepted = [
        job(json!({ "priority": 9, "max_attempts": 1000 })),
        job(json!({ "tags": vec!["t".repeat(100); 20] })),
        job(json!({ "unique_key": "k".repeat(255) })),
        job(json!({ "unique_key": "webhook:mine" })),
        job(json!({ "args": { "url": url, "body": { "n": 1e300, "m": -1e300 } } })),
        job(json!({ "meta": { "late": { "after_ms": 86_400_000u64, "then": "discard" } } })),
        job(json!({ "scheduled_at": in_hours(-23), "queue": "a-b_c9" })),
        job(json!({ "scheduled_at": in_hours(3649 * 24) })),
    ];
    for body in &accepted {
        assert_eq!(through_sql(db.pool.pool(), body).await, Ok(()), "{body}");
        let api = through_the_api(&server, body).await;
        assert_eq!(api.0, 201, "{body}: {api:?}");
    }
}
