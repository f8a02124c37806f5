//! What an application does from SQL in its own transaction besides inserting a job (issue 50,
//! docs/embedding.md, migration `20261231000001_sql_actions.sql`): cancel a job
//! (`kickoff_cancel_job`), create a question with its lock job (`kickoff_add_question`, the
//! examples `examples/sql/question.sql`, `python/question.py` and `node/question.mjs` run by
//! psql, Python with psycopg and Node with node-postgres), signal a workflow run
//! (`kickoff_signal`).
//! Rolled back, each leaves nothing; committed, its effect reaches the nodes (a running attempt
//! stops, the question locks at its game time, the waiting step starts). And each is the API's
//! own action, written once: the same bad inputs are refused alike both ways.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use chrono::{DateTime, SubsecRound, Utc};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::common::rest::call;
use crate::common::{test_db, wait_for};
use kickoff::engine::workflow::Workflow;
use kickoff::engine::{
    Engine, EngineConfig, JobContext, JobState, NewJob, WorkError, Worker, Workers,
};

const TOKEN: &str = "test-token-123";

/// Runs until its attempt is stopped, telling when it started.
struct Hang {
    started: mpsc::UnboundedSender<i64>,
}

impl Worker for Hang {
    fn kind(&self) -> &'static str {
        "hang"
    }
    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        let _ = self.started.send(ctx.job.id.0);
        Box::pin(async move {
            ctx.cancelled().cancelled().await;
            Err(WorkError::Retryable("stopped".into()))
        })
    }
}

/// Ends the application's transaction: `commit`, or else rolled back.
async fn end(tx: sqlx::Transaction<'static, sqlx::Postgres>, finish: &str) {
    match finish {
        "commit" => tx.commit().await.unwrap(),
        _ => tx.rollback().await.unwrap(),
    }
}

/// A refusal of SQL: its SQLSTATE, column and message.
type Refusal = (String, String, String);

fn refusal(e: sqlx::Error) -> Refusal {
    let pg = e
        .as_database_error()
        .and_then(|db| db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
        .unwrap_or_else(|| panic!("not a refusal of the database: {e}"));
    (
        pg.code().to_string(),
        pg.column().unwrap_or_default().to_string(),
        pg.message().to_string(),
    )
}

/// The API's status and error code of a refusal with SQLSTATE `code`.
fn api_answer_of(code: &str) -> (StatusCode, &'static str) {
    match code {
        "KO001" => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
        "KO002" => (StatusCode::UNPROCESSABLE_ENTITY, "unknown_kind"),
        "KO003" => (StatusCode::CONFLICT, "conflict"),
        "KO004" => (StatusCode::UNPROCESSABLE_ENTITY, "out_of_window"),
        "KO005" => (StatusCode::NOT_FOUND, "not_found"),
        other => panic!("SQLSTATE {other}"),
    }
}

/// Whether the API answered as SQL refused: the same status and code, and the same message (or
/// the SQL's after its `column: `; or the request check of the API's document, which states the
/// same bounds, answered first in its words, naming the same field or one inside it:
/// `choices.1`). A description if not.
fn unlike(what: &str, api: &(StatusCode, Value), sql: &Refusal) -> Option<String> {
    let (code, column, message) = sql;
    let (status, name) = api_answer_of(code);
    let error = &api.1["error"];
    let api_message = error["message"].as_str().unwrap_or_default();
    let bare = message
        .strip_prefix(&format!("{column}: "))
        .unwrap_or(message);
    let same = api_message == message
        || api_message == bare
        || api_message.starts_with(&format!("{column}: "))
        || api_message.starts_with(&format!("{column}."));
    (api.0 != status || error["code"] != name || !same).then(|| {
        format!(
            "{what}\n  API: {} {}\n  SQL: {code} {message}",
            api.0, api.1
        )
    })
}

#[tokio::test]
async fn a_job_cancelled_from_sql_stops_on_its_node_when_the_apps_transaction_commits() {
    let db = test_db().await;
    let (started, mut starts) = mpsc::unbounded_channel();
    let mut workers = Workers::new();
    workers.register(Hang { started });
    let engine = Engine::start(db.pool.clone(), workers, EngineConfig::default())
        .await
        .unwrap();
    let job = engine
        .client()
        .insert(&NewJob::new("hang", json!({})))
        .await
        .unwrap()
        .job;
    let id = tokio::time::timeout(Duration::from_secs(10), starts.recv())
        .await
        .expect("the job started")
        .unwrap();
    assert_eq!(id, job.id.0);
    sqlx::raw_sql("CREATE TABLE refunds (job bigint PRIMARY KEY)")
        .execute(&db.pool)
        .await
        .unwrap();
    let cancel = |finish: &'static str| {
        let pool = db.pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("INSERT INTO refunds VALUES ($1)")
                .bind(id)
                .execute(&mut *tx)
                .await
                .unwrap();
            let state: String =
                sqlx::query_scalar("SELECT state::text FROM kickoff_cancel_job($1)")
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await
                    .unwrap();
            assert_eq!(state, "cancelled");
            end(tx, finish).await;
        }
    };
    cancel("rollback").await;
    let (state, refunds, records): (String, i64, i64) = sqlx::query_as(
        "SELECT (SELECT state::text FROM jobs WHERE id = $1),
                (SELECT count(*) FROM refunds),
                (SELECT count(*) FROM job_attempts WHERE job_id = $1)",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (state.as_str(), refunds, records),
        ("executing", 0, 0),
        "a rolled-back cancel leaves the job running and nothing recorded"
    );
    assert_eq!(engine.running_count(), 1);
    cancel("commit").await;
    wait_for(
        "the node to stop the cancelled attempt",
        Duration::from_secs(5),
        || async { engine.running_count() == 0 },
    )
    .await;
    let (state, outcomes): (String, Vec<String>) = sqlx::query_as(
        "SELECT (SELECT state::text FROM jobs WHERE id = $1),
                ARRAY(SELECT outcome || ': ' || error FROM job_attempts WHERE job_id = $1)",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(state, "cancelled");
    assert_eq!(outcomes, ["cancelled: cancelled while it ran"]);
    engine.stop().await;
}

/// A cancel of many executing jobs tells their nodes in messages a notification can carry (at
/// most 8000 bytes), which name every claim and nothing else, and records each attempt.
#[tokio::test]
async fn a_cancel_of_many_running_jobs_stops_each_claim_in_messages_that_fit() {
    let db = test_db().await;
    let pool = db.pool.pool();
    // Rows as a node's claim leaves them (no node runs here: nothing else moves them).
    let claims: Vec<(i64, i64)> = sqlx::query_as(
        "WITH made AS (
             INSERT INTO jobs (kind, args, state, attempt, attempted_at, attempted_by,
                               lease_expires_at, claim_token)
             SELECT 'hang', '{}', 'executing', 1, now(), 'node-a', now() + interval '1 hour',
                    -9000000000000000000 + g
             FROM generate_series(1, 250) g
             RETURNING id, claim_token)
         SELECT id, claim_token FROM made ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut listener = sqlx::postgres::PgListener::connect(&db.direct_url)
        .await
        .unwrap();
    listener.listen("kickoff_control").await.unwrap();
    let ids: Vec<i64> = claims.iter().map(|c| c.0).collect();
    // One of them finished already: not cancelled, not named.
    sqlx::query(
        "UPDATE jobs SET state = 'completed', finalized_at = now(), claim_token = NULL,
                lease_expires_at = NULL
         WHERE id = $1",
    )
    .bind(ids[7])
    .execute(pool)
    .await
    .unwrap();
    let cancelled: Vec<(i64, String, Option<i64>)> = sqlx::query_as(
        "SELECT id, before::text, claim_token FROM kickoff_cancel_jobs($1) ORDER BY id",
    )
    .bind(&ids)
    .fetch_all(pool)
    .await
    .unwrap();
    let running: Vec<(i64, i64)> = claims.iter().copied().filter(|c| c.0 != ids[7]).collect();
    let answered: Vec<(i64, i64)> = cancelled
        .iter()
        .map(|(id, before, token)| {
            assert_eq!(before, "executing");
            (*id, token.unwrap())
        })
        .collect();
    assert_eq!(answered, running);
    let mut named = Vec::new();
    let mut messages = 0;
    while named.len() < running.len() {
        let n = tokio::time::timeout(Duration::from_secs(5), listener.recv())
            .await
            .expect("a stop message")
            .unwrap();
        assert!(n.payload().len() <= 8000, "{} bytes", n.payload().len());
        let wire: Value = serde_json::from_str(n.payload()).unwrap();
        let pairs: Vec<(i64, i64)> = serde_json::from_value(wire["claims"].clone()).unwrap();
        let cancel: Vec<i64> = serde_json::from_value(wire["cancel"].clone()).unwrap();
        assert_eq!(cancel, pairs.iter().map(|p| p.0).collect::<Vec<_>>());
        named.extend(pairs);
        messages += 1;
    }
    assert_eq!(named, running);
    assert_eq!(messages, 3, "100 claims a message");
    let records: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job_attempts
         WHERE outcome = 'cancelled' AND error = 'cancelled while it ran' AND node = 'node-a'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(records, running.len() as i64);
}

#[tokio::test]
async fn a_cancel_is_refused_alike_through_the_api_and_through_sql() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let (status, made) = call(
        &app,
        Method::POST,
        "/api/v1/questions",
        Some(TOKEN),
        Some(
            &json!({ "game": "Ajax - PSV", "prompt": "Who scores first?",
                      "choices": ["Ajax", "PSV"],
                      "game_time": Utc::now() + chrono::Duration::hours(2) }),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let owned = made["lock_job"]["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{made}"));
    let (_, done) = call(
        &app,
        Method::POST,
        "/api/v1/jobs",
        Some(TOKEN),
        Some(&json!({ "kind": "noop" })),
    )
    .await;
    let done = done["job"]["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{done}"));
    sqlx::query("UPDATE jobs SET state = 'completed', finalized_at = now() WHERE id = $1")
        .bind(done)
        .execute(&db.pool)
        .await
        .unwrap();
    let mut differ = Vec::new();
    for (what, id) in [
        ("a question's lock job", owned),
        ("a finished job", done),
        ("no such job", 987_654_321),
    ] {
        let api = call(
            &app,
            Method::POST,
            &format!("/api/v1/jobs/{id}/cancel"),
            Some(TOKEN),
            None,
        )
        .await;
        let mut tx = db.pool.begin().await.unwrap();
        let sql = sqlx::query("SELECT kickoff_cancel_job($1)")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map(drop)
            .map_err(refusal);
        tx.rollback().await.unwrap();
        let Err(sql) = sql else {
            panic!("{what}: SQL cancelled what the API answered {api:?}");
        };
        differ.extend(unlike(what, &api, &sql));
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    let live: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE state = 'cancelled'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(live, 0, "nothing was cancelled");
}

fn example(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/sql")
        .join(path)
}

/// Runs the question example of `language` (`examples/sql/question.sql` with psql,
/// `python/question.py`, `node/question.mjs`) for game `game` at `at`, its transaction ended by
/// `finish` (`commit`, `rollback`, or `refused`: a question Kickoff refuses, not for psql). What
/// it printed: `{"question": id, "lock_job": id}` or the refusal.
fn question_from(
    language: &str,
    db_url: &str,
    game: i64,
    at: DateTime<Utc>,
    finish: &str,
) -> Value {
    let db_url = db_url.split('?').next().unwrap();
    let mut cmd = match language {
        "psql" => {
            let mut cmd = Command::new("psql");
            cmd.args(["-X", "-q", "-t", "-A"])
                .args(["-v", &format!("game={game}")])
                .args(["-v", &format!("starts_at={}", at.to_rfc3339())])
                .args(["-v", &format!("finish={}", finish.to_uppercase())])
                .arg("-f")
                .arg(example("question.sql"))
                .arg(db_url);
            cmd
        }
        "python" => {
            let mut cmd = crate::common::venv_python();
            cmd.arg(example("python/question.py"));
            cmd
        }
        _ => {
            let mut cmd = Command::new("node");
            cmd.arg(example("node/question.mjs"));
            cmd
        }
    };
    if language != "psql" {
        cmd.arg(game.to_string()).arg(at.to_rfc3339()).arg(finish);
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
        let mut fields = line.split('|').map(|f| f.parse::<i64>());
        return match (fields.next(), fields.next()) {
            (Some(Ok(q)), Some(Ok(job))) => json!({ "question": q, "lock_job": job }),
            _ => panic!("psql printed {stdout:?}"),
        };
    }
    serde_json::from_str(line).unwrap_or_else(|_| panic!("{language} printed {stdout:?}"))
}

#[tokio::test]
async fn a_question_added_from_psql_python_and_node_commits_with_the_games_row_and_locks_at_its_time(
) {
    let db = test_db().await;
    let engine = Engine::start(
        db.pool.clone(),
        kickoff::workers::builtin(vec![]),
        EngineConfig {
            queues: vec![("questions".into(), 5)],
            ..EngineConfig::default()
        },
    )
    .await
    .unwrap();
    sqlx::raw_sql(include_str!("../../examples/sql/schema.sql"))
        .execute(db.pool.pool())
        .await
        .unwrap();
    let kept = || async {
        sqlx::query_as::<_, (i64, i64, i64)>(
            "SELECT (SELECT count(*) FROM games), (SELECT count(*) FROM questions),
                    (SELECT count(*) FROM jobs)",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap()
    };
    let mut committed = Vec::new();
    for (i, language) in ["psql", "python", "node"].into_iter().enumerate() {
        let game = 30 + 10 * i as i64;
        // Ahead of the three runs of the example (a slow machine's interpreters included).
        let at = Utc::now().trunc_subsecs(3) + chrono::Duration::milliseconds(4000);
        let before = kept().await;
        let printed = question_from(language, &db.url, game, at, "rollback");
        assert!(printed["question"].is_i64(), "{language}: {printed}");
        assert_eq!(
            kept().await,
            before,
            "{language}: rolled back, no game, question or job"
        );
        if language != "psql" {
            let refused = question_from(language, &db.url, game + 2, at, "refused");
            assert_eq!(
                refused,
                json!({ "sqlstate": "KO001", "column": "choices",
                        "message": "choices: give 2 to 20 choices" }),
                "{language}"
            );
            assert_eq!(kept().await, before, "{language}: refused, nothing kept");
        }
        let printed = question_from(language, &db.url, game + 1, at, "commit");
        let (question, job) = (
            printed["question"].as_i64().unwrap(),
            printed["lock_job"].as_i64().unwrap(),
        );
        let (kind, owner, due): (String, String, DateTime<Utc>) =
            sqlx::query_as("SELECT kind, meta ->> 'owner', scheduled_at FROM jobs WHERE id = $1")
                .bind(job)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert_eq!(
            (kind.as_str(), owner, due),
            ("lock_question", format!("question {question}"), at),
            "{language}"
        );
        committed.push((language, question, at));
    }
    let questions = kickoff::questions::QuestionService::new(engine.client());
    for (language, question, at) in committed {
        wait_for("the question to lock", Duration::from_secs(10), || async {
            questions
                .get(question)
                .await
                .unwrap()
                .question
                .locked_at
                .is_some()
        })
        .await;
        let detail = questions.get(question).await.unwrap();
        assert!(
            detail.question.locked_at.unwrap() >= at,
            "{language}: never before its game time"
        );
        assert_eq!(detail.lock_job.unwrap().state, JobState::Completed);
    }
    engine.stop().await;
}

#[tokio::test]
async fn a_question_is_refused_alike_through_the_api_and_through_sql() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    // A node said it runs the question kinds (`kickoff_kinds`), as a started server does.
    sqlx::query("INSERT INTO kickoff_kinds (kind, kickoffs_own) VALUES ('lock_question', true)")
        .execute(&db.pool)
        .await
        .unwrap();
    let in_hours = |h: i64| Utc::now() + chrono::Duration::hours(h);
    let question = |patch: Value| {
        let mut body = json!({ "game": "Ajax - PSV", "prompt": "Who scores first?",
                               "choices": ["Ajax", "PSV"], "game_time": in_hours(2) });
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let refused = [
        question(json!({ "game": "" })),
        question(json!({ "game": "   " })),
        // White space as Rust's `str::trim` takes it off, not only ASCII's.
        question(json!({ "game": "\u{3000}" })),
        question(json!({ "prompt": "\u{a0}\u{2003}" })),
        question(json!({ "choices": ["Ajax", "PSV\u{a0}"] })),
        question(json!({ "game": "g".repeat(201) })),
        question(json!({ "prompt": "" })),
        question(json!({ "prompt": "p".repeat(501) })),
        question(json!({ "choices": ["Ajax"] })),
        question(json!({ "choices": vec!["c"; 21].iter().enumerate()
                         .map(|(i, c)| format!("{c}{i}")).collect::<Vec<_>>() })),
        question(json!({ "choices": ["Ajax", "Ajax"] })),
        question(json!({ "choices": ["Ajax", " PSV"] })),
        question(json!({ "choices": ["Ajax", ""] })),
        question(json!({ "choices": ["Ajax", "x".repeat(101)] })),
        question(json!({ "game_time": in_hours(-1) })),
        question(json!({ "game_time": in_hours(731 * 24) })),
    ];
    let mut differ = Vec::new();
    for body in &refused {
        let api = call(
            &app,
            Method::POST,
            "/api/v1/questions",
            Some(TOKEN),
            Some(body),
        )
        .await;
        let mut tx = db.pool.begin().await.unwrap();
        let choices: Vec<String> = serde_json::from_value(body["choices"].clone()).unwrap();
        let game_time: DateTime<Utc> = serde_json::from_value(body["game_time"].clone()).unwrap();
        let sql = sqlx::query("SELECT kickoff_add_question($1, $2, $3, $4)")
            .bind(body["game"].as_str())
            .bind(body["prompt"].as_str())
            .bind(&choices)
            .bind(game_time)
            .execute(&mut *tx)
            .await
            .map(drop)
            .map_err(refusal);
        tx.rollback().await.unwrap();
        let Err(sql) = sql else {
            panic!("SQL accepted what the API answered {api:?}: {body}");
        };
        differ.extend(unlike(&body.to_string(), &api, &sql));
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    // What Rust's `str::trim` takes off, SQL takes off; the first choice that repeats one before
    // it is named, as the API named it.
    let game = " \u{3000}Derby\u{a0}\t";
    let trimmed: String = sqlx::query_scalar("SELECT kickoff_trim($1)")
        .bind(game)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(trimmed, game.trim());
    let twice = sqlx::query("SELECT kickoff_check_question(NULL, NULL, $1, NULL)")
        .bind(["b", "a", "a", "b"])
        .execute(&db.pool)
        .await
        .map(drop)
        .map_err(refusal);
    assert_eq!(
        twice,
        Err((
            "KO001".into(),
            "choices".into(),
            "choices: `a` is listed twice".into()
        ))
    );
    // At the bounds: accepted both ways.
    let accepted = [
        question(json!({ "game": "g".repeat(200), "prompt": "p".repeat(500) })),
        question(
            json!({ "choices": (0..20).map(|i| format!("{i}{}", "x".repeat(98)))
                         .collect::<Vec<_>>() }),
        ),
        question(json!({ "game_time": in_hours(729 * 24) })),
    ];
    for body in &accepted {
        let (status, answer) = call(
            &app,
            Method::POST,
            "/api/v1/questions",
            Some(TOKEN),
            Some(body),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}: {answer}");
        let choices: Vec<String> = serde_json::from_value(body["choices"].clone()).unwrap();
        let game_time: DateTime<Utc> = serde_json::from_value(body["game_time"].clone()).unwrap();
        sqlx::query("SELECT kickoff_add_question($1, $2, $3, $4)")
            .bind(body["game"].as_str())
            .bind(body["prompt"].as_str())
            .bind(&choices)
            .bind(game_time)
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{body}: {e}"));
    }
    let (questions, lock_jobs): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM questions),
                (SELECT count(*) FROM jobs j JOIN questions q ON q.lock_job_id = j.id
                 WHERE j.meta ->> 'owner' = 'question ' || q.id)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((questions, lock_jobs), (6, 6));
}

#[tokio::test]
async fn a_signal_sent_from_sql_starts_the_waiting_step_when_the_apps_transaction_commits() {
    let db = test_db().await;
    let (engine, mut started, _) = super::workflows::engine_healable(&db).await;
    let client = engine.client();
    let flow = Workflow::new("game")
        .time("kickoff_at", Utc::now().trunc_subsecs(6))
        .step(
            "await_final",
            NewJob::new(
                "wf_step",
                json!({ "name": "await_final", "signal": "final" }),
            ),
        )
        .signal("final", "kickoff_at", chrono::Duration::minutes(300));
    let run = client.insert_workflow(&flow).await.unwrap().run;
    sqlx::raw_sql("CREATE TABLE results (game text PRIMARY KEY, home int, away int)")
        .execute(&db.pool)
        .await
        .unwrap();
    let signal = |finish: &'static str| {
        let pool = db.pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("INSERT INTO results VALUES ('ajax-psv', 2, 1)")
                .execute(&mut *tx)
                .await
                .unwrap();
            let (stored, source): (bool, String) = sqlx::query_as(
                "SELECT stored, source FROM kickoff_signal($1, 'final',
                     (SELECT to_jsonb(r) FROM results r WHERE game = 'ajax-psv'))",
            )
            .bind(run.id)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
            assert!(stored);
            assert!(source.starts_with("sql:"), "{source}");
            end(tx, finish).await;
        }
    };
    signal("rollback").await;
    assert!(client.workflow_signals(run.id).await.unwrap().is_empty());
    signal("commit").await;
    let (name, read) = tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .expect("the waiting step started")
        .unwrap();
    assert_eq!(name, "await_final");
    assert_eq!(
        read["signal:final"],
        json!({ "game": "ajax-psv", "home": 2, "away": 1 })
    );
    engine.stop().await;
}

#[tokio::test]
async fn a_signal_is_refused_alike_through_the_api_and_through_sql() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let kickoff = Utc::now().trunc_subsecs(6) + chrono::Duration::hours(1);
    let body = json!({
        "name": "game", "times": { "kickoff_at": kickoff },
        "steps": [{ "name": "await_final", "job": { "kind": "noop" }, "signal": "final",
                    "deadline": { "time": "kickoff_at", "offset_ms": 18_000_000 } }],
    });
    let (status, made) = call(
        &app,
        Method::POST,
        "/api/v1/workflows",
        Some(TOKEN),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let ended = made["run"]["id"].as_i64().unwrap();
    let (status, _) = call(
        &app,
        Method::POST,
        &format!("/api/v1/workflows/{ended}/cancel"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, made) = call(
        &app,
        Method::POST,
        "/api/v1/workflows",
        Some(TOKEN),
        Some(&body),
    )
    .await;
    let running = made["run"]["id"].as_i64().unwrap();
    let tries = [
        (running, json!({ "name": "" })),
        (running, json!({ "name": "n".repeat(129) })),
        (
            running,
            json!({ "name": "final", "payload": { "n": 1e301 } }),
        ),
        (
            running,
            json!({ "name": "final", "payload": { "s": "x".repeat(262_200) } }),
        ),
        (ended, json!({ "name": "final" })),
        (987_654_321, json!({ "name": "final" })),
    ];
    let mut differ = Vec::new();
    for (run, body) in &tries {
        let api = call(
            &app,
            Method::POST,
            &format!("/api/v1/workflows/{run}/signals"),
            Some(TOKEN),
            Some(body),
        )
        .await;
        let mut tx = db.pool.begin().await.unwrap();
        let sql = sqlx::query("SELECT * FROM kickoff_signal($1, $2, $3)")
            .bind(run)
            .bind(body["name"].as_str())
            .bind(body.get("payload").cloned().unwrap_or(Value::Null))
            .execute(&mut *tx)
            .await
            .map(drop)
            .map_err(refusal);
        tx.rollback().await.unwrap();
        let what = format!(
            "run {run}: {}",
            &body.to_string()[..body.to_string().len().min(80)]
        );
        let Err(sql) = sql else {
            panic!("{what}: SQL accepted what the API answered {api:?}");
        };
        differ.extend(unlike(&what, &api, &sql));
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    let signals: i64 = sqlx::query_scalar("SELECT count(*) FROM workflow_signals")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(signals, 0);
}
