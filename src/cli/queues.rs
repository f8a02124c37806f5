//! `kickoff queues list|pause|resume|limits` and `kickoff questions list|show|settle` against a
//! server (see [`super::remote`]).

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use super::remote::{cell, table, Api, Exit, Failure, Outcome};

#[derive(Debug, Subcommand)]
pub enum QueuesAction {
    /// Every queue: paused, concurrency, limits, jobs per state.
    List,
    /// Pause a queue on every node.
    Pause { name: String },
    /// Resume a paused queue.
    Resume { name: String },
    /// Set a queue's limits; absent flags keep theirs, `none` removes one.
    Limits {
        name: String,
        /// Per-node concurrency (1 to 10,000), or `none`.
        #[arg(long)]
        concurrency: Option<String>,
        /// Attempts started per period across every node (`100/s`, `5000/min`), or `none`.
        #[arg(long)]
        rate: Option<String>,
        /// What the rate counts by (`kind`, `host`, `args.<field>`), or `none`.
        #[arg(long)]
        per: Option<String>,
        /// Attempts executing on all nodes together (1 to 100,000), or `none`.
        #[arg(long = "global-concurrency")]
        global_concurrency: Option<String>,
    },
}

impl QueuesAction {
    pub async fn run(self, api: &Api) -> Outcome {
        let (method, path, body) = match self {
            QueuesAction::List => {
                let queues = api.call(Method::GET, "/queues", None).await?;
                api.print(&queues, |q| {
                    let rows = q.as_array().cloned().unwrap_or_default();
                    table(
                        &[
                            "name",
                            "paused",
                            "concurrency",
                            "rate",
                            "global",
                            "available",
                            "executing",
                            "scheduled",
                        ],
                        rows.iter()
                            .map(|q| {
                                let rate = match (
                                    q["rate_limit"].as_i64(),
                                    q["rate_period_ms"].as_i64(),
                                ) {
                                    (Some(n), Some(ms)) => format!("{n}/{ms}ms"),
                                    _ => "-".into(),
                                };
                                vec![
                                    cell(&q["name"]),
                                    cell(&q["paused"]),
                                    cell(&q["concurrency"]),
                                    rate,
                                    cell(&q["global_concurrency"]),
                                    count(q, "available"),
                                    count(q, "executing"),
                                    count(q, "scheduled"),
                                ]
                            })
                            .collect(),
                    );
                });
                return Ok(());
            }
            QueuesAction::Pause { name } => (Method::POST, format!("/queues/{name}/pause"), None),
            QueuesAction::Resume { name } => (Method::POST, format!("/queues/{name}/resume"), None),
            QueuesAction::Limits {
                name,
                concurrency,
                rate,
                per,
                global_concurrency,
            } => {
                let mut patch = serde_json::Map::new();
                let number = |flag: &str, v: &str| -> Result<Value, Failure> {
                    v.parse::<i64>().map(Value::from).map_err(|_| {
                        Failure::new(Exit::Usage, format!("--{flag}: a number or `none`"))
                    })
                };
                for (key, flag, value, numeric) in [
                    ("concurrency", "concurrency", concurrency, true),
                    ("rate", "rate", rate, false),
                    ("per", "per", per, false),
                    (
                        "global_concurrency",
                        "global-concurrency",
                        global_concurrency,
                        true,
                    ),
                ] {
                    let Some(v) = value else { continue };
                    let v = match (v.as_str(), numeric) {
                        ("none", _) => Value::Null,
                        (text, true) => number(flag, text)?,
                        (text, false) => Value::from(text),
                    };
                    patch.insert(key.into(), v);
                }
                if patch.is_empty() {
                    return Err(Failure::new(Exit::Usage, "nothing to change: give a limit"));
                }
                (
                    Method::PATCH,
                    format!("/queues/{name}"),
                    Some(Value::Object(patch)),
                )
            }
        };
        let answer = api.call(method, &path, body.as_ref()).await?;
        api.print(&answer, |q| {
            println!(
                "{}: {}",
                cell(&q["name"]),
                if q["paused"] == json!(true) {
                    "paused"
                } else {
                    "running"
                }
            );
        });
        Ok(())
    }
}

fn count(q: &Value, state: &str) -> String {
    q["counts"][state].as_i64().unwrap_or(0).to_string()
}

#[derive(Debug, Subcommand)]
pub enum QuestionsAction {
    /// Questions, upcoming first.
    List {
        /// `open`, `locked` or `settled`.
        #[arg(long)]
        status: Option<String>,
        /// 1 to 500.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// A question with its predictions per choice.
    Show { id: i64 },
    /// Give a locked question its correct choice (its predictions are scored).
    Settle {
        id: i64,
        /// The correct choice, one of the question's choices.
        choice: String,
    },
}

impl QuestionsAction {
    pub async fn run(self, api: &Api) -> Outcome {
        match self {
            QuestionsAction::List { status, limit } => {
                let mut path = format!("/questions?limit={limit}");
                if let Some(s) = status {
                    path.push_str(&format!(
                        "&status={}",
                        form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
                    ));
                }
                let list = api.call(Method::GET, &path, None).await?;
                api.print(&list, |l| {
                    let rows = l.as_array().cloned().unwrap_or_default();
                    table(
                        &["id", "status", "game time", "game", "prompt"],
                        rows.iter()
                            .map(|q| {
                                vec![
                                    cell(&q["id"]),
                                    cell(&q["status"]),
                                    cell(&q["game_time"]),
                                    cell(&q["game"]),
                                    cell(&q["prompt"]),
                                ]
                            })
                            .collect(),
                    );
                });
            }
            QuestionsAction::Show { id } => {
                let q = api
                    .call(Method::GET, &format!("/questions/{id}"), None)
                    .await?;
                api.print(&q, print_question);
            }
            QuestionsAction::Settle { id, choice } => {
                let body = json!({ "correct_choice": choice });
                let q = api
                    .call(
                        Method::POST,
                        &format!("/questions/{id}/settle"),
                        Some(&body),
                    )
                    .await?;
                api.print(&q, print_question);
            }
        }
        Ok(())
    }
}

fn print_question(q: &Value) {
    for key in [
        "id",
        "game",
        "prompt",
        "status",
        "game_time",
        "correct_choice",
        "predictions",
    ] {
        println!("{key:<15} {}", cell(&q[key]));
    }
    for c in q["counts"].as_array().into_iter().flatten() {
        println!("  {:<13} {}", cell(&c["choice"]), cell(&c["predictions"]));
    }
}
