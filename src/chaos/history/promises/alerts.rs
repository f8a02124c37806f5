//! [`Promise::AlertsNotifyOnce`](super::Promise::AlertsNotifyOnce): each alert incident notifies
//! at most once when it fires and once when it resolves, and never about an alert's own
//! notification (docs/webhooks-and-alerts.md, "Alerts").

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::chaos::history::record::{History, JobRow, Snapshot};

/// The incidents a notification job names, with its event: one in its `meta`, or a digest's
/// in its body.
fn named(job: &JobRow) -> Option<(Vec<i64>, &str)> {
    let event = job.meta.get("alert_event")?.as_str()?;
    if let Some(id) = job.meta.get("alert_incident").and_then(Value::as_i64) {
        return Some((vec![id], event));
    }
    let ids = job
        .args
        .pointer("/body/data/incident_ids")?
        .as_array()?
        .iter()
        .filter_map(Value::as_i64)
        .collect();
    Some((ids, event))
}

pub(super) fn alerts_notify_once(_h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let mut notifications: HashSet<i64> = s.alert_notifications.iter().copied().collect();
    let mut sent: HashMap<(i64, String), Vec<i64>> = HashMap::new();
    for job in &s.jobs {
        if let Some((ids, event)) = named(job) {
            notifications.insert(job.id);
            for id in ids {
                sent.entry((id, event.to_string()))
                    .or_default()
                    .push(job.id);
            }
        }
    }
    let mut twice: Vec<String> = sent
        .into_iter()
        .filter(|(_, jobs)| jobs.len() > 1)
        .map(|((incident, event), jobs)| {
            format!(
                "incident {incident}: {} notifications of {event}: jobs {jobs:?}",
                jobs.len()
            )
        })
        .collect();
    twice.sort();
    out.extend(twice);
    for i in &s.incidents {
        let about = i
            .subject
            .strip_prefix("job ")
            .and_then(|n| n.parse::<i64>().ok());
        if let Some(job) = about.filter(|j| notifications.contains(j)) {
            out.push(format!(
                "incident {} of rule {} is about job {job}, an alert's own notification",
                i.id, i.rule_id
            ));
        }
    }
    out
}
