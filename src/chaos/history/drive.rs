//! Runs a plan's steps against the nodes: each action as the REST request an operator would send
//! (to one node or another, with the token of the step's role), or as the dashboard's server
//! function a signed-in operator's or viewer's page calls, each fault on the processes or the
//! database; every request and answer recorded.

use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};

use super::plan::{
    tasks_of, wait_of, BulkAction, ErrorSearchAct, Fault, JobAction, ReadWhat, Role,
    ScheduleAction, ScheduleSpec, Step, Work, ALERT_RULES, KINDS, ON_FAILURE, QUEUES, RETRY_MODES,
    WORKFLOW_SHAPES,
};
use super::record::{Event, FaultEvent, History, DASHBOARD_AUDIT, DASHBOARD_SIGN_IN};
use crate::chaos::node::{Node, NodeEnv};
use crate::engine::job::RESERVED_META;
use crate::postgres::EmbeddedPostgres;

/// Every question's choices.
const CHOICES: [&str; 3] = ["Home", "Away", "Nobody"];

/// The tokens of the three roles.
pub struct Tokens {
    pub admin: String,
    pub operator: String,
    pub viewer: String,
}

/// The accounts behind the operator's and the viewer's tokens, to sign in to the dashboard with
/// (the admin's bootstrap token has no account).
pub struct Logins {
    pub operator: Login,
    pub viewer: Login,
}

pub struct Login {
    pub name: String,
    pub password: String,
}

/// The most pages of the audit log one read walks (a history writes a few hundred entries, a
/// page holds 100).
const MAX_AUDIT_PAGES: usize = 20;

pub struct Driver<'a> {
    pub http: reqwest::Client,
    pub env: &'a NodeEnv,
    /// The primary (the promoted standby once the history failed over).
    pub cluster: &'a EmbeddedPostgres,
    /// The synchronous standby the database's address moves to (`--failover`), until it did.
    pub standby: Option<&'a crate::chaos::failover::Standby>,
    pub pool: crate::db::Db,
    pub nodes: Vec<Node>,
    pub generations: Vec<usize>,
    /// How far each node slot's wall clock is moved (seconds; 0: not), kept across its restarts.
    pub clocks: Vec<i32>,
    pub tokens: Tokens,
    pub hook_url: String,
    /// Jobs whose insert was acknowledged, in order: a step's `pick` chooses among them.
    pub jobs: Vec<i64>,
    /// The admin's webhook jobs carrying a planted secret (acknowledged): what a read of one job
    /// looks at, since only they can leak one.
    pub secret_jobs: Vec<i64>,
    /// Schedules made (acknowledged): their ids and names, for a forged run's meta.
    pub schedules: Vec<(i64, String)>,
    pub logins: Logins,
    /// The dashboard session cookie of each role signed in so far.
    pub sessions: Vec<(Role, String)>,
    pub questions: Vec<i64>,
    /// Webhook endpoints and alert rules made so far (their ids).
    pub endpoints: Vec<i64>,
    pub alert_rules: Vec<i64>,
    /// Workflow runs made (acknowledged, new; inserted or rerun): a cancel's, retry's, skip's or
    /// rerun's `pick` chooses among them.
    pub runs: Vec<i64>,
    /// The keys of the runs that have one, for a partner's signal (sent by key).
    pub run_keys: std::collections::HashMap<i64, String>,
    /// The partner's webhook endpoint (made by the first signed signal) and its raw secret. Not
    /// among `endpoints`: no rotation of the plan's changes it.
    pub partner: Option<(i64, Vec<u8>)>,
    pub history: History,
}

impl Driver<'_> {
    fn token(&self, role: Role) -> &str {
        match role {
            Role::Admin => &self.tokens.admin,
            Role::Operator => &self.tokens.operator,
            Role::Viewer => &self.tokens.viewer,
        }
    }

    /// Sends one request to node `step % nodes` and records it.
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &mut self,
        step: usize,
        role: Role,
        method: &'static str,
        route: &'static str,
        path: String,
        body: Option<Value>,
        subject: Option<i64>,
    ) -> Event {
        let node = step % self.nodes.len();
        let url = format!("{}/api/v1{path}", self.nodes[node].url);
        let mut request = match method {
            "GET" => self.http.get(&url),
            "PATCH" => self.http.patch(&url),
            "DELETE" => self.http.delete(&url),
            _ => self.http.post(&url),
        }
        .bearer_auth(self.token(role))
        .timeout(Duration::from_secs(15));
        if let Some(b) = &body {
            request = request.json(b);
        }
        let sent = Utc::now();
        let (status, answer) = answer_of(request).await;
        let event = Event {
            step,
            role,
            node,
            method,
            route,
            path,
            body,
            status,
            answer,
            sent,
            answered: Utc::now(),
            subject,
        };
        self.history.events.push(event.clone());
        event
    }

    /// Sends run `run`'s key its signal `name` as the partner does: a call signed with its
    /// endpoint's secret (the endpoint made first if there is none yet), recorded as an
    /// operator's (its audit entry's actor is the endpoint).
    async fn partner_signal(&mut self, step: usize, run: i64, key: &str, name: &str) {
        if self.partner.is_none() {
            let body = json!({ "url_prefix": format!("{}/partner/", self.hook_url),
                               "signal_workflows": ["game"] });
            let e = self
                .post(step, Role::Admin, "/webhook-endpoints", body)
                .await;
            let secret = e.answer.get("secret").and_then(Value::as_str);
            if let Some(secret) = secret {
                self.history.secrets.push(secret.to_string());
            }
            let id = e.answer.pointer("/endpoint/id").and_then(Value::as_i64);
            let raw = secret.and_then(|s| s.strip_prefix("whsec_")).and_then(|b| {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.decode(b).ok()
            });
            let (Some(id), Some(raw)) = (id, raw) else {
                return;
            };
            self.partner = Some((id, raw));
        }
        let Some((endpoint, raw)) = self.partner.clone() else {
            return;
        };
        let body = json!({ "key": key, "name": name, "payload": { "step": step } });
        let text = body.to_string();
        let (message, at) = (format!("msg_{}_{step}", self.history.seed), Utc::now());
        let signature =
            crate::webhooks::signing::sign(&raw, &message, at.timestamp(), text.as_bytes());
        let node = step % self.nodes.len();
        let path = format!("/inbound/{endpoint}/signals");
        let request = self
            .http
            .post(format!("{}/api/v1{path}", self.nodes[node].url))
            .header("content-type", "application/json")
            .header("webhook-id", &message)
            .header("webhook-timestamp", at.timestamp().to_string())
            .header("webhook-signature", signature)
            .body(text)
            .timeout(Duration::from_secs(15));
        let sent = Utc::now();
        let (status, answer) = answer_of(request).await;
        self.history.events.push(Event {
            step,
            role: Role::Operator,
            node,
            method: "POST",
            route: "/inbound/{endpoint}/signals",
            path,
            body: Some(body),
            status,
            answer,
            sent,
            answered: Utc::now(),
            subject: Some(run),
        });
    }

    /// Sends one request about `id` on `route`, its path the route with `{id}` filled in.
    async fn send_about(
        &mut self,
        step: usize,
        role: Role,
        method: &'static str,
        route: &'static str,
        id: i64,
        body: Option<Value>,
    ) -> Event {
        let path = route.replace("{id}", &id.to_string());
        self.send(step, role, method, route, path, body, Some(id))
            .await
    }

    /// Posts `body` to make something on `route` (its path too).
    async fn post(&mut self, step: usize, role: Role, route: &'static str, body: Value) -> Event {
        self.send(step, role, "POST", route, route.into(), Some(body), None)
            .await
    }

    fn pick_job(&self, pick: usize) -> Option<i64> {
        (!self.jobs.is_empty()).then(|| self.jobs[pick % self.jobs.len()])
    }

    fn pick_question(&self, pick: usize) -> Option<i64> {
        pick_of(&self.questions, pick)
    }

    /// Starts (again) the node of `slot`, with its clock moved if a fault moved it.
    async fn start_node(&mut self, slot: usize) -> Result<Node, String> {
        self.generations[slot] += 1;
        let clock = self.clocks[slot];
        Node::start_moved(self.env, slot, self.generations[slot], clock).await
    }

    /// Runs step `i`; `Err` only when the run itself cannot go on (a node that will not start).
    pub async fn step(&mut self, i: usize, step: Step) -> Result<(), String> {
        self.history.steps.push((i, step));
        match step {
            Step::Insert {
                queue,
                work,
                delay_ms,
                unique,
                role,
            } => {
                let (kind, args) = match work {
                    Work::Noop {
                        sleep_ms,
                        fail_attempts,
                    } => (
                        "noop",
                        json!({ "tally": format!("h{}-{i}", self.history.seed),
                                "sleep_ms": sleep_ms, "fail_attempts": fail_attempts }),
                    ),
                    Work::Webhook { secret } => {
                        // One in four without a planted secret (by the step: the plans of the
                        // seeds stay as they were; those with one keep meeting the echo) refused
                        // for good by the receiver at its first call.
                        let no_retry = !secret && i % 4 == 1;
                        let mut args = json!({ "url": self.hook_url, "timeout_ms": 5000,
                                               "body": { "step": i, "no_retry": no_retry } });
                        if secret {
                            let value = format!("sekret-{}-{i}", self.history.seed);
                            self.history.secrets.push(value.clone());
                            args["headers"] = json!({ "authorization": format!("Bearer {value}") });
                        }
                        ("webhook", args)
                    }
                };
                let mut body = json!({ "kind": kind, "args": args, "queue": QUEUES[queue],
                                       "schedule_in_ms": delay_ms, "max_attempts": 3 });
                if let Some(u) = unique {
                    body["unique_key"] = json!(format!("u{u}"));
                }
                let e = self
                    .send(i, role, "POST", "/jobs", "/jobs".into(), Some(body), None)
                    .await;
                if let (true, Some(id)) = (e.ok(), e.job_id()) {
                    if !self.jobs.contains(&id) {
                        self.jobs.push(id);
                    }
                    // A unique key's holder is someone else's job, not this secret's.
                    let existing = e.answer.get("existing").and_then(Value::as_bool);
                    if work == (Work::Webhook { secret: true })
                        && existing != Some(true)
                        && !self.secret_jobs.contains(&id)
                    {
                        self.secret_jobs.push(id);
                    }
                }
            }
            Step::Job { action, pick, role } => {
                let Some(id) = self.pick_job(pick) else {
                    return Ok(());
                };
                // From the pick's bits (the plans of the seeds stay as they were): an
                // operator's cancel sent as the application does, from SQL in its own
                // transaction, committed or rolled back.
                if action == JobAction::Cancel && role != Role::Viewer && pick & (1 << 41) != 0 {
                    self.sql_cancel(i, id, pick & (1 << 42) != 0).await;
                    return Ok(());
                }
                let (method, route, path, body) = match action {
                    JobAction::Cancel => ("POST", "/jobs/{id}/cancel", "cancel", None),
                    JobAction::Retry => ("POST", "/jobs/{id}/retry", "retry", None),
                    JobAction::RunNow => ("POST", "/jobs/{id}/run-now", "run-now", None),
                    JobAction::Reschedule { delay_ms } => (
                        "POST",
                        "/jobs/{id}/reschedule",
                        "reschedule",
                        Some(json!({ "scheduled_at":
                            (Utc::now() + chrono::Duration::milliseconds(delay_ms as i64)).to_rfc3339() })),
                    ),
                    JobAction::Delete => ("DELETE", "/jobs/{id}", "", None),
                    JobAction::Read => ("GET", "/jobs/{id}", "", None),
                };
                let path = if path.is_empty() {
                    format!("/jobs/{id}")
                } else {
                    format!("/jobs/{id}/{path}")
                };
                self.send(i, role, method, route, path, body, Some(id))
                    .await;
            }
            Step::Bulk { action, queue } => {
                let (action, states) = match action {
                    BulkAction::Cancel => {
                        ("cancel", json!(["scheduled", "available", "retryable"]))
                    }
                    BulkAction::Retry => ("retry", json!(["discarded", "cancelled"])),
                    BulkAction::RunNow => ("run_now", json!(["scheduled", "retryable"])),
                    BulkAction::DeleteWaiting => {
                        ("delete", json!(["scheduled", "available", "retryable"]))
                    }
                    BulkAction::DeleteFinal => {
                        ("delete", json!(["completed", "discarded", "cancelled"]))
                    }
                };
                let body = json!({ "action": action,
                                   "filter": { "queue": QUEUES[queue], "states": states } });
                self.post(i, Role::Operator, "/jobs/bulk", body).await;
            }
            Step::PauseQueue { queue } | Step::ResumeQueue { queue } => {
                let pause = matches!(step, Step::PauseQueue { .. });
                let (route, verb) = if pause {
                    ("/queues/{name}/pause", "pause")
                } else {
                    ("/queues/{name}/resume", "resume")
                };
                let path = format!("/queues/{}/{verb}", QUEUES[queue]);
                self.send(i, Role::Operator, "POST", route, path, None, None)
                    .await;
            }
            Step::PauseKind { kind } | Step::ResumeKind { kind } => {
                let pause = matches!(step, Step::PauseKind { .. });
                let (route, verb) = if pause {
                    ("/kinds/{kind}/pause", "pause")
                } else {
                    ("/kinds/{kind}/resume", "resume")
                };
                let path = format!("/kinds/{}/{verb}", KINDS[kind]);
                self.send(i, Role::Operator, "POST", route, path, None, None)
                    .await;
            }
            Step::Limits {
                queue,
                concurrency,
                global,
                rate,
                per,
            } => {
                let body = json!({ "concurrency": concurrency, "global_concurrency": global,
                                   "rate": rate, "per": per });
                let path = format!("/queues/{}", QUEUES[queue]);
                self.send(
                    i,
                    Role::Operator,
                    "PATCH",
                    "/queues/{name}",
                    path,
                    Some(body),
                    None,
                )
                .await;
            }
            Step::ScheduleCreate(spec) => {
                let mut body = schedule_body(&spec);
                body["name"] = json!(format!("s{}", spec.name));
                body["job"] = json!({ "kind": "noop", "queue": QUEUES[spec.queue],
                                      "args": { "sleep_ms": 50 } });
                let e = self.post(i, Role::Operator, "/schedules", body).await;
                if let (true, Some(id)) = (e.ok(), e.answer.get("id").and_then(Value::as_i64)) {
                    self.schedules.push((id, format!("s{}", spec.name)));
                }
            }
            Step::Schedule { name, action } => {
                let (method, route, verb) = match action {
                    ScheduleAction::Pause => ("POST", "/schedules/{name}/pause", "/pause"),
                    ScheduleAction::Resume => ("POST", "/schedules/{name}/resume", "/resume"),
                    ScheduleAction::Trigger => ("POST", "/schedules/{name}/trigger", "/trigger"),
                    ScheduleAction::Delete => ("DELETE", "/schedules/{name}", ""),
                };
                let path = format!("/schedules/s{name}{verb}");
                let e = self
                    .send(i, Role::Operator, method, route, path, None, None)
                    .await;
                if let (ScheduleAction::Trigger, true, Some(id)) = (action, e.ok(), e.job_id()) {
                    self.jobs.push(id);
                }
            }
            Step::ScheduleEdit(spec) => {
                let mut body = schedule_body(&spec);
                body["queue"] = json!(QUEUES[spec.queue]);
                self.send(
                    i,
                    Role::Operator,
                    "PATCH",
                    "/schedules/{name}",
                    format!("/schedules/s{}", spec.name),
                    Some(body),
                    None,
                )
                .await;
            }
            Step::QuestionCreate { game_in_ms } => {
                let at = Utc::now() + chrono::Duration::milliseconds(game_in_ms as i64);
                // From the plan's draw (its seeds' plans unchanged): the later questions belong
                // to one of two games, each started with its workflow (or keeping its live run),
                // which the workflow actions then pick among the others.
                let in_game = game_in_ms >= 900;
                let game = match in_game {
                    true => format!("Game w{game_in_ms}"),
                    false => format!("Game {i}"),
                };
                let mut body = json!({ "game": game, "prompt": "Who scores first?",
                                       "choices": CHOICES,
                                       "game_time": at.to_rfc3339() });
                if in_game {
                    // The game's result asked of the receiver every second, which answers it
                    // final a moment after its first call; its players told in pages of two.
                    let api = self.hook_url.trim_end_matches("/hook");
                    body["workflow"] = json!({
                        "result_url": format!("{api}/result/w{game_in_ms}"),
                        "poll_every_ms": 1000,
                        "notify_url": self.hook_url,
                        "notify_tasks": 2,
                        "notify_batch": 2,
                    });
                }
                let e = self.post(i, Role::Operator, "/questions", body).await;
                let run = e.answer.get("workflow").and_then(|w| w.get("run"));
                if let (true, Some(run)) = (e.ok(), run.and_then(Value::as_i64)) {
                    if !self.runs.contains(&run) {
                        self.runs.push(run);
                    }
                }
                if let (true, Some(id)) = (e.ok(), e.answer.get("id").and_then(Value::as_i64)) {
                    self.questions.push(id);
                    // A game's players predict at once (before its time), for its notify step
                    // to tell them in pages; the same players on every game.
                    if in_game {
                        for player in 0..5usize {
                            let body = json!({ "player": format!("fan{player}"),
                                               "choice": CHOICES[player % 3] });
                            self.send_about(
                                i,
                                Role::Operator,
                                "POST",
                                "/questions/{id}/predictions",
                                id,
                                Some(body),
                            )
                            .await;
                        }
                    }
                    if let Some(job) = e
                        .answer
                        .get("lock_job")
                        .and_then(|j| j.get("id"))
                        .and_then(Value::as_i64)
                    {
                        self.jobs.push(job);
                    }
                }
            }
            Step::QuestionMove { pick, game_in_ms } => {
                let Some(q) = self.pick_question(pick) else {
                    return Ok(());
                };
                let at = Utc::now() + chrono::Duration::milliseconds(game_in_ms as i64);
                self.send_about(
                    i,
                    Role::Operator,
                    "PATCH",
                    "/questions/{id}",
                    q,
                    Some(json!({ "game_time": at.to_rfc3339() })),
                )
                .await;
            }
            Step::Predict {
                pick,
                player,
                choice,
            } => {
                let Some(q) = self.pick_question(pick) else {
                    return Ok(());
                };
                let body = json!({ "player": format!("p{player}"),
                                   "choice": CHOICES[choice as usize % 3] });
                self.send_about(
                    i,
                    Role::Operator,
                    "POST",
                    "/questions/{id}/predictions",
                    q,
                    Some(body),
                )
                .await;
            }
            Step::Settle { pick, choice } => {
                let Some(q) = self.pick_question(pick) else {
                    return Ok(());
                };
                let body = json!({ "correct_choice": CHOICES[choice as usize % 2] });
                self.send_about(
                    i,
                    Role::Operator,
                    "POST",
                    "/questions/{id}/settle",
                    q,
                    Some(body),
                )
                .await;
            }
            Step::QuestionDelete { pick } => {
                let Some(q) = self.pick_question(pick) else {
                    return Ok(());
                };
                self.send_about(i, Role::Operator, "DELETE", "/questions/{id}", q, None)
                    .await;
            }
            Step::SqlInsert {
                queue,
                delay_ms,
                rollback,
            } => self.sql_insert(i, queue, delay_ms, rollback).await,
            Step::EndpointCreate => {
                let value = format!("endpoint-sekret-{}-{i}", self.history.seed);
                self.history.secrets.push(value.clone());
                let body = json!({ "url_prefix": format!("{}/e{i}/", self.hook_url),
                                   "headers": { "x-partner-key": value }, "allow_calls": true,
                                   "private_network": true });
                let e = self.post(i, Role::Admin, "/webhook-endpoints", body).await;
                if let Some(secret) = e.answer.get("secret").and_then(Value::as_str) {
                    self.history.secrets.push(secret.to_string());
                }
                // `{"endpoint": {...}, "secret"}` (the endpoints' edits and rotations had none
                // to pick while this read `id` at the top).
                let id = e.answer.pointer("/endpoint/id").and_then(Value::as_i64);
                if let (true, Some(id)) = (e.ok(), id) {
                    self.endpoints.push(id);
                }
            }
            Step::EndpointEdit { pick } => {
                let Some(id) = pick_of(&self.endpoints, pick) else {
                    return Ok(());
                };
                let value = format!("endpoint-sekret-{}-{i}", self.history.seed);
                self.history.secrets.push(value.clone());
                let body = json!({ "headers": { "x-partner-key": value } });
                self.send_about(
                    i,
                    Role::Admin,
                    "PATCH",
                    "/webhook-endpoints/{id}",
                    id,
                    Some(body),
                )
                .await;
            }
            Step::EndpointRotate { pick } => {
                let Some(id) = pick_of(&self.endpoints, pick) else {
                    return Ok(());
                };
                let e = self
                    .send_about(
                        i,
                        Role::Admin,
                        "POST",
                        "/webhook-endpoints/{id}/rotate",
                        id,
                        Some(json!({ "overlap_secs": 0 })),
                    )
                    .await;
                if let Some(secret) = e.answer.get("secret").and_then(Value::as_str) {
                    self.history.secrets.push(secret.to_string());
                }
            }
            Step::AlertRuleCreate { rule } => {
                let (name, condition) = ALERT_RULES[rule % ALERT_RULES.len()];
                let mut body: Value = serde_json::from_str(condition).unwrap_or_default();
                body["name"] = json!(name);
                body["notify_url"] = json!(self.hook_url);
                let e = self.post(i, Role::Admin, "/alert-rules", body).await;
                if let (true, Some(id)) = (e.ok(), e.answer.get("id").and_then(Value::as_i64)) {
                    self.alert_rules.push(id);
                }
            }
            Step::AlertRuleSwitch { pick, enabled } => {
                let Some(id) = pick_of(&self.alert_rules, pick) else {
                    return Ok(());
                };
                self.send_about(
                    i,
                    Role::Admin,
                    "PATCH",
                    "/alert-rules/{id}",
                    id,
                    Some(json!({ "enabled": enabled })),
                )
                .await;
            }
            Step::Read { what, role, pick } => self.read(i, what, role, pick).await,
            Step::ForgedMeta { key, pick } => {
                let key = RESERVED_META[key % RESERVED_META.len()];
                let meta = forged_meta(key, pick_of_schedule(&self.schedules, pick));
                let body = json!({ "kind": "noop", "args": { "sleep_ms": 0 }, "queue": QUEUES[0],
                                   "meta": meta });
                let e = self.post(i, Role::Operator, "/jobs", body).await;
                // Refused, it changes nothing; taken, it is a job like any other (and a broken
                // promise).
                if let (true, Some(id)) = (e.ok(), e.job_id()) {
                    if !self.jobs.contains(&id) {
                        self.jobs.push(id);
                    }
                }
            }
            Step::ErrorSearch { act, pick } => {
                let secrets = &self.history.secrets;
                let searched = (!secrets.is_empty()).then(|| secrets[pick % secrets.len()].clone());
                let text = searched.unwrap_or_else(|| {
                    let planted = format!("search-sekret-{}-{i}", self.history.seed);
                    self.history.secrets.push(planted.clone());
                    planted
                });
                // The newest job the history knows stands for the count an admin confirms first.
                let max_id = self.jobs.iter().max().copied().unwrap_or(1);
                let filter = json!({ "error": text, "max_id": max_id });
                let (route, body) = match act {
                    ErrorSearchAct::Cancel => (
                        "/jobs/bulk",
                        json!({ "action": "cancel", "filter": filter }),
                    ),
                    ErrorSearchAct::Edit { priority } => (
                        "/jobs/edit",
                        json!({ "filter": filter, "edit": { "priority": priority } }),
                    ),
                    ErrorSearchAct::Shift { by_ms } => {
                        ("/jobs/shift", json!({ "filter": filter, "by_ms": by_ms }))
                    }
                };
                self.post(i, Role::Admin, route, body).await;
            }
            Step::Fault { fault } => {
                let at = Utc::now();
                let done = self.fault(fault).await;
                self.history.faults.push(FaultEvent {
                    step: i,
                    fault,
                    at,
                    done: Utc::now(),
                });
                done?;
            }
            Step::WorkflowInsert {
                queue,
                shape,
                fail,
                policies,
                key,
                role,
            } => {
                let edges = WORKFLOW_SHAPES[shape];
                let count = edges.iter().map(|(s, _)| s + 1).max().unwrap_or(1);
                let (deadline, timer) = wait_of(policies);
                let steps: Vec<Value> = (0..count)
                    .map(|k| {
                        let sleep_ms = [0, 5, 50][k % 3];
                        let after: Vec<Value> = edges
                            .iter()
                            .enumerate()
                            .filter(|(_, (s, _))| *s == k)
                            .map(|(n, (_, dep))| {
                                let bits = (policies >> (2 * n)) & 3;
                                json!({ "step": format!("s{dep}"),
                                        "on_failure": ON_FAILURE[bits as usize] })
                            })
                            .collect();
                        let mut step = json!({ "name": format!("s{k}"), "after": after, "job": {
                            "kind": "noop", "queue": QUEUES[queue], "max_attempts": 1,
                            "args": { "tally": format!("h{}-{i}-s{k}", self.history.seed),
                                      "tally_by_job": true,
                                      "sleep_ms": sleep_ms,
                                      "fail_attempts": u8::from(k == fail as usize) } } });
                        if let Some((_, n)) = tasks_of(policies, count).filter(|m| m.0 == k) {
                            step["tasks"] = json!(n);
                        }
                        match (k, deadline, timer) {
                            (1, Some(ms), _) => {
                                step["signal"] = json!("go");
                                step["deadline"] = json!({ "time": "kickoff_at", "offset_ms": ms });
                            }
                            (0, _, Some(ms)) => {
                                step["at"] = json!({ "time": "kickoff_at", "offset_ms": ms });
                            }
                            _ => {}
                        }
                        step
                    })
                    .collect();
                let mut body = json!({ "name": "game", "steps": steps,
                                       "times": { "kickoff_at": Utc::now() } });
                let key = key.map(|k| format!("w{k}"));
                if let Some(k) = &key {
                    body["key"] = json!(k);
                }
                let e = self
                    .send(
                        i,
                        role,
                        "POST",
                        "/workflows",
                        "/workflows".into(),
                        Some(body),
                        None,
                    )
                    .await;
                let run = e
                    .answer
                    .get("run")
                    .and_then(|r| r.get("id"))
                    .and_then(Value::as_i64);
                if let (true, Some(id)) = (e.ok(), run) {
                    if let Some(k) = key {
                        self.run_keys.insert(id, k);
                    }
                    if !self.runs.contains(&id) {
                        self.runs.push(id);
                    }
                }
            }
            Step::WorkflowCancel { pick, role } => {
                let Some(id) = pick_of(&self.runs, pick) else {
                    return Ok(());
                };
                self.send(
                    i,
                    role,
                    "POST",
                    "/workflows/{id}/cancel",
                    format!("/workflows/{id}/cancel"),
                    None,
                    Some(id),
                )
                .await;
            }
            Step::WorkflowRetry { pick, mode, role } => {
                let Some(id) = pick_of(&self.runs, pick) else {
                    return Ok(());
                };
                let body = json!({ "mode": RETRY_MODES[mode as usize % RETRY_MODES.len()] });
                self.send(
                    i,
                    role,
                    "POST",
                    "/workflows/{id}/retry",
                    format!("/workflows/{id}/retry"),
                    Some(body),
                    Some(id),
                )
                .await;
            }
            Step::WorkflowSkip { pick, nth, role } => {
                let Some(id) = pick_of(&self.runs, pick) else {
                    return Ok(());
                };
                self.send(
                    i,
                    role,
                    "POST",
                    "/workflows/{id}/skip",
                    format!("/workflows/{id}/skip"),
                    Some(json!({ "step": format!("s{nth}") })),
                    Some(id),
                )
                .await;
            }
            Step::WorkflowRerun { pick, from, role } => {
                let Some(id) = pick_of(&self.runs, pick) else {
                    return Ok(());
                };
                let e = self
                    .send(
                        i,
                        role,
                        "POST",
                        "/workflows/{id}/rerun",
                        format!("/workflows/{id}/rerun"),
                        Some(json!({ "from": format!("s{from}") })),
                        Some(id),
                    )
                    .await;
                if let (true, Some(new)) =
                    (e.ok(), e.answer.pointer("/run/id").and_then(Value::as_i64))
                {
                    self.runs.push(new);
                    if let Some(k) = self.run_keys.get(&id).cloned() {
                        self.run_keys.insert(new, k);
                    }
                }
            }
            Step::WorkflowSignal {
                pick,
                other,
                role,
                signed,
            } => {
                let name = if other { "other" } else { "go" };
                if signed {
                    // Among the runs with a key (a partner names its run by key).
                    let keyed: Vec<i64> = self
                        .runs
                        .iter()
                        .filter(|r| self.run_keys.contains_key(r))
                        .copied()
                        .collect();
                    if let Some(id) = pick_of(&keyed, pick) {
                        let key = self.run_keys[&id].clone();
                        self.partner_signal(i, id, &key, name).await;
                        return Ok(());
                    }
                }
                let Some(id) = pick_of(&self.runs, pick) else {
                    return Ok(());
                };
                // From the pick's bits: the signal sent as the application does, from SQL in
                // its own transaction (its result saved with it), committed or rolled back.
                if role != Role::Viewer && pick & (1 << 41) != 0 {
                    self.sql_signal(i, id, name, pick & (1 << 42) != 0).await;
                    return Ok(());
                }
                self.send(
                    i,
                    role,
                    "POST",
                    "/workflows/{id}/signals",
                    format!("/workflows/{id}/signals"),
                    Some(json!({ "name": name, "payload": { "step": i } })),
                    Some(id),
                )
                .await;
            }
            Step::WorkflowMoveTimes { pick, in_ms, role } => {
                let Some(id) = pick_of(&self.runs, pick) else {
                    return Ok(());
                };
                let at = Utc::now() + chrono::Duration::milliseconds(in_ms as i64);
                self.send(
                    i,
                    role,
                    "POST",
                    "/workflows/{id}/times",
                    format!("/workflows/{id}/times"),
                    Some(json!({ "times": { "kickoff_at": at } })),
                    Some(id),
                )
                .await;
            }
            Step::Wait { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
        Ok(())
    }

    /// After the plan and the quiet that follows it (every attempt made): each reader reads once
    /// more every surface a planted secret could leak through, the lists, the exports, the audit
    /// log and each secret-carrying job's record, so that what the last steps planted and the
    /// receiver echoed after the plan's own reads is looked at too. `i`: the plan's length.
    pub async fn read_everything(&mut self, i: usize) {
        for role in [Role::Viewer, Role::Operator] {
            for what in [
                ReadWhat::Jobs,
                ReadWhat::Deliveries,
                ReadWhat::ExportJsonl,
                ReadWhat::ExportCsv,
                ReadWhat::Audit,
            ] {
                self.read(i, what, role, 0).await;
            }
            for pick in 0..self.secret_jobs.len() {
                for what in [ReadWhat::Job, ReadWhat::Attempts, ReadWhat::JobDeliveries] {
                    self.read(i, what, role, pick).await;
                }
            }
        }
    }

    /// Reads `what` as `role`.
    async fn read(&mut self, i: usize, what: ReadWhat, role: Role, pick: usize) {
        // A job with a planted secret when there is one: only those can leak one.
        let job = pick_of(&self.secret_jobs, pick).or_else(|| self.pick_job(pick));
        let (route, path, subject) = match (what, job) {
            (ReadWhat::Jobs, _) => ("/jobs", "/jobs?limit=500".to_string(), None),
            (ReadWhat::Schedules, _) => ("/schedules", "/schedules".into(), None),
            (ReadWhat::Deliveries, _) => (
                "/webhook-deliveries",
                "/webhook-deliveries?limit=500".into(),
                None,
            ),
            (ReadWhat::Endpoints, _) => ("/webhook-endpoints", "/webhook-endpoints".into(), None),
            // Text answers: `send` keeps them as a JSON string (one line of JSON reads as JSON),
            // the same text for the secrets' search.
            (ReadWhat::ExportJsonl, _) => {
                ("/jobs/export", "/jobs/export?format=jsonl".into(), None)
            }
            (ReadWhat::ExportCsv, _) => ("/jobs/export", "/jobs/export?format=csv".into(), None),
            (ReadWhat::Job, Some(id)) => ("/jobs/{id}", format!("/jobs/{id}"), Some(id)),
            (ReadWhat::Attempts, Some(id)) => (
                "/jobs/{id}/attempts",
                format!("/jobs/{id}/attempts"),
                Some(id),
            ),
            (ReadWhat::JobDeliveries, Some(id)) => (
                "/webhook-deliveries",
                format!("/webhook-deliveries?job_id={id}"),
                Some(id),
            ),
            (ReadWhat::Job | ReadWhat::Attempts | ReadWhat::JobDeliveries, None) => return,
            (ReadWhat::Audit, _) => return self.read_audit(i, role).await,
        };
        self.send(i, role, "GET", route, path, None, subject).await;
    }

    /// Reads the audit log, every page of it, as `role`'s dashboard does: the `audit` server
    /// function its page calls, with the role's session. What a reader is served, not what the
    /// product's redaction is thought to do.
    async fn read_audit(&mut self, i: usize, role: Role) {
        let Some(cookie) = self.session(i, role).await else {
            return;
        };
        let mut before: Option<i64> = None;
        for _ in 0..MAX_AUDIT_PAGES {
            let form = before
                .map(|b| format!("query[before]={b}"))
                .unwrap_or_default();
            let body = before.map(|b| json!({ "query": { "before": b } }));
            let e = self
                .send_dashboard(i, role, DASHBOARD_AUDIT, &cookie, form, body)
                .await;
            if e.status == 401 {
                // The session ended (swept, or its user changed): the next read signs in again.
                self.sessions.retain(|(r, _)| *r != role);
                return;
            }
            match e.answer.get("next_before").and_then(Value::as_i64) {
                Some(next) if e.ok() => before = Some(next),
                _ => return,
            }
        }
    }

    /// `role`'s dashboard session cookie, signing in through the login server function the first
    /// time. Sessions live in PostgreSQL: every node honours one, across restarts. `None` for the
    /// admin (the bootstrap token has no account) or when the sign-in failed.
    async fn session(&mut self, i: usize, role: Role) -> Option<String> {
        if let Some((_, cookie)) = self.sessions.iter().find(|(r, _)| *r == role) {
            return Some(cookie.clone());
        }
        let login = match role {
            Role::Admin => return None,
            Role::Operator => &self.logins.operator,
            Role::Viewer => &self.logins.viewer,
        };
        let name = login.name.clone();
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("name", &login.name)
            .append_pair("password", &login.password)
            .finish();
        let node = i % self.nodes.len();
        // The redirect a sign-in may answer is not followed: its `Set-Cookie` is what counts.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .ok()?;
        let sent = Utc::now();
        let answered = http
            .post(format!("{}{DASHBOARD_SIGN_IN}", self.nodes[node].url))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .timeout(Duration::from_secs(15))
            .send()
            .await;
        let (status, cookie, text) = match answered {
            Ok(r) => {
                let status = r.status().as_u16();
                let prefix = format!("{}=", crate::http::session::COOKIE);
                let cookie = r
                    .headers()
                    .get_all(reqwest::header::SET_COOKIE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find(|v| v.starts_with(&prefix))
                    .and_then(|v| v.split(';').next())
                    .map(String::from);
                (status, cookie, r.text().await.unwrap_or_default())
            }
            Err(e) => (0, None, e.to_string()),
        };
        // The password is not recorded.
        self.history.events.push(Event {
            step: i,
            role,
            node,
            method: "POST",
            route: DASHBOARD_SIGN_IN,
            path: DASHBOARD_SIGN_IN.into(),
            body: Some(json!({ "name": name })),
            status,
            answer: Value::String(text),
            sent,
            answered: Utc::now(),
            subject: None,
        });
        // A refused sign-in may set a cookie too (the form remembers the name): not a session.
        let cookie = cookie.filter(|_| (200..400).contains(&status))?;
        self.sessions.push((role, cookie.clone()));
        Some(cookie)
    }

    /// Calls the dashboard's server function `route` (`/_console/...`) with the session `cookie`
    /// and the urlencoded arguments `form`, as a hydrated page does, and records it (`body`: the
    /// arguments as JSON).
    async fn send_dashboard(
        &mut self,
        i: usize,
        role: Role,
        route: &'static str,
        cookie: &str,
        form: String,
        body: Option<Value>,
    ) -> Event {
        let node = i % self.nodes.len();
        let request = self
            .http
            .post(format!("{}{route}", self.nodes[node].url))
            .header(reqwest::header::COOKIE, cookie)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .timeout(Duration::from_secs(15));
        let sent = Utc::now();
        let (status, answer) = answer_of(request).await;
        let event = Event {
            step: i,
            role,
            node,
            method: "POST",
            route,
            path: route.into(),
            body,
            status,
            answer,
            sent,
            answered: Utc::now(),
            subject: None,
        };
        self.history.events.push(event.clone());
        event
    }

    /// Cancels job `id` as the application does (`kickoff_cancel_job`), in its transaction with
    /// its own row, committed or rolled back: an event of method `SQL` on the API's route (a
    /// rolled-back one on a route of its own), answered as the API answers (the job, or the
    /// status of the API's refusal).
    async fn sql_cancel(&mut self, i: usize, id: i64, rollback: bool) {
        let sent = Utc::now();
        let done = async {
            let mut tx = self.pool.begin().await?;
            app_table(&mut tx).await?;
            let job: Value = sqlx::query_scalar("SELECT to_jsonb(j) FROM kickoff_cancel_job($1) j")
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
            app_row(&mut tx, i, id).await?;
            finish(tx, rollback).await?;
            Ok::<_, sqlx::Error>(job)
        }
        .await;
        let path = format!("/jobs/{id}/cancel");
        let route = match rollback {
            true => "/jobs/{id}/cancel#rolled-back",
            false => "/jobs/{id}/cancel",
        };
        self.record_sql(i, route, path, None, Some(id), done, sent);
    }

    /// Sends run `run` its signal `name` as the application does (`kickoff_signal`), in its
    /// transaction with its own row (the game's result), committed or rolled back; recorded as
    /// [`Self::sql_cancel`] records.
    async fn sql_signal(&mut self, i: usize, run: i64, name: &str, rollback: bool) {
        let sent = Utc::now();
        let payload = json!({ "step": i });
        let done = async {
            let mut tx = self.pool.begin().await?;
            app_table(&mut tx).await?;
            app_row(&mut tx, i, run).await?;
            let signal: Value = sqlx::query_scalar(
                "SELECT to_jsonb(s) FROM kickoff_signal($1, $2, $3, 'sql:history') s",
            )
            .bind(run)
            .bind(name)
            .bind(&payload)
            .fetch_one(&mut *tx)
            .await?;
            finish(tx, rollback).await?;
            Ok::<_, sqlx::Error>(signal)
        }
        .await;
        let path = format!("/workflows/{run}/signals");
        let route = match rollback {
            true => "/workflows/{id}/signals#rolled-back",
            false => "/workflows/{id}/signals",
        };
        let body = json!({ "name": name, "payload": payload });
        self.record_sql(i, route, path, Some(body), Some(run), done, sent);
    }

    /// Records an action sent from SQL: 200 and its answer when it was done, the API's status
    /// for a refusal of Kickoff's (`KO003` 409, `KO005` 404, else 422), 0 when the database did
    /// not answer (it may have committed).
    #[allow(clippy::too_many_arguments)]
    fn record_sql(
        &mut self,
        step: usize,
        route: &'static str,
        path: String,
        body: Option<Value>,
        subject: Option<i64>,
        done: Result<Value, sqlx::Error>,
        sent: chrono::DateTime<Utc>,
    ) {
        let (status, answer) = match done {
            Ok(answer) => (200, answer),
            Err(e) => {
                let code = e
                    .as_database_error()
                    .and_then(|d| d.code())
                    .unwrap_or_default()
                    .to_string();
                let status = match code.as_str() {
                    "KO003" => 409,
                    "KO005" => 404,
                    c if c.starts_with("KO") => 422,
                    _ => 0,
                };
                (status, Value::String(e.to_string()))
            }
        };
        self.history.events.push(Event {
            step,
            role: Role::Admin,
            node: 0,
            method: "SQL",
            route,
            path,
            body,
            status,
            answer,
            sent,
            answered: Utc::now(),
            subject,
        });
    }

    /// Inserts a counting `noop` job with plain SQL, recorded as an event of method `SQL` (status
    /// 201 when it committed, 0 when the database did not answer).
    async fn sql_insert(&mut self, i: usize, queue: usize, delay_ms: u64, rollback: bool) {
        let args = json!({ "tally": format!("h{}-{i}", self.history.seed), "sleep_ms": 0,
                           "fail_attempts": 0 });
        let sent = Utc::now();
        let inserted = async {
            let mut tx = self.pool.begin().await?;
            // The application's own row, in the transaction that adds its job.
            app_table(&mut tx).await?;
            let (id, due): (i64, chrono::DateTime<Utc>) = sqlx::query_as(
                "SELECT id, scheduled_at FROM kickoff_add_job('noop', $2, $1,
                     scheduled_at => statement_timestamp() + make_interval(secs => $3 / 1000.0),
                     max_attempts => 3)",
            )
            .bind(QUEUES[queue])
            .bind(&args)
            .bind(delay_ms as f64)
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query("INSERT INTO history_app_rows (step, subject) VALUES ($1, $2)")
                .bind(i as i64)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            if rollback {
                tx.rollback().await?;
            } else {
                tx.commit().await?;
            }
            Ok::<_, sqlx::Error>((id, due))
        }
        .await;
        let (status, answer) = match inserted {
            Ok((id, due)) => {
                if !rollback {
                    self.jobs.push(id);
                }
                (
                    if rollback { 200 } else { 201 },
                    json!({ "job": { "id": id, "scheduled_at": due.to_rfc3339() } }),
                )
            }
            Err(e) => (0, Value::String(e.to_string())),
        };
        self.history.events.push(Event {
            step: i,
            role: Role::Admin,
            node: 0,
            method: "SQL",
            // A rolled-back insert's job was never acknowledged: a route of its own.
            route: if rollback {
                "/jobs#rolled-back"
            } else {
                "/jobs"
            },
            path: "/jobs".into(),
            body: Some(json!({ "queue": QUEUES[queue], "args": args,
                               "schedule_in_ms": delay_ms })),
            status,
            answer,
            sent,
            answered: Utc::now(),
            subject: None,
        });
    }

    async fn fault(&mut self, fault: Fault) -> Result<(), String> {
        match fault {
            Fault::Kill { node } | Fault::Restart { node } => {
                let slot = node % self.nodes.len();
                let victim = self.nodes.remove(slot);
                if matches!(fault, Fault::Kill { .. }) {
                    victim.kill9().await;
                } else {
                    victim.stop().await;
                }
                let fresh = self.start_node(slot).await?;
                self.nodes.insert(slot, fresh);
            }
            Fault::Clock { node, secs } => {
                let slot = node % self.nodes.len();
                self.nodes.remove(slot).stop().await;
                self.clocks[slot] = secs;
                let fresh = self.start_node(slot).await?;
                self.nodes.insert(slot, fresh);
            }
            Fault::CutListener { node } => {
                let app_name = self.nodes[node % self.nodes.len()].app_name.clone();
                crate::chaos::cut_listener(&self.pool, &app_name).await;
            }
            Fault::CrashDatabase => {
                self.cluster
                    .crash_and_restart()
                    .map_err(|e| format!("restart PostgreSQL: {e}"))?;
            }
            Fault::CutConnections { node } => {
                let app_name = self.nodes[node % self.nodes.len()].app_name.clone();
                crate::chaos::cut_connections(&self.pool, &app_name).await;
            }
            Fault::Failover => {
                // Once: the standby is the primary after it.
                if let Some(standby) = self.standby.take() {
                    standby.fail_over(self.cluster)?;
                    self.cluster = standby.cluster();
                }
            }
        }
        Ok(())
    }
}

/// What a schedule's creation and change both send: its interval and policies.
fn schedule_body(spec: &ScheduleSpec) -> Value {
    json!({ "every_ms": spec.every_ms, "overlap": spec.overlap, "missed": spec.missed })
}

/// The `pick`th of `ids` (modulo their number), if there are any.
fn pick_of(ids: &[i64], pick: usize) -> Option<i64> {
    (!ids.is_empty()).then(|| ids[pick % ids.len()])
}

fn pick_of_schedule(schedules: &[(i64, String)], pick: usize) -> Option<(i64, String)> {
    (!schedules.is_empty()).then(|| schedules[pick % schedules.len()].clone())
}

/// A job's meta setting the reserved `key` to what Kickoff itself writes there. A schedule's
/// markers come as a whole forged run of `schedule` (one the history made, when there is one):
/// its slot 0, which the schedule would then take as run.
fn forged_meta(key: &str, schedule: Option<(i64, String)>) -> Value {
    let (schedule_id, name) = schedule.unwrap_or((1, "s0".into()));
    let run = json!({ "schedule_id": schedule_id, "schedule": name, "slot_ms": 0 });
    let value = match key {
        "schedule_id" => json!(schedule_id),
        "schedule" => json!(name),
        "slot" => json!("1970-01-01T00:00:00Z"),
        "slot_ms" => json!(0),
        "overlap" => json!("skip"),
        "trigger" => json!(true),
        "triggered_by" => json!("operator"),
        "snoozes" => json!(1),
        "owner" => json!("question 1"),
        "alert_event" => json!("fired"),
        _ => json!(1),
    };
    let mut meta = match key {
        "schedule_id" | "schedule" | "slot" | "slot_ms" | "overlap" | "trigger"
        | "triggered_by" => run,
        _ => json!({}),
    };
    meta[key] = value;
    meta
}

/// A request's status and answer (JSON, or its text as a string; status 0 and the error when no
/// answer came).
async fn answer_of(request: reqwest::RequestBuilder) -> (u16, Value) {
    match request.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            let answer = serde_json::from_str(&text).unwrap_or(Value::String(text));
            (status, answer)
        }
        Err(e) => (0, Value::String(e.to_string())),
    }
}

/// The application's own table in a history: a row of each action it sends from SQL, written in
/// the action's transaction (by the step that sent it, and what it named).
async fn app_table(tx: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS history_app_rows (step bigint PRIMARY KEY, subject bigint)",
    )
    .execute(tx)
    .await?;
    Ok(())
}

async fn app_row(
    tx: &mut sqlx::PgConnection,
    step: usize,
    subject: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO history_app_rows (step, subject) VALUES ($1, $2)")
        .bind(step as i64)
        .bind(subject)
        .execute(tx)
        .await?;
    Ok(())
}

/// Ends an application's transaction as its step says.
async fn finish(
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    rollback: bool,
) -> Result<(), sqlx::Error> {
    match rollback {
        true => tx.rollback().await,
        false => tx.commit().await,
    }
}
