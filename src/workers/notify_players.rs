//! `notify_players`: the `notify` step of the game's workflow (`questions::game_workflow`), a
//! map step. Each of its tasks tells a share of the game's players how they did (a player's
//! share: the md5 of their name, the same on every server), in pages of `batch` players by
//! name: each page becomes one `webhook` call to the receiver (`{"type": "game.players",
//! "game", "players": [{"player", "correct", "predicted"}]}`) inserted in the transaction that
//! moves the task's cursor past it. So a page is handed over exactly once, across a kill -9, a
//! rescue or a retry of the step (the cursor and the call commit together), and the calls then
//! go as every webhook call does: at the `webhooks` queue's rate (per host, when set), each
//! retried alone, signed with its endpoint's secret, recorded as a delivery. The call is
//! checked as the API checks an insert (the kind's own check, through a client of the webhook
//! kind), and the task's receiver is hidden from readers as a webhook's URL is.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::db::Db;
use crate::engine::{
    ArgsRefused, BoxFuture, Client, ClientError, JobContext, NewJob, WorkError, Worker, Workers,
};
use crate::questions::game_workflow::{
    DEFAULT_NOTIFY_BATCH as DEFAULT_BATCH, MAX_NOTIFY_BATCH as MAX_BATCH, NOTIFY_PLAYERS_KIND,
};
use crate::questions::store;
use crate::webhooks::WEBHOOK_KIND;

/// The queue the calls go to (its rate paces them).
pub const CALLS_QUEUE: &str = "webhooks";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NotifyArgs {
    game: String,
    url: String,
    #[serde(default = "default_batch")]
    batch: u32,
}

fn default_batch() -> u32 {
    DEFAULT_BATCH
}

/// Where a task is: after this player, by name.
#[derive(Debug, Default, Deserialize)]
struct Cursor {
    after: Option<String>,
}

pub struct NotifyPlayersWorker {
    /// The webhook kind alone: the calls are inserted (and checked) through it.
    calls: Arc<Workers>,
    client: OnceLock<Client>,
}

impl NotifyPlayersWorker {
    /// Its calls checked and made by `webhook` (configured as the server's own).
    pub fn new(webhook: super::webhook::WebhookWorker) -> Self {
        let mut calls = Workers::new();
        calls.register(webhook);
        NotifyPlayersWorker {
            calls: Arc::new(calls),
            client: OnceLock::new(),
        }
    }

    fn webhook(&self) -> &Arc<dyn Worker> {
        self.calls
            .get(WEBHOOK_KIND)
            .expect("registered in NotifyPlayersWorker::new")
    }

    fn client(&self, pool: &Db) -> &Client {
        self.client
            .get_or_init(|| Client::new(pool.clone(), self.calls.clone()))
    }
}

fn parse(args: &Value) -> Result<NotifyArgs, String> {
    let a: NotifyArgs = serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
    let chars = a.game.trim().chars().count();
    if chars == 0 || chars > 200 {
        return Err("game: 1 to 200 characters".into());
    }
    if !(1..=MAX_BATCH).contains(&a.batch) {
        return Err(format!("batch: 1 to {MAX_BATCH} players a call"));
    }
    Ok(a)
}

/// The webhook call's args for `players` of `game`.
fn call_args(url: &str, game: &str, players: &[store::Standing]) -> Value {
    json!({ "url": url, "body": { "type": "game.players", "game": game, "players": players } })
}

impl Worker for NotifyPlayersWorker {
    fn kind(&self) -> &'static str {
        NOTIFY_PLAYERS_KIND
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        parse(args).map(drop)
    }

    /// The receiver as a call to it is checked (the allowlist, the endpoints).
    fn validate_in<'a>(
        &'a self,
        conn: &'a mut sqlx::PgConnection,
        args: &'a Value,
    ) -> BoxFuture<'a, Result<(), ArgsRefused>> {
        Box::pin(async move {
            let a = parse(args).map_err(ArgsRefused::Invalid)?;
            let call = call_args(&a.url, &a.game, &[]);
            self.webhook().validate_in(conn, &call).await
        })
    }

    /// The receiver's URL as a webhook's is shown (its user info and query values hidden).
    fn hide_secrets(&self, args: &mut Value, meta: &Value) -> Vec<String> {
        super::webhook::hide_url_as_a_webhooks(self.webhook().as_ref(), args, meta)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(600)
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let a = parse(&ctx.job.args).map_err(WorkError::Fatal)?;
            let Some(task) = ctx.task().await? else {
                return Err(WorkError::Fatal(format!(
                    "a {NOTIFY_PLAYERS_KIND} job is a task of a game's workflow (its notify step)"
                )));
            };
            let cursor: Cursor = task
                .cursor
                .clone()
                .and_then(|c| serde_json::from_value(c).ok())
                .unwrap_or_default();
            let (mut after, mut items) = (cursor.after, task.items);
            let mut calls = 0;
            loop {
                if ctx.cancelled().is_cancelled() {
                    return Err(WorkError::Retryable("stopped".into()));
                }
                let mut tx = ctx.begin().await?;
                let players = store::standings_of_share(
                    &mut *tx,
                    &a.game,
                    task.task,
                    task.tasks,
                    after.as_deref(),
                    i64::from(a.batch),
                )
                .await?;
                let Some(last) = players.last().map(|p| p.player.clone()) else {
                    break;
                };
                let mut call = NewJob::new(WEBHOOK_KIND, call_args(&a.url, &a.game, &players))
                    .with_queue(CALLS_QUEUE);
                if let Some(by) = &ctx.job.created_by {
                    call = call.created_by(by);
                }
                self.client(ctx.pool())
                    .insert_with(&mut tx, &call)
                    .await
                    .map_err(|e| match e {
                        ClientError::Database(e) => WorkError::from(e),
                        // Refused as the API refuses it (the receiver no longer allowed, say).
                        e => WorkError::Fatal(format!("the call to the receiver: {e}")),
                    })?;
                items += players.len() as i64;
                ctx.checkpoint_with(&mut tx, &json!({ "after": last }), items)
                    .await?;
                tx.commit().await?;
                calls += 1;
                after = Some(last);
                if players.len() < a.batch as usize {
                    break;
                }
            }
            let _ = ctx.record(
                &json!({ "game": a.game, "task": task.task, "players": items,
                                        "calls_now": calls }),
            );
            Ok(())
        })
    }
}
