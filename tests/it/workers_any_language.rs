//! Workers in any language (issue 50, docs/workers.md): the example workers in Python and
//! TypeScript (`examples/workers/`) run as their own processes beside a `kickoff serve`; the
//! server's `webhook` jobs call them, signed by an endpoint's secret, and each verifies the
//! signature with the published Standard Webhooks library (PyPI's and npm's `standardwebhooks`).
//! Their answers decide the jobs: a 2xx completes one, a 500 is retried (the same `webhook-id`),
//! a 429 with `Retry-After` snoozes it without spending an attempt, a 422 with
//! `kickoff-no-retry: true` discards it at once (an unknown task, a call without a JSON body); a
//! call with a forged signature is refused.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::pooler::free_port;
use crate::common::server::{Server, TOKEN};
use crate::common::{test_db, venv_python};

fn example(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/workers")
        .join(path)
}

/// A worker's process and the JSON lines it printed, one per call it answered.
struct Worker {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the worker of `language` on `port` with the endpoint's `secret`.
fn start(language: &str, port: u16, secret: &str) -> Worker {
    let mut cmd = match language {
        "python" => {
            let mut cmd = venv_python();
            cmd.arg(example("python/worker.py"));
            cmd
        }
        _ => {
            let dir = example("typescript");
            let tsc = dir.join("node_modules/typescript/bin/tsc");
            assert!(
                tsc.exists(),
                "{} is missing: run scripts/bootstrap.sh --e2e (scripts/test does)",
                tsc.display()
            );
            // Compiled from its source each time: what runs is what the guide shows.
            let built = Command::new("node")
                .arg(&tsc)
                .arg("-p")
                .arg(&dir)
                .status()
                .unwrap();
            assert!(built.success(), "tsc failed on {}", dir.display());
            let mut cmd = Command::new("node");
            cmd.arg(dir.join("dist/worker.js"));
            cmd
        }
    };
    let mut child = cmd
        .arg(port.to_string())
        .env("KICKOFF_WEBHOOK_SECRET", secret)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {language} worker: {e}"));
    let stdout = child.stdout.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn({
        let lines = lines.clone();
        move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => lines.lock().unwrap().push(v),
                    Err(_) => {
                        let _ = tx.send(line);
                    }
                }
            }
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("the {language} worker did not start"));
    assert_eq!(first, format!("listening {port}"));
    Worker { child, lines }
}

async fn api(server: &Server, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let url = format!("http://{}/api/v1{path}", server.addr);
    let http = reqwest::Client::new();
    let req = match method {
        "POST" => http.post(url),
        _ => http.get(url),
    }
    .bearer_auth(TOKEN);
    let res = match body {
        Some(b) => req.json(&b),
        None => req,
    }
    .send()
    .await
    .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Job `id` once it completed or was discarded.
async fn ended_job(server: &Server, id: i64) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let job = api(server, "GET", &format!("/jobs/{id}"), None).await.1;
        if matches!(job["state"].as_str(), Some("completed" | "discarded")) {
            return job;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} did not end: {job}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn workers_in_python_and_typescript_verify_their_calls_and_their_answers_decide_the_jobs() {
    let db = test_db().await;
    let server = Server::start(&[("DATABASE_URL", db.url.clone())]);
    for language in ["python", "typescript"] {
        // Free a moment ago: the endpoint's prefix names it before the worker listens on it.
        let port = free_port();
        let prefix = format!("http://127.0.0.1:{port}/");
        let (status, endpoint) = api(
            &server,
            "POST",
            "/webhook-endpoints",
            Some(json!({ "url_prefix": prefix, "allow_calls": true, "private_network": true })),
        )
        .await;
        assert_eq!(status, 201, "{endpoint}");
        let secret = endpoint["secret"].as_str().unwrap().to_string();
        let worker = start(language, port, &secret);

        let mut jobs = Vec::new();
        for task in [
            json!({ "task": "greet", "name": language }),
            json!({ "task": "flaky" }),
            json!({ "task": "busy" }),
            json!({ "task": "unknown" }),
        ] {
            let (status, made) = api(
                &server,
                "POST",
                "/jobs",
                Some(json!({ "kind": "webhook",
                             "args": { "url": format!("{prefix}jobs"), "body": task } })),
            )
            .await;
            assert_eq!(status, 201, "{made}");
            jobs.push(
                made["job"]["id"]
                    .as_i64()
                    .unwrap_or_else(|| panic!("{made}")),
            );
        }
        // And a job without a body: signed, but nothing a worker can read.
        let (status, made) = api(
            &server,
            "POST",
            "/jobs",
            Some(json!({ "kind": "webhook", "args": { "url": format!("{prefix}jobs") } })),
        )
        .await;
        assert_eq!(status, 201, "{made}");
        jobs.push(made["job"]["id"].as_i64().unwrap());
        let mut ended = Vec::new();
        for &id in &jobs {
            ended.push(ended_job(&server, id).await);
        }
        let seen: Vec<(&str, i64)> = ended
            .iter()
            .map(|j| (j["state"].as_str().unwrap(), j["attempt"].as_i64().unwrap()))
            .collect();
        assert_eq!(
            seen,
            [
                ("completed", 1), // greet: done at once
                ("completed", 2), // flaky: its 500 retried
                ("completed", 1), // busy: its 429 waited for, no attempt spent
                ("discarded", 1), // unknown: kickoff-no-retry, no second attempt
                ("discarded", 1), // no body: the same
            ],
            "{language}: {ended:#?}"
        );
        assert_eq!(ended[2]["meta"]["snoozes"], json!(1), "{language}");
        // A worker's JSON answer is its attempt's output (shown on the job's page; a workflow
        // step's dependents read it).
        let (_, attempts) = api(&server, "GET", &format!("/jobs/{}/attempts", jobs[0]), None).await;
        assert_eq!(
            attempts[0]["output"]["answer"],
            json!({ "greeting": format!("hello {language}") }),
            "{language}: {attempts}"
        );
        assert_eq!(attempts[0]["output"]["status"], json!(200), "{language}");
        let error = ended[3]["errors"][0]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            error.contains("HTTP 422") && error.contains("kickoff-no-retry"),
            "{language}: {error}"
        );
        let error = ended[4]["errors"][0]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(error.contains("not a JSON object"), "{language}: {error}");

        // What the worker answered, by the call's `webhook-id` (one per job, on every attempt).
        // (A worker prints its line once its answer went: wait for the seven.)
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while worker.lines.lock().unwrap().len() < 7 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let lines = worker.lines.lock().unwrap().clone();
        let answered = |task: &str| -> Vec<(String, i64)> {
            lines
                .iter()
                .filter(|l| l["task"]["task"] == json!(task))
                .map(|l| {
                    (
                        l["id"].as_str().unwrap().to_string(),
                        l["status"].as_i64().unwrap(),
                    )
                })
                .collect()
        };
        assert_eq!(
            answered("greet").iter().map(|a| a.1).collect::<Vec<_>>(),
            [200],
            "{language}: {lines:?}"
        );
        for (task, statuses) in [("flaky", [500, 200]), ("busy", [429, 200])] {
            let calls = answered(task);
            assert_eq!(
                calls.iter().map(|a| a.1).collect::<Vec<_>>(),
                statuses,
                "{language}: {lines:?}"
            );
            assert_eq!(calls[0].0, calls[1].0, "the same webhook-id on each call");
        }
        assert_eq!(
            answered("unknown").iter().map(|a| a.1).collect::<Vec<_>>(),
            [422],
            "{language}: {lines:?}"
        );

        // A call the server did not sign is refused, by the library's check.
        let forged = reqwest::Client::new()
            .post(format!("{prefix}jobs"))
            .header("webhook-id", "msg_forged")
            .header(
                "webhook-timestamp",
                chrono::Utc::now().timestamp().to_string(),
            )
            .header(
                "webhook-signature",
                "v1,bm90IHRoZSBzaWduYXR1cmUgb2YgdGhpcyBib2R5",
            )
            .body(r#"{"task":"greet","name":"mallory"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(forged.status().as_u16(), 401, "{language}");
    }
}
