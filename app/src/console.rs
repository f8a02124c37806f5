//! The port between the dashboard and the server: the data the UI shows, the server functions
//! that fetch it or act, and the `Console` trait the server implements (behind the `ssr` feature).
//!
//! Times travel as milliseconds since the epoch; every page's data carries the database clock
//! (`now_ms`) it was read at, so countdowns and "2 s late" are measured against the database, not
//! against the browser's or the server's own clock.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::local_time::instant_ms;

/// Every job state, in the order of a job's life.
pub const STATES: [&str; 7] = [
    "scheduled",
    "available",
    "executing",
    "retryable",
    "completed",
    "discarded",
    "cancelled",
];

/// The states that count as failures on the failures page.
pub const FAILED_STATES: &str = "retryable,discarded";

/// The largest number of jobs a bulk confirmation counts exactly.
pub const BULK_COUNT_CAP: i64 = 100_000;

/// The overview page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub now_ms: i64,
    /// Counts per state, in [`STATES`] order.
    pub states: Vec<(String, i64)>,
    pub queues: Vec<QueueInfo>,
    /// Completed and failed attempts per minute, oldest first.
    pub throughput: Vec<MinutePoint>,
    pub nodes: Vec<NodeInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueInfo {
    pub name: String,
    pub paused: bool,
    /// Per-node limit set by an operator; `None`: each node's configured limit.
    pub concurrency: Option<i32>,
    /// Per-node limits the running nodes were started with (`node: limit`), for reference.
    pub configured: Vec<(String, i64)>,
    pub available: i64,
    pub scheduled: i64,
    pub executing: i64,
    pub retryable: i64,
    pub discarded: i64,
    pub completed: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinutePoint {
    pub minute_ms: i64,
    pub completed: i64,
    pub failed: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: String,
    pub hostname: String,
    pub pid: i32,
    pub started_ms: i64,
    pub heartbeat_ms: i64,
    pub leader: bool,
}

/// A job listing's filter, as the address bar holds it (`/jobs?state=retryable&queue=webhooks`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobQuery {
    /// One state or several separated by commas.
    pub state: Option<String>,
    pub queue: Option<String>,
    pub kind: Option<String>,
    /// `key=value` pairs separated by commas, or a JSON object: jobs whose args contain it.
    pub args: Option<String>,
    /// `scheduled_at` from / to, as `datetime-local` values in the time zone `zone`.
    pub from: Option<String>,
    pub to: Option<String>,
    /// The IANA name of the zone `from` and `to` are in; absent: UTC.
    pub zone: Option<String>,
    /// Which of the two instants `from` / `to` means when it happens twice in `zone`
    /// (`earlier` or `later`, see [`crate::local_time`]).
    pub from_which: Option<String>,
    pub to_which: Option<String>,
    /// Keyset cursor: jobs with a smaller id.
    pub before: Option<i64>,
    /// Jobs with an id at most this: the list as the operator is reading it.
    pub max_id: Option<i64>,
}

impl JobQuery {
    /// The filter part as `key=value` pairs (no cursor), for links and hidden form fields. The
    /// zone goes with the times it is the zone of, and only with them.
    pub fn filter_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        let times = [&self.from, &self.to]
            .iter()
            .any(|t| t.as_ref().is_some_and(|t| !t.is_empty()));
        let fields = [
            ("state", &self.state),
            ("queue", &self.queue),
            ("kind", &self.kind),
            ("args", &self.args),
            ("from", &self.from),
            ("to", &self.to),
        ];
        let zone_fields = [
            ("zone", &self.zone),
            ("from_which", &self.from_which),
            ("to_which", &self.to_which),
        ];
        for (k, v) in fields
            .into_iter()
            .chain(zone_fields.into_iter().filter(|_| times))
        {
            if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
                pairs.push((k, v.clone()));
            }
        }
        pairs
    }

    pub fn has_filter(&self) -> bool {
        !self.filter_pairs().is_empty()
    }
}

/// A query parameter's value, trimmed; `None` when absent or blank.
pub fn nonempty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// Encodes pairs as a query string (`a=1&b=x%20y`).
pub fn query_string(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// One page of a job listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    pub now_ms: i64,
    pub rows: Vec<JobRow>,
    /// Cursor of the next (older) page; absent on the last page.
    pub next_before: Option<i64>,
    /// Matching jobs newer than the list's `max_id` (at most 100 are counted).
    pub newer: i64,
}

/// One job in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    pub id: i64,
    pub kind: String,
    pub queue: String,
    pub state: String,
    pub priority: i16,
    pub attempt: i32,
    pub max_attempts: i32,
    pub scheduled_ms: i64,
    pub finalized_ms: Option<i64>,
    pub last_error: Option<String>,
    /// The args as compact JSON, cut to a readable length.
    pub args_preview: String,
}

impl JobRow {
    pub fn is_final(&self) -> bool {
        matches!(self.state.as_str(), "completed" | "discarded" | "cancelled")
    }
    pub fn can_retry(&self) -> bool {
        self.is_final() || self.state == "retryable"
    }
    pub fn is_waiting(&self) -> bool {
        matches!(self.state.as_str(), "scheduled" | "available" | "retryable")
    }
}

/// The job detail page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    pub now_ms: i64,
    pub job: JobRow,
    pub args_json: String,
    pub meta_json: String,
    pub tags: Vec<String>,
    pub unique_key: Option<String>,
    pub inserted_ms: i64,
    pub lease_ms: Option<i64>,
    pub attempts: Vec<AttemptRow>,
}

/// One attempt of a job, for the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRow {
    pub attempt: i32,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub node: Option<String>,
    /// `failed`, `completed`, `cancelled`, `running`, or `interrupted` (handed back or rescued).
    pub outcome: String,
    pub error: Option<String>,
}

/// Jobs waiting for their time, soonest (or latest overdue) first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimersPage {
    pub now_ms: i64,
    pub rows: Vec<JobRow>,
}

/// What a bulk action would touch, shown before it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkCount {
    pub count: i64,
    /// The count stopped at [`BULK_COUNT_CAP`].
    pub capped: bool,
    /// The newest job the action may touch: jobs inserted after the confirmation are left alone.
    pub max_id: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkDone {
    pub action: String,
    pub changed: u64,
    pub skipped: u64,
}

/// What the new-job form offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobChoices {
    pub kinds: Vec<String>,
    pub queues: Vec<String>,
}

/// A new job as the form submits it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewJobInput {
    pub kind: String,
    pub args: String,
    pub queue: String,
    /// `now`, `in` (minutes) or `at` (a `datetime-local` value in the time zone `zone`).
    pub when: String,
    pub in_minutes: Option<String>,
    pub at: Option<String>,
    /// The IANA name of the zone `at` is in; absent: UTC.
    pub zone: Option<String>,
    /// Which of the two instants `at` means when it happens twice in `zone`.
    pub which: Option<String>,
    pub priority: Option<String>,
    pub max_attempts: Option<String>,
    pub unique_key: Option<String>,
}

/// One game question in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionRow {
    pub id: i64,
    pub game: String,
    pub prompt: String,
    pub status: String,
    pub game_ms: i64,
    pub lock_job_id: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionsPage {
    pub now_ms: i64,
    pub rows: Vec<QuestionRow>,
}

/// A question with its predictions per choice and its lock job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionDetail {
    pub now_ms: i64,
    pub question: QuestionRow,
    pub correct_choice: Option<String>,
    pub locked_ms: Option<i64>,
    /// `(choice, predictions, correct)` for every choice.
    pub choices: Vec<(String, i64, i64)>,
    pub predictions: i64,
    pub lock_job: Option<JobRow>,
}

/// The signed-in operator, as the pages need them: the server's request guard puts it in the
/// request; the browser reads it from the page's `<meta>` tags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Me {
    pub name: String,
    /// `viewer`, `operator` or `admin`.
    pub role: String,
    /// The session's CSRF token, which every form posts back.
    pub csrf: String,
}

impl Me {
    /// Whether the role may act on jobs, queues and questions (not only read).
    pub fn may_act(&self) -> bool {
        self.role != "viewer"
    }
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    pub id: i64,
    pub at_ms: i64,
    pub actor: String,
    pub role: String,
    pub action: String,
    pub target: Option<String>,
    /// A bulk action's filter, as compact JSON.
    pub filter: Option<String>,
    pub count: Option<i64>,
    pub address: Option<String>,
    pub ok: bool,
    pub result: String,
}

/// The audit page's filter, from the address bar.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditQuery {
    pub actor: Option<String>,
    /// Actions starting with this (`job.`, `jobs.bulk`, `queue.`, `session.`).
    pub action: Option<String>,
    /// `ok` or `refused`.
    pub result: Option<String>,
    pub before: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditPage {
    pub now_ms: i64,
    pub rows: Vec<AuditRow>,
    pub next_before: Option<i64>,
}

/// One account, for the users page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserRow {
    pub id: i64,
    pub name: String,
    pub role: String,
    pub disabled: bool,
    pub created_ms: i64,
    /// The signed-in admin's own row (the page offers no way to lock oneself out).
    pub is_me: bool,
}

/// One API token: never its secret, only its first characters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenRow {
    pub id: i64,
    pub owner: String,
    pub name: String,
    /// `read` or `write`.
    pub scope: String,
    /// The token's first characters (`ko_1a2b3c4d`).
    pub prefix: String,
    pub created_ms: i64,
    pub last_used_ms: Option<i64>,
    pub revoked_ms: Option<i64>,
}

/// The users page (admins): every account and every API token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsersPage {
    pub now_ms: i64,
    pub users: Vec<UserRow>,
    pub tokens: Vec<TokenRow>,
}

/// The signed-in user's own page: their tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountPage {
    pub now_ms: i64,
    pub name: String,
    pub role: String,
    pub tokens: Vec<TokenRow>,
}

/// A token just made: its text, shown this once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewToken {
    pub id: i64,
    pub token: String,
}

/// What the login page says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoginInfo {
    /// False on a fresh install: the page points to the setup link in the server's output.
    pub has_users: bool,
}

/// Why the server refused a dashboard request: the HTTP status of the server function's response
/// and a message for the operator. A client's mistake is never a 500.
#[cfg(feature = "ssr")]
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

#[cfg(feature = "ssr")]
impl Refusal {
    /// 422: the input is wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        Refusal {
            status: 422,
            message: message.into(),
        }
    }
    /// 404: no such job, question or queue.
    pub fn not_found(message: impl Into<String>) -> Self {
        Refusal {
            status: 404,
            message: message.into(),
        }
    }
    /// 409: the thing's state does not allow it.
    pub fn conflict(message: impl Into<String>) -> Self {
        Refusal {
            status: 409,
            message: message.into(),
        }
    }
    /// 503: the database is unreachable (the cause is logged, not shown).
    pub fn unavailable() -> Self {
        Refusal {
            status: 503,
            message: "the database is unreachable; try again".into(),
        }
    }
}

#[cfg(feature = "ssr")]
impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal::invalid(message)
    }
}

/// What the server provides to the dashboard.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait Console: Send + Sync + 'static {
    async fn overview(&self) -> Result<Overview, Refusal>;
    async fn jobs(&self, query: JobQuery) -> Result<JobPage, Refusal>;
    async fn job(&self, id: i64) -> Result<JobDetail, Refusal>;
    /// `cancel`, `retry`, `run_now` or `delete` one job.
    async fn job_action(&self, id: i64, action: String) -> Result<(), Refusal>;
    async fn reschedule_job(&self, id: i64, at_ms: i64) -> Result<(), Refusal>;
    /// Inserts a copy of a job, due now. Returns the new job's id.
    async fn clone_job(&self, id: i64) -> Result<i64, Refusal>;
    async fn job_choices(&self) -> Result<JobChoices, Refusal>;
    async fn create_job(&self, input: NewJobInput) -> Result<i64, Refusal>;
    async fn bulk_preview(&self, query: JobQuery) -> Result<BulkCount, Refusal>;
    /// Applies `action` to the listed ids, or (when `ids` is empty) to every job matching `query`.
    async fn bulk(
        &self,
        action: String,
        ids: Vec<i64>,
        query: JobQuery,
    ) -> Result<BulkDone, Refusal>;
    async fn timers(&self) -> Result<TimersPage, Refusal>;
    async fn queues(&self) -> Result<Vec<QueueInfo>, Refusal>;
    /// `pause`, `resume`, or `concurrency` (with `concurrency`, empty for the nodes' default).
    async fn queue_action(
        &self,
        name: String,
        action: String,
        concurrency: Option<String>,
    ) -> Result<(), Refusal>;
    async fn questions(&self) -> Result<QuestionsPage, Refusal>;
    async fn question(&self, id: i64) -> Result<QuestionDetail, Refusal>;
    async fn create_question(
        &self,
        game: String,
        prompt: String,
        choices: Vec<String>,
        game_ms: i64,
    ) -> Result<i64, Refusal>;
    async fn move_question(&self, id: i64, game_ms: i64) -> Result<(), Refusal>;
    async fn audit(&self, query: AuditQuery) -> Result<AuditPage, Refusal>;
    /// Admins: every user and token.
    async fn users(&self) -> Result<UsersPage, Refusal>;
    /// Admins: a new user; returns its id.
    async fn create_user(
        &self,
        name: String,
        role: String,
        password: String,
    ) -> Result<i64, Refusal>;
    /// Admins: `role` (with `role`), `disable`, `enable` or `password` (a reset, with `password`).
    async fn update_user(
        &self,
        id: i64,
        action: String,
        role: Option<String>,
        password: Option<String>,
    ) -> Result<(), Refusal>;
    /// The signed-in user's page.
    async fn account(&self) -> Result<AccountPage, Refusal>;
    /// A token for the signed-in user, who confirms with their password.
    async fn create_token(
        &self,
        name: String,
        scope: String,
        password: String,
    ) -> Result<NewToken, Refusal>;
    /// Revokes one of the signed-in user's tokens (admins: anyone's).
    async fn revoke_token(&self, id: i64) -> Result<(), Refusal>;
    /// The signed-in user changes their password (their other sessions end).
    async fn change_password(&self, current: String, new: String) -> Result<(), Refusal>;
    async fn login_info(&self) -> Result<LoginInfo, Refusal>;
    /// Signs in (a new session id) or says why not.
    async fn login(&self, name: String, password: String) -> Result<(), Refusal>;
    /// Ok if `code` is the server's live setup link; 404 otherwise (a wrong code counts like a
    /// failed sign-in).
    async fn setup_check(&self, code: String) -> Result<(), Refusal>;
    /// Creates the first admin through the setup link and signs them in; 404 as above, and once
    /// any user exists.
    async fn setup(&self, code: String, name: String, password: String) -> Result<(), Refusal>;
    async fn logout(&self) -> Result<(), Refusal>;
}

#[cfg(feature = "ssr")]
fn console() -> Result<std::sync::Arc<dyn Console>, ServerFnError> {
    use_context::<std::sync::Arc<dyn Console>>()
        .ok_or_else(|| ServerFnError::new("the console is not available"))
}

/// Turns a refusal into the server function's error, with its HTTP status on the response (also
/// on a server-rendered page whose data was refused: a missing job's page is a 404).
///
/// A plain form post (no JavaScript: the browser accepts HTML) keeps the redirect back to the page
/// it came from, which then shows the job or queue as it is.
#[cfg(feature = "ssr")]
fn fail(refusal: impl Into<Refusal>) -> ServerFnError {
    let refusal = refusal.into();
    let form_post = use_context::<http::request::Parts>().is_some_and(|parts| {
        parts.method == http::Method::POST
            && parts
                .headers
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("text/html"))
    });
    if form_post {
        return ServerFnError::new(refusal.message);
    }
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        if let Ok(status) = http::StatusCode::from_u16(refusal.status) {
            response.set_status(status);
        }
    }
    ServerFnError::new(refusal.message)
}

#[server(prefix = "/_console", endpoint = "overview")]
pub async fn get_overview() -> Result<Overview, ServerFnError> {
    console()?.overview().await.map_err(fail)
}

// A struct argument whose fields are all absent (an unfiltered list) is encoded as nothing at all:
// `#[server(default)]` lets the server read that as the default instead of refusing it as a missing
// field. Every such argument below carries it.

#[server(prefix = "/_console", endpoint = "jobs")]
pub async fn list_jobs(#[server(default)] query: JobQuery) -> Result<JobPage, ServerFnError> {
    console()?.jobs(query).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "job")]
pub async fn get_job(id: i64) -> Result<JobDetail, ServerFnError> {
    console()?.job(id).await.map_err(fail)
}

/// One job's action; the form's pressed button names it (`action=cancel`).
#[server(prefix = "/_console", endpoint = "job_action")]
pub async fn job_action(
    csrf: Option<String>,
    id: i64,
    action: String,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.job_action(id, action).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "reschedule_job")]
pub async fn reschedule_job(
    csrf: Option<String>,
    id: i64,
    at: String,
    zone: Option<String>,
    which: Option<String>,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let at_ms = instant_ms(&at, zone.as_deref(), which.as_deref()).map_err(fail)?;
    console()?.reschedule_job(id, at_ms).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "clone_job")]
pub async fn clone_job(csrf: Option<String>, id: i64) -> Result<i64, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.clone_job(id).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "job_choices")]
pub async fn get_job_choices() -> Result<JobChoices, ServerFnError> {
    console()?.job_choices().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "create_job")]
pub async fn create_job(
    csrf: Option<String>,
    #[server(default)] input: NewJobInput,
) -> Result<i64, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.create_job(input).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "bulk_preview")]
pub async fn bulk_preview(#[server(default)] query: JobQuery) -> Result<BulkCount, ServerFnError> {
    console()?.bulk_preview(query).await.map_err(fail)
}

/// A confirmed bulk action: on `ids` (comma-separated) when given, else on everything matching
/// `query` up to `query.max_id`.
#[server(prefix = "/_console", endpoint = "bulk")]
pub async fn bulk_jobs(
    csrf: Option<String>,
    action: String,
    ids: Option<String>,
    #[server(default)] query: JobQuery,
) -> Result<BulkDone, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let ids = parse_ids(ids.as_deref().unwrap_or("")).map_err(fail)?;
    console()?.bulk(action, ids, query).await.map_err(fail)
}

/// Parses `1,2,3` (spaces allowed, empty: none).
pub fn parse_ids(s: &str) -> Result<Vec<i64>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.parse::<i64>()
                .map_err(|_| format!("`{p}` is not a job id"))
        })
        .collect()
}

#[server(prefix = "/_console", endpoint = "timers")]
pub async fn list_timers() -> Result<TimersPage, ServerFnError> {
    console()?.timers().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "queues")]
pub async fn list_queues() -> Result<Vec<QueueInfo>, ServerFnError> {
    console()?.queues().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "queue_action")]
pub async fn queue_action(
    csrf: Option<String>,
    name: String,
    action: String,
    concurrency: Option<String>,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?
        .queue_action(name, action, concurrency)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "questions")]
pub async fn list_questions() -> Result<QuestionsPage, ServerFnError> {
    console()?.questions().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "question")]
pub async fn get_question(id: i64) -> Result<QuestionDetail, ServerFnError> {
    console()?.question(id).await.map_err(fail)
}

/// Creates a question; `choices` one per line.
#[server(prefix = "/_console", endpoint = "create_question")]
pub async fn create_question(
    csrf: Option<String>,
    game: String,
    prompt: String,
    choices: String,
    game_time: String,
    zone: Option<String>,
    which: Option<String>,
) -> Result<i64, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let game_ms = instant_ms(&game_time, zone.as_deref(), which.as_deref()).map_err(fail)?;
    let choices = choices
        .lines()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect();
    console()?
        .create_question(game, prompt, choices, game_ms)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "move_question")]
pub async fn move_question(
    csrf: Option<String>,
    id: i64,
    game_time: String,
    zone: Option<String>,
    which: Option<String>,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    let game_ms = instant_ms(&game_time, zone.as_deref(), which.as_deref()).map_err(fail)?;
    console()?.move_question(id, game_ms).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "login_info")]
pub async fn get_login_info() -> Result<LoginInfo, ServerFnError> {
    console()?.login_info().await.map_err(fail)
}

/// Where to go after signing in: a path of this site, else the overview.
///
/// Only a path written without control characters (browsers drop tabs and newlines from a URL, so
/// `/\t/x` would be `//x`, another site), backslashes (`/\x` is `//x` to them) or a `//` start,
/// which parses by the URL standard browsers follow to a path of this site and stays a one-slash
/// path once its dot segments are resolved (`/.//x` is `//x`). What comes back is that parsed path,
/// query and fragment, percent-encoded: printable ASCII that a `Location` header can hold.
pub fn safe_next(next: Option<&str>) -> String {
    next.and_then(same_site_path)
        .unwrap_or_else(|| "/".to_string())
}

fn same_site_path(next: &str) -> Option<String> {
    let plain = next.starts_with('/')
        && !next.starts_with("//")
        && !next.chars().any(|c| c.is_control() || c == '\\');
    if !plain {
        return None;
    }
    // Any base does: only whether the result leaves it matters.
    let base = url::Url::parse("http://kickoff.invalid/").ok()?;
    let parsed = base.join(next).ok()?;
    if parsed.origin() != base.origin() {
        return None;
    }
    let mut path = parsed.path().to_string();
    if path.starts_with("//") || path.contains('\\') {
        return None;
    }
    if let Some(query) = parsed.query() {
        path.push('?');
        path.push_str(query);
    }
    if let Some(fragment) = parsed.fragment() {
        path.push('#');
        path.push_str(fragment);
    }
    Some(path)
}

/// Signs in and goes on to `next` (a redirect, also without JavaScript).
#[server(prefix = "/_console", endpoint = "login")]
pub async fn login(
    name: String,
    password: String,
    next: Option<String>,
) -> Result<String, ServerFnError> {
    console()?.login(name, password).await.map_err(fail)?;
    let next = safe_next(next.as_deref());
    leptos_axum::redirect(&next);
    Ok(next)
}

#[server(prefix = "/_console", endpoint = "logout")]
pub async fn logout(csrf: Option<String>) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.logout().await.map_err(fail)?;
    leptos_axum::redirect("/login");
    Ok(())
}

/// 404 unless `code` is the server's live setup link (the setup page asks first).
#[server(prefix = "/_console", endpoint = "setup_check")]
pub async fn check_setup_code(code: String) -> Result<(), ServerFnError> {
    console()?.setup_check(code).await.map_err(fail)
}

/// Creates the first admin through the setup link, signs them in and goes on to the overview (a
/// redirect, also without JavaScript).
#[server(prefix = "/_console", endpoint = "setup")]
pub async fn set_up(
    code: String,
    name: String,
    password: String,
    confirm: String,
) -> Result<String, ServerFnError> {
    if password != confirm {
        return Err(fail(Refusal::invalid("the two passwords differ")));
    }
    console()?.setup(code, name, password).await.map_err(fail)?;
    leptos_axum::redirect("/");
    Ok("/".to_string())
}

/// The signed-in operator of this request (server) or page (browser).
pub fn current_me() -> Option<Me> {
    #[cfg(feature = "ssr")]
    {
        use_context::<http::request::Parts>().and_then(|p| p.extensions.get::<Me>().cloned())
    }
    #[cfg(all(feature = "hydrate", not(feature = "ssr")))]
    {
        let document = web_sys::window()?.document()?;
        let meta = |name: &str| -> Option<String> {
            document
                .query_selector(&format!("meta[name=\"{name}\"]"))
                .ok()
                .flatten()
                .and_then(|m| m.get_attribute("content"))
        };
        Some(Me {
            name: meta("kickoff-user")?,
            role: meta("kickoff-role")?,
            csrf: meta("csrf-token")?,
        })
    }
    #[cfg(not(any(feature = "ssr", feature = "hydrate")))]
    None
}

#[server(prefix = "/_console", endpoint = "audit")]
pub async fn list_audit(#[server(default)] query: AuditQuery) -> Result<AuditPage, ServerFnError> {
    console()?.audit(query).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "users")]
pub async fn get_users() -> Result<UsersPage, ServerFnError> {
    console()?.users().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "create_user")]
pub async fn create_user(
    csrf: Option<String>,
    name: String,
    role: String,
    password: String,
) -> Result<i64, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?
        .create_user(name, role, password)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "update_user")]
pub async fn update_user(
    csrf: Option<String>,
    id: i64,
    action: String,
    role: Option<String>,
    password: Option<String>,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?
        .update_user(id, action, role, password)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "account")]
pub async fn get_account() -> Result<AccountPage, ServerFnError> {
    console()?.account().await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "create_token")]
pub async fn create_token(
    csrf: Option<String>,
    name: String,
    scope: String,
    password: String,
) -> Result<NewToken, ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?
        .create_token(name, scope, password)
        .await
        .map_err(fail)
}

#[server(prefix = "/_console", endpoint = "revoke_token")]
pub async fn revoke_token(csrf: Option<String>, id: i64) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.revoke_token(id).await.map_err(fail)
}

#[server(prefix = "/_console", endpoint = "change_password")]
pub async fn change_password(
    csrf: Option<String>,
    current: String,
    new: String,
) -> Result<(), ServerFnError> {
    // Checked by the server's session guard before this runs; carried here so the form's
    // field survives the browser's encoding of the arguments.
    let _ = csrf;
    console()?.change_password(current, new).await.map_err(fail)
}
