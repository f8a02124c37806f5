//! The server's side of the dashboard's port (`kickoff_app::console::Console`): turns the engine's
//! and the questions' answers into the UI's DTOs, and the operator's input into engine calls.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use kickoff_app::console::accounts::{
    AccountPage, AccountsConsole, LoginInfo, NewToken, TokenRow, UserRow, UsersPage,
};
use kickoff_app::console::audit::{AuditConsole, AuditPage, AuditQuery, AuditRow};
use kickoff_app::console::jobs::{
    AttemptRow, BulkCount, BulkDone, JobChoices, JobDetail, JobPage, JobQuery, JobRow, JobsConsole,
    NewJobInput, TimersPage, BULK_COUNT_CAP,
};
use kickoff_app::console::overview::{MinutePoint, NodeInfo, Overview, OverviewConsole};
use kickoff_app::console::questions::{
    QuestionDetail, QuestionRow, QuestionsConsole, QuestionsPage,
};
use kickoff_app::console::queues::{QueueInfo, QueuesConsole};
use kickoff_app::console::Refusal;
use kickoff_app::local_time::instant_ms;
use leptos::prelude::use_context;
use serde_json::Value;

use crate::accounts::{AccountError, Accounts, ApiToken, LoginError, Role, SetupError, TokenScope};
use crate::audit::{AuditEntry, AuditFilter, Auditor};
use crate::engine::store::jobs::{db_now, JobFilter};
use crate::engine::{
    BulkAction, Client, ClientError, Job, JobId, JobState, NewJob, OnConflict, Schedule,
};
use crate::http::session::{self, Operator};
use crate::questions::{QuestionError, QuestionService};

/// How many rows a dashboard list shows.
const LIST_ROWS: i64 = 100;
/// How many upcoming timers the timers page shows.
const TIMER_ROWS: i64 = 200;
/// How many new jobs the "N new" note counts.
const NEWER_CAP: i64 = 100;
/// How long an args preview in a list is.
const ARGS_PREVIEW_CHARS: usize = 80;

/// An operator's action as the audit log names it.
struct Act {
    /// `job.cancel`, `jobs.bulk_retry`, `queue.pause`, ...
    action: String,
    /// What it acts on: `job 42`, `queue default`, ...
    target: Option<String>,
    /// A bulk action's filter.
    filter: Option<Value>,
}

pub struct ServerConsole {
    client: Client,
    questions: QuestionService,
    accounts: Accounts,
    auditor: Auditor,
}

/// The request being served (leptos_axum provides it to server functions and rendered pages).
fn request() -> Option<axum::http::request::Parts> {
    use_context::<axum::http::request::Parts>()
}

/// The signed-in operator of the request, if their role is at least `need`: 401 without one (the
/// session guard normally answered already), 403 for a role below.
fn operator(need: Role) -> Result<Operator, Refusal> {
    let op = request()
        .and_then(|p| p.extensions.get::<Operator>().cloned())
        .ok_or_else(|| Refusal {
            status: 401,
            message: "sign in first".into(),
        })?;
    if !op.may(need) {
        return Err(Refusal {
            status: 403,
            message: format!(
                "signed in as a {}: only an {} or admin may do this",
                op.user.role.as_str(),
                need.as_str()
            ),
        });
    }
    Ok(op)
}

impl ServerConsole {
    pub fn new(
        client: Client,
        questions: QuestionService,
        accounts: Accounts,
        auditor: Auditor,
    ) -> Self {
        ServerConsole {
            client,
            questions,
            accounts,
            auditor,
        }
    }

    /// Runs an operator's action (after checking the role) and records it, with its result and
    /// (for bulk actions) how many jobs it changed, in the audit log.
    async fn act<T>(
        &self,
        act: Act,
        count: fn(&T) -> Option<i64>,
        run: impl std::future::Future<Output = Result<T, Refusal>>,
    ) -> Result<T, Refusal> {
        self.act_as(Role::Operator, act, count, run).await
    }

    /// [`Self::act`] for actions that need another role than operator (admins' user management,
    /// anyone's own tokens and password).
    async fn act_as<T>(
        &self,
        need: Role,
        act: Act,
        count: fn(&T) -> Option<i64>,
        run: impl std::future::Future<Output = Result<T, Refusal>>,
    ) -> Result<T, Refusal> {
        let op = operator(need)?;
        let result = run.await;
        let changed = result.as_ref().ok().and_then(count);
        self.record(&op, &act.action, act.target, act.filter, changed, &result)
            .await;
        result
    }

    /// Records what an operator did (or tried) in the audit log.
    async fn record<T>(
        &self,
        op: &Operator,
        action: &str,
        target: Option<String>,
        filter: Option<Value>,
        count: Option<i64>,
        result: &Result<T, Refusal>,
    ) {
        self.auditor
            .record(AuditEntry {
                actor: op.user.name.clone(),
                role: op.user.role.as_str().to_string(),
                action: action.to_string(),
                target,
                filter,
                count,
                address: Some(op.address),
                result: result.as_ref().map(|_| ()).map_err(|r| r.message.clone()),
            })
            .await;
    }

    /// Signs `user` in on `session` (a new session id) and records it.
    async fn start_session(
        &self,
        session: &tower_sessions::Session,
        user: &crate::accounts::User,
        address: std::net::IpAddr,
    ) -> Result<(), Refusal> {
        session::sign_in(session, user).await.map_err(unavailable)?;
        tracing::info!(user = %user.name, %address, "signed in");
        self.auditor
            .record(AuditEntry {
                actor: user.name.clone(),
                role: user.role.as_str().to_string(),
                action: "session.sign_in".into(),
                target: None,
                filter: None,
                count: None,
                address: Some(address),
                result: Ok(()),
            })
            .await;
        Ok(())
    }

    async fn now_ms(&self) -> Result<i64, Refusal> {
        db_now(self.client.pool())
            .await
            .map(|t| t.timestamp_millis())
            .map_err(unavailable)
    }
}

/// The session and client address of a request that starts a session (signing in, the setup
/// link). It carries no session token yet, so it must come from this site: 403 with `refused`
/// otherwise.
fn session_starter(refused: &str) -> Result<(tower_sessions::Session, std::net::IpAddr), Refusal> {
    let parts = request().ok_or_else(Refusal::unavailable)?;
    if !session::same_origin(&parts) {
        return Err(Refusal {
            status: 403,
            message: refused.into(),
        });
    }
    let session = parts
        .extensions
        .get::<tower_sessions::Session>()
        .cloned()
        .ok_or_else(Refusal::unavailable)?;
    Ok((session, session::client_address(&parts.extensions)))
}

/// Logs the cause and gives the browser a message without internals.
fn unavailable(e: impl std::fmt::Display) -> Refusal {
    tracing::error!(error = %e, "dashboard query failed");
    Refusal::unavailable()
}

/// An operator's request refused: say why (a conflict, a missing job, bad input are the operator's
/// to know) with the matching status; a database failure is logged and summarised.
fn refused(e: ClientError) -> Refusal {
    match e {
        ClientError::Database(e) => unavailable(e),
        ClientError::NotFound(_) => Refusal::not_found(e.to_string()),
        ClientError::Conflict(_) => Refusal::conflict(e.to_string()),
        ClientError::Invalid { .. } | ClientError::UnknownKind(_) => {
            Refusal::invalid(e.to_string())
        }
    }
}

/// A refused sign-in (or password check): 401 for wrong credentials, 429 with `Retry-After` for a
/// lock.
fn login_refused(e: LoginError) -> Refusal {
    match e {
        LoginError::BadCredentials => Refusal {
            status: 401,
            message: "wrong name or password".into(),
        },
        LoginError::Locked { retry_after_secs } => {
            if let Some(res) = use_context::<leptos_axum::ResponseOptions>() {
                res.insert_header(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from(retry_after_secs),
                );
            }
            Refusal {
                status: 429,
                message: format!(
                    "too many failed sign-ins: try again in {} min",
                    retry_after_secs.div_ceil(60).max(1)
                ),
            }
        }
        LoginError::Invalid(message) => Refusal::invalid(message),
        LoginError::Database(e) => unavailable(e),
    }
}

/// An account change refused: the rule broken (422), a name taken or the last admin (409), a
/// missing user or token (404).
fn account_refused(e: AccountError) -> Refusal {
    match e {
        AccountError::Database(e) => unavailable(e),
        AccountError::NotFound(_) => Refusal::not_found(e.to_string()),
        AccountError::NameTaken(_) | AccountError::Conflict(_) => Refusal::conflict(e.to_string()),
        AccountError::Invalid { .. } => Refusal::invalid(e.to_string()),
    }
}

/// A refused setup link: one 404 for a missing, wrong or spent code and a database with users
/// (worded like any unknown page), the sign-in lock, or the name and password rules.
fn setup_refused(e: SetupError) -> Refusal {
    match e {
        SetupError::NotFound => Refusal::not_found("Page not found."),
        SetupError::Locked { retry_after_secs } => {
            login_refused(LoginError::Locked { retry_after_secs })
        }
        SetupError::Account(e) => account_refused(e),
    }
}

fn token_row(t: &ApiToken) -> TokenRow {
    TokenRow {
        id: t.id,
        owner: t.user_name.clone(),
        name: t.name.clone(),
        scope: t.scope.as_str().to_string(),
        prefix: t.prefix.clone(),
        created_ms: ms(t.created_at),
        last_used_ms: t.last_used_at.map(ms),
        revoked_ms: t.revoked_at.map(ms),
    }
}

fn question_refused(e: QuestionError) -> Refusal {
    match e {
        QuestionError::Database(e) => unavailable(e),
        QuestionError::Client(e) => refused(e),
        QuestionError::NotFound(_) => Refusal::not_found(e.to_string()),
        QuestionError::Conflict(_) | QuestionError::PredictionsClosed => {
            Refusal::conflict(e.to_string())
        }
        QuestionError::Invalid { .. } | QuestionError::UnknownChoice(_) => {
            Refusal::invalid(e.to_string())
        }
    }
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_ms(field: &str, ms: i64) -> Result<DateTime<Utc>, String> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| format!("{field}: out of range"))
}

fn job_row(j: &Job) -> JobRow {
    let mut preview = j.args.to_string();
    if preview.chars().count() > ARGS_PREVIEW_CHARS {
        preview = preview.chars().take(ARGS_PREVIEW_CHARS).collect::<String>() + "…";
    }
    JobRow {
        id: j.id.0,
        kind: j.kind.clone(),
        queue: j.queue.clone(),
        state: j.state.as_str().to_string(),
        priority: j.priority,
        attempt: j.attempt,
        max_attempts: j.max_attempts,
        scheduled_ms: ms(j.scheduled_at),
        finalized_ms: j.finalized_at.map(ms),
        last_error: j.errors.last().map(|e| e.message.clone()),
        args_preview: preview,
    }
}

/// The timeline of a job's attempts: every recorded failure, then the latest attempt's outcome.
fn attempts(j: &Job) -> Vec<AttemptRow> {
    let mut rows: Vec<AttemptRow> = j
        .errors
        .iter()
        .map(|e| AttemptRow {
            attempt: e.attempt,
            started_ms: e.started_at.map(ms),
            ended_ms: Some(ms(e.at)),
            node: e.node.clone(),
            outcome: "failed".into(),
            error: Some(e.message.clone()),
        })
        .collect();
    let latest_recorded = j.errors.iter().any(|e| e.attempt == j.attempt);
    if j.attempt > 0 && !latest_recorded {
        let outcome = match j.state {
            JobState::Executing => "running",
            JobState::Completed => "completed",
            JobState::Cancelled => "cancelled",
            JobState::Discarded => "discarded",
            // Handed back at a graceful stop, or snoozed by its handler: it runs again.
            _ => "interrupted",
        };
        let ended = match j.state {
            JobState::Executing => None,
            _ => j.finalized_at.map(ms),
        };
        rows.push(AttemptRow {
            attempt: j.attempt,
            started_ms: j.attempted_at.map(ms),
            ended_ms: ended,
            node: j.attempted_by.clone(),
            outcome: outcome.into(),
            error: None,
        });
    }
    rows.sort_by_key(|r| (r.attempt, r.ended_ms));
    rows
}

/// `key=value, key2=value2` (values read as JSON when they parse, as text otherwise) or a JSON
/// object: the object the listed jobs' args must contain.
pub fn parse_args_filter(text: &str) -> Result<Value, String> {
    let text = text.trim();
    if text.starts_with('{') {
        return match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err("args: not a JSON object".into()),
        };
    }
    let mut object = serde_json::Map::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("args: `{pair}` is not key=value (or give a JSON object)"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(format!("args: `{pair}` has no key"));
        }
        let value = serde_json::from_str::<Value>(v).unwrap_or_else(|_| Value::from(v));
        object.insert(k.to_string(), value);
    }
    Ok(Value::Object(object))
}

/// The engine's filter for a listing's query; bad input is the operator's to fix.
fn job_filter(q: &JobQuery) -> Result<JobFilter, String> {
    let states = match q.state.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => Vec::new(),
        Some(s) => s
            .split(',')
            .map(|p| p.trim().parse::<JobState>())
            .collect::<Result<Vec<_>, _>>()?,
    };
    let time = |field: &str,
                v: &Option<String>,
                which: &Option<String>|
     -> Result<Option<DateTime<Utc>>, String> {
        match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => {
                let ms = instant_ms(s, q.zone.as_deref(), which.as_deref())
                    .map_err(|e| format!("{field}: {e}"))?;
                from_ms(field, ms).map(Some)
            }
        }
    };
    let text = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    Ok(JobFilter {
        states,
        queue: text(&q.queue),
        kind: text(&q.kind),
        args: text(&q.args).map(|a| parse_args_filter(&a)).transpose()?,
        scheduled_from: time("from", &q.from, &q.from_which)?,
        scheduled_to: time("to", &q.to, &q.to_which)?,
        max_id: q.max_id.map(JobId),
    })
}

fn new_job(input: NewJobInput) -> Result<NewJob, String> {
    let number = |field: &str, v: &Option<String>| -> Result<Option<f64>, String> {
        match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => s
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .map(Some)
                .ok_or_else(|| format!("{field}: `{s}` is not a number")),
        }
    };
    let args: Value = serde_json::from_str(input.args.trim())
        .map_err(|e| format!("args: not valid JSON ({e})"))?;
    let schedule = match input.when.as_str() {
        "" | "now" => Schedule::Now,
        "in" => {
            let minutes = number("in_minutes", &input.in_minutes)?
                .ok_or("in_minutes: say in how many minutes")?;
            if !(0.0..=5_256_000.0).contains(&minutes) {
                return Err("in_minutes: must be between 0 and 5,256,000 (ten years)".into());
            }
            Schedule::In(std::time::Duration::from_secs_f64(minutes * 60.0))
        }
        "at" => {
            let at = input
                .at
                .as_deref()
                .filter(|s| !s.trim().is_empty())
                .ok_or("at: give a date and time")?;
            let ms = instant_ms(at, input.zone.as_deref(), input.which.as_deref())
                .map_err(|e| format!("at: {e}"))?;
            Schedule::At(from_ms("at", ms)?)
        }
        other => return Err(format!("when: `{other}` is not now, in or at")),
    };
    let mut job = NewJob::new(input.kind.trim(), args).with_queue(input.queue.trim());
    job.schedule = schedule;
    if let Some(p) = number("priority", &input.priority)? {
        if p.fract() != 0.0 || !(0.0..=9.0).contains(&p) {
            return Err("priority: must be a whole number from 0 to 9".into());
        }
        job = job.with_priority(p as i16);
    }
    if let Some(m) = number("max_attempts", &input.max_attempts)? {
        if m.fract() != 0.0 || !(1.0..=1000.0).contains(&m) {
            return Err("max_attempts: must be a whole number from 1 to 1000".into());
        }
        job = job.with_max_attempts(m as i32);
    }
    if let Some(key) = input
        .unique_key
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
    {
        job = job.with_unique_key(key, OnConflict::Keep);
    }
    Ok(job)
}

fn question_row(q: &crate::questions::store::Question) -> QuestionRow {
    QuestionRow {
        id: q.id,
        game: q.game.clone(),
        prompt: q.prompt.clone(),
        status: q.status.as_str().to_string(),
        game_ms: ms(q.game_time),
        lock_job_id: q.lock_job_id.map(|id| id.0),
    }
}

#[async_trait::async_trait]
impl OverviewConsole for ServerConsole {
    async fn overview(&self) -> Result<Overview, Refusal> {
        operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let counts = self.client.counts().await.map_err(refused)?;
        let mut states: BTreeMap<&'static str, i64> =
            JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        for (_, st, n) in &counts {
            *states.entry(st.as_str()).or_default() += n;
        }
        let throughput = self
            .client
            .throughput(60)
            .await
            .map_err(refused)?
            .into_iter()
            .map(|m| MinutePoint {
                minute_ms: ms(m.minute),
                completed: m.completed,
                failed: m.failed,
            })
            .collect();
        let (nodes, leader) = self.client.nodes().await.map_err(refused)?;
        let queues = self.queue_infos(&counts, &nodes).await?;
        let leader = leader.map(|l| l.node_id);
        Ok(Overview {
            now_ms,
            states: JobState::ALL
                .iter()
                .map(|s| (s.as_str().to_string(), states[s.as_str()]))
                .collect(),
            queues,
            throughput,
            nodes: nodes
                .into_iter()
                .map(|n| NodeInfo {
                    leader: leader.as_deref() == Some(n.id.as_str()),
                    id: n.id,
                    hostname: n.hostname,
                    pid: n.pid,
                    started_ms: ms(n.started_at),
                    heartbeat_ms: ms(n.heartbeat_at),
                })
                .collect(),
        })
    }
}

#[async_trait::async_trait]
impl JobsConsole for ServerConsole {
    async fn jobs(&self, query: JobQuery) -> Result<JobPage, Refusal> {
        operator(Role::Viewer)?;
        let filter = job_filter(&query)?;
        let now_ms = self.now_ms().await?;
        let rows = self
            .client
            .list(&filter, query.before.map(JobId), LIST_ROWS)
            .await
            .map_err(refused)?;
        let newer = match (query.max_id, query.before) {
            (Some(max_id), None) => {
                let head = JobFilter {
                    max_id: None,
                    ..filter.clone()
                };
                self.client
                    .list(&head, None, NEWER_CAP)
                    .await
                    .map_err(refused)?
                    .iter()
                    .filter(|j| j.id.0 > max_id)
                    .count() as i64
            }
            _ => 0,
        };
        let next_before = (rows.len() as i64 == LIST_ROWS)
            .then(|| rows.last().map(|j| j.id.0))
            .flatten();
        Ok(JobPage {
            now_ms,
            rows: rows.iter().map(job_row).collect(),
            next_before,
            newer,
        })
    }

    async fn job(&self, id: i64) -> Result<JobDetail, Refusal> {
        operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let j = self.client.get(JobId(id)).await.map_err(refused)?;
        let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
        Ok(JobDetail {
            now_ms,
            job: job_row(&j),
            args_json: pretty(&j.args),
            meta_json: pretty(&j.meta),
            tags: j.tags.clone(),
            unique_key: j.unique_key.clone(),
            inserted_ms: ms(j.inserted_at),
            lease_ms: j.lease_expires_at.map(ms),
            attempts: attempts(&j),
        })
    }

    async fn job_action(&self, id: i64, action: String) -> Result<(), Refusal> {
        let act = Act {
            action: format!("job.{action}"),
            target: Some(format!("job {id}")),
            filter: None,
        };
        self.act(act, |_| None, async {
            let id = JobId(id);
            let done = match action.as_str() {
                "cancel" => self.client.cancel(id).await.map(drop),
                "retry" => self.client.retry(id).await.map(drop),
                "run_now" => self.client.run_now(id).await.map(drop),
                "delete" => self.client.delete(id).await,
                other => return Err(Refusal::invalid(format!("`{other}` is not a job action"))),
            };
            done.map_err(refused)
        })
        .await
    }

    async fn reschedule_job(&self, id: i64, at_ms: i64) -> Result<(), Refusal> {
        let act = Act {
            action: "job.reschedule".to_string(),
            target: Some(format!(
                "job {id} to {}",
                DateTime::from_timestamp_millis(at_ms)
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_default()
            )),
            filter: None,
        };
        self.act(act, |_| None, async {
            let at = from_ms("at", at_ms)?;
            self.client
                .reschedule(JobId(id), at)
                .await
                .map(drop)
                .map_err(refused)
        })
        .await
    }

    async fn clone_job(&self, id: i64) -> Result<i64, Refusal> {
        let act = Act {
            action: "job.clone".to_string(),
            target: Some(format!("job {id}")),
            filter: None,
        };
        self.act(act, |_| None, async {
            self.client
                .clone_job(JobId(id))
                .await
                .map(|j| j.id.0)
                .map_err(refused)
        })
        .await
    }

    async fn job_choices(&self) -> Result<JobChoices, Refusal> {
        operator(Role::Viewer)?;
        let mut kinds: Vec<String> = self
            .client
            .workers()
            .kinds()
            .into_iter()
            .map(String::from)
            .collect();
        kinds.sort();
        let queues = self
            .client
            .queues()
            .await
            .map_err(refused)?
            .into_iter()
            .map(|q| q.name)
            .collect();
        Ok(JobChoices { kinds, queues })
    }

    async fn create_job(&self, input: NewJobInput) -> Result<i64, Refusal> {
        let act = Act {
            action: "job.create".to_string(),
            target: Some(format!("{} in {}", input.kind.trim(), input.queue.trim())),
            filter: None,
        };
        self.act(act, |_| None, async {
            let job = new_job(input)?;
            self.client
                .insert(&job)
                .await
                .map(|i| i.job.id.0)
                .map_err(refused)
        })
        .await
    }

    async fn bulk_preview(&self, query: JobQuery) -> Result<BulkCount, Refusal> {
        operator(Role::Viewer)?;
        let mut filter = job_filter(&query)?;
        // The newest job now is the snapshot: jobs inserted after the confirmation are not touched.
        let newest = self
            .client
            .list(
                &JobFilter {
                    max_id: None,
                    ..filter.clone()
                },
                None,
                1,
            )
            .await
            .map_err(refused)?;
        let max_id = newest.first().map(|j| j.id.0);
        filter.max_id = max_id.map(JobId);
        let count = match max_id {
            None => 0,
            Some(_) => self
                .client
                .count_matching(&filter, BULK_COUNT_CAP + 1)
                .await
                .map_err(refused)?,
        };
        Ok(BulkCount {
            count: count.min(BULK_COUNT_CAP),
            capped: count > BULK_COUNT_CAP,
            max_id,
        })
    }

    async fn bulk(
        &self,
        action: String,
        ids: Vec<i64>,
        query: JobQuery,
    ) -> Result<BulkDone, Refusal> {
        let act = Act {
            action: format!("jobs.bulk_{action}"),
            target: (!ids.is_empty()).then(|| {
                format!(
                    "jobs {}",
                    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
                )
            }),
            filter: ids
                .is_empty()
                .then(|| serde_json::to_value(&query).unwrap_or_default()),
        };
        self.act(act, |d: &BulkDone| Some(d.changed as i64), async {
            let bulk_action: BulkAction = action.parse().map_err(Refusal::invalid)?;
            let report = if ids.is_empty() {
                let filter = job_filter(&query)?;
                if filter.max_id.is_none() {
                    return Err(Refusal::invalid(
                        "confirm the count first: the action needs its snapshot",
                    ));
                }
                self.client.bulk_filter(bulk_action, &filter).await
            } else {
                let ids: Vec<JobId> = ids.into_iter().map(JobId).collect();
                self.client.bulk_ids(bulk_action, &ids).await
            }
            .map_err(refused)?;
            Ok(BulkDone {
                action,
                changed: report.changed,
                skipped: report.skipped,
            })
        })
        .await
    }

    async fn timers(&self) -> Result<TimersPage, Refusal> {
        operator(Role::Viewer)?;
        let (jobs, now) = self.client.timers(TIMER_ROWS).await.map_err(refused)?;
        Ok(TimersPage {
            now_ms: ms(now),
            rows: jobs.iter().map(job_row).collect(),
        })
    }
}

#[async_trait::async_trait]
impl QueuesConsole for ServerConsole {
    async fn queues(&self) -> Result<Vec<QueueInfo>, Refusal> {
        operator(Role::Viewer)?;
        let counts = self.client.counts().await.map_err(refused)?;
        let (nodes, _) = self.client.nodes().await.map_err(refused)?;
        self.queue_infos(&counts, &nodes).await
    }

    async fn queue_action(
        &self,
        name: String,
        action: String,
        concurrency: Option<String>,
    ) -> Result<(), Refusal> {
        let act = Act {
            action: format!("queue.{action}"),
            target: Some(match concurrency.as_deref() {
                Some(c) if action == "concurrency" => format!(
                    "queue {name} to {}",
                    if c.trim().is_empty() {
                        "the nodes' default"
                    } else {
                        c.trim()
                    }
                ),
                _ => format!("queue {name}"),
            }),
            filter: None,
        };
        self.act(act, |_| None, async {
            let done = match action.as_str() {
                "pause" => self.client.set_queue_paused(&name, true).await,
                "resume" => self.client.set_queue_paused(&name, false).await,
                "concurrency" => {
                    let limit = match concurrency.as_deref().map(str::trim) {
                        None | Some("") => None,
                        Some(s) => Some(s.parse::<i32>().map_err(|_| {
                            Refusal::invalid(format!("concurrency: `{s}` is not a whole number"))
                        })?),
                    };
                    self.client.set_queue_concurrency(&name, limit).await
                }
                other => return Err(Refusal::invalid(format!("`{other}` is not a queue action"))),
            };
            done.map(drop).map_err(refused)
        })
        .await
    }
}

#[async_trait::async_trait]
impl QuestionsConsole for ServerConsole {
    async fn questions(&self) -> Result<QuestionsPage, Refusal> {
        operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let rows = self
            .questions
            .list(None, LIST_ROWS)
            .await
            .map_err(question_refused)?;
        Ok(QuestionsPage {
            now_ms,
            rows: rows.iter().map(question_row).collect(),
        })
    }

    async fn question(&self, id: i64) -> Result<QuestionDetail, Refusal> {
        operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let d = self.questions.get(id).await.map_err(question_refused)?;
        let counts: BTreeMap<&str, (i64, i64)> = d
            .counts
            .iter()
            .map(|c| (c.choice.as_str(), (c.predictions, c.correct)))
            .collect();
        Ok(QuestionDetail {
            now_ms,
            question: question_row(&d.question),
            correct_choice: d.question.correct_choice.clone(),
            locked_ms: d.question.locked_at.map(ms),
            choices: d
                .question
                .choices
                .iter()
                .map(|c| {
                    let (n, correct) = counts.get(c.as_str()).copied().unwrap_or((0, 0));
                    (c.clone(), n, correct)
                })
                .collect(),
            predictions: d.predictions,
            lock_job: d.lock_job.as_ref().map(job_row),
        })
    }

    async fn create_question(
        &self,
        game: String,
        prompt: String,
        choices: Vec<String>,
        game_ms: i64,
    ) -> Result<i64, Refusal> {
        let act = Act {
            action: "question.create".to_string(),
            target: Some(format!("{} / {}", game.trim(), prompt.trim())),
            filter: None,
        };
        self.act(act, |_| None, async {
            let at = from_ms("game_time", game_ms)?;
            self.questions
                .create(&game, &prompt, &choices, at)
                .await
                .map(|d| d.question.id)
                .map_err(question_refused)
        })
        .await
    }

    async fn move_question(&self, id: i64, game_ms: i64) -> Result<(), Refusal> {
        let act = Act {
            action: "question.move".to_string(),
            target: Some(format!("question {id}")),
            filter: None,
        };
        self.act(act, |_| None, async {
            let at = from_ms("game_time", game_ms)?;
            self.questions
                .update(id, None, None, Some(at))
                .await
                .map(drop)
                .map_err(question_refused)
        })
        .await
    }
}

#[async_trait::async_trait]
impl AuditConsole for ServerConsole {
    async fn audit(&self, query: AuditQuery) -> Result<AuditPage, Refusal> {
        operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let ok = match query.result.as_deref() {
            None | Some("") => None,
            Some("ok") => Some(true),
            Some("refused") => Some(false),
            Some(other) => {
                return Err(Refusal::invalid(format!(
                    "result: `{other}` is not ok or refused"
                )))
            }
        };
        let filter = AuditFilter {
            actor: query.actor.filter(|a| !a.trim().is_empty()),
            action: query.action.filter(|a| !a.trim().is_empty()),
            ok,
        };
        let rows = self
            .auditor
            .list(&filter, query.before, LIST_ROWS)
            .await
            .map_err(unavailable)?;
        let next_before = (rows.len() as i64 == LIST_ROWS)
            .then(|| rows.last().map(|r| r.id))
            .flatten();
        Ok(AuditPage {
            now_ms,
            next_before,
            rows: rows
                .into_iter()
                .map(|r| AuditRow {
                    id: r.id,
                    at_ms: ms(r.at),
                    actor: r.actor,
                    role: r.role,
                    action: r.action,
                    target: r.target,
                    filter: r.filter.map(|f| f.to_string()),
                    count: r.count,
                    address: r.address,
                    ok: r.ok,
                    result: r.result,
                })
                .collect(),
        })
    }
}

#[async_trait::async_trait]
impl AccountsConsole for ServerConsole {
    async fn users(&self) -> Result<UsersPage, Refusal> {
        let op = operator(Role::Admin)?;
        let now_ms = self.now_ms().await?;
        let users = self.accounts.list().await.map_err(account_refused)?;
        let tokens = self.accounts.tokens(None).await.map_err(account_refused)?;
        Ok(UsersPage {
            now_ms,
            users: users
                .into_iter()
                .map(|u| UserRow {
                    is_me: u.id == op.user.id,
                    id: u.id,
                    name: u.name,
                    role: u.role.as_str().to_string(),
                    disabled: u.disabled,
                    created_ms: ms(u.created_at),
                })
                .collect(),
            tokens: tokens.iter().map(token_row).collect(),
        })
    }

    async fn create_user(
        &self,
        name: String,
        role: String,
        password: String,
    ) -> Result<i64, Refusal> {
        let act = Act {
            action: "user.create".into(),
            target: Some(format!(
                "user {}",
                name.trim().chars().take(64).collect::<String>()
            )),
            filter: None,
        };
        self.act_as(Role::Admin, act, |_| None, async {
            let role: Role = role.parse().map_err(Refusal::invalid)?;
            self.accounts
                .create(&name, &password, role)
                .await
                .map(|u| u.id)
                .map_err(account_refused)
        })
        .await
    }

    async fn update_user(
        &self,
        id: i64,
        action: String,
        role: Option<String>,
        password: Option<String>,
    ) -> Result<(), Refusal> {
        let me = operator(Role::Admin)?;
        let target = match self.accounts.get(id).await.map_err(account_refused)? {
            Some(u) => format!("user {}", u.name),
            None => format!("user {id}"),
        };
        let audit_action = match action.as_str() {
            "role" | "disable" | "enable" => format!("user.{action}"),
            "password" => "user.password_reset".to_string(),
            other => {
                return Err(Refusal::invalid(format!(
                    "`{other}` is not a user action: use role, disable, enable or password"
                )))
            }
        };
        let act = Act {
            action: audit_action,
            target: Some(target),
            filter: None,
        };
        self.act_as(Role::Admin, act, |_| None, async {
            let changed = match action.as_str() {
                "role" => {
                    let role: Role = role
                        .as_deref()
                        .unwrap_or("")
                        .parse()
                        .map_err(Refusal::invalid)?;
                    if id == me.user.id && role < Role::Admin {
                        return Err(Refusal::conflict(
                            "you cannot take the admin role from yourself: ask another admin",
                        ));
                    }
                    self.accounts.set_role(id, role).await
                }
                "disable" => {
                    if id == me.user.id {
                        return Err(Refusal::conflict(
                            "you cannot disable yourself: ask another admin",
                        ));
                    }
                    self.accounts.set_disabled(id, true).await
                }
                "enable" => self.accounts.set_disabled(id, false).await,
                _ if id == me.user.id => return Err(Refusal::conflict(
                    "change your own password on your account page: it asks for the current one",
                )),
                _ => {
                    self.accounts
                        .set_password(id, password.as_deref().unwrap_or(""))
                        .await
                }
            };
            changed.map(drop).map_err(account_refused)
        })
        .await
    }

    async fn account(&self) -> Result<AccountPage, Refusal> {
        let op = operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let tokens = self
            .accounts
            .tokens(Some(op.user.id))
            .await
            .map_err(account_refused)?;
        Ok(AccountPage {
            now_ms,
            name: op.user.name.clone(),
            role: op.user.role.as_str().to_string(),
            tokens: tokens.iter().map(token_row).collect(),
        })
    }

    async fn create_token(
        &self,
        name: String,
        scope: String,
        password: String,
    ) -> Result<NewToken, Refusal> {
        let op = operator(Role::Viewer)?;
        // What the audit entry shows of the input: checked values only, cut and printable.
        let shown_scope = if matches!(scope.as_str(), "read" | "write") {
            scope.as_str()
        } else {
            "?"
        };
        let shown_name: String = name
            .trim()
            .chars()
            .filter(|c| !c.is_control())
            .take(100)
            .collect();
        let act = Act {
            action: "token.create".into(),
            target: Some(format!(
                "{shown_scope} token `{shown_name}` of {}",
                op.user.name
            )),
            filter: None,
        };
        self.act_as(Role::Viewer, act, |_| None, async {
            let scope: TokenScope = scope.parse().map_err(Refusal::invalid)?;
            // A token outlives the session it was made in (and a later password change): making
            // one takes the password again, so a stolen session cannot mint a lasting credential.
            // A wrong one counts toward the sign-in lock.
            self.accounts
                .authenticate(&op.user.name, &password, op.address)
                .await
                .map_err(|e| match e {
                    LoginError::BadCredentials => Refusal::invalid("your password is wrong"),
                    other => login_refused(other),
                })?;
            let (token, text) = self
                .accounts
                .create_token(&op.user, &name, scope)
                .await
                .map_err(account_refused)?;
            Ok(NewToken {
                id: token.id,
                token: text,
            })
        })
        .await
    }

    async fn revoke_token(&self, id: i64) -> Result<(), Refusal> {
        let op = operator(Role::Viewer)?;
        let token = self.accounts.token(id).await.map_err(account_refused)?;
        let act = Act {
            action: "token.revoke".into(),
            // The token's prefix and owner only for those who may see them (the audit log is
            // readable by every role).
            target: Some(match &token {
                Some(t) if t.user_id == op.user.id || op.may(Role::Admin) => {
                    format!("token {id} ({}) of {}", t.prefix, t.user_name)
                }
                _ => format!("token {id}"),
            }),
            filter: None,
        };
        self.act_as(Role::Viewer, act, |_| None, async {
            let token = token.ok_or_else(|| Refusal::not_found(format!("token {id} not found")))?;
            if token.user_id != op.user.id && !op.may(Role::Admin) {
                return Err(Refusal {
                    status: 403,
                    message: "only its owner or an admin may revoke a token".into(),
                });
            }
            self.accounts
                .revoke_token(id)
                .await
                .map(drop)
                .map_err(account_refused)
        })
        .await
    }

    async fn change_password(&self, current: String, new: String) -> Result<(), Refusal> {
        let op = operator(Role::Viewer)?;
        let act = Act {
            action: "account.password".into(),
            target: Some(format!("user {}", op.user.name)),
            filter: None,
        };
        self.act_as(Role::Viewer, act, |_| None, async {
            let user = self
                .accounts
                .change_own_password(&op.user, &current, &new, op.address)
                .await
                .map_err(|e| match e {
                    // Signed in already: a wrong current password is the form's mistake, not a
                    // missing sign-in.
                    LoginError::BadCredentials => Refusal::invalid("the current password is wrong"),
                    other => login_refused(other),
                })?;
            // This session carries on with the new password; the others end.
            let parts = request().ok_or_else(Refusal::unavailable)?;
            if let Some(session) = parts.extensions.get::<tower_sessions::Session>() {
                session::renew_epoch(session, &user)
                    .await
                    .map_err(unavailable)?;
            }
            Ok(())
        })
        .await
    }

    async fn login_info(&self) -> Result<LoginInfo, Refusal> {
        let has_users = self.accounts.count().await.map_err(unavailable)? > 0;
        Ok(LoginInfo { has_users })
    }

    async fn login(&self, name: String, password: String) -> Result<(), Refusal> {
        let (session, address) = session_starter("sign in from the dashboard's own page")?;
        let refusal = match self.accounts.authenticate(&name, &password, address).await {
            Ok(user) => Ok(user),
            Err(LoginError::Database(e)) => return Err(unavailable(e)),
            Err(e) => Err(login_refused(e)),
        };
        let user = match refusal {
            Ok(user) => user,
            Err(refusal) => {
                // The name as typed (cut): who tried, even if no such user exists.
                let typed: String = name.trim().chars().take(100).collect();
                self.auditor
                    .record(AuditEntry {
                        actor: if typed.is_empty() { "?".into() } else { typed },
                        role: "none".into(),
                        action: "session.sign_in".into(),
                        target: None,
                        filter: None,
                        count: None,
                        address: Some(address),
                        result: Err(refusal.message.clone()),
                    })
                    .await;
                return Err(refusal);
            }
        };
        self.start_session(&session, &user, address).await
    }

    async fn setup_check(&self, code: String) -> Result<(), Refusal> {
        let parts = request().ok_or_else(Refusal::unavailable)?;
        let address = session::client_address(&parts.extensions);
        self.accounts
            .check_setup_code(&code, address)
            .await
            .map(drop)
            .map_err(setup_refused)
    }

    async fn setup(&self, code: String, name: String, password: String) -> Result<(), Refusal> {
        let (session, address) = session_starter("set up from the dashboard's own page")?;
        let typed: String = name.trim().chars().take(64).collect();
        let entry = |actor: String, role: &str, result: Result<(), String>| AuditEntry {
            actor,
            role: role.to_string(),
            action: "user.create".into(),
            target: Some(format!("first admin {typed}, by the setup link")),
            filter: None,
            count: None,
            address: Some(address),
            result,
        };
        let made = match self.accounts.check_setup_code(&code, address).await {
            Ok(pass) => {
                self.accounts
                    .set_up_first_admin(pass, &name, &password)
                    .await
            }
            Err(e) => Err(e),
        };
        let user = match made {
            Ok(user) => user,
            Err(SetupError::Account(AccountError::Database(e))) => return Err(unavailable(e)),
            Err(e) => {
                let refusal = setup_refused(e);
                let actor = if typed.is_empty() {
                    "?".into()
                } else {
                    typed.clone()
                };
                self.auditor
                    .record(entry(actor, "none", Err(refusal.message.clone())))
                    .await;
                return Err(refusal);
            }
        };
        tracing::info!(user = %user.name, %address, "the first admin was made by the setup link");
        self.auditor
            .record(entry(user.name.clone(), user.role.as_str(), Ok(())))
            .await;
        self.start_session(&session, &user, address).await
    }

    async fn logout(&self) -> Result<(), Refusal> {
        if let Ok(op) = operator(Role::Viewer) {
            self.record(
                &op,
                "session.sign_out",
                None,
                None,
                None,
                &Ok::<(), Refusal>(()),
            )
            .await;
        }
        let parts = request().ok_or_else(Refusal::unavailable)?;
        if let Some(session) = parts.extensions.get::<tower_sessions::Session>() {
            session::sign_out(session).await.map_err(unavailable)?;
        }
        Ok(())
    }
}

impl ServerConsole {
    /// Every queue with a row, a job, or a node serving it, with its counts.
    async fn queue_infos(
        &self,
        counts: &[(String, JobState, i64)],
        nodes: &[crate::engine::store::nodes::NodeRow],
    ) -> Result<Vec<QueueInfo>, Refusal> {
        let settings = self.client.queues().await.map_err(refused)?;
        let mut infos: BTreeMap<String, QueueInfo> = BTreeMap::new();
        let blank = |name: &str| QueueInfo {
            name: name.to_string(),
            paused: false,
            concurrency: None,
            configured: Vec::new(),
            available: 0,
            scheduled: 0,
            executing: 0,
            retryable: 0,
            discarded: 0,
            completed: 0,
        };
        for s in settings {
            let info = infos
                .entry(s.name.clone())
                .or_insert_with(|| blank(&s.name));
            info.paused = s.paused;
            info.concurrency = s.concurrency;
        }
        for (queue, state, n) in counts {
            let info = infos.entry(queue.clone()).or_insert_with(|| blank(queue));
            match state {
                JobState::Available => info.available += n,
                JobState::Scheduled => info.scheduled += n,
                JobState::Executing => info.executing += n,
                JobState::Retryable => info.retryable += n,
                JobState::Discarded => info.discarded += n,
                JobState::Completed => info.completed += n,
                JobState::Cancelled => {}
            }
        }
        for node in nodes {
            if let Value::Object(queues) = &node.queues {
                for (queue, limit) in queues {
                    let info = infos.entry(queue.clone()).or_insert_with(|| blank(queue));
                    if let Some(limit) = limit.as_i64() {
                        info.configured.push((node.id.clone(), limit));
                    }
                }
            }
        }
        Ok(infos.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn args_filter_reads_pairs_and_json() {
        assert_eq!(
            parse_args_filter("game_id=42, team=lions").unwrap(),
            json!({"game_id": 42, "team": "lions"})
        );
        assert_eq!(
            parse_args_filter(r#"{"a": {"b": true}}"#).unwrap(),
            json!({"a": {"b": true}})
        );
        assert!(parse_args_filter("no pair here").is_err());
        assert!(parse_args_filter("[1, 2]").is_err());
        assert!(parse_args_filter("=3").is_err());
    }

    #[test]
    fn job_filter_refuses_unknown_states_and_bad_times() {
        let q = |state: &str, from: &str| JobQuery {
            state: Some(state.into()),
            from: Some(from.into()),
            ..JobQuery::default()
        };
        assert!(job_filter(&q("retryable,discarded", "")).is_ok());
        assert!(job_filter(&q("exploded", "")).is_err());
        assert!(job_filter(&q("", "yesterday")).is_err());
        // Each bound gets its zone's offset on its own date, across a daylight-saving switch.
        let f = job_filter(&JobQuery {
            from: Some("2027-01-10T19:00".into()),
            to: Some("2027-07-10T19:00".into()),
            zone: Some("America/New_York".into()),
            ..JobQuery::default()
        })
        .unwrap();
        assert_eq!(
            f.scheduled_from.unwrap().to_rfc3339(),
            "2027-01-11T00:00:00+00:00"
        );
        assert_eq!(
            f.scheduled_to.unwrap().to_rfc3339(),
            "2027-07-10T23:00:00+00:00"
        );
        // A repeated hour needs its bound's own answer.
        let repeated = |to_which: Option<&str>| {
            job_filter(&JobQuery {
                to: Some("2026-11-01T01:30".into()),
                zone: Some("America/New_York".into()),
                to_which: to_which.map(String::from),
                ..JobQuery::default()
            })
        };
        assert!(repeated(None)
            .unwrap_err()
            .starts_with("to: 2026-11-01 01:30 happens twice"));
        assert_eq!(
            repeated(Some("later"))
                .unwrap()
                .scheduled_to
                .unwrap()
                .to_rfc3339(),
            "2026-11-01T06:30:00+00:00"
        );
    }

    #[test]
    fn new_job_input_is_checked() {
        let input = |when: &str| NewJobInput {
            kind: "noop".into(),
            args: "{}".into(),
            queue: "default".into(),
            when: when.into(),
            in_minutes: Some("1.5".into()),
            ..NewJobInput::default()
        };
        assert_eq!(
            new_job(input("in")).unwrap().schedule,
            Schedule::In(std::time::Duration::from_secs(90))
        );
        assert!(new_job(input("later")).is_err());
        assert!(new_job(NewJobInput {
            args: "{oops".into(),
            ..input("now")
        })
        .is_err());
        assert!(new_job(NewJobInput {
            priority: Some("12".into()),
            ..input("now")
        })
        .is_err());
    }
}
