//! `kickoff workflows list|show|cancel|retry|skip|rerun|signal|move` against a server (see [`super::remote`]): workflow runs and
//! their steps (docs/workflows.md).

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use super::remote::{cell, table, Api, Exit, Failure, Outcome};

#[derive(Debug, Subcommand)]
pub enum WorkflowsAction {
    /// Runs, newest first, with their steps counted by state.
    List {
        /// `running`, `completed`, `failed` or `cancelled`.
        #[arg(long)]
        state: Option<String>,
        /// 1 to 200.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Only running runs none of whose steps changed state for longer than this (`90s`,
        /// `1h`, `1d`).
        #[arg(long, value_name = "DURATION")]
        waiting: Option<String>,
    },
    /// A run with its steps: state, dependencies left, job.
    Show { id: i64 },
    /// Cancel a run: nothing of it starts after; its running attempts are stopped.
    Cancel { id: i64 },
    /// Retry a run's steps: `failed` (the failed, cancelled and skipped; never a completed one),
    /// `failed_and_following` (those and every step after them), `all`.
    Retry {
        id: i64,
        #[arg(long, default_value = "failed")]
        mode: String,
    },
    /// Skip a blocked or ready step of a running run: the steps after it go on; its job is
    /// cancelled.
    Skip { id: i64, step: String },
    /// Run a settled run again from a step, as a new run keeping the completions before it.
    Rerun {
        id: i64,
        #[arg(long)]
        from: String,
    },
    /// Send a running run a signal (the first of a name stands); the steps waiting for it start.
    Signal {
        id: i64,
        name: String,
        /// JSON the steps waiting for it read.
        #[arg(long)]
        payload: Option<String>,
    },
    /// Move a running run's named times (`kickoff_at=2026-12-06T21:00:00Z`): the timers and
    /// deadlines anchored to them move with them (a game's run: its open questions too).
    Move {
        id: i64,
        /// NAME=TIME (RFC 3339), one or more.
        #[arg(required = true)]
        times: Vec<String>,
    },
}

impl WorkflowsAction {
    pub async fn run(self, api: &Api) -> Outcome {
        match self {
            WorkflowsAction::List {
                state,
                limit,
                waiting,
            } => {
                let mut path = format!("/workflows?limit={limit}");
                if let Some(w) = waiting {
                    let ms = crate::engine::job_edit::parse_duration_ms(&w)
                        .map_err(|e| Failure::new(Exit::Usage, format!("--waiting: {e}")))?;
                    path.push_str(&format!("&waiting_ms={ms}"));
                }
                if let Some(s) = state {
                    path.push_str(&format!(
                        "&state={}",
                        form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
                    ));
                }
                let page = api.call(Method::GET, &path, None).await?;
                api.print(&page, |p| {
                    let runs = p["runs"].as_array().cloned().unwrap_or_default();
                    table(
                        &[
                            "id", "name", "key", "state", "steps", "done", "failed", "created",
                        ],
                        runs.iter()
                            .map(|r| {
                                let done = r["completed"].as_i64().unwrap_or(0)
                                    + r["skipped"].as_i64().unwrap_or(0);
                                let failed = r["failed"].as_i64().unwrap_or(0)
                                    + r["cancelled"].as_i64().unwrap_or(0);
                                vec![
                                    cell(&r["id"]),
                                    cell(&r["name"]),
                                    cell(&r["key"]),
                                    cell(&r["state"]),
                                    cell(&r["steps"]),
                                    done.to_string(),
                                    failed.to_string(),
                                    cell(&r["created_at"]),
                                ]
                            })
                            .collect(),
                    );
                });
            }
            WorkflowsAction::Show { id } => {
                let run = api
                    .call(Method::GET, &format!("/workflows/{id}"), None)
                    .await?;
                api.print(&run, print_run);
            }
            WorkflowsAction::Cancel { id } => act(api, id, "cancel", None).await?,
            WorkflowsAction::Retry { id, mode } => {
                act(api, id, "retry", Some(json!({ "mode": mode }))).await?
            }
            WorkflowsAction::Skip { id, step } => {
                act(api, id, "skip", Some(json!({ "step": step }))).await?
            }
            WorkflowsAction::Rerun { id, from } => {
                act(api, id, "rerun", Some(json!({ "from": from }))).await?
            }
            WorkflowsAction::Signal { id, name, payload } => {
                let payload: Value = match payload {
                    Some(p) => serde_json::from_str(&p).map_err(|e| {
                        Failure::new(Exit::Usage, format!("--payload is not JSON: {e}"))
                    })?,
                    None => Value::Null,
                };
                let body = json!({ "name": name, "payload": payload });
                act(api, id, "signals", Some(body)).await?
            }
            WorkflowsAction::Move { id, times } => {
                let mut moved = serde_json::Map::new();
                for t in times {
                    let Some((name, at)) = t.split_once('=') else {
                        return Err(Failure::new(Exit::Usage, format!("{t:?}: NAME=TIME")));
                    };
                    moved.insert(name.to_string(), Value::String(at.to_string()));
                }
                act(api, id, "times", Some(json!({ "times": moved }))).await?
            }
        }
        Ok(())
    }
}

/// `POST /workflows/{id}/{action}` with `body`, the run it answers printed.
async fn act(api: &Api, id: i64, action: &str, body: Option<Value>) -> Outcome {
    let run = api
        .call(
            Method::POST,
            &format!("/workflows/{id}/{action}"),
            body.as_ref(),
        )
        .await?;
    api.print(&run, print_run);
    Ok(())
}

fn print_run(detail: &Value) {
    let run = &detail["run"];
    for key in [
        "id",
        "name",
        "key",
        "state",
        "created_at",
        "finished_at",
        "created_by",
        "rerun_of",
    ] {
        println!("{key:<12} {}", cell(&run[key]));
    }
    if let Some(times) = run["times"].as_object().filter(|t| !t.is_empty()) {
        for (name, at) in times {
            println!("{:<12} {}", name, cell(at));
        }
    }
    let steps = detail["steps"].as_array().cloned().unwrap_or_default();
    table(
        &["step", "state", "kind", "job", "waits", "output"],
        steps
            .iter()
            .map(|s| {
                vec![
                    cell(&s["name"]),
                    cell(&s["state"]),
                    cell(&s["kind"]),
                    cell(&s["job_id"]),
                    cell(&s["waits"]),
                    cell(&s["output"]),
                ]
            })
            .collect(),
    );
    let signals = detail["signals"].as_array().cloned().unwrap_or_default();
    if !signals.is_empty() {
        table(
            &["signal", "source", "received", "payload"],
            signals
                .iter()
                .map(|g| {
                    vec![
                        cell(&g["name"]),
                        cell(&g["source"]),
                        cell(&g["received_at"]),
                        cell(&g["payload"]),
                    ]
                })
                .collect(),
        );
    }
}
