//! `kickoff schedule list|show|add|pause|resume|trigger|delete`: schedules from the command line,
//! against the server's database (changes audited as `cli` with the OS user's name), or against
//! a running server's REST API with `--server URL` and a token (audited there as the token's owner).

use clap::Subcommand;
use serde_json::{json, Value};

use super::audited;
use crate::audit::Auditor;
use crate::config::Config;
use crate::engine::schedules::rule::MAX_EVERY;
use crate::engine::schedules::{
    JobTemplate, Missed, Overlap, ScheduleError, ScheduleSpec, ScheduleView, Schedules,
};
use crate::engine::Client;
use crate::server::Database;

#[derive(Debug, Subcommand)]
pub enum ScheduleAction {
    /// Every schedule: name, rule in words, next run, latest run.
    List,
    /// One schedule (JSON) and its next five slots.
    Show { name: String },
    /// Create a schedule.
    Add {
        /// 1 to 100 of A-Z, a-z, 0-9, `_`, `.`, `:`, `-`.
        name: String,
        /// A cron expression (5 fields, or 6 with seconds first); or give --every.
        #[arg(long, conflicts_with = "every")]
        cron: Option<String>,
        /// An interval in seconds (at least 1).
        #[arg(long)]
        every: Option<f64>,
        /// IANA time zone the cron rule reads.
        #[arg(long, default_value = "UTC")]
        zone: String,
        /// The job's kind.
        #[arg(long)]
        kind: String,
        /// The job's args, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        #[arg(long, default_value = "default")]
        queue: String,
        /// allow, skip or cancel_previous.
        #[arg(long, default_value = "allow")]
        overlap: String,
        /// skip, run_once or run_all.
        #[arg(long, default_value = "run_once")]
        missed: String,
        /// Create it paused.
        #[arg(long)]
        paused: bool,
    },
    /// Pause a schedule (its runs ahead are cancelled).
    Pause { name: String },
    /// Resume a schedule from its next slot.
    Resume { name: String },
    /// Run a schedule now, outside its slots.
    Trigger { name: String },
    /// Delete a schedule (its runs ahead are cancelled; its past runs stay).
    Delete { name: String },
}

/// Where the command acts: the database, or a server's API.
pub struct Target {
    /// A running server's base URL (`http://127.0.0.1:3000`); `None`: the database.
    pub server: Option<String>,
    /// The API token for `server`.
    pub token: Option<String>,
    /// The token may go over plain HTTP to another machine (see `remote::client_for`).
    pub insecure: bool,
}

impl ScheduleAction {
    pub async fn run(self, config: &Config, target: Target) -> Result<(), String> {
        match target.server {
            Some(server) => {
                let token = target
                    .token
                    .ok_or("--server needs a token (--token or KICKOFF_TOKEN)")?;
                self.over_http(&server, &token, target.insecure).await
            }
            None => self.on_database(config).await,
        }
    }

    fn spec(&self) -> Result<Option<ScheduleSpec>, String> {
        let ScheduleAction::Add {
            name,
            cron,
            every,
            zone,
            kind,
            args,
            queue,
            overlap,
            missed,
            paused,
        } = self
        else {
            return Ok(None);
        };
        let args: Value =
            serde_json::from_str(args).map_err(|e| format!("--args: not JSON: {e}"))?;
        let mut job = JobTemplate::new(kind.clone(), args);
        job.queue = queue.clone();
        let mut spec = match (cron, every) {
            (Some(c), None) => ScheduleSpec::cron(name.clone(), c.clone(), job),
            (None, Some(s)) => {
                // Checked before the conversion, which panics on a value past `Duration`'s range
                // (`--every 1e20`).
                let max = MAX_EVERY.as_secs_f64();
                if !(s.is_finite() && (1.0..=max).contains(s)) {
                    return Err(format!("--every: 1 to {max} seconds"));
                }
                ScheduleSpec::every(name.clone(), std::time::Duration::from_secs_f64(*s), job)
            }
            _ => return Err("give --cron or --every".into()),
        };
        spec.time_zone = zone.clone();
        spec.overlap =
            Overlap::parse(overlap).ok_or("--overlap: allow, skip or cancel_previous")?;
        spec.missed = Missed::parse(missed).ok_or("--missed: skip, run_once or run_all")?;
        spec.paused = *paused;
        Ok(Some(spec))
    }

    async fn on_database(self, config: &Config) -> Result<(), String> {
        let spec = self.spec()?;
        let db = Database::open_beside_server(config)
            .await
            .map_err(|e| e.to_string())?;
        let client = Client::new(
            db.pool.clone(),
            std::sync::Arc::new(crate::workers::builtin(config.allowed_hosts())),
        );
        let schedules = Schedules::new(client);
        let auditor = Auditor::new(db.pool.clone());
        let done = self.act(&schedules, &auditor, spec).await;
        db.close().await;
        done
    }

    async fn act(
        self,
        s: &Schedules,
        auditor: &Auditor,
        spec: Option<ScheduleSpec>,
    ) -> Result<(), String> {
        let entry = |action: &str, name: &str| {
            audited::entry(&format!("schedule.{action}"), format!("schedule {name}"))
        };
        let fail = |e: ScheduleError| e.to_string();
        let printed = match self {
            ScheduleAction::List => {
                print_list(&s.list().await.map_err(fail)?);
                return Ok(());
            }
            ScheduleAction::Show { name } => {
                let (view, next) = s.upcoming(&name, 5, None).await.map_err(fail)?;
                json!({ "schedule": view, "next": next })
            }
            ScheduleAction::Add { name, .. } => {
                let spec = spec.expect("add has a spec");
                audited::run(
                    auditor,
                    || entry("create", &name),
                    async |conn| s.create_with(conn, &spec, None, "api").await,
                )
                .await?;
                json!(s.get(&name).await.map_err(fail)?)
            }
            ScheduleAction::Pause { name } => {
                audited::run(
                    auditor,
                    || entry("pause", &name),
                    async |conn| s.set_paused_with(conn, &name, true).await,
                )
                .await?;
                json!(s.get(&name).await.map_err(fail)?)
            }
            ScheduleAction::Resume { name } => {
                audited::run(
                    auditor,
                    || entry("resume", &name),
                    async |conn| s.set_paused_with(conn, &name, false).await,
                )
                .await?;
                json!(s.get(&name).await.map_err(fail)?)
            }
            ScheduleAction::Trigger { name } => {
                let job = audited::run(
                    auditor,
                    || entry("trigger", &name),
                    async |conn| s.trigger_with(conn, &name, None).await,
                )
                .await?;
                json!(job)
            }
            ScheduleAction::Delete { name } => {
                audited::run(
                    auditor,
                    || entry("delete", &name),
                    async |conn| s.delete_with(conn, &name).await,
                )
                .await?;
                json!({ "deleted": name })
            }
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&printed).unwrap_or_default()
        );
        Ok(())
    }

    async fn over_http(self, server: &str, token: &str, insecure: bool) -> Result<(), String> {
        let base = format!("{}/api/v1/schedules", server.trim_end_matches('/'));
        let (http, _) = super::remote::client_for(server, insecure).map_err(|f| f.message)?;
        let spec = self.spec()?;
        let (method, url, body) = match &self {
            ScheduleAction::List => (reqwest::Method::GET, base.clone(), None),
            ScheduleAction::Show { name } => (reqwest::Method::GET, format!("{base}/{name}"), None),
            ScheduleAction::Add { .. } => {
                (reqwest::Method::POST, base.clone(), spec.map(|s| json!(s)))
            }
            ScheduleAction::Pause { name } => {
                (reqwest::Method::POST, format!("{base}/{name}/pause"), None)
            }
            ScheduleAction::Resume { name } => {
                (reqwest::Method::POST, format!("{base}/{name}/resume"), None)
            }
            ScheduleAction::Trigger { name } => (
                reqwest::Method::POST,
                format!("{base}/{name}/trigger"),
                None,
            ),
            ScheduleAction::Delete { name } => {
                (reqwest::Method::DELETE, format!("{base}/{name}"), None)
            }
        };
        let mut req = http.request(method, &url).bearer_auth(token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let res = req.send().await.map_err(|e| format!("{url}: {e}"))?;
        let status = res.status();
        let text = res.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(format!("{status}: {text}"));
        }
        if matches!(self, ScheduleAction::List) {
            let views: Vec<ScheduleView> =
                serde_json::from_str(&text).map_err(|e| format!("the answer: {e}"))?;
            print_list(&views);
        } else if !text.is_empty() {
            let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            println!(
                "{}",
                serde_json::to_string_pretty(&value).unwrap_or_default()
            );
        } else if let ScheduleAction::Delete { name } = &self {
            println!("{}", json!({ "deleted": name }));
        }
        Ok(())
    }
}

fn print_list(views: &[ScheduleView]) {
    println!(
        "{:<28}  {:<8}  {:<25}  {:<25}  rule",
        "name", "status", "next run (UTC)", "last run"
    );
    for v in views {
        let next = v
            .next_run_at
            .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
            .unwrap_or_else(|| "-".into());
        let last = v
            .last_run
            .as_ref()
            .map(|l| format!("#{} {}", l.job_id, l.state))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<28}  {:<8}  {:<25}  {:<25}  {}",
            v.name,
            if v.paused { "paused" } else { "active" },
            next,
            last,
            v.rule_text
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add_every(every: f64) -> ScheduleAction {
        ScheduleAction::Add {
            name: "n".into(),
            cron: None,
            every: Some(every),
            zone: "UTC".into(),
            kind: "noop".into(),
            args: "{}".into(),
            queue: "default".into(),
            overlap: "allow".into(),
            missed: "run_once".into(),
            paused: false,
        }
    }

    #[test]
    fn an_interval_out_of_range_is_refused_not_a_panic() {
        for every in [1e20, f64::INFINITY, f64::NAN, 0.5, -3.0, 34_560_001.0] {
            let refused = add_every(every).spec();
            assert!(
                refused.as_ref().is_err_and(|e| e.starts_with("--every")),
                "{every}: {refused:?}"
            );
        }
        assert!(add_every(1.5).spec().is_ok());
    }
}
