//! The steps of the game's workflow (`questions::game_workflow`): `lock_game`, `settle_game`
//! and `publish_leaderboard`, each with the game's name as its args (`{"game": "…"}`). They lock,
//! settle and score with the same statements as a question's own `lock_question` and
//! `settle_question` jobs, so a question locked or settled by either is so for both.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::{BoxFuture, JobContext, WorkError, Worker};
use crate::questions::game_workflow::{
    FINAL, LEADERBOARD_KIND, LOCK_GAME_KIND, POLL_STEP, SETTLE_GAME_KIND,
};
use crate::questions::{store, QuestionStatus};

/// Players in a published leaderboard.
pub const LEADERBOARD_SIZE: i64 = 100;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GameArgs {
    game: String,
}

fn validate_game(args: &Value) -> Result<(), String> {
    let a: GameArgs = serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
    let chars = a.game.trim().chars().count();
    if chars == 0 || chars > 200 {
        return Err("game: 1 to 200 characters".into());
    }
    Ok(())
}

/// `lock_game`: locks the game's open questions whose game time came.
pub struct LockGameWorker;

impl Worker for LockGameWorker {
    fn kind(&self) -> &'static str {
        LOCK_GAME_KIND
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        validate_game(args)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    fn backoff(&self, attempt: i32) -> Duration {
        Duration::from_millis((100 * 2u64.pow(attempt.clamp(0, 6) as u32)).min(5_000))
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let args: GameArgs = ctx.args()?;
            let mut tx = ctx.begin().await?;
            let open = store::question_open_of_game(&mut tx, Some(&args.game), &[]).await?;
            let mut locked = 0;
            let mut ahead = Vec::new();
            for q in &open {
                if store::question_lock(&mut *tx, q.id).await? {
                    locked += 1;
                } else {
                    ahead.push(q.id);
                }
            }
            if let Some(first) = ahead.first() {
                // A question moved later: lock it at its time (the others are locked now).
                let wait = store::question_time_to_game(&mut *tx, *first).await?;
                tx.commit().await?;
                return Err(WorkError::Snooze(Duration::from_secs_f64(wait.max(0.001))));
            }
            let _ = ctx.record(&json!({ "game": args.game, "locked": locked }));
            ctx.complete_with(tx).await
        })
    }
}

/// `settle_game`: records each question's correct choice from the run's `final` signal
/// (`{"answers": {"<question id>": "<choice>"}}`) and scores its predictions.
pub struct SettleGameWorker;

impl Worker for SettleGameWorker {
    fn kind(&self) -> &'static str {
        SETTLE_GAME_KIND
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        validate_game(args)
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(600)
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let args: GameArgs = ctx.args()?;
            // A poll of the partner's result (if the run has one) learns at once that the
            // result came.
            if let Err(e) = ctx.wake_sibling(POLL_STEP).await {
                tracing::warn!(job = ctx.job.id.0, error = %e, "waking the game's poll failed");
            }
            let Some(result) = ctx.signal(FINAL).await? else {
                return Err(WorkError::Fatal(format!(
                    "no {FINAL:?} signal: a settle_game job is a step of a game's workflow run"
                )));
            };
            let answers: BTreeMap<String, String> = result
                .get("answers")
                .and_then(|a| serde_json::from_value(a.clone()).ok())
                .ok_or_else(|| {
                    WorkError::Fatal(format!(
                        "the {FINAL:?} signal has no answers: {{\"answers\": {{\"<question id>\": \"<choice>\"}}}}"
                    ))
                })?;
            let (mut settled, mut unanswered, mut refused, mut kept) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for q in store::questions_of_game(ctx.pool(), &args.game).await? {
                let mut tx = ctx.begin().await?;
                let Some(q) = store::question_get_for_update(&mut *tx, q.id).await? else {
                    continue;
                };
                if q.status == QuestionStatus::Open && !store::question_lock(&mut *tx, q.id).await?
                {
                    return Err(WorkError::Retryable(format!(
                        "question {}'s game time is still ahead",
                        q.id
                    )));
                }
                let answer = answers.get(&q.id.to_string());
                let correct = match (&q.correct_choice, answer) {
                    (Some(c), Some(a)) if c != a => {
                        kept.push(q.id);
                        c.clone()
                    }
                    (Some(c), _) => c.clone(),
                    (None, Some(a)) if q.choices.contains(a) => {
                        store::question_set_answer(&mut *tx, q.id, a).await?;
                        a.clone()
                    }
                    (None, Some(_)) => {
                        refused.push(q.id);
                        continue;
                    }
                    (None, None) => {
                        unanswered.push(q.id);
                        continue;
                    }
                };
                tx.commit().await?;
                loop {
                    if ctx.cancelled().is_cancelled() {
                        return Err(WorkError::Retryable("stopped".into()));
                    }
                    let n = store::prediction_score_batch(
                        ctx.pool(),
                        q.id,
                        &correct,
                        super::settle_question::BATCH,
                    )
                    .await?;
                    if n < super::settle_question::BATCH as u64 {
                        break;
                    }
                }
                store::question_mark_settled(ctx.pool(), q.id).await?;
                settled.push(q.id);
            }
            // What was settled and what was not, kept as the step's output.
            let _ = ctx.record(&json!({
                "game": args.game, "settled": settled, "unanswered": unanswered,
                "not_a_choice": refused, "kept_their_answer": kept,
            }));
            let tx = ctx.begin().await?;
            ctx.complete_with(tx).await
        })
    }
}

/// `publish_leaderboard`: the game's players ranked by their correct predictions, as the
/// step's output.
pub struct LeaderboardWorker;

impl Worker for LeaderboardWorker {
    fn kind(&self) -> &'static str {
        LEADERBOARD_KIND
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        validate_game(args)
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let args: GameArgs = ctx.args()?;
            let (top, players) =
                store::leaderboard(ctx.pool(), &args.game, LEADERBOARD_SIZE).await?;
            // Ranked as competitions rank: equal scores share a rank, the next one skips.
            let mut rank = 0;
            let ranked: Vec<Value> = top
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    if i == 0 || top[i - 1].correct != s.correct {
                        rank = i + 1;
                    }
                    json!({ "rank": rank, "player": s.player, "correct": s.correct,
                            "predicted": s.predicted })
                })
                .collect();
            let _ = ctx.record(&json!({ "game": args.game, "players": players, "top": ranked }));
            let tx = ctx.begin().await?;
            ctx.complete_with(tx).await
        })
    }
}
