//! Runs a plan's steps against the nodes: each action as the REST request an operator would send
//! (to one node or another, with the token of the step's role), each fault on the processes or
//! the database; every request and answer recorded.

use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};

use super::plan::{
    BulkAction, Fault, JobAction, ReadWhat, Role, ScheduleAction, ScheduleSpec, Step, Work,
    ALERT_RULES, KINDS, QUEUES,
};
use super::record::{Event, FaultEvent, History};
use crate::chaos::node::{Node, NodeEnv};
use crate::postgres::EmbeddedPostgres;

/// Every question's choices.
const CHOICES: [&str; 3] = ["Home", "Away", "Nobody"];

/// The tokens of the three roles.
pub struct Tokens {
    pub admin: String,
    pub operator: String,
    pub viewer: String,
}

pub struct Driver<'a> {
    pub http: reqwest::Client,
    pub env: &'a NodeEnv,
    pub cluster: &'a EmbeddedPostgres,
    pub pool: crate::engine::db::Db,
    pub nodes: Vec<Node>,
    pub generations: Vec<usize>,
    /// How far each node slot's wall clock is moved (seconds; 0: not), kept across its restarts.
    pub clocks: Vec<i32>,
    pub tokens: Tokens,
    pub hook_url: String,
    /// Jobs whose insert was acknowledged, in order: a step's `pick` chooses among them.
    pub jobs: Vec<i64>,
    pub questions: Vec<i64>,
    /// Webhook endpoints and alert rules made so far (their ids).
    pub endpoints: Vec<i64>,
    pub alert_rules: Vec<i64>,
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
        let (status, answer) = match request.send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let text = r.text().await.unwrap_or_default();
                let answer = serde_json::from_str(&text).unwrap_or(Value::String(text));
                (status, answer)
            }
            Err(e) => (0, Value::String(e.to_string())),
        };
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
                        let mut args = json!({ "url": self.hook_url, "timeout_ms": 5000 });
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
                }
            }
            Step::Job { action, pick, role } => {
                let Some(id) = self.pick_job(pick) else {
                    return Ok(());
                };
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
                self.post(i, Role::Operator, "/schedules", body).await;
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
                let body = json!({ "game": format!("Game {i}"), "prompt": "Who scores first?",
                                   "choices": CHOICES,
                                   "game_time": at.to_rfc3339() });
                let e = self.post(i, Role::Operator, "/questions", body).await;
                if let (true, Some(id)) = (e.ok(), e.answer.get("id").and_then(Value::as_i64)) {
                    self.questions.push(id);
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
            Step::SqlInsert { queue, delay_ms } => self.sql_insert(i, queue, delay_ms).await,
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
                if let (true, Some(id)) = (e.ok(), e.answer.get("id").and_then(Value::as_i64)) {
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
            Step::Read { what, role } => {
                let (route, path) = match what {
                    ReadWhat::Jobs => ("/jobs", "/jobs?limit=500"),
                    ReadWhat::Schedules => ("/schedules", "/schedules"),
                    ReadWhat::Deliveries => ("/webhook-deliveries", "/webhook-deliveries"),
                    ReadWhat::Endpoints => ("/webhook-endpoints", "/webhook-endpoints"),
                };
                self.send(i, role, "GET", route, path.into(), None, None)
                    .await;
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
            Step::Wait { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
        Ok(())
    }

    /// Inserts a counting `noop` job with plain SQL, recorded as an event of method `SQL` (status
    /// 201 when it committed, 0 when the database did not answer).
    async fn sql_insert(&mut self, i: usize, queue: usize, delay_ms: u64) {
        let args = json!({ "tally": format!("h{}-{i}", self.history.seed), "sleep_ms": 0,
                           "fail_attempts": 0 });
        let sent = Utc::now();
        let inserted: Result<(i64, chrono::DateTime<Utc>), _> = sqlx::query_as(
            "INSERT INTO jobs (kind, queue, args, state, scheduled_at, max_attempts)
             VALUES ('noop', $1, $2,
                     CASE WHEN $3 > 0 THEN 'scheduled' ELSE 'available' END::job_state,
                     now() + make_interval(secs => $3 / 1000.0), 3)
             RETURNING id, scheduled_at",
        )
        .bind(QUEUES[queue])
        .bind(&args)
        .bind(delay_ms as f64)
        .fetch_one(&self.pool)
        .await;
        let (status, answer) = match inserted {
            Ok((id, due)) => {
                self.jobs.push(id);
                (
                    201,
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
            route: "/jobs",
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
