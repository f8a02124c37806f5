//! `kickoff bench streams`: live updates at scale. For each stream count (100, 1,000 and 5,000 by
//! default) it starts a real `kickoff serve` process on the bench database, opens that many
//! `GET /api/v1/events` streams to it over loopback, then makes one change at a time (a job
//! inserted, due in a day: exactly one `kickoff_events` notification) and times, for every
//! stream, how long after the insert was sent the change arrived on it.
//!
//! Reported per count: delivery percentiles over every (stream, change) pair, the time until the
//! *last* stream had each change, changes missed, the server's RSS with the streams open, and its
//! CPU while idle (what holding the streams costs: keep-alives, the rechecks of each stream's
//! token) and while delivering. The server is its own process, so its RSS and CPU are its own; the
//! streams' reader (this process) shares the machine's cores with it.
//!
//! A stream holder (user or token) may hold at most [`MAX_STREAMS_PER_HOLDER`] streams on a node,
//! so the streams are spread over as many API tokens of one viewer as that takes.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::db::Db;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::percentiles::percentile;
use crate::accounts::{Accounts, Role, TokenScope};
use crate::http::sse::MAX_STREAMS_PER_HOLDER;

/// Changes made per stream count, one at a time.
const CHANGES: usize = 30;
/// The pause between two changes (after every stream had the previous one).
const BETWEEN_CHANGES: Duration = Duration::from_millis(100);
/// How long the server's CPU is sampled with the streams open and nothing happening.
const IDLE_SAMPLE: Duration = Duration::from_secs(10);
/// Streams being opened at once (the rest wait their turn), so the listen backlog never
/// overflows.
const OPENING_AT_ONCE: usize = 200;

/// A change that reached one stream: (stream, job id, when).
type Arrival = (usize, i64, Instant);

pub async fn streams(pool: &Db, database_url: &str, counts: &[usize]) -> Result<Value, String> {
    let most = counts.iter().copied().max().unwrap_or(0);
    let tokens = tokens(pool, most.div_ceil(MAX_STREAMS_PER_HOLDER)).await?;
    let mut runs = Vec::new();
    for &n in counts {
        runs.push(run(database_url, &tokens, n).await?);
    }
    Ok(json!({ "bench": "streams", "changes_per_count": CHANGES, "runs": runs }))
}

/// `n` read tokens of one viewer.
async fn tokens(pool: &Db, n: usize) -> Result<Vec<String>, String> {
    let accounts = Accounts::new(pool.clone());
    let user = accounts
        .create("bench-streams", "bench-password-not-secret", Role::Viewer)
        .await
        .map_err(|e| e.to_string())?;
    let mut tokens = Vec::with_capacity(n);
    for i in 0..n {
        let (_, text) = accounts
            .create_token(&user, &format!("streams {i}"), TokenScope::Read)
            .await
            .map_err(|e| e.to_string())?;
        tokens.push(text);
    }
    Ok(tokens)
}

/// The server under test: a `kickoff serve` child process.
struct Server {
    child: Child,
    pid: u32,
    base: String,
    dir: std::path::PathBuf,
}

impl Server {
    async fn start(database_url: &str, streams: usize) -> Result<Server, String> {
        let binary = std::env::current_exe().map_err(|e| e.to_string())?;
        let dir = std::env::temp_dir().join(format!(
            "kickoff-bench-streams-{}-{streams}",
            std::process::id()
        ));
        let mut child = Command::new(binary)
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("LEPTOS_SITE_ADDR", "127.0.0.1:0")
            .env("KICKOFF_API_TOKEN", "off")
            .env("KICKOFF_DATA_DIR", &dir)
            .env("KICKOFF_MAX_STREAMS", (streams + 16).to_string())
            .env("KICKOFF_MAX_CONNECTIONS", (streams + 256).to_string())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting the server: {e}"))?;
        let pid = child.id().ok_or("the server exited at once")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let base = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("Kickoff listening on ") {
                    return Some(url.trim().to_string());
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .ok_or("the server did not start")?;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Server {
            child,
            pid,
            base,
            dir,
        })
    }

    /// User and system CPU time of the server process so far.
    fn cpu(&self) -> Result<Duration, String> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .map_err(|e| e.to_string())?;
        // Fields after the command name (which may hold spaces), closed by the last ')'.
        let rest = stat.rsplit_once(')').ok_or("bad /proc stat")?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
        // The kernel's clock ticks are 100 per second on every Linux this runs on (USER_HZ).
        Ok(Duration::from_millis(ticks * 10))
    }

    fn rss_mib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let kib: u64 = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(kib / 1024)
    }

    async fn stop(self) {
        crate::chaos::node::stop_child(self.child).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads one stream until it ends, reporting the job ids of each `jobs` event.
async fn read_stream(
    i: usize,
    mut response: reqwest::Response,
    arrivals: mpsc::UnboundedSender<Arrival>,
) {
    let mut pending = String::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let now = Instant::now();
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            if !event.lines().any(|l| l == "event: jobs") {
                continue;
            }
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            let Ok(payload) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            for id in payload["ids"].as_array().into_iter().flatten() {
                if let Some(id) = id.as_i64() {
                    let _ = arrivals.send((i, id, now));
                }
            }
        }
    }
}

async fn run(database_url: &str, tokens: &[String], n: usize) -> Result<Value, String> {
    let server = Server::start(database_url, n).await?;
    let result = measure(&server, database_url, tokens, n).await;
    server.stop().await;
    result
}

async fn measure(
    server: &Server,
    database_url: &str,
    tokens: &[String],
    n: usize,
) -> Result<Value, String> {
    let pool = Db::from(
        sqlx::PgPool::connect(database_url)
            .await
            .map_err(|e| e.to_string())?,
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| e.to_string())?;
    let url = format!("{}/api/v1/events", server.base);
    let (arrivals_tx, mut arrivals) = mpsc::unbounded_channel::<Arrival>();

    // Open the streams, OPENING_AT_ONCE at a time.
    let opening = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(OPENING_AT_ONCE));
    let opened = Arc::new(AtomicUsize::new(0));
    let mut readers = tokio::task::JoinSet::new();
    let (open_tx, mut open_rx) = mpsc::unbounded_channel::<Result<(), String>>();
    for i in 0..n {
        let token = tokens[i / MAX_STREAMS_PER_HOLDER].clone();
        let (client, url, gate, opened) =
            (client.clone(), url.clone(), gate.clone(), opened.clone());
        let (arrivals_tx, open_tx) = (arrivals_tx.clone(), open_tx.clone());
        readers.spawn(async move {
            let permit = gate.acquire_owned().await;
            let response = client.get(&url).bearer_auth(token).send().await;
            drop(permit);
            match response {
                Ok(r) if r.status().is_success() => {
                    opened.fetch_add(1, Ordering::SeqCst);
                    let _ = open_tx.send(Ok(()));
                    read_stream(i, r, arrivals_tx).await;
                }
                Ok(r) => {
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    let _ = open_tx.send(Err(format!("stream {i}: {status}: {body}")));
                }
                Err(e) => {
                    let _ = open_tx.send(Err(format!("stream {i}: {e}")));
                }
            }
        });
    }
    drop(arrivals_tx);
    for _ in 0..n {
        match tokio::time::timeout(Duration::from_secs(120), open_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => return Err(e),
            _ => {
                return Err(format!(
                    "only {} of {n} streams opened",
                    opened.load(Ordering::SeqCst)
                ))
            }
        }
    }
    let open_s = opening.elapsed().as_secs_f64();

    // Holding them: what the server spends with nothing to deliver.
    let cpu0 = server.cpu()?;
    tokio::time::sleep(IDLE_SAMPLE).await;
    let idle_cpu = server.cpu()? - cpu0;

    // One change at a time; every stream must see each.
    let mut deliveries_ms = Vec::with_capacity(n * CHANGES);
    let mut last_stream_ms = Vec::with_capacity(CHANGES);
    let mut missed = 0usize;
    let changing = Instant::now();
    let cpu0 = server.cpu()?;
    let mut early: HashMap<i64, Vec<Instant>> = HashMap::new();
    for _ in 0..CHANGES {
        let sent = Instant::now();
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO jobs (kind, args, state, scheduled_at)
             VALUES ('noop', '{\"bench\": \"streams\"}', 'scheduled', now() + interval '1 day')
             RETURNING id",
        )
        .fetch_one(&pool)
        .await
        .map_err(|e| e.to_string())?;
        let mut got: Vec<Instant> = early.remove(&id).unwrap_or_default();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while got.len() < n {
            match tokio::time::timeout_at(deadline, arrivals.recv()).await {
                Ok(Some((_, job, at))) if job == id => got.push(at),
                Ok(Some((_, job, at))) => early.entry(job).or_default().push(at),
                _ => break,
            }
        }
        missed += n - got.len();
        let mut ms: Vec<f64> = got
            .iter()
            .map(|at| at.duration_since(sent).as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(|a, b| a.total_cmp(b));
        if let Some(last) = ms.last() {
            last_stream_ms.push(*last);
        }
        deliveries_ms.extend(ms);
        tokio::time::sleep(BETWEEN_CHANGES).await;
    }
    let changes_cpu = server.cpu()? - cpu0;
    let changes_s = changing.elapsed();
    let rss = server.rss_mib();
    readers.abort_all();
    pool.close().await;

    deliveries_ms.sort_by(|a, b| a.total_cmp(b));
    last_stream_ms.sort_by(|a, b| a.total_cmp(b));
    let r2 = |x: f64| (x * 100.0).round() / 100.0;
    let pct = |cpu: Duration, over: Duration| r2(cpu.as_secs_f64() / over.as_secs_f64() * 100.0);
    Ok(json!({
        "streams": n,
        "open_s": r2(open_s),
        "delivery_p50_ms": r2(percentile(&deliveries_ms, 0.5)),
        "delivery_p99_ms": r2(percentile(&deliveries_ms, 0.99)),
        "delivery_max_ms": r2(deliveries_ms.last().copied().unwrap_or(0.0)),
        "all_streams_p50_ms": r2(percentile(&last_stream_ms, 0.5)),
        "all_streams_p99_ms": r2(percentile(&last_stream_ms, 0.99)),
        "missed": missed,
        "server_rss_mib": rss,
        "server_cpu_idle_pct": pct(idle_cpu, IDLE_SAMPLE),
        "server_cpu_delivering_pct": pct(changes_cpu, changes_s),
    }))
}
