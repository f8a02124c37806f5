//! docs/embedding.md: what an application does from SQL commits with its own rows. A job of an
//! SQL insert exists (or ran: its tally was raised) only with the row the application wrote in
//! the same transaction, so a rolled-back insert's job never exists nor runs; an insert, a
//! cancel or a signal whose commit was answered left its row, and a rolled-back or refused one
//! left none; a signal stored from SQL came with its row. (A cancel from SQL holds as the API's
//! does: `cancel_holds` and `cancel_explained` count it.)

use super::workflows::may_have_done;
use super::{tally_of, History, Snapshot};

/// The route a history's signals from SQL name as their source.
const SQL_SOURCE: &str = "sql:history";

pub fn sql_actions_atomic(h: &History, s: &Snapshot) -> Vec<String> {
    let mut broken = Vec::new();
    for e in h.events.iter().filter(|e| e.method == "SQL") {
        let step = e.step as i64;
        let row = s.app_rows.contains(&step);
        let rolled_back = e.route.ends_with("#rolled-back");
        if e.route.starts_with("/jobs#") || e.route == "/jobs" {
            let tally = format!("h{}-{}", h.seed, e.step);
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
        }
        if e.ok() && !rolled_back && !row {
            broken.push(format!(
                "step {}: the SQL action's commit was answered ({}), but the application's row \
                 is gone",
                e.step, e.route
            ));
        }
        if row && (rolled_back || (400..500).contains(&e.status)) {
            broken.push(format!(
                "step {}: a {} SQL action left the application's row ({})",
                e.step,
                if rolled_back {
                    "rolled-back"
                } else {
                    "refused"
                },
                e.route
            ));
        }
    }
    for g in s.workflow_signals.iter().filter(|g| g.source == SQL_SOURCE) {
        let explained = h.events.iter().any(|e| {
            e.method == "SQL"
                && e.route == "/workflows/{id}/signals"
                && e.subject == Some(g.run_id)
                && may_have_done(e)
                && e.sent <= g.received_at
                && s.app_rows.contains(&(e.step as i64))
                && e.body
                    .as_ref()
                    .and_then(|b| b.get("name"))
                    .and_then(|n| n.as_str())
                    == Some(g.name.as_str())
        });
        if !explained {
            broken.push(format!(
                "run {}: a signal {:?} from SQL at {}, without a committed SQL signal with the \
                 application's row that may have stored it",
                g.run_id, g.name, g.received_at
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
        assert!(sql_actions_atomic(&h, &s).is_empty());
        s.jobs.push(job(7, "h1-0"));
        assert_eq!(sql_actions_atomic(&h, &s).len(), 1);
        s.jobs.clear();
        s.tallies.insert("h1-0".into(), 1);
        assert_eq!(sql_actions_atomic(&h, &s).len(), 1);
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
        assert_eq!(sql_actions_atomic(&h, &s).len(), 2);
        s.app_rows.insert(3);
        assert!(sql_actions_atomic(&h, &s).is_empty());
    }

    #[test]
    fn a_rolled_back_or_refused_action_with_its_row_and_an_answered_one_without_are_reported() {
        let h = History {
            seed: 1,
            events: vec![
                event(1, "/jobs/{id}/cancel#rolled-back", 200),
                event(2, "/jobs/{id}/cancel", 409),
                event(3, "/workflows/{id}/signals", 200),
            ],
            ..Default::default()
        };
        let mut s = Snapshot::default();
        s.app_rows.insert(3);
        assert!(sql_actions_atomic(&h, &s).is_empty());
        s.app_rows.remove(&3);
        assert_eq!(
            sql_actions_atomic(&h, &s).len(),
            1,
            "the answered one's row is gone"
        );
        s.app_rows.extend([1, 2, 3]);
        assert_eq!(
            sql_actions_atomic(&h, &s).len(),
            2,
            "rolled back and refused, with rows"
        );
    }

    #[test]
    fn a_signal_from_sql_without_a_committed_sql_signal_is_reported() {
        let mut signal = event(4, "/workflows/{id}/signals#rolled-back", 200);
        signal.subject = Some(12);
        signal.body = Some(json!({ "name": "go" }));
        let mut h = History {
            seed: 1,
            events: vec![signal.clone()],
            ..Default::default()
        };
        let mut s = Snapshot::default();
        s.workflow_signals
            .push(crate::chaos::history::record::SignalRow {
                run_id: 12,
                name: "go".into(),
                received_at: Utc::now(),
                source: SQL_SOURCE.into(),
            });
        assert_eq!(sql_actions_atomic(&h, &s).len(), 1);
        signal.route = "/workflows/{id}/signals";
        h.events = vec![signal];
        s.app_rows.insert(4);
        assert!(sql_actions_atomic(&h, &s).is_empty());
    }
}
