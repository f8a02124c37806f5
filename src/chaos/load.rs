//! The chaos suite's steady mixed load: timers firing every few milliseconds, immediate jobs,
//! jobs that fail once and retry, question locks at game time, and webhooks to the loopback
//! receiver. Every acknowledged insert is recorded: it must end in a final state.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::engine::{Client, NewJob};
use crate::questions::QuestionService;

/// The tally every counting job raises.
pub const TALLY: &str = "chaos";

/// What the load inserted (acknowledged inserts only).
#[derive(Debug, Default, Clone)]
pub struct Inserted {
    /// Every job id, lock jobs included.
    pub jobs: Vec<i64>,
    pub questions: Vec<i64>,
    /// Inserts refused or failed (the database restarting): not acknowledged, not expected.
    pub failed_inserts: u64,
}

/// Inserts about `rate` jobs a second until `stop`.
pub async fn run(
    client: Client,
    rate: u32,
    webhook_url: String,
    record: Arc<Mutex<Inserted>>,
    stop: CancellationToken,
) {
    let questions = QuestionService::new(client.clone());
    let tick = Duration::from_millis(10);
    let per_tick = (rate as f64 / 100.0).max(0.01);
    let mut owed = 0.0;
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        owed += per_tick;
        while owed >= 1.0 {
            owed -= 1.0;
            n += 1;
            insert_one(&client, &questions, &webhook_url, n, &record).await;
        }
    }
}

async fn insert_one(
    client: &Client,
    questions: &QuestionService,
    webhook_url: &str,
    n: u64,
    record: &Mutex<Inserted>,
) {
    let tally = json!({ "tally": TALLY });
    // Ten kinds of slot: 4 timers, 1 immediate, 1 taking half a second (so that a killed node
    // has work in flight), 1 failing once, 1 question, 2 webhooks.
    let slot = n % 10;
    if slot == 7 {
        let game_time = Utc::now() + chrono::Duration::milliseconds(200 + (n % 20) as i64 * 100);
        let made = questions
            .create(
                &format!("Chaos {n}"),
                "Who scores first?",
                &["Home".to_string(), "Away".to_string()],
                game_time,
            )
            .await;
        let mut r = record.lock().expect("record poisoned");
        match made {
            Ok(q) => {
                r.questions.push(q.question.id);
                if let Some(job) = q.question.lock_job_id {
                    r.jobs.push(job.0);
                }
            }
            Err(_) => r.failed_inserts += 1,
        }
        return;
    }
    let new = match slot {
        0..=3 => NewJob::new("noop", tally).after(Duration::from_millis(5 + (n % 40) * 50)),
        4 => NewJob::new("noop", tally),
        5 => NewJob::new("noop", json!({ "tally": TALLY, "sleep_ms": 500 })),
        6 => NewJob::new("noop", json!({ "tally": TALLY, "fail_attempts": 1 })),
        _ => NewJob::new("webhook", json!({ "url": webhook_url, "timeout_ms": 5000 }))
            .with_queue("webhooks")
            .after(Duration::from_millis((n % 10) * 100)),
    };
    let inserted = client.insert(&new).await;
    let mut r = record.lock().expect("record poisoned");
    match inserted {
        Ok(i) => {
            r.jobs.push(i.job.id.0);
        }
        Err(_) => r.failed_inserts += 1,
    }
}
