//! The game's workflow (issue 49): a game's whole life as one durable run, built in.
//!
//! ```text
//! lock ──▶ settle (waits for the signal "final", until kickoff_at + 5 h) ──▶ notify ──▶ leaderboard
//!   │                                                                  └──(run anyway)──┘
//!   └──▶ poll (asks the partner's result API every 30 s; its final answer is the signal)
//! ```
//!
//! - `lock` (`lock_game`, due at the run's `kickoff_at`): locks every open question of the game
//!   whose game time came, as each question's own lock job does (the same statement); snoozes
//!   while one's time is still ahead (a question moved later).
//! - `settle` (`settle_game`): waits for the partner's `final` signal (a signed call,
//!   `POST /api/v1/inbound/{endpoint}/signals`, or an operator's), whose payload names each
//!   question's correct choice (`{"answers": {"<question id>": "Home"}}`); records the answers
//!   and scores every prediction as a question's settle job does (the same statements, in
//!   batches, each scored once); a question an operator settled already keeps its answer. Its
//!   deadline passing fails it: the alert `workflow_deadline` says so, and nothing after it runs.
//! - `poll` (when the run starts with a `result_url`: `workers::poll_result`): from the lock on,
//!   asks the partner's result API every `poll_every_ms` (30 s) and sends the `final` signal
//!   once its answer is `{"final": true, "answers": {…}}`, completing with it; stops when the
//!   signal came another way, fails when the settle's deadline passed.
//! - `notify` (when the run starts with a receiver): a map step of `notify_players` tasks, each
//!   telling a share of the game's players how they did, a page of players a `webhook` call to
//!   the receiver handed over with the task's cursor (`workers::notify_players`): each page
//!   once, across crashes. The `webhooks` queue's rate (`PATCH /api/v1/queues/webhooks`) paces
//!   the calls.
//! - `leaderboard` (`publish_leaderboard`): the game's players ranked by correct predictions, as
//!   the step's output (read on the run's page and API); published even if the notification
//!   failed (`on_failure: run`), never before the settle.
//!
//! Started by `POST /api/v1/games/{game}/workflow` (operators) once the game has open questions,
//! or with a question (`POST /api/v1/questions` with `workflow`, the new question form):
//! `kickoff_at` is the earliest game time among them; the key `game:<game>` keeps one live run per
//! game (a second start answers the first).

use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use crate::engine::workflow::{OnDepFailure, RunRow, Workflow};
use crate::engine::NewJob;

/// The workflow's name.
pub const NAME: &str = "game";
pub const LOCK_GAME_KIND: &str = "lock_game";
pub const SETTLE_GAME_KIND: &str = "settle_game";
pub const LEADERBOARD_KIND: &str = "publish_leaderboard";
pub const NOTIFY_PLAYERS_KIND: &str = "notify_players";
pub const POLL_RESULT_KIND: &str = "poll_game_result";
/// The step that waits for the final result.
pub const SETTLE_STEP: &str = "settle";
/// The step that asks the partner for it.
pub const POLL_STEP: &str = "poll";
/// How often the partner's result API is asked unless told otherwise, and the bounds.
pub const DEFAULT_POLL_EVERY_MS: u64 = 30_000;
pub const MIN_POLL_EVERY_MS: u64 = 1_000;
pub const MAX_POLL_EVERY_MS: u64 = 3_600_000;
/// The notify step's tasks unless told otherwise, and at most.
pub const DEFAULT_NOTIFY_TASKS: u32 = 4;
pub const MAX_NOTIFY_TASKS: u32 = 1_000;
/// Players in one of the notify step's calls unless told otherwise, and at most (250 players of
/// the longest names, escaped, keep a call's args well under a job's bound).
pub const DEFAULT_NOTIFY_BATCH: u32 = 100;
pub const MAX_NOTIFY_BATCH: u32 = 250;
/// The run's time its lock is anchored to (and the settle's deadline).
pub const KICKOFF_AT: &str = "kickoff_at";
/// The step that locks the game's questions.
pub const LOCK_STEP: &str = "lock";
/// The signal the settle waits for.
pub const FINAL: &str = "final";
/// How long after kickoff the settle waits for the final result unless told otherwise.
pub const DEFAULT_DEADLINE_MS: i64 = 5 * 3_600_000;
/// The longest a run may wait for the final result: two days.
pub const MAX_DEADLINE_MS: i64 = 48 * 3_600_000;

/// The run's key: one live run per game.
pub fn key_of(game: &str) -> String {
    format!("game:{game}")
}

/// The game a run is the game's workflow of (its key `game:<game>`), if it is one.
pub fn game_of_run(run: &RunRow) -> Option<&str> {
    (run.name == NAME)
        .then(|| run.key.as_deref()?.strip_prefix("game:"))
        .flatten()
}

/// A run's `kickoff_at`, if it has one.
pub fn kickoff_of(run: &RunRow) -> Option<DateTime<Utc>> {
    serde_json::from_value(run.times.get(KICKOFF_AT)?.clone()).ok()
}

/// How a game's run is made.
#[derive(Debug, Clone, Default)]
pub struct GameWorkflowSettings {
    /// Where the `notify` step's calls go (none: no such step).
    pub notify_url: Option<String>,
    /// The notify step's tasks (1 to [`MAX_NOTIFY_TASKS`], default [`DEFAULT_NOTIFY_TASKS`]):
    /// each tells a share of the players how they did.
    pub notify_tasks: Option<u32>,
    /// Players in one call (1 to [`MAX_NOTIFY_BATCH`], default 100).
    pub notify_batch: Option<u32>,
    /// How long after kickoff the settle waits for the final result (default 5 h).
    pub deadline_ms: Option<i64>,
    /// The partner's result API, asked by the `poll` step (none: no such step; the partner
    /// calls us).
    pub result_url: Option<String>,
    /// How often it is asked ([`MIN_POLL_EVERY_MS`] to [`MAX_POLL_EVERY_MS`], default 30 s).
    pub poll_every_ms: Option<u64>,
}

/// The run of `game` whose kickoff is `kickoff_at`.
pub fn workflow(
    game: &str,
    kickoff_at: DateTime<Utc>,
    settings: &GameWorkflowSettings,
    created_by: Option<&str>,
) -> Workflow {
    let args = json!({ "game": game });
    let step = |kind: &str| {
        let job = NewJob::new(kind, args.clone());
        match created_by {
            Some(by) => job.created_by(by),
            None => job,
        }
    };
    let deadline = settings.deadline_ms.unwrap_or(DEFAULT_DEADLINE_MS);
    let mut flow = Workflow::new(NAME)
        .key(key_of(game))
        .time(KICKOFF_AT, kickoff_at)
        .step(LOCK_STEP, step(LOCK_GAME_KIND))
        .at(KICKOFF_AT, Duration::zero())
        .step(SETTLE_STEP, step(SETTLE_GAME_KIND))
        .after(LOCK_STEP)
        .signal(FINAL, KICKOFF_AT, Duration::milliseconds(deadline));
    if let Some(url) = &settings.result_url {
        let every = settings.poll_every_ms.unwrap_or(DEFAULT_POLL_EVERY_MS);
        let mut poll = NewJob::new(
            POLL_RESULT_KIND,
            json!({ "game": game, "url": url, "every_ms": every }),
        );
        if let Some(by) = created_by {
            poll = poll.created_by(by);
        }
        flow = flow.step(POLL_STEP, poll).after(LOCK_STEP);
    }
    let mut last = "settle";
    if let Some(url) = &settings.notify_url {
        let batch = settings.notify_batch.unwrap_or(DEFAULT_NOTIFY_BATCH);
        let mut tell = NewJob::new(
            NOTIFY_PLAYERS_KIND,
            json!({ "game": game, "url": url, "batch": batch }),
        );
        if let Some(by) = created_by {
            tell = tell.created_by(by);
        }
        flow = flow
            .step("notify", tell)
            .map(settings.notify_tasks.unwrap_or(DEFAULT_NOTIFY_TASKS))
            .after("settle");
        last = "notify";
    }
    flow = flow
        .step("leaderboard", step(LEADERBOARD_KIND))
        .after("settle");
    if last == "notify" {
        flow = flow.after_or("notify", OnDepFailure::Run);
    }
    flow.created_by = created_by.map(str::to_string);
    flow
}
