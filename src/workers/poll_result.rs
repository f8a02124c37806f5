//! `poll_game_result`: the `poll` step of the game's workflow (`questions::game_workflow`), for
//! a partner that does not call us: it asks the partner's result API every `every_ms` (30 s
//! unless told otherwise) from the game's lock on, and once the answer says the result is final
//! it sends the run its `final` signal (`{"answers": …}`, the source `polled <host>`) in the
//! transaction that completes the step: the settle starts at once.
//!
//! The call is a webhook's: `GET <url>` checked against `KICKOFF_WEBHOOK_ALLOWED_HOSTS` or a
//! webhook endpoint that allows calls (at the run's start and before each call), carrying the
//! endpoint's default headers (the partner's API key) and signature, each one recorded as a
//! delivery of the step's job. The answer, at most [`MAX_ANSWER_BYTES`]:
//!
//! - `{"final": true, "answers": {"<question id>": "<choice>"}}`: the result; the signal is
//!   stored (or one that came first, a partner's signed call or an operator's, stands) and the
//!   step completes;
//! - any other 2xx JSON (`{"final": false}`), a non-2xx answer, a time-out or a refused
//!   connection: asked again after `every_ms` (a snooze: no attempt spent, `meta.snoozes`
//!   counts the polls), the reason in the attempt's output;
//! - a `429` or `503` with `Retry-After`: asked again then;
//! - a host no longer allowed: the step fails (fatal), the settle still waits for another
//!   signal.
//!
//! It stops once the settle no longer waits: completed when the signal came another way (or the
//! settle was skipped, cancelled), failed when the settle's deadline passed without a final
//! answer (so a retry of the run's failed steps polls again). Its waits never pass that
//! deadline.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::db::Db;
use crate::engine::{
    ArgsRefused, BoxFuture, Client, ClientError, JobContext, WorkError, Worker, Workers,
};
use crate::questions::game_workflow::{
    DEFAULT_POLL_EVERY_MS, FINAL, MAX_POLL_EVERY_MS, MIN_POLL_EVERY_MS, POLL_RESULT_KIND,
    SETTLE_STEP,
};

/// The most of an answer read: a final result of many questions fits.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How long one call may take.
const CALL_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PollArgs {
    game: String,
    url: String,
    #[serde(
        default = "default_every",
        deserialize_with = "crate::engine::worker::whole_number"
    )]
    every_ms: u64,
}

fn default_every() -> u64 {
    DEFAULT_POLL_EVERY_MS
}

fn parse(args: &Value) -> Result<PollArgs, String> {
    let a: PollArgs = serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
    let chars = a.game.trim().chars().count();
    if chars == 0 || chars > 200 {
        return Err("game: 1 to 200 characters".into());
    }
    if !(MIN_POLL_EVERY_MS..=MAX_POLL_EVERY_MS).contains(&a.every_ms) {
        return Err(format!(
            "every_ms: {MIN_POLL_EVERY_MS} to {MAX_POLL_EVERY_MS} (an hour)"
        ));
    }
    Ok(a)
}

/// The webhook call that asks for the result.
fn call_args(url: &str) -> Value {
    json!({ "url": url, "method": "GET", "timeout_ms": CALL_TIMEOUT_MS })
}

/// What an answer says.
#[derive(Debug, PartialEq)]
enum Answer {
    /// Final, with the answers (an object of question id → choice).
    Final(Value),
    /// Not yet, or not understood: why.
    NotYet(String),
}

fn read_answer(body: &[u8]) -> Answer {
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) if body.len() >= MAX_ANSWER_BYTES => {
            return Answer::NotYet(format!(
                "the answer is longer than {MAX_ANSWER_BYTES} bytes ({e})"
            ))
        }
        Err(e) => return Answer::NotYet(format!("the answer is not JSON: {e}")),
    };
    if value.get("final") != Some(&Value::Bool(true)) {
        return Answer::NotYet("not final yet".into());
    }
    match value.get("answers") {
        Some(answers @ Value::Object(_)) => Answer::Final(answers.clone()),
        _ => Answer::NotYet(
            "final, but without \"answers\": {\"<question id>\": \"<choice>\"}".into(),
        ),
    }
}

pub struct PollResultWorker {
    /// The webhook kind alone (the client that stores the signal knows no other).
    calls: Arc<Workers>,
    /// Checks and makes the calls.
    webhook: super::webhook::WebhookWorker,
    client: OnceLock<Client>,
}

impl PollResultWorker {
    /// Its calls checked and made as `webhook`'s (configured as the server's own).
    pub fn new(webhook: super::webhook::WebhookWorker) -> Self {
        let mut calls = Workers::new();
        calls.register(webhook.clone());
        PollResultWorker {
            calls: Arc::new(calls),
            webhook,
            client: OnceLock::new(),
        }
    }

    fn client(&self, pool: &Db) -> &Client {
        self.client
            .get_or_init(|| Client::new(pool.clone(), self.calls.clone()))
    }
}

impl Worker for PollResultWorker {
    fn kind(&self) -> &'static str {
        POLL_RESULT_KIND
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        parse(args).map(drop)
    }

    /// The result's URL as a call to it is checked (the allowlist, the endpoints).
    fn validate_in<'a>(
        &'a self,
        conn: &'a mut sqlx::PgConnection,
        args: &'a Value,
    ) -> BoxFuture<'a, Result<(), ArgsRefused>> {
        Box::pin(async move {
            let a = parse(args).map_err(ArgsRefused::Invalid)?;
            self.webhook.validate_in(conn, &call_args(&a.url)).await
        })
    }

    /// The URL as a webhook's is shown (its user info and query values hidden).
    fn hide_secrets(&self, args: &mut Value, meta: &Value) -> Vec<String> {
        super::webhook::hide_url_as_a_webhooks(&self.webhook, args, meta)
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(CALL_TIMEOUT_MS + 20_000)
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let a = parse(&ctx.job.args).map_err(WorkError::Fatal)?;
            let polls = ctx.job.meta["snoozes"].as_u64().unwrap_or(0);
            let Some(settle) = ctx.sibling(SETTLE_STEP).await? else {
                return Err(WorkError::Fatal(format!(
                    "a {POLL_RESULT_KIND} job is a step of a game's workflow run (its poll step)"
                )));
            };
            let now = ctx.started_at();
            let stopped = |why: String| {
                let _ = ctx.record(&json!({ "game": a.game, "polls": polls, "stopped": why }));
            };
            // The settle no longer waits: the signal came another way, or it ended.
            if settle.state != "blocked" {
                stopped(format!("the settle step is {}", settle.state));
                if settle.state == "failed" {
                    return Err(WorkError::Fatal(format!(
                        "the settle step failed before a final answer ({polls} polls)"
                    )));
                }
                return Ok(());
            }
            if let Some(deadline) = settle.deadline_at.filter(|d| *d <= now) {
                stopped("the settle's deadline passed".into());
                return Err(WorkError::Fatal(format!(
                    "no final answer by the settle's deadline, {deadline} ({polls} polls)"
                )));
            }
            // The next poll, never past the settle's deadline.
            let until_deadline = settle
                .deadline_at
                .and_then(|d| (d - now).to_std().ok())
                .map(|d| d + Duration::from_millis(1));
            let again = |wait: Duration, why: String| {
                let _ = ctx.record(&json!({ "game": a.game, "polls": polls + 1, "last": why }));
                let wait = until_deadline.map_or(wait, |d| wait.min(d));
                Err(WorkError::Snooze(wait))
            };
            let every = Duration::from_millis(a.every_ms);
            let body = match self
                .webhook
                .recorded_call(&ctx, &call_args(&a.url), MAX_ANSWER_BYTES)
                .await
            {
                Ok(body) => body,
                Err(WorkError::Snooze(wait)) => {
                    return again(wait, "the partner asked to wait (Retry-After)".into())
                }
                Err(WorkError::Retryable(e)) => return again(every, e),
                Err(e) => return Err(e),
            };
            let answers = match read_answer(&body) {
                Answer::Final(answers) => answers,
                Answer::NotYet(why) => return again(every, why),
            };
            let host = reqwest::Url::parse(&a.url)
                .ok()
                .and_then(|u| u.host_str().map(str::to_string))
                .unwrap_or_default();
            let mut tx = ctx.begin().await?;
            let (_, stored) = self
                .client(ctx.pool())
                .signal_workflow_with(
                    &mut tx,
                    settle.run_id,
                    FINAL,
                    &json!({ "answers": answers }),
                    &format!("polled {host}"),
                )
                .await
                .map_err(|e| match e {
                    ClientError::Database(e) => WorkError::from(e),
                    e => WorkError::Fatal(format!("the final signal: {e}")),
                })?;
            let _ = ctx.record(&json!({
                "game": a.game, "polls": polls + 1, "final": true,
                "signal": if stored { "stored" } else { "one came first" },
            }));
            ctx.complete_with(tx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_final_only_with_its_answers() {
        assert_eq!(
            read_answer(br#"{"final": true, "answers": {"7": "Home"}}"#),
            Answer::Final(json!({"7": "Home"}))
        );
        for (body, why) in [
            (&br#"{"final": false}"#[..], "not final yet"),
            (br#"{"final": "yes", "answers": {}}"#, "not final yet"),
            (br#"{"final": true}"#, "without"),
            (br#"{"final": true, "answers": ["Home"]}"#, "without"),
            (b"<html>", "not JSON"),
        ] {
            match read_answer(body) {
                Answer::NotYet(reason) => assert!(reason.contains(why), "{reason}"),
                other => panic!("{other:?} for {body:?}"),
            }
        }
    }

    #[test]
    fn the_poll_interval_is_bounded() {
        let args = |every: u64| json!({ "game": "g", "url": "http://h/", "every_ms": every });
        assert!(parse(&args(999)).is_err());
        assert!(parse(&args(1_000)).is_ok());
        assert!(parse(&args(3_600_001)).is_err());
        assert_eq!(
            parse(&json!({ "game": "g", "url": "http://h/" }))
                .unwrap()
                .every_ms,
            30_000
        );
    }
}
