//! The game's workflow's `notify` step (`workers/notify_players.rs`) on the games a history
//! started, part of [`super::Promise::WorkflowsHold`]: each page of a game's players becomes one
//! webhook call, inserted in the transaction that moves its task's cursor past them, so across a
//! kill -9, a rescue, a cancel or a retry of the failed a player is handed to the receiver once
//! for each run of the game's step, and again only after a retry that runs it afresh (`all`, or
//! `failed_and_following` over a completed step); and a step that completed told every player
//! who predicted on the game before it began.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::super::record::{History, JobRow, Snapshot};
use super::game_of;
use super::workflows::{mode_of, retries_by_run};

/// How long before the notify step's first job a prediction must have been made to be among
/// its pages for sure: a prediction's transaction may commit a moment after its clock read.
const PREDICTION_COMMIT: Duration = Duration::seconds(2);

/// The calls that told a player: (their job, when it was made).
type Calls = Vec<(i64, DateTime<Utc>)>;

/// The game and the players a job of the receiver's calls tells (`{"type": "game.players"}`).
fn call_of(job: &JobRow) -> Option<(&str, Vec<&str>)> {
    let body = job.args.get("body")?;
    if job.kind != "webhook" || body.get("type")? != "game.players" {
        return None;
    }
    let players = body
        .get("players")?
        .as_array()?
        .iter()
        .filter_map(|p| p.get("player").and_then(Value::as_str))
        .collect();
    Some((body.get("game")?.as_str()?, players))
}

pub(super) fn notify_pages_hold(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    // Each game's calls: its players, with the calls (job, made at) that told them.
    let mut told: BTreeMap<&str, BTreeMap<&str, Calls>> = BTreeMap::new();
    for job in &s.jobs {
        if let Some((game, players)) = call_of(job) {
            for player in players {
                told.entry(game)
                    .or_default()
                    .entry(player)
                    .or_default()
                    .push((job.id, job.inserted_at));
            }
        }
    }
    // The runs of each game's notify step that may have happened: one a run whose step began
    // (its tasks' rows or jobs are there), and one a retry of it that ran the step afresh. Only
    // `all` does: under the others a step that failed or was cancelled resumes each task from
    // its cursor, and a completed notify step is never after a step that fails later (its
    // dependencies completed before it began).
    let retries = retries_by_run(h);
    let mut allowed: HashMap<&str, usize> = HashMap::new();
    for run in &s.workflow_runs {
        let Some(game) = game_of(run) else { continue };
        let step = |name: &str| {
            s.workflow_steps
                .iter()
                .find(|st| st.run_id == run.id && st.name == name)
        };
        let Some(notify) = step("notify") else {
            continue;
        };
        let began = s.workflow_tasks.iter().any(|t| t.step_id == notify.id)
            || s.jobs.iter().any(|j| j.step_id == Some(notify.id));
        let afresh = retries
            .get(&run.id)
            .map_or(0, |rs| rs.iter().filter(|e| mode_of(e) == "all").count());
        *allowed.entry(game).or_default() += usize::from(began) + afresh;
        // A completed step told every player who predicted before it could begin: before its
        // dependency, the settle, completed (its jobs may have been deleted since; the settle's
        // time stays).
        if notify.state != "completed" {
            continue;
        }
        let Some(began) = step("settle").and_then(|st| st.finished_at) else {
            continue;
        };
        let games: HashMap<i64, &str> = s
            .questions
            .iter()
            .map(|q| (q.id, q.game.as_str()))
            .collect();
        let calls = told.get(game);
        for p in &s.predictions {
            if games.get(&p.question_id) != Some(&game) || p.at >= began - PREDICTION_COMMIT {
                continue;
            }
            let told_since = calls
                .and_then(|c| c.get(p.player.as_str()))
                .is_some_and(|c| c.iter().any(|&(_, at)| at >= began));
            if !told_since {
                out.push(format!(
                    "run {}: its notify step completed (begun at {began}) without telling \
                     player {} of {game}, who predicted at {}",
                    run.id, p.player, p.at
                ));
            }
        }
    }
    for (game, players) in &told {
        let may = allowed.get(game).copied().unwrap_or(0);
        for (player, calls) in players {
            if calls.len() > may {
                out.push(format!(
                    "{game}: player {player} told by {} calls ({:?}), its runs' notify steps \
                     explain {may}",
                    calls.len(),
                    calls.iter().map(|c| c.0).collect::<Vec<_>>()
                ));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::super::super::plan::Role;
    use super::super::super::record::{Event, PredictionRow, QuestionRow, RunRow, StepRow};
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;

    fn t(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(ms).unwrap()
    }

    fn job(id: i64, inserted_ms: i64, args: Value, step_id: Option<i64>) -> JobRow {
        JobRow {
            id,
            queue: "webhooks".into(),
            kind: if step_id.is_some() {
                "notify_players"
            } else {
                "webhook"
            }
            .into(),
            state: "completed".into(),
            attempt: 1,
            scheduled_at: t(inserted_ms),
            attempted_at: Some(t(inserted_ms)),
            finalized_at: Some(t(inserted_ms + 1)),
            args,
            meta: json!({}),
            inserted_at: t(inserted_ms),
            step_id,
        }
    }

    fn call(id: i64, inserted_ms: i64, players: &[&str]) -> JobRow {
        let players: Vec<Value> = players.iter().map(|p| json!({ "player": p })).collect();
        job(
            id,
            inserted_ms,
            json!({ "url": "http://127.0.0.1/hook",
                    "body": { "type": "game.players", "game": "Game w900", "players": players } }),
            None,
        )
    }

    /// Run 1's notify step (7), completed with its one task.
    fn notify_step() -> StepRow {
        StepRow {
            id: 7,
            run_id: 1,
            name: "notify".into(),
            state: "completed".into(),
            deps_left: 0,
            skip_following: false,
            job_id: None,
            job_inserted_at: None,
            kept_from: None,
            at_time: None,
            at_ms: None,
            signal: None,
            deadline_at: None,
            finished_at: Some(t(11_000)),
            tasks: Some(1),
            tasks_counts: [1, 0, 0],
        }
    }

    /// Game w900's run (its settle completed at 9.5 s, its notify step completed, its task's job made at 10 s) and three
    /// players who predicted before, each told once.
    fn game() -> Snapshot {
        Snapshot {
            workflow_runs: vec![RunRow {
                id: 1,
                name: "game".into(),
                key: Some("game:Game w900".into()),
                state: "completed".into(),
                steps: 5,
                counts: [0, 0, 5, 0, 0, 0],
                times: json!({}),
            }],
            workflow_steps: vec![
                StepRow {
                    finished_at: Some(t(9_500)),
                    name: "settle".into(),
                    id: 6,
                    tasks: None,
                    tasks_counts: [0, 0, 0],
                    ..notify_step()
                },
                notify_step(),
            ],
            jobs: vec![
                job(20, 10_000, json!({}), Some(7)),
                call(21, 10_100, &["ana", "ben"]),
                call(22, 10_200, &["cem"]),
            ],
            questions: vec![QuestionRow {
                id: 3,
                game: "Game w900".into(),
                status: "settled".into(),
                game_time: t(5_000),
                locked_at: Some(t(5_000)),
                lock_job_id: None,
            }],
            predictions: ["ana", "ben", "cem"]
                .iter()
                .map(|p| PredictionRow {
                    question_id: 3,
                    player: (*p).into(),
                    choice: "Lions".into(),
                    at: t(1_000),
                })
                .collect(),
            ..Snapshot::default()
        }
    }

    fn retried(mode: &str) -> History {
        let mut h = History::default();
        h.events.push(Event {
            step: 0,
            role: Role::Operator,
            node: 0,
            method: "POST",
            route: "/workflows/{id}/retry",
            path: "/workflows/1/retry".into(),
            body: Some(json!({ "mode": mode })),
            status: 200,
            answer: json!({}),
            sent: t(12_000),
            answered: t(12_000),
            subject: Some(1),
        });
        h
    }

    #[test]
    fn a_player_told_twice_is_reported_unless_a_retry_ran_the_step_afresh() {
        assert_eq!(
            notify_pages_hold(&History::default(), &game()),
            Vec::<String>::new()
        );
        let mut twice = game();
        twice.jobs.push(call(23, 10_300, &["ben"]));
        let broken = notify_pages_hold(&History::default(), &twice);
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(broken[0].starts_with("Game w900: player ben told by 2 calls ([21, 23])"));
        // A retry of the failed (or of what follows them) resumes the tasks from their
        // cursors: it explains nothing; a retry of all runs the step afresh.
        for mode in ["failed", "failed_and_following"] {
            assert_eq!(notify_pages_hold(&retried(mode), &twice).len(), 1, "{mode}");
        }
        assert_eq!(
            notify_pages_hold(&retried("all"), &twice),
            Vec::<String>::new()
        );
        // Another run of the game whose notify step never began explains nothing either; one
        // whose step began does.
        let mut other = twice.clone();
        other.workflow_runs.push(RunRow {
            id: 2,
            ..other.workflow_runs[0].clone()
        });
        other.workflow_steps.push(StepRow {
            id: 8,
            run_id: 2,
            state: "blocked".into(),
            ..notify_step()
        });
        assert_eq!(notify_pages_hold(&History::default(), &other).len(), 1);
        other.jobs.push(job(30, 12_000, json!({}), Some(8)));
        assert_eq!(
            notify_pages_hold(&History::default(), &other),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_completed_notify_step_that_left_out_a_player_is_reported() {
        let mut left_out = game();
        left_out.jobs.retain(|j| j.id != 22);
        let broken = notify_pages_hold(&History::default(), &left_out);
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(broken[0].contains("without telling player cem of Game w900"));
        // A prediction made as the step could begin may have committed after its page was read.
        left_out.predictions[2].at = t(8_000);
        assert_eq!(
            notify_pages_hold(&History::default(), &left_out),
            Vec::<String>::new()
        );
        // A step that did not complete owes nothing yet.
        let mut running = game();
        running.jobs.retain(|j| j.id != 22);
        running.workflow_steps[1].state = "ready".into();
        assert_eq!(
            notify_pages_hold(&History::default(), &running),
            Vec::<String>::new()
        );
    }
}
