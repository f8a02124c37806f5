//! docs/embedding.md: a job added from SQL commits with the application's own rows. A job of an
//! SQL insert exists (or ran: its tally was raised) only with the row the application wrote in
//! the same transaction, so a rolled-back insert's job never exists nor runs; and an insert
//! whose commit was answered left its row.

use super::{tally_of, History, Snapshot};

pub fn sql_inserts_atomic(h: &History, s: &Snapshot) -> Vec<String> {
    let mut broken = Vec::new();
    for e in h.events.iter().filter(|e| e.method == "SQL") {
        let step = e.step as i64;
        let tally = format!("h{}-{}", h.seed, e.step);
        let row = s.app_games.contains(&step);
        let job = s
            .jobs
            .iter()
            .find(|j| tally_of(j).as_deref() == Some(tally.as_str()));
        let ran = s.tallies.get(&tally).copied().unwrap_or(0) > 0;
        if (job.is_some() || ran) && !row {
            broken.push(format!(
                "step {}: the SQL insert's job {} {} without the application's row of its \
                 transaction ({})",
                e.step,
                job.map_or("(deleted)".into(), |j| j.id.to_string()),
                if ran { "ran" } else { "exists" },
                e.route
            ));
        }
        if e.ok() && e.route == "/jobs" && !row {
            broken.push(format!(
                "step {}: the SQL insert's commit was answered, but the application's row is gone",
                e.step
            ));
        }
    }
    broken
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::{json, Value};

    use super::super::super::plan::Role;
    use super::super::super::record::{Event, JobRow};
    use super::*;

    fn event(step: usize, route: &'static str, status: u16) -> Event {
        Event {
            step,
            role: Role::Admin,
            node: 0,
            method: "SQL",
            route,
            path: "/jobs".into(),
            body: None,
            status,
            answer: Value::Null,
            sent: Utc::now(),
            answered: Utc::now(),
            subject: None,
        }
    }

    fn job(id: i64, tally: &str) -> JobRow {
        JobRow {
            id,
            queue: "default".into(),
            kind: "noop".into(),
            state: "available".into(),
            attempt: 0,
            scheduled_at: Utc::now(),
            attempted_at: None,
            finalized_at: None,
            args: json!({ "tally": tally }),
            meta: json!({}),
            inserted_at: Utc::now(),
            step_id: None,
        }
    }

    #[test]
    fn a_rolled_back_insert_whose_job_exists_or_ran_is_reported() {
        let h = History {
            seed: 1,
            events: vec![event(0, "/jobs#rolled-back", 200)],
            ..Default::default()
        };
        let mut s = Snapshot::default();
        assert!(sql_inserts_atomic(&h, &s).is_empty());
        s.jobs.push(job(7, "h1-0"));
        assert_eq!(sql_inserts_atomic(&h, &s).len(), 1);
        s.jobs.clear();
        s.tallies.insert("h1-0".into(), 1);
        assert_eq!(sql_inserts_atomic(&h, &s).len(), 1);
    }

    #[test]
    fn a_committed_insert_without_its_row_is_reported() {
        let h = History {
            seed: 1,
            events: vec![event(3, "/jobs", 201)],
            ..Default::default()
        };
        let mut s = Snapshot::default();
        s.jobs.push(job(9, "h1-3"));
        s.tallies.insert("h1-3".into(), 1);
        assert_eq!(sql_inserts_atomic(&h, &s).len(), 2);
        s.app_games.insert(3);
        assert!(sql_inserts_atomic(&h, &s).is_empty());
    }
}
