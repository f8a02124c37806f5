//! The body of a notification: Kickoff's own shape (Standard Webhooks' `type`, `timestamp`,
//! `data`), or the `{"text": ...}` that Slack's incoming webhooks (and those compatible with
//! them) take.

use serde_json::{json, Value};

use super::store::{IncidentRow, RuleRow};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Fired,
    Resolved,
}

impl Event {
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Fired => "fired",
            Event::Resolved => "resolved",
        }
    }
}

pub fn body(rule: &RuleRow, incident: &IncidentRow, event: Event) -> Value {
    if rule.payload == "slack" {
        let text = match event {
            Event::Fired => format!(
                ":rotating_light: Kickoff alert *{}* fired: {}",
                rule.name, incident.summary
            ),
            Event::Resolved => format!(
                ":white_check_mark: Kickoff alert *{}* resolved: {} ({})",
                rule.name, incident.subject, incident.summary
            ),
        };
        return json!({ "text": text });
    }
    let at = match event {
        Event::Fired => incident.fired_at,
        Event::Resolved => incident.resolved_at.unwrap_or(incident.fired_at),
    };
    json!({
        "type": format!("alert.{}", event.as_str()),
        "timestamp": at.to_rfc3339(),
        "data": {
            "incident_id": incident.id,
            "rule_id": rule.id,
            "rule": rule.name,
            "condition": rule.condition,
            "rule_words": rule.words,
            "subject": incident.subject,
            "summary": incident.summary,
            "fired_at": incident.fired_at.to_rfc3339(),
            "resolved_at": incident.resolved_at.map(|t| t.to_rfc3339()),
        }
    })
}
