//! `kickoff jobs list|show|retry|cancel|run-now|delete|edit|shift|export` against a server (see
//! [`super::remote`]).

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand, ValueEnum};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::remote::{cell, confirm, table, Api, Exit, Failure, Outcome};
use crate::engine::job_edit::parse_duration_ms;
use crate::engine::job_filter::{split_tags, FilterFields};
use crate::engine::JobFilter;

/// The filters of a job list, as `GET /api/v1/jobs` and the dashboard read them.
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// One state or several separated by commas (`retryable,discarded`).
    #[arg(long)]
    pub state: Option<String>,
    #[arg(long)]
    pub queue: Option<String>,
    #[arg(long)]
    pub kind: Option<String>,
    /// Args containing this: `game_id=42,team=lions` or a JSON object.
    #[arg(long)]
    pub args: Option<String>,
    /// Carrying every one of these tags, separated by commas.
    #[arg(long)]
    pub tags: Option<String>,
    /// Text in the last error (case-insensitive).
    #[arg(long)]
    pub error: Option<String>,
    /// Due at or after this instant (RFC 3339).
    #[arg(long)]
    pub from: Option<DateTime<Utc>>,
    /// Due before this instant (RFC 3339).
    #[arg(long)]
    pub to: Option<DateTime<Utc>>,
    /// With an attempt that started more than this many ms late.
    #[arg(long = "late-by-ms")]
    pub late_by_ms: Option<f64>,
}

impl FilterArgs {
    /// The query string of `GET /api/v1/jobs` (and its count and export).
    fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        let text = [
            ("state", &self.state),
            ("queue", &self.queue),
            ("kind", &self.kind),
            ("args", &self.args),
            ("tags", &self.tags),
            ("error", &self.error),
        ];
        for (k, v) in text {
            if let Some(v) = v {
                q.push((k, v.clone()));
            }
        }
        if let Some(t) = self.from {
            q.push(("scheduled_from", t.to_rfc3339()));
        }
        if let Some(t) = self.to {
            q.push(("scheduled_to", t.to_rfc3339()));
        }
        if let Some(ms) = self.late_by_ms {
            q.push(("late_by_ms", ms.to_string()));
        }
        q
    }

    /// The filter as a bulk body's `filter` (JSON), read by the same code as the query.
    fn bulk(&self, max_id: i64) -> Result<Value, Failure> {
        let f: JobFilter = FilterFields {
            states: self.state.as_deref(),
            queue: self.queue.as_deref(),
            kind: self.kind.as_deref(),
            args: self.args.as_deref(),
            tags: self.tags.as_deref(),
            error: self.error.as_deref(),
            late_by_ms: self.late_by_ms,
        }
        .into_filter()
        .map_err(|e| Failure::new(Exit::Invalid, e))?;
        let mut body = json!({ "max_id": max_id });
        if !f.states.is_empty() {
            body["states"] = json!(f.states);
        }
        for (k, v) in [
            ("queue", f.queue.map(Value::from)),
            ("kind", f.kind.map(Value::from)),
            ("args", f.args),
            ("error", f.error.map(Value::from)),
            ("late_by_ms", f.late_by_ms.map(Value::from)),
            ("scheduled_from", self.from.map(|t| json!(t))),
            ("scheduled_to", self.to.map(|t| json!(t))),
        ] {
            if let Some(v) = v {
                body[k] = v;
            }
        }
        if !f.tags.is_empty() {
            body["tags"] = json!(f.tags);
        }
        Ok(body)
    }

    fn is_empty(&self) -> bool {
        self.query().is_empty()
    }
}

fn query_string(pairs: &[(&str, String)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

/// What an edit changes (the fields of `PATCH /api/v1/jobs/{id}`).
#[derive(Debug, Clone, Default, Args)]
pub struct EditArgs {
    /// The new args, whole (a JSON object).
    #[arg(long = "set-args", id = "set_args", conflicts_with = "args_patch")]
    pub args: Option<String>,
    /// A JSON merge patch of the args (`{"url": "https://new"}`; `null` removes a key).
    #[arg(long = "args-patch", id = "args_patch")]
    pub args_patch: Option<String>,
    /// 0 (highest) to 9.
    #[arg(long)]
    pub priority: Option<i16>,
    /// Move it to this queue.
    #[arg(long = "set-queue", id = "set_queue")]
    pub queue: Option<String>,
    #[arg(long = "max-attempts")]
    pub max_attempts: Option<i32>,
    /// The new tags, all of them, separated by commas (`--set-tags ""`: none).
    #[arg(long = "set-tags", id = "set_tags")]
    pub tags: Option<String>,
    /// A JSON merge patch of the meta.
    #[arg(long = "meta-patch")]
    pub meta_patch: Option<String>,
}

impl EditArgs {
    fn body(&self) -> Result<Value, Failure> {
        let object = |flag: &str, text: &Option<String>| -> Result<Option<Value>, Failure> {
            text.as_deref()
                .map(|t| {
                    serde_json::from_str::<Value>(t)
                        .map_err(|e| Failure::new(Exit::Usage, format!("{flag}: not JSON ({e})")))
                })
                .transpose()
        };
        let mut edit = serde_json::Map::new();
        let fields = [
            ("args", object("--set-args", &self.args)?),
            ("args_patch", object("--args-patch", &self.args_patch)?),
            ("priority", self.priority.map(Value::from)),
            ("queue", self.queue.clone().map(Value::from)),
            ("max_attempts", self.max_attempts.map(Value::from)),
            ("tags", self.tags.as_deref().map(|t| json!(split_tags(t)))),
            ("meta_patch", object("--meta-patch", &self.meta_patch)?),
        ];
        for (k, v) in fields {
            if let Some(v) = v {
                edit.insert(k.into(), v);
            }
        }
        if edit.is_empty() {
            return Err(Failure::new(
                Exit::Usage,
                "nothing to change: give --priority, --set-queue, --args-patch, ...",
            ));
        }
        Ok(Value::Object(edit))
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    Csv,
    Jsonl,
}

#[derive(Debug, Subcommand)]
pub enum JobsAction {
    /// Jobs matching the filters, newest first: id, state, kind, queue, due, attempts, last error.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// 1 to 500.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Jobs with a smaller id (the next page: the last id listed).
        #[arg(long)]
        before: Option<i64>,
    },
    /// One job, with its errors.
    Show { id: i64 },
    /// Run failed or finished jobs again now (several ids: in one transaction).
    Retry {
        #[arg(required = true)]
        ids: Vec<i64>,
    },
    /// Cancel jobs (an executing attempt is stopped).
    Cancel {
        #[arg(required = true)]
        ids: Vec<i64>,
    },
    /// Make waiting jobs due now.
    RunNow {
        #[arg(required = true)]
        ids: Vec<i64>,
    },
    /// Delete jobs that are not executing.
    Delete {
        #[arg(required = true)]
        ids: Vec<i64>,
    },
    /// Edit a waiting job (give its id), or every waiting job matching the filters (the count is
    /// confirmed first; jobs inserted after it are left alone).
    Edit {
        id: Option<i64>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        edit: EditArgs,
        /// Do not ask before editing every matching job.
        #[arg(long)]
        yes: bool,
    },
    /// Move every waiting job matching the filters by a duration (`--by 2h`, `--by -30m`) or
    /// the earliest of them to a time (`--to`), the count confirmed first; a game's questions
    /// move with their lock jobs (`--game`).
    Shift {
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(
            long,
            conflicts_with = "at",
            required_unless_present = "at",
            allow_hyphen_values = true
        )]
        by: Option<String>,
        /// RFC 3339: the earliest matching job moves there, the others keep their distance.
        #[arg(long = "to-time", id = "at")]
        at: Option<DateTime<Utc>>,
        /// The open questions of this game (its name exactly) move too.
        #[arg(long)]
        game: Option<String>,
        #[arg(long)]
        yes: bool,
    },
    /// Jobs matching the filters as CSV or JSON lines, streamed to standard output or a file.
    Export {
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(long, value_enum, default_value = "csv")]
        format: ExportFormat,
        /// 1 to 1,000,000 (the server's default: 100,000).
        #[arg(long = "max-rows")]
        max_rows: Option<i64>,
        /// Write here instead of standard output.
        #[arg(long, short)]
        output: Option<std::path::PathBuf>,
    },
}

impl JobsAction {
    pub async fn run(self, api: &Api) -> Outcome {
        match self {
            JobsAction::List {
                filter,
                limit,
                before,
            } => {
                let mut q = filter.query();
                q.push(("limit", limit.to_string()));
                if let Some(b) = before {
                    q.push(("before", b.to_string()));
                }
                let page = api
                    .call(Method::GET, &format!("/jobs?{}", query_string(&q)), None)
                    .await?;
                api.print(&page, |page| {
                    let rows = page["jobs"].as_array().cloned().unwrap_or_default();
                    table(&JOB_COLUMNS, rows.iter().map(job_row).collect());
                    if let Some(next) = page["next_before"].as_i64() {
                        eprintln!("more: --before {next}");
                    }
                });
                Ok(())
            }
            JobsAction::Show { id } => {
                let job = api.call(Method::GET, &format!("/jobs/{id}"), None).await?;
                api.print(&job, |j| {
                    for key in [
                        "id",
                        "state",
                        "kind",
                        "queue",
                        "priority",
                        "attempt",
                        "max_attempts",
                        "scheduled_at",
                        "attempted_at",
                        "finalized_at",
                        "tags",
                        "created_by",
                    ] {
                        println!("{key:<13} {}", cell(&j[key]));
                    }
                    println!(
                        "{:<13} {}",
                        "args",
                        serde_json::to_string_pretty(&j["args"]).unwrap_or_default()
                    );
                    for e in j["errors"].as_array().into_iter().flatten() {
                        println!("error #{}     {}", cell(&e["attempt"]), cell(&e["message"]));
                    }
                });
                Ok(())
            }
            JobsAction::Retry { ids } => act(api, "retry", "retry", &ids).await,
            JobsAction::Cancel { ids } => act(api, "cancel", "cancel", &ids).await,
            JobsAction::RunNow { ids } => act(api, "run-now", "run_now", &ids).await,
            JobsAction::Delete { ids } => act(api, "", "delete", &ids).await,
            JobsAction::Edit {
                id,
                filter,
                edit,
                yes,
            } => {
                let body = edit.body()?;
                match id {
                    Some(id) => {
                        if !filter.is_empty() {
                            return Err(Failure::new(
                                Exit::Usage,
                                "give a job id or filters, not both",
                            ));
                        }
                        let job = api
                            .call(Method::PATCH, &format!("/jobs/{id}"), Some(&body))
                            .await?;
                        api.print(&job, |j| table(&JOB_COLUMNS, vec![job_row(j)]));
                        Ok(())
                    }
                    None => {
                        let max_id = confirmed_count(api, &filter, "edit", yes).await?;
                        let Some(max_id) = max_id else { return Ok(()) };
                        let req = json!({"filter": filter.bulk(max_id)?, "edit": body});
                        let report = api.call(Method::POST, "/jobs/edit", Some(&req)).await?;
                        api.print(&report, print_report);
                        Ok(())
                    }
                }
            }
            JobsAction::Shift {
                filter,
                by,
                at,
                game,
                yes,
            } => {
                let mut req = json!({});
                match (by, at) {
                    (Some(by), None) => {
                        req["by_ms"] =
                            json!(parse_duration_ms(&by).map_err(|e| Failure::new(Exit::Usage, e))?)
                    }
                    (None, Some(at)) => req["to"] = json!(at),
                    _ => return Err(Failure::new(Exit::Usage, "give --by or --to-time")),
                }
                // The game's questions move whenever a game is named, even when no job matches
                // (the snapshot is then no job at all: `max_id` 0).
                let max_id = match (confirmed_count(api, &filter, "move", yes).await?, &game) {
                    (Some(max_id), _) => max_id,
                    (None, Some(game)) => {
                        confirm(&format!("move the open questions of {game}?"), yes)?;
                        0
                    }
                    (None, None) => return Ok(()),
                };
                if let Some(game) = game {
                    req["game"] = json!(game);
                }
                req["filter"] = filter.bulk(max_id)?;
                let report = api.call(Method::POST, "/jobs/shift", Some(&req)).await?;
                api.print(&report, |r| {
                    print_report(&r["jobs"]);
                    println!("by {} ms", cell(&r["by_ms"]));
                    let questions = r["questions"].as_array().cloned().unwrap_or_default();
                    if !questions.is_empty() {
                        println!(
                            "questions moved: {}",
                            questions.iter().map(cell).collect::<Vec<_>>().join(", ")
                        );
                    }
                });
                Ok(())
            }
            JobsAction::Export {
                filter,
                format,
                max_rows,
                output,
            } => {
                let mut q = filter.query();
                q.push((
                    "format",
                    match format {
                        ExportFormat::Csv => "csv",
                        ExportFormat::Jsonl => "jsonl",
                    }
                    .into(),
                ));
                if let Some(n) = max_rows {
                    q.push(("max_rows", n.to_string()));
                }
                let mut res = api
                    .send(
                        Method::GET,
                        &format!("/jobs/export?{}", query_string(&q)),
                        None,
                    )
                    .await?;
                let limit = res
                    .headers()
                    .get("kickoff-max-rows")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("?")
                    .to_string();
                let mut out: Box<dyn tokio::io::AsyncWrite + Unpin> = match &output {
                    Some(path) => Box::new(tokio::fs::File::create(path).await.map_err(|e| {
                        Failure::new(Exit::Failed, format!("{}: {e}", path.display()))
                    })?),
                    None => Box::new(tokio::io::stdout()),
                };
                let (mut lines, mut ended_with_newline) = (0u64, true);
                let failed = |e: String| Failure::new(Exit::Failed, e);
                while let Some(chunk) = res.chunk().await.map_err(|e| {
                    Failure::new(Exit::Unavailable, format!("the export stopped: {e}"))
                })? {
                    lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
                    ended_with_newline = chunk.last() == Some(&b'\n');
                    out.write_all(&chunk)
                        .await
                        .map_err(|e| failed(e.to_string()))?;
                }
                out.flush().await.map_err(|e| failed(e.to_string()))?;
                if !ended_with_newline {
                    return Err(Failure::new(Exit::Unavailable, "the export ended mid-row"));
                }
                let rows = match format {
                    ExportFormat::Csv => lines.saturating_sub(1),
                    ExportFormat::Jsonl => lines,
                };
                eprintln!("{rows} jobs exported (at most {limit})");
                Ok(())
            }
        }
    }
}

const JOB_COLUMNS: [&str; 7] = [
    "id",
    "state",
    "kind",
    "queue",
    "due",
    "attempt",
    "last error",
];

fn job_row(j: &Value) -> Vec<String> {
    let last_error = j["errors"]
        .as_array()
        .and_then(|e| e.last())
        .map(|e| cell(&e["message"]))
        .unwrap_or_default();
    let mut last_error: String = last_error.chars().take(60).collect();
    if last_error.contains('\n') {
        last_error = last_error.lines().next().unwrap_or_default().to_string();
    }
    vec![
        cell(&j["id"]),
        cell(&j["state"]),
        cell(&j["kind"]),
        cell(&j["queue"]),
        cell(&j["scheduled_at"]),
        format!("{}/{}", cell(&j["attempt"]), cell(&j["max_attempts"])),
        last_error,
    ]
}

fn print_report(r: &Value) {
    println!(
        "changed: {}  skipped: {}",
        cell(&r["changed"]),
        cell(&r["skipped"])
    );
    if r["refused"].as_u64().is_some_and(|n| n > 0) {
        println!(
            "refused: {} (first: {})",
            cell(&r["refused"]),
            cell(&r["refusal"])
        );
    }
}

/// One job by its endpoint, or several in one bulk call.
async fn act(api: &Api, path: &str, bulk: &str, ids: &[i64]) -> Outcome {
    if let [id] = ids {
        let (method, url) = if path.is_empty() {
            (Method::DELETE, format!("/jobs/{id}"))
        } else {
            (Method::POST, format!("/jobs/{id}/{path}"))
        };
        let job = api.call(method, &url, None).await?;
        if job.is_null() {
            api.print(&json!({"deleted": id}), |_| println!("deleted {id}"));
        } else {
            api.print(&job, |j| table(&JOB_COLUMNS, vec![job_row(j)]));
        }
        return Ok(());
    }
    let body = json!({"action": bulk, "ids": ids});
    let report = api.call(Method::POST, "/jobs/bulk", Some(&body)).await?;
    api.print(&report, print_report);
    Ok(())
}

/// Counts what the filters match, asks to go on (unless `yes`), and answers the snapshot to act
/// on; `None` when nothing matches.
async fn confirmed_count(
    api: &Api,
    filter: &FilterArgs,
    verb: &str,
    yes: bool,
) -> Result<Option<i64>, Failure> {
    if filter.is_empty() {
        return Err(Failure::new(
            Exit::Usage,
            format!("give filters (--args, --tags, --queue, ...) to {verb} every job they match"),
        ));
    }
    let count = api
        .call(
            Method::GET,
            &format!("/jobs/count?{}", query_string(&filter.query())),
            None,
        )
        .await?;
    let Some(max_id) = count["max_id"].as_i64() else {
        eprintln!("no job matches");
        return Ok(None);
    };
    let n = cell(&count["count"]);
    let more = if count["capped"] == json!(true) {
        " or more"
    } else {
        ""
    };
    confirm(
        &format!("{verb} the waiting jobs of the {n}{more} matching jobs (newest id {max_id})?"),
        yes,
    )?;
    Ok(Some(max_id))
}
