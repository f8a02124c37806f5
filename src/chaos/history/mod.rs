//! Random operator histories, with faults, checked against Kickoff's promises
//! (`kickoff chaos history`).
//!
//! A seed draws a plan ([`plan`]): inserts, cancels, retries, runs now, reschedules and deletes,
//! bulk actions on a filter, pauses and resumes of queues and kinds, limits, schedules made,
//! paused, resumed, triggered and deleted, questions made, moved, predicted, settled and deleted,
//! webhook endpoints with secrets (and a receiver that echoes some calls' headers back), inserts
//! forging the meta Kickoff writes, an admin's actions on the jobs whose errors hold a secret,
//! reads by each role (lists, exports, one job's attempts and delivery record, the dashboard's
//! audit log); and faults: a node killed (SIGKILL) or restarted (SIGTERM), PostgreSQL crashed and
//! restarted, a node's connections cut. The driver ([`drive`]) sends each action as a REST
//! request to one of the `kickoff serve` nodes, with the token of the step's role (the audit log
//! through the dashboard, with the role's session), and records the request and its answer
//! ([`record`]). Then it waits for quiet, has each reader read every surface once more (lists,
//! exports, the audit log, each secret-carrying job's record), reads the database, and checks
//! every promise ([`promises`]) on the record and the database alone.
//!
//! A failing history is shrunk: steps are left out while it still fails ([`shrink`]), and the
//! report ends with the command that replays the shortest one.

pub mod drive;
pub mod plan;
pub mod promises;
pub mod record;
pub mod shrink;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::db::Db;
use serde::Serialize;

use crate::accounts::{Accounts, Role as AccountRole, TokenScope};
use crate::chaos::node::{Node, NodeEnv};
use crate::chaos::receiver;
use crate::postgres::{Durability, EmbeddedPostgres, DATABASE};
use drive::{Driver, Login, Logins, Tokens};
use promises::Violation;
use record::{AuditRow, History, IncidentRow, JobRow, PredictionRow, QuestionRow, Snapshot};

/// What a history run does.
#[derive(Debug, Clone)]
pub struct HistoryConfig {
    /// The `kickoff` binary to start the nodes from.
    pub binary: PathBuf,
    /// Where the cluster and the nodes' logs go.
    pub dir: PathBuf,
    pub seed: u64,
    /// Steps drawn from the seed.
    pub steps: usize,
    pub nodes: usize,
    pub faults: bool,
    /// Only these steps of the plan (a shrunk history's replay); `None`: all.
    pub keep: Option<Vec<usize>>,
    /// How long to wait for quiet (nothing due and unheld) before reading the database.
    pub settle: Duration,
    /// Keep every run's directory with its record (`history.json`, `snapshot.json`), not only a
    /// failing one's.
    pub records: bool,
    /// The cluster has a synchronous standby, and the database's address moves to it at the
    /// plan's middle ([`plan::Fault::Failover`]).
    pub failover: bool,
}

impl HistoryConfig {
    pub fn new(binary: PathBuf, dir: PathBuf, seed: u64) -> Self {
        HistoryConfig {
            binary,
            dir,
            seed,
            steps: 60,
            nodes: 2,
            faults: true,
            keep: None,
            settle: Duration::from_secs(20),
            records: false,
            failover: false,
        }
    }

    /// The plan's steps this run takes, with their indices.
    pub fn steps(&self) -> Vec<(usize, plan::Step)> {
        let all = plan::draw(self.seed, self.steps, self.nodes, self.faults);
        all.into_iter()
            .enumerate()
            .filter(|(i, _)| self.keep.as_ref().is_none_or(|k| k.contains(i)))
            .collect()
    }

    /// The command that replays this run.
    pub fn replay_command(&self) -> String {
        let mut c = format!(
            "kickoff chaos-history --seed {} --steps {} --nodes {}",
            self.seed, self.steps, self.nodes
        );
        if !self.faults {
            c.push_str(" --no-faults");
        }
        if self.failover {
            c.push_str(" --failover");
        }
        if let Some(k) = &self.keep {
            let k: Vec<String> = k.iter().map(ToString::to_string).collect();
            c.push_str(&format!(" --keep {}", k.join(",")));
        }
        c
    }
}

/// What a history run found.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryReport {
    pub seed: u64,
    pub steps: usize,
    pub requests: usize,
    /// Requests by answer status.
    pub statuses: std::collections::BTreeMap<u16, usize>,
    pub faults: usize,
    pub jobs: usize,
    pub deliveries: usize,
    pub seconds: f64,
    /// Whether quiet came before the settle time ran out.
    pub quiet: bool,
    pub violations: Vec<Violation>,
    pub replay: String,
}

impl HistoryReport {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    pub fn text(&self) -> String {
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        let mut t = format!(
            "history seed {}: {} steps, {} requests ({}), {} faults, {} jobs, {} webhook calls, \
             {:.1} s{}\n",
            self.seed,
            self.steps,
            self.requests,
            statuses.join(", "),
            self.faults,
            self.jobs,
            self.deliveries,
            self.seconds,
            if self.quiet { "" } else { " (never quiet)" }
        );
        if self.ok() {
            t.push_str("every promise held\n");
        } else {
            for v in &self.violations {
                t.push_str(&format!("broken {:?}: {}\n", v.promise, v.detail));
            }
            t.push_str(&format!("replay: {}\n", self.replay));
        }
        t
    }
}

/// Runs one history: its own embedded cluster, `config.nodes` nodes, the plan, the checks.
pub async fn run(config: &HistoryConfig) -> Result<(HistoryReport, History, Snapshot), String> {
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(&config.dir);
    std::fs::create_dir_all(&config.dir).map_err(|e| e.to_string())?;
    let cluster = EmbeddedPostgres::start(&config.dir.join("cluster"), Durability::Durable)
        .map_err(|e| e.to_string())?;
    let standby = match config.failover {
        true => match crate::chaos::failover::Standby::make(&cluster, &config.dir.join("standby"))
            .await
        {
            Ok(standby) => Some(standby),
            Err(e) => {
                let _ = cluster.stop();
                return Err(e);
            }
        },
        false => None,
    };
    let result = run_on(config, &cluster, standby.as_ref(), started).await;
    // A killed primary is gone already.
    let _ = cluster.stop();
    if let Some(standby) = standby {
        standby.stop();
    }
    result
}

async fn run_on(
    config: &HistoryConfig,
    cluster: &EmbeddedPostgres,
    standby: Option<&crate::chaos::failover::Standby>,
    started: Instant,
) -> Result<(HistoryReport, History, Snapshot), String> {
    let url = match standby {
        Some(standby) => standby.url(),
        None => cluster.url_for(DATABASE),
    };
    let pool = crate::chaos::connect_and_migrate(&url, 4).await?;
    let (tokens, logins) = make_tokens(&pool).await?;
    let (receiver_addr, deliveries) = receiver::start_unreliable().await?;
    let log_dir = config.dir.join("nodes");
    std::fs::create_dir_all(&log_dir).map_err(|e| e.to_string())?;
    let env = NodeEnv {
        binary: config.binary.clone(),
        database_url: url.clone(),
        lease_ms: 2000,
        webhook_host: receiver_addr.to_string(),
        log_dir,
        // `webhooks`: the game's notify step's calls.
        queues: "default:10,limited:4,hooks:10,questions:5,webhooks:5".into(),
        secret_key: Some(secret_key(config.seed)),
        // Alert rules evaluated as often as they may be, so that a short history sees incidents.
        // Alert notifications in `default`, among the queues the history pauses and acts on in
        // bulk (with `webhooks` run, for the games' notify calls, they would go there).
        settings: vec![
            ("KICKOFF_ALERT_INTERVAL_MS", "500".into()),
            ("KICKOFF_ALERT_QUEUE", "default".into()),
        ],
        // The second node under a path of a site, as behind a proxy (docs/embedding.md): every
        // request, page and server function of a history's goes to it as to the first.
        odd_base: Some("/kickoff"),
    };
    let mut nodes = Vec::new();
    for slot in 0..config.nodes.max(1) {
        nodes.push(Node::start(&env, slot, 0).await?);
    }
    let mut driver = Driver {
        http: reqwest::Client::new(),
        env: &env,
        cluster,
        standby,
        pool: pool.clone(),
        generations: vec![0; nodes.len()],
        clocks: vec![0; nodes.len()],
        nodes,
        tokens,
        hook_url: format!("http://{receiver_addr}/hook"),
        jobs: Vec::new(),
        secret_jobs: Vec::new(),
        schedules: Vec::new(),
        logins,
        sessions: Vec::new(),
        questions: Vec::new(),
        endpoints: Vec::new(),
        alert_rules: Vec::new(),
        runs: Vec::new(),
        run_keys: Default::default(),
        partner: None,
        history: History {
            seed: config.seed,
            ..History::default()
        },
    };
    let steps = config.steps();
    let mut failure = None;
    let mut failover_at = standby.map(|_| config.steps / 2);
    for (i, step) in &steps {
        if failover_at.is_some_and(|at| *i >= at) {
            failover_at = None;
            if let Err(e) = driver
                .step(
                    *i,
                    plan::Step::Fault {
                        fault: plan::Fault::Failover,
                    },
                )
                .await
            {
                failure = Some(e);
                break;
            }
        }
        if let Err(e) = driver.step(*i, *step).await {
            failure = Some(e);
            break;
        }
    }
    let quiet = match failure {
        None => {
            let quiet = wait_for_quiet(&pool, config.settle).await;
            driver.read_everything(config.steps).await;
            // Schedules went on while the readers read: quiet again before the database is read.
            quiet && wait_for_quiet(&pool, config.settle).await
        }
        Some(_) => false,
    };
    let snapshot = read_snapshot(&pool).await;
    let nodes = std::mem::take(&mut driver.nodes);
    for n in nodes {
        n.stop().await;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let snapshot = snapshot?;
    let mut history = driver.history;
    history.deliveries = deliveries.snapshot();
    history.finals = deliveries.finals();
    let violations = promises::check(&history, &snapshot);
    if !violations.is_empty() || config.records {
        // The record and the database beside the nodes' logs, for a look.
        for (name, json) in [
            ("history.json", serde_json::to_string_pretty(&history)),
            ("snapshot.json", serde_json::to_string_pretty(&snapshot)),
        ] {
            if let Ok(json) = json {
                let _ = std::fs::write(config.dir.join(name), json);
            }
        }
    }
    let mut statuses = std::collections::BTreeMap::new();
    for e in &history.events {
        *statuses.entry(e.status).or_default() += 1;
    }
    let report = HistoryReport {
        seed: config.seed,
        steps: steps.len(),
        requests: history.events.len(),
        statuses,
        faults: history.faults.len(),
        jobs: snapshot.jobs.len(),
        deliveries: history.deliveries.values().map(Vec::len).sum(),
        seconds: started.elapsed().as_secs_f64(),
        quiet,
        violations,
        replay: config.replay_command(),
    };
    Ok((report, history, snapshot))
}

/// A key for the nodes' `KICKOFF_SECRET_KEY` (base64 of 32 bytes), from the seed.
fn secret_key(seed: u64) -> String {
    use base64::Engine as _;
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
    let bytes: Vec<u8> = (0..32).map(|_| rng.u8(..)).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The admin's is the bootstrap token every node is started with; an operator and a viewer are
/// made as a deployment would (their accounts also sign in to the dashboard).
async fn make_tokens(pool: &Db) -> Result<(Tokens, Logins), String> {
    let accounts = Accounts::new(pool.clone());
    let e = |e: crate::accounts::AccountError| format!("accounts: {e}");
    let logins = Logins {
        operator: Login {
            name: "operator".into(),
            password: "history operator password".into(),
        },
        viewer: Login {
            name: "viewer".into(),
            password: "history viewer password".into(),
        },
    };
    let operator = accounts
        .create(
            &logins.operator.name,
            &logins.operator.password,
            AccountRole::Operator,
        )
        .await
        .map_err(e)?;
    let viewer = accounts
        .create(
            &logins.viewer.name,
            &logins.viewer.password,
            AccountRole::Viewer,
        )
        .await
        .map_err(e)?;
    let (_, operator) = accounts
        .create_token(&operator, "history", TokenScope::Write)
        .await
        .map_err(e)?;
    let (_, viewer) = accounts
        .create_token(&viewer, "history", TokenScope::Read)
        .await
        .map_err(e)?;
    let tokens = Tokens {
        admin: crate::chaos::node::BOOTSTRAP_TOKEN.to_string(),
        operator,
        viewer,
    };
    Ok((tokens, logins))
}

/// Waits until nothing is due and unheld: no job executing, none available or overdue outside a
/// paused queue or kind, no failed attempt whose retry comes within 5 s (a job that failed in a
/// fault's wake runs again before the database is read). `false` when `limit` passed first.
async fn wait_for_quiet(pool: &Db, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let busy: Result<i64, _> = sqlx::query_scalar(
            "SELECT count(*) FROM jobs j
             WHERE j.state = 'executing'
                OR (j.state = 'retryable' AND j.scheduled_at < now() + interval '5 seconds'
                    AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = j.queue AND q.paused)
                    AND NOT EXISTS (SELECT 1 FROM kind_pauses k WHERE k.kind = j.kind))
                OR (j.state IN ('available', 'scheduled', 'retryable')
                    AND j.scheduled_at < now() - interval '1 second'
                    AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = j.queue AND q.paused)
                    AND NOT EXISTS (SELECT 1 FROM kind_pauses k WHERE k.kind = j.kind))",
        )
        .fetch_one(pool)
        .await;
        if matches!(busy, Ok(0)) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The database at the end (the checks' instruments, like the chaos suite's: queries of their own).
async fn read_snapshot(pool: &Db) -> Result<Snapshot, String> {
    let db = |e: sqlx::Error| format!("snapshot: {e}");
    // One snapshot of the database for every table (and its `now()`): read one after another
    // without it, a job seen executing may have completed, tally raised, by the tallies' read.
    let mut tx = pool.begin().await.map_err(db)?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    let now = sqlx::query_scalar("SELECT now()")
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
    type Row = (
        i64,
        String,
        String,
        String,
        i32,
        chrono::DateTime<chrono::Utc>,
        Option<chrono::DateTime<chrono::Utc>>,
        Option<chrono::DateTime<chrono::Utc>>,
        serde_json::Value,
        serde_json::Value,
        chrono::DateTime<chrono::Utc>,
        Option<i64>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, queue, kind, state::text, attempt, scheduled_at, attempted_at, finalized_at,
                args, meta, inserted_at, step_id
         FROM jobs ORDER BY id",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?;
    let jobs = rows
        .into_iter()
        .map(|r| JobRow {
            id: r.0,
            queue: r.1,
            kind: r.2,
            state: r.3,
            attempt: r.4,
            scheduled_at: r.5,
            attempted_at: r.6,
            finalized_at: r.7,
            args: r.8,
            meta: r.9,
            inserted_at: r.10,
            step_id: r.11,
        })
        .collect();
    let tallies: HashMap<String, i64> = sqlx::query_as("SELECT name, count FROM tallies")
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?
        .into_iter()
        .collect();
    let paused_queues = sqlx::query_scalar("SELECT name FROM queues WHERE paused")
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
    let paused_kinds = sqlx::query_scalar("SELECT kind FROM kind_pauses")
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
    let questions = sqlx::query_as::<_, (i64, String, String, _, _, Option<i64>)>(
        "SELECT id, game, status::text, game_time, locked_at, lock_job_id FROM questions",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?
    .into_iter()
    .map(|r| QuestionRow {
        id: r.0,
        game: r.1,
        status: r.2,
        game_time: r.3,
        locked_at: r.4,
        lock_job_id: r.5,
    })
    .collect();
    let predictions = sqlx::query_as::<_, (i64, String, String, _)>(
        "SELECT question_id, player, choice, at FROM predictions",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?
    .into_iter()
    .map(|r| PredictionRow {
        question_id: r.0,
        player: r.1,
        choice: r.2,
        at: r.3,
    })
    .collect();
    let audit = sqlx::query_as::<_, (String, String, bool)>(
        "SELECT action, coalesce(target, ''), ok FROM audit_log",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?
    .into_iter()
    .map(|r| AuditRow {
        action: r.0,
        target: r.1,
        ok: r.2,
    })
    .collect();
    let incidents =
        sqlx::query_as::<_, (i64, i64, String)>("SELECT id, rule_id, subject FROM alert_incidents")
            .fetch_all(&mut *tx)
            .await
            .map_err(db)?
            .into_iter()
            .map(|r| IncidentRow {
                id: r.0,
                rule_id: r.1,
                subject: r.2,
            })
            .collect();
    let alert_notifications = sqlx::query_scalar("SELECT job_id FROM alert_notifications")
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
    type RunCols = (
        i64,
        String,
        Option<String>,
        String,
        i32,
        i32,
        i32,
        i32,
        i32,
        i32,
        i32,
        serde_json::Value,
    );
    let workflow_runs = sqlx::query_as::<_, RunCols>(
        "SELECT id, name, key, state, steps, blocked, ready, completed, failed, skipped,
                cancelled, times
         FROM workflow_runs ORDER BY id",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?
    .into_iter()
    .map(|r| record::RunRow {
        id: r.0,
        name: r.1,
        key: r.2,
        state: r.3,
        steps: r.4,
        counts: [r.5, r.6, r.7, r.8, r.9, r.10],
        times: r.11,
    })
    .collect();
    type Time = chrono::DateTime<chrono::Utc>;
    let workflow_steps = sqlx::query(
        "SELECT s.id, s.run_id, s.name, s.state, s.deps_left, s.skip_following, s.job_id,
                j.inserted_at, s.kept_from, s.at_time, s.at_ms, s.signal, s.deadline_at,
                s.finished_at, s.tasks, s.tasks_done, s.tasks_failed, s.tasks_cancelled
         FROM workflow_steps s LEFT JOIN jobs j ON j.id = s.job_id ORDER BY s.id",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?
    .into_iter()
    .map(|r| -> Result<record::StepRow, sqlx::Error> {
        use sqlx::Row;
        Ok(record::StepRow {
            id: r.try_get("id")?,
            run_id: r.try_get("run_id")?,
            name: r.try_get("name")?,
            state: r.try_get("state")?,
            deps_left: r.try_get("deps_left")?,
            skip_following: r.try_get("skip_following")?,
            job_id: r.try_get("job_id")?,
            job_inserted_at: r.try_get::<Option<Time>, _>("inserted_at")?,
            kept_from: r.try_get("kept_from")?,
            at_time: r.try_get("at_time")?,
            at_ms: r.try_get("at_ms")?,
            signal: r.try_get("signal")?,
            deadline_at: r.try_get("deadline_at")?,
            finished_at: r.try_get("finished_at")?,
            tasks: r.try_get("tasks")?,
            tasks_counts: [
                r.try_get("tasks_done")?,
                r.try_get("tasks_failed")?,
                r.try_get("tasks_cancelled")?,
            ],
        })
    })
    .collect::<Result<Vec<_>, _>>()
    .map_err(db)?;
    let workflow_signals = sqlx::query_as::<_, (i64, String, Time, String)>(
        "SELECT run_id, name, received_at, source FROM workflow_signals ORDER BY run_id, name",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?
    .into_iter()
    .map(|r| record::SignalRow {
        run_id: r.0,
        name: r.1,
        received_at: r.2,
        source: r.3,
    })
    .collect();
    let workflow_tasks = sqlx::query_as::<_, (i64, i32, i64, String)>(
        "SELECT step_id, task, job_id, state FROM workflow_tasks ORDER BY step_id, task",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?
    .into_iter()
    .map(|r| record::TaskRow {
        step_id: r.0,
        task: r.1,
        job_id: r.2,
        state: r.3,
    })
    .collect();
    let workflow_edges = sqlx::query_as::<_, (i64, i64, String)>(
        "SELECT dep_id, step_id, on_failure FROM workflow_edges",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?
    .into_iter()
    .map(|r| record::EdgeRow {
        dep_id: r.0,
        step_id: r.1,
        on_failure: r.2,
    })
    .collect();
    let app_rows: Vec<i64> = sqlx::query_scalar(
        "SELECT step FROM history_app_rows WHERE to_regclass('history_app_rows') IS NOT NULL",
    )
    .fetch_all(&mut *tx)
    .await
    .or_else(|e| match &e {
        // No SQL action ran: the application's table was never made.
        sqlx::Error::Database(d) if d.code().as_deref() == Some("42P01") => Ok(Vec::new()),
        _ => Err(e),
    })
    .map_err(db)?;
    Ok(Snapshot {
        app_rows: app_rows.into_iter().collect(),
        workflow_runs,
        workflow_steps,
        workflow_edges,
        workflow_signals,
        workflow_tasks,
        now,
        incidents,
        alert_notifications,
        jobs,
        tallies,
        paused_queues,
        paused_kinds,
        questions,
        predictions,
        audit,
    })
}

/// Runs `config`'s history and, when it fails and `shrink` is set, its shortest failing
/// subsequence (each try a whole run); returns the first report and the shrunk one.
pub async fn run_and_shrink(
    config: &HistoryConfig,
    shrink: bool,
) -> Result<(HistoryReport, Option<HistoryReport>), String> {
    let (report, _, _) = run(config).await?;
    if report.ok() || !shrink {
        return Ok((report, None));
    }
    let promises: Vec<promises::Promise> = report.violations.iter().map(|v| v.promise).collect();
    let all: Vec<usize> = config.steps().into_iter().map(|(i, _)| i).collect();
    let mut last = None;
    let kept = shrink::shrink(all, |candidate| {
        let mut c = config.clone();
        c.keep = Some(candidate.to_vec());
        let handle = tokio::runtime::Handle::current();
        let outcome = tokio::task::block_in_place(|| handle.block_on(run(&c)));
        match outcome {
            Ok((r, _, _)) if r.violations.iter().any(|v| promises.contains(&v.promise)) => {
                last = Some(r);
                true
            }
            _ => false,
        }
    });
    let mut c = config.clone();
    c.keep = Some(kept);
    Ok((
        report,
        last.map(|mut r| {
            r.replay = c.replay_command();
            r
        }),
    ))
}

/// Runs histories seed after seed from `config.seed`: `seeds` of them, or as many as fit in
/// `limit`; a history that breaks a promise is shrunk when `shrink`, and the run goes on with the
/// next seed (a long run reports every failing seed, not only the first). Each report goes to
/// `print` as it comes; `Err` names the failing seeds.
pub async fn run_seeds(
    mut config: HistoryConfig,
    seeds: u64,
    limit: Option<Duration>,
    shrink: bool,
    mut print: impl FnMut(&HistoryReport),
) -> Result<(), String> {
    let started = Instant::now();
    let base = config.dir.clone();
    let mut n = 0u64;
    let mut failed = Vec::new();
    loop {
        let more = match limit {
            Some(l) => started.elapsed() < l,
            None => n < seeds,
        };
        if !more {
            break;
        }
        config.dir = base.join(format!("seed-{}", config.seed));
        let (report, shrunk) = run_and_shrink(&config, shrink).await?;
        print(&report);
        if report.ok() {
            if !config.records {
                let _ = std::fs::remove_dir_all(&config.dir);
            }
        } else {
            if let Some(s) = shrunk {
                print(&s);
            }
            failed.push(config.seed.to_string());
        }
        config.seed += 1;
        n += 1;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {n} histories broke a promise: seeds {} (records in {})",
            failed.len(),
            failed.join(", "),
            base.display()
        ))
    }
}
