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
//! - a `429` or `503` with `Retry-After`: asked again then (never sooner than `every_ms`);
//! - a host no longer allowed: the step fails (fatal), the settle still waits for another
//!   signal.
//!
//! Each call has its own `webhook-id` (the job's, then `_poll<n>`): a receiver that drops a
//! repeated id takes every poll.
//!
//! It stops once the settle no longer waits: completed when the signal came another way (the
//! settle's job wakes it: [`crate::engine::JobContext::wake_sibling`]) or the settle was skipped
//! or cancelled, failed when the settle's deadline passed without a final answer. Its waits never
//! pass that deadline.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::webhook::{webhook_id, CallAs};
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
/// The most of the host kept in the signal's source (`polled <host>`, at most 200 characters).
const SOURCE_HOST_CHARS: usize = 150;

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
            if settle.state != "blocked" {
                return stop(&ctx, &a.game, polls, &settle.state).await;
            }
            if let Some(deadline) = settle.deadline_at.filter(|d| *d <= now) {
                let _ = ctx.record(&json!({ "game": a.game, "polls": polls,
                                            "stopped": "the settle's deadline passed" }));
                return Err(WorkError::Fatal(format!(
                    "no final answer by the settle's deadline, {deadline} ({polls} polls)"
                )));
            }
            // The next poll, never past the settle's deadline.
            let until_deadline = settle
                .deadline_at
                .and_then(|d| (d - now).to_std().ok())
                .map(|d| d + Duration::from_millis(1));
            let again = async |wait: Duration, why: String| {
                let wait = until_deadline.map_or(wait, |d| wait.min(d));
                again(&ctx, &a.game, polls + 1, wait, why).await
            };
            let every = Duration::from_millis(a.every_ms);
            let call_as = CallAs {
                body_bytes: MAX_ANSWER_BYTES,
                id: format!("{}_poll{}", webhook_id(&ctx.job), polls + 1),
                snoozes_left: true,
                // A result API's failure is asked again at the next poll, whatever it says.
                no_retry: false,
            };
            let body = match self
                .webhook
                .recorded_call(&ctx, &call_args(&a.url), &call_as)
                .await
            {
                Ok(body) => body,
                Err(WorkError::Snooze(wait)) => {
                    return again(
                        wait.max(every),
                        "the partner asked to wait (Retry-After)".into(),
                    )
                    .await
                }
                Err(WorkError::Retryable(e)) => return again(every, e).await,
                Err(e) => return Err(e),
            };
            let answers = match read_answer(&body) {
                Answer::Final(answers) => answers,
                Answer::NotYet(why) => return again(every, why).await,
            };
            let host: String = reqwest::Url::parse(&a.url)
                .ok()
                .and_then(|u| {
                    u.host_str()
                        .map(|h| h.chars().take(SOURCE_HOST_CHARS).collect())
                })
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

/// Stops polling: the settle step no longer waits (`state`). Completed, unless the settle
/// failed without the final result (its deadline, or a failure before a signal).
async fn stop(ctx: &JobContext, game: &str, polls: u64, state: &str) -> Result<(), WorkError> {
    let _ = ctx.record(&json!({ "game": game, "polls": polls,
                                "stopped": format!("the settle step is {state}") }));
    if state == "failed" && ctx.signal(FINAL).await?.is_none() {
        return Err(WorkError::Fatal(format!(
            "the settle step failed before a final answer ({polls} polls)"
        )));
    }
    Ok(())
}

/// Asks again after `wait`, unless the settle stopped waiting since the call. The snooze is
/// written while the settle step's row is held: a signal stored meanwhile starts the settle
/// only after it, and the settle's job then wakes this one (`wake_sibling`), so no final result
/// waits for a whole interval here.
async fn again(
    ctx: &JobContext,
    game: &str,
    polls: u64,
    wait: Duration,
    why: String,
) -> Result<(), WorkError> {
    let mut tx = ctx.begin().await?;
    let settle = ctx.sibling_with(&mut tx, SETTLE_STEP).await?;
    if let Some(settle) = settle.filter(|s| s.state != "blocked") {
        tx.rollback().await?;
        return stop(ctx, game, polls, &settle.state).await;
    }
    let _ = ctx.record(&json!({ "game": game, "polls": polls, "last": why }));
    ctx.snooze_with(tx, wait).await?;
    Err(WorkError::Snooze(wait))
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
