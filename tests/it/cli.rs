//! `kickoff jobs|queues|questions ...` against a real server process: every subcommand, `--json`
//! parsed, and the exit codes that say what happened.

use std::process::Command;

use serde_json::{json, Value};

use crate::common::server::{Server, TOKEN};

struct Cli<'a> {
    server: &'a Server,
}

impl Cli<'_> {
    /// Runs `kickoff <args>` against the server: its exit code and standard output.
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        self.run_with(args, &[])
    }

    /// [`Cli::run`] with more of the environment set.
    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_kickoff"))
            .args(args)
            .env("KICKOFF_URL", format!("http://{}", self.server.addr))
            .env("KICKOFF_TOKEN", TOKEN)
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs with `--json`; the command must succeed.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let (code, out, err) = self.run(&all);
        assert_eq!(code, 0, "kickoff {args:?}: {err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("kickoff {args:?}: {e}: {out}"))
    }

    /// The exit code of a command that must fail, checked against `expected`.
    fn fails(&self, args: &[&str], expected: i32) -> String {
        let (code, _, err) = self.run(args);
        assert_eq!(code, expected, "kickoff {args:?}: {err}");
        err
    }
}

#[tokio::test]
async fn the_cli_drives_a_server_and_its_exit_codes_say_what_happened() {
    let db = crate::common::test_db().await;
    let server = Server::start(&[("DATABASE_URL", db.url.clone())]);
    let cli = Cli { server: &server };
    // A paused queue keeps the jobs waiting while the server's engine runs.
    let (code, out, err) = cli.run(&["queues", "pause", "games"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("games: paused"), "{out}");
    let mut ids = Vec::new();
    for n in 0..3 {
        let job = server
            .post_job(
                json!({"kind": "noop", "queue": "games", "args": {"game_id": 1, "n": n},
                             "tags": ["derby"], "schedule_in_ms": 3_600_000}),
            )
            .await;
        ids.push(job["job"]["id"].as_i64().unwrap());
    }
    let id = ids[0].to_string();

    // list: a table by default, JSON with --json; the filters of the API.
    let (code, table, _) = cli.run(&["jobs", "list", "--queue", "games"]);
    assert_eq!(code, 0);
    assert!(table.starts_with("ID"), "{table}");
    assert_eq!(table.lines().count(), 4, "{table}");
    let page = cli.json(&["jobs", "list", "--tags", "derby", "--args", "n=1"]);
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["jobs"][0]["id"], ids[1]);
    assert_eq!(cli.json(&["jobs", "show", &id])["id"], ids[0]);

    // edit: one job, then every match (counted and confirmed with --yes).
    let edited = cli.json(&[
        "jobs",
        "edit",
        &id,
        "--priority",
        "3",
        "--args-patch",
        r#"{"team":"x"}"#,
    ]);
    assert_eq!(
        (&edited["priority"], &edited["args"]["team"]),
        (&json!(3), &json!("x"))
    );
    let report = cli.json(&[
        "jobs",
        "edit",
        "--args",
        "game_id=1",
        "--set-tags",
        "derby,moved",
        "--yes",
    ]);
    assert_eq!(report["changed"], 3, "{report}");
    // shift: every match by an hour.
    let before = cli.json(&["jobs", "show", &id])["scheduled_at"].clone();
    let shifted = cli.json(&["jobs", "shift", "--tags", "moved", "--by", "1h", "--yes"]);
    assert_eq!(shifted["jobs"]["changed"], 3, "{shifted}");
    let after = cli.json(&["jobs", "show", &id])["scheduled_at"].clone();
    let t = |v: &Value| serde_json::from_value::<chrono::DateTime<chrono::Utc>>(v.clone()).unwrap();
    assert_eq!(t(&after) - t(&before), chrono::Duration::hours(1));
    // export: the rows, streamed to standard output.
    let (code, csv, err) = cli.run(&["jobs", "export", "--queue", "games"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert!(err.contains("3 jobs exported (at most 100000)"), "{err}");
    let (code, jsonl, _) = cli.run(&[
        "jobs",
        "export",
        "--queue",
        "games",
        "--format",
        "jsonl",
        "--max-rows",
        "2",
    ]);
    assert_eq!(code, 0);
    let rows: Vec<Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);

    // queues: list, limits, resume.
    let queues = cli.json(&["queues", "list"]);
    let games = queues
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "games")
        .unwrap();
    assert_eq!(games["paused"], true);
    let limited = cli.json(&["queues", "limits", "games", "--rate", "10/s"]);
    assert_eq!(limited["rate_limit"], 10, "{limited}");
    cli.fails(&["queues", "limits", "games", "--rate", "often"], 6);

    // run-now, cancel, retry, delete: one id, or several in one call.
    assert_eq!(cli.json(&["jobs", "run-now", &id])["state"], "available");
    let cancelled = cli.json(&["jobs", "cancel", &ids[1].to_string(), &ids[2].to_string()]);
    assert_eq!(cancelled["changed"], 2, "{cancelled}");
    assert_eq!(
        cli.json(&["jobs", "retry", &ids[1].to_string()])["state"],
        "available"
    );
    let (code, out, _) = cli.run(&["jobs", "delete", &ids[2].to_string()]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("deleted {}", ids[2]).as_str())
    );

    // Exit codes: not found 3, refused 4, conflict 5, invalid 6, usage 2, unreachable 7.
    cli.fails(&["jobs", "show", &ids[2].to_string()], 3);
    cli.fails(&["jobs", "edit", &ids[2].to_string(), "--priority", "1"], 3);
    cli.fails(
        &[
            "jobs",
            "edit",
            &id,
            "--args-patch",
            r#"{"sleep_ms":"soon"}"#,
        ],
        6,
    );
    cli.fails(&["jobs", "edit", &id, "--priority", "12"], 6);
    cli.fails(&["jobs", "list", "--state", "exploded"], 6);
    cli.fails(&["jobs", "edit", &ids[1].to_string()], 2);
    cli.fails(&["jobs", "shift", "--tags", "moved"], 2);
    cli.fails(
        &["jobs", "shift", "--tags", "moved", "--by", "soon", "--yes"],
        2,
    );
    cli.run(&["jobs", "cancel", &id]);
    cli.fails(&["jobs", "edit", &id, "--priority", "1"], 5);
    let (code, _, err) = Command::new(env!("CARGO_BIN_EXE_kickoff"))
        .args(["jobs", "list"])
        .env("KICKOFF_URL", format!("http://{}", server.addr))
        .env("KICKOFF_TOKEN", "wrong")
        .output()
        .map(|o| {
            (
                o.status.code().unwrap(),
                (),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .unwrap();
    assert_eq!(code, 4, "{err}");
    cli.fails(&["jobs", "list", "--server", "http://127.0.0.1:1"], 7);
    // The local bootstrap token (an admin's) goes to a server on this machine only: elsewhere,
    // no token is no request.
    let data = tempdir_with_token();
    let out = Command::new(env!("CARGO_BIN_EXE_kickoff"))
        .args(["jobs", "list", "--server", "http://192.0.2.1:9"])
        .env_remove("KICKOFF_TOKEN")
        .env("KICKOFF_DATA_DIR", &data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("only used for a server on this machine"),
        "{err}"
    );

    // questions: list, show, settle (refused while open: a conflict).
    let game_time = (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
    let res = reqwest::Client::new()
        .post(format!("http://{}/api/v1/questions", server.addr))
        .bearer_auth(TOKEN)
        .json(&json!({"game": "Lions vs Bears", "prompt": "First goal?",
                      "choices": ["Lions", "Bears"], "game_time": game_time}))
        .send()
        .await
        .unwrap();
    let question: Value = res.json().await.unwrap();
    let qid = question["id"].as_i64().unwrap().to_string();
    let list = cli.json(&["questions", "list", "--status", "open"]);
    assert_eq!(list[0]["id"], question["id"]);
    let (code, shown, _) = cli.run(&["questions", "show", &qid]);
    assert_eq!(code, 0);
    assert!(shown.contains("First goal?"), "{shown}");
    cli.fails(&["questions", "settle", &qid, "Lions"], 5);
    cli.fails(&["questions", "show", "999999"], 3);

    // A postponed game whose filter matches no job still moves its questions (the CLI said "no
    // job matches" and called nothing: the question would have locked two hours early).
    let before: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(question["game_time"].clone()).unwrap();
    let shifted = cli.json(&[
        "jobs",
        "shift",
        "--args",
        "game_id=999",
        "--by",
        "2h",
        "--game",
        "Lions vs Bears",
        "--yes",
    ]);
    assert_eq!(shifted["questions"], json!([question["id"]]), "{shifted}");
    let moved = cli.json(&["questions", "show", &qid]);
    let after: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(moved["game_time"].clone()).unwrap();
    assert_eq!(after - before, chrono::Duration::hours(2), "{moved}");
    cli.json(&["queues", "resume", "games"]);

    // workflows: list, show (a run of two steps the server's engine runs at once).
    let res = reqwest::Client::new()
        .post(format!("http://{}/api/v1/workflows", server.addr))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "game", "key": "game:7", "steps": [
            {"name": "settle", "job": {"kind": "noop"}},
            {"name": "leaderboard", "job": {"kind": "noop"}, "after": [{"step": "settle"}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::CREATED);
    let made: Value = res.json().await.unwrap();
    let run = made["run"]["id"].as_i64().unwrap().to_string();
    let page = cli.json(&["workflows", "list"]);
    assert_eq!(page["runs"][0]["id"], made["run"]["id"], "{page}");
    // Nothing of it has waited a day: not among the runs waiting that long.
    let waiting = cli.json(&["workflows", "list", "--waiting", "1d"]);
    assert_eq!(waiting["runs"], json!([]), "{waiting}");
    cli.fails(&["workflows", "list", "--waiting", "soon"], 2);
    let (code, shown, _) = cli.run(&["workflows", "show", &run]);
    assert_eq!(code, 0);
    assert!(
        shown.contains("leaderboard") && shown.contains("game:7"),
        "{shown}"
    );
    cli.fails(&["workflows", "show", "999999"], 3);
    // A run waiting on a queue no node runs: cancelled once (its steps with it), then a conflict.
    let res = reqwest::Client::new()
        .post(format!("http://{}/api/v1/workflows", server.addr))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "waiting", "steps": [
            {"name": "held", "job": {"kind": "noop", "queue": "nobody"}},
            {"name": "next", "job": {"kind": "noop"}, "after": [{"step": "held"}]}]}))
        .send()
        .await
        .unwrap();
    let waiting: Value = res.json().await.unwrap();
    let waiting = waiting["run"]["id"].as_i64().unwrap().to_string();
    let gone = cli.json(&["workflows", "cancel", &waiting]);
    assert_eq!(gone["run"]["state"], "cancelled", "{gone}");
    cli.fails(&["workflows", "cancel", &waiting], 5);
    // Run again from its first step (a new run), that step skipped there; a cancelled run is
    // not retried.
    let rerun = cli.json(&["workflows", "rerun", &waiting, "--from", "held"]);
    assert_eq!(rerun["run"]["rerun_of"].to_string(), waiting, "{rerun}");
    let again = rerun["run"]["id"].to_string();
    let skipped = cli.json(&["workflows", "skip", &again, "held"]);
    assert_eq!(skipped["steps"][0]["state"], "skipped", "{skipped}");
    assert!(
        skipped["steps"][1]["job_id"].is_i64(),
        "the step after it was made: {skipped}"
    );
    cli.fails(&["workflows", "retry", &waiting], 5);
    cli.fails(&["workflows", "retry", &waiting, "--mode", "sideways"], 6);
    // A run with a time and a step that waits for a signal: signalled, its time moved.
    let kickoff = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let res = reqwest::Client::new()
        .post(format!("http://{}/api/v1/workflows", server.addr))
        .bearer_auth(TOKEN)
        .json(
            &json!({"name": "game", "times": {"kickoff_at": kickoff}, "steps": [
            {"name": "await_final", "job": {"kind": "noop"}, "signal": "final",
             "deadline": {"time": "kickoff_at", "offset_ms": 3_600_000}}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), reqwest::StatusCode::CREATED);
    let game: Value = res.json().await.unwrap();
    let game = game["run"]["id"].as_i64().unwrap().to_string();
    let (code, shown, _) = cli.run(&["workflows", "show", &game]);
    assert_eq!(code, 0);
    assert!(shown.contains("waits for the signal"), "{shown}");
    cli.fails(
        &["workflows", "signal", &game, "final", "--payload", "{home"],
        2,
    );
    let later = "2030-01-01T20:00:00Z";
    let moved = cli.json(&["workflows", "move", &game, &format!("kickoff_at={later}")]);
    assert_eq!(moved["run"]["times"]["kickoff_at"], later, "{moved}");
    cli.fails(&["workflows", "move", &game, "kickoff_at"], 2);
    cli.fails(
        &["workflows", "move", &game, &format!("whistle={later}")],
        6,
    );
    let signalled = cli.json(&[
        "workflows",
        "signal",
        &game,
        "final",
        "--payload",
        r#"{"home": 1}"#,
    ]);
    assert_eq!(signalled["signals"][0]["name"], "final", "{signalled}");
    assert!(signalled["steps"][0]["job_id"].is_i64(), "{signalled}");
    cli.fails(&["workflows", "list", "--state", "sideways"], 6);

    // A token never goes over plain HTTP to another host unless asked (`--insecure`), and a
    // server on this machine is never reached through a proxy.
    plain_http_and_proxies(&cli);
}

/// A listener that counts its connections and answers each with a 500.
fn counting_listener(
    addr: &str,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind(addr).unwrap();
    let local = listener.local_addr().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap_or(0);
            kept.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = conn.write_all(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    });
    (local, seen)
}

/// This machine's address on its way out (not loopback), if it has one.
fn outward_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

fn plain_http_and_proxies(cli: &Cli<'_>) {
    // Another host over plain HTTP: refused before any connection, naming the way out.
    let host = outward_address().map_or("192.0.2.1".to_string(), |ip| ip.to_string());
    let (addr, seen) = counting_listener(&format!("{host}:0"));
    let server = format!("http://{host}:{}", addr.port());
    let err = cli.fails(&["jobs", "list", "--server", &server], 4);
    assert!(err.contains("https") && err.contains("--insecure"), "{err}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "a connection was made: {seen:?}"
    );
    // Asked for: the call is made (the listener answers 500).
    if outward_address().is_some() {
        cli.fails(&["jobs", "list", "--server", &server, "--insecure"], 7);
        let requests = seen.lock().unwrap().clone();
        assert_eq!(requests.len(), 1, "{requests:?}");
        assert!(requests[0]
            .to_ascii_lowercase()
            .contains("authorization: bearer"));
    }
    // HTTPS elsewhere is fine to try (nothing listens there: unreachable, not refused).
    cli.fails(&["jobs", "list", "--server", "https://192.0.2.1:1"], 7);

    // A proxy in the environment is not used for the local server.
    let (proxy, through) = counting_listener("127.0.0.1:0");
    let proxy = format!("http://{proxy}");
    let (code, _, err) = cli.run_with(
        &["jobs", "list"],
        &[
            ("HTTP_PROXY", proxy.as_str()),
            ("http_proxy", proxy.as_str()),
            ("ALL_PROXY", proxy.as_str()),
            ("all_proxy", proxy.as_str()),
            ("NO_PROXY", ""),
            ("no_proxy", ""),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        through.lock().unwrap().is_empty(),
        "went through the proxy: {through:?}"
    );
}

/// A data directory holding a bootstrap token, as a local server leaves it.
fn tempdir_with_token() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kickoff-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("api-token"), "local-admin-token\n").unwrap();
    dir
}
