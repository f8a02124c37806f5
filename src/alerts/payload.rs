//! The body of a notification: Kickoff's own shape (Standard Webhooks' `type`, `timestamp`,
//! `data`), or the `{"text": ...}` that Slack's incoming webhooks (and those compatible with
//! them) take; and the digest that stands for the incidents of a burst past the first few.

use serde_json::{json, Value};

use super::rules::RuleRow;
use super::store::IncidentRow;

/// How many subjects a digest's summary names (its `subjects` list has them all: at most as many
/// as one evaluation fires or resolves for a rule).
const DIGEST_NAMES: usize = 20;

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

    fn at(self, incident: &IncidentRow) -> chrono::DateTime<chrono::Utc> {
        match self {
            Event::Fired => incident.fired_at,
            Event::Resolved => incident.resolved_at.unwrap_or(incident.fired_at),
        }
    }
}

/// The notification of one incident.
pub fn body(rule: &RuleRow, incident: &IncidentRow, event: Event) -> Value {
    if rule.payload == "slack" {
        let (name, subject, summary) = (
            slack_escape(&rule.name),
            slack_escape(&incident.subject),
            slack_escape(&incident.summary),
        );
        let text = match event {
            Event::Fired => format!(":rotating_light: Kickoff alert *{name}* fired: {summary}"),
            Event::Resolved => {
                format!(":white_check_mark: Kickoff alert *{name}* resolved: {subject} ({summary})")
            }
        };
        return json!({ "text": text });
    }
    json!({
        "type": format!("alert.{}", event.as_str()),
        "timestamp": event.at(incident).to_rfc3339(),
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

/// One notification for the `incidents` (not empty) of a burst that did not notify one by one:
/// `alert.digest`, with the event, how many, their ids and subjects, and a summary that starts
/// "and N more".
pub fn digest(rule: &RuleRow, incidents: &[IncidentRow], event: Event) -> Value {
    let subjects: Vec<&str> = incidents.iter().map(|i| i.subject.as_str()).collect();
    let mut named = subjects
        .iter()
        .take(DIGEST_NAMES)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if subjects.len() > DIGEST_NAMES {
        named.push_str(", …");
    }
    let summary = format!("and {} more: {named}", incidents.len());
    if rule.payload == "slack" {
        let (name, summary) = (slack_escape(&rule.name), slack_escape(&summary));
        let text = match event {
            Event::Fired => format!(":rotating_light: Kickoff alert *{name}* fired {summary}"),
            Event::Resolved => {
                format!(":white_check_mark: Kickoff alert *{name}* resolved {summary}")
            }
        };
        return json!({ "text": text });
    }
    let at = incidents.iter().map(|i| event.at(i)).max();
    json!({
        "type": "alert.digest",
        "timestamp": at.map(|t| t.to_rfc3339()),
        "data": {
            "event": event.as_str(),
            "rule_id": rule.id,
            "rule": rule.name,
            "condition": rule.condition,
            "rule_words": rule.words,
            "count": incidents.len(),
            "incident_ids": incidents.iter().map(|i| i.id).collect::<Vec<_>>(),
            "subjects": subjects,
            "summary": summary,
        }
    })
}

/// Text as Slack reads it literally: `&`, `<` and `>` are its control characters (`<!channel>`
/// pings everyone, `<https://…|words>` shows a link as any words), so they are escaped as HTML
/// entities, the only escaping Slack asks for. Our own formatting (`*bold*`, emoji codes) is
/// written around the escaped text.
pub fn slack_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(payload: &str) -> RuleRow {
        RuleRow {
            id: 1,
            name: "r&d <team>".into(),
            condition: "job_discarded".into(),
            queue: None,
            kind: None,
            game: None,
            workflow: None,
            threshold_ms: None,
            threshold_n: None,
            for_secs: 0,
            percent: None,
            notify_url: None,
            payload: payload.into(),
            enabled: true,
            created_at: chrono::Utc::now(),
            created_by: None,
            words: String::new(),
        }
    }

    fn incident(id: i64, summary: &str) -> IncidentRow {
        IncidentRow {
            id,
            rule_id: 1,
            rule: "r".into(),
            condition: "job_discarded".into(),
            subject: format!("job {id}"),
            summary: summary.into(),
            fired_at: chrono::Utc::now(),
            resolved_at: None,
            acknowledged_at: None,
            acknowledged_by: None,
        }
    }

    #[test]
    fn slack_text_escapes_its_control_characters_and_keeps_our_formatting() {
        assert_eq!(
            slack_escape("<!channel> <https://evil|click> & <@U1>"),
            "&lt;!channel&gt; &lt;https://evil|click&gt; &amp; &lt;@U1&gt;"
        );
        assert_eq!(
            slack_escape("&amp;"),
            "&amp;amp;",
            "escaped once more, shown as typed"
        );
        let fired = body(
            &rule("slack"),
            &incident(7, "job 7 was discarded: <!here>"),
            Event::Fired,
        );
        assert_eq!(
            fired["text"],
            ":rotating_light: Kickoff alert *r&amp;d &lt;team&gt;* fired: job 7 was discarded: &lt;!here&gt;"
        );
        let many: Vec<IncidentRow> = (1..=3).map(|i| incident(i, "<!channel>")).collect();
        let text = digest(&rule("slack"), &many, Event::Resolved)["text"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            text,
            ":white_check_mark: Kickoff alert *r&amp;d &lt;team&gt;* resolved and 3 more: job 1, job 2, job 3"
        );
    }

    #[test]
    fn the_standard_shape_keeps_the_text_as_it_is() {
        let fired = body(&rule("standard"), &incident(7, "<b> & </b>"), Event::Fired);
        assert_eq!(fired["data"]["summary"], "<b> & </b>");
        let many: Vec<IncidentRow> = (1..=25).map(|i| incident(i, "x")).collect();
        let d = digest(&rule("standard"), &many, Event::Fired);
        assert_eq!(d["type"], "alert.digest");
        assert_eq!(d["data"]["count"], 25);
        let summary = d["data"]["summary"].as_str().unwrap();
        assert!(
            summary.starts_with("and 25 more: job 1, job 2, "),
            "{summary}"
        );
        assert!(summary.ends_with("job 20, …"), "{summary}");
    }
}
