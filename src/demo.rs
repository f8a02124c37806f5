//! `kickoff demo`: fills the database with a living fixture list, through the same paths the API
//! uses: upcoming games (some locking within minutes), predictions from made-up players, a few
//! games already played and settled, and a few failed webhook jobs.

use std::sync::Arc;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};
use serde_json::json;

use crate::config::Config;
use crate::engine::schedules::{
    JobTemplate, Missed, Overlap, ScheduleError, ScheduleSpec, Schedules,
};
use crate::engine::{Client, Engine, EngineConfig, NewJob};
use crate::questions::{QuestionService, QuestionStatus};
use crate::server::Database;
use crate::workers;

const TEAMS: [&str; 16] = [
    "Lions", "Tigers", "Bears", "Wolves", "Eagles", "Sharks", "Falcons", "Hornets", "Panthers",
    "Rams", "Bulls", "Comets", "Pirates", "Giants", "Rockets", "Vikings",
];
const PLAYERS: [&str; 12] = [
    "ada",
    "grace",
    "linus",
    "margaret",
    "ken",
    "barbara",
    "dennis",
    "frances",
    "alan",
    "radia",
    "edsger",
    "katherine",
];

pub async fn run(config: &Config) -> Result<(), String> {
    let db = Database::open_beside_server(config)
        .await
        .map_err(|e| e.to_string())?;
    let result = seed(&db.pool).await;
    db.close().await;
    let summary = result?;
    println!("{summary}");
    Ok(())
}

async fn seed(pool: &crate::db::Db) -> Result<String, String> {
    // The demo's own webhook target: a closed local port, so these calls fail for real.
    let failing_host = "127.0.0.1:9".to_string();
    let client = Client::new(
        pool.clone(),
        Arc::new(workers::builtin(vec![failing_host.clone()])),
    );
    let questions = QuestionService::new(client.clone());
    let err = |e: crate::questions::QuestionError| e.to_string();

    // Games about to be played: they lock while the demo runs, then get settled.
    let mut played = Vec::new();
    for i in 0..4 {
        let (home, away) = (TEAMS[i * 2], TEAMS[i * 2 + 1]);
        let q = questions
            .create(
                &format!("{home} vs {away}"),
                "Who scores first?",
                &[home.to_string(), away.to_string(), "Nobody".to_string()],
                Utc::now() + ChronoDuration::milliseconds(2500),
            )
            .await
            .map_err(err)?;
        predict_all(&questions, q.question.id, &q.question.choices, i).await?;
        played.push(q.question.id);
    }
    // Upcoming games: some within minutes, most later today and this week.
    let prompts = [
        "Who scores first?",
        "Who wins?",
        "Will there be a penalty?",
        "Who leads at half time?",
        "More than 3 goals?",
    ];
    let mut upcoming = 0;
    for i in 0..28 {
        let home = TEAMS[(i * 3) % TEAMS.len()];
        let away = TEAMS[(i * 3 + 5) % TEAMS.len()];
        let prompt = prompts[i % prompts.len()];
        let choices: Vec<String> = match prompt {
            "Will there be a penalty?" | "More than 3 goals?" => vec!["Yes".into(), "No".into()],
            _ => vec![home.into(), away.into(), "Draw".into()],
        };
        let minutes = if i < 6 {
            2 + i as i64 * 2
        } else {
            60 * (i as i64 - 4)
        };
        let q = questions
            .create(
                &format!("{home} vs {away}"),
                prompt,
                &choices,
                Utc::now() + ChronoDuration::minutes(minutes),
            )
            .await
            .map_err(err)?;
        predict_all(&questions, q.question.id, &choices, i).await?;
        upcoming += 1;
    }
    // Webhooks: a few that fail (and are out of attempts), a few scheduled.
    for i in 0..3 {
        client
            .insert(
                &NewJob::new(
                    "webhook",
                    json!({ "url": format!("http://{failing_host}/notify"), "body": { "game": i } }),
                )
                .with_queue("webhooks")
                .with_max_attempts(1),
            )
            .await
            .map_err(|e| e.to_string())?;
    }
    for i in 0..3 {
        client
            .insert(
                &NewJob::new("noop", json!({ "sleep_ms": 500 }))
                    .after(Duration::from_secs(300 + 120 * i)),
            )
            .await
            .map_err(|e| e.to_string())?;
    }

    // Two schedules a prediction game runs: the nightly fixture import, and a reminder to
    // partners 30 minutes before each hour of kick-offs (12:00 to 22:00, London time).
    let schedules = Schedules::new(client.clone());
    let nightly = {
        let mut job = JobTemplate::new(
            "webhook",
            json!({ "url": format!("http://{failing_host}/fixtures/import"), "method": "POST" }),
        );
        job.queue = "webhooks".into();
        job.max_attempts = 3;
        let mut spec =
            ScheduleSpec::cron("nightly-fixture-import", "0 3 * * *", job).in_zone("Europe/London");
        spec.overlap = Overlap::Skip;
        spec
    };
    let reminders = {
        let mut job = JobTemplate::new(
            "webhook",
            json!({ "url": format!("http://{failing_host}/reminders"),
                    "body": { "text": "Predictions close in 30 minutes" } }),
        );
        job.queue = "webhooks".into();
        job.max_attempts = 1;
        let mut spec =
            ScheduleSpec::cron("kickoff-reminders", "30 11-21 * * *", job).in_zone("Europe/London");
        spec.missed = Missed::Skip;
        spec
    };
    let mut added = 0;
    for spec in [nightly, reminders] {
        match schedules.create(&spec, Some("demo")).await {
            Ok(_) => added += 1,
            // Already there from an earlier demo run.
            Err(ScheduleError::Conflict(_)) => {}
            Err(e) => return Err(format!("schedule {}: {e}", spec.name)),
        }
    }

    // Run an engine until the played games locked and the webhooks failed, then settle the games.
    let engine = Engine::start(
        pool.clone(),
        workers::builtin(vec![failing_host]),
        EngineConfig {
            queues: vec![("questions".into(), 10), ("webhooks".into(), 5)],
            ..EngineConfig::default()
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for (n, id) in played.iter().enumerate() {
        loop {
            let q = questions.get(*id).await.map_err(err)?;
            match q.question.status {
                QuestionStatus::Locked => {
                    let winner = q.question.choices[n % q.question.choices.len()].clone();
                    questions.settle(*id, &winner).await.map_err(err)?;
                    break;
                }
                QuestionStatus::Settled => break,
                QuestionStatus::Open if tokio::time::Instant::now() > deadline => {
                    return Err("the demo's games did not lock in time".into())
                }
                QuestionStatus::Open => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    // Let the settle jobs and the failing webhooks finish before stopping.
    tokio::time::sleep(Duration::from_secs(2)).await;
    engine.stop().await;
    Ok(format!(
        "demo data: {} played and settled games, {upcoming} upcoming questions, 3 failed webhooks, 3 scheduled jobs, {added} schedules",
        played.len()
    ))
}

async fn predict_all(
    questions: &QuestionService,
    id: i64,
    choices: &[String],
    seed: usize,
) -> Result<(), String> {
    for (p, player) in PLAYERS.iter().enumerate() {
        if (p + seed) % 4 == 3 {
            continue; // not everyone plays every question
        }
        let choice = &choices[(p * 7 + seed) % choices.len()];
        questions
            .predict(id, player, choice)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
