//! The alerts page: incidents (everyone), acknowledging one (operators), the rules (admins). Each
//! change is audited by the rule's name or the incident's id, never with a rule's notification
//! URL (an incoming-webhook URL is a secret).

use kickoff_app::console::alerts::{
    AlertsConsole, AlertsPage, IncidentInfo, NewRuleInput, RuleInfo,
};
use kickoff_app::console::Refusal;

use super::{conn, ms, operator, refused, Act, ServerConsole};
use crate::accounts::Role;
use crate::alerts::{Condition, IncidentRow, Payload, RuleRow, RuleSpec};

/// How many resolved incidents the page shows.
const RESOLVED_SHOWN: i64 = 50;
/// How many firing incidents the page shows.
const FIRING_SHOWN: i64 = 200;

fn incident(i: IncidentRow) -> IncidentInfo {
    IncidentInfo {
        id: i.id,
        rule: i.rule,
        condition: i.condition,
        subject: i.subject,
        summary: i.summary,
        fired_ms: ms(i.fired_at),
        resolved_ms: i.resolved_at.map(ms),
        acknowledged_ms: i.acknowledged_at.map(ms),
        acknowledged_by: i.acknowledged_by,
    }
}

fn rule(r: RuleRow) -> RuleInfo {
    RuleInfo {
        notifies: r.notify_url.as_deref().map(|u| {
            reqwest::Url::parse(u)
                .ok()
                .and_then(|u| u.host_str().map(String::from))
                .unwrap_or_else(|| "(an address)".into())
        }),
        id: r.id,
        name: r.name,
        condition: r.condition,
        words: r.words,
        payload: r.payload,
        enabled: r.enabled,
    }
}

/// A form field as a number, blank as absent.
fn number<T: std::str::FromStr>(field: &str, v: &Option<String>) -> Result<Option<T>, Refusal> {
    match v.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| Refusal::invalid(format!("{field}: `{v}` is not a number"))),
    }
}

fn spec(input: NewRuleInput) -> Result<RuleSpec, Refusal> {
    let condition = input.condition.trim();
    let payload = match input.payload.as_deref().map(str::trim) {
        None | Some("") | Some("standard") => None,
        Some("slack") => Some(Payload::Slack),
        Some(other) => {
            return Err(Refusal::invalid(format!(
                "payload: `{other}` is not standard or slack"
            )))
        }
    };
    Ok(RuleSpec {
        condition: match condition {
            "" => None,
            c => {
                Some(Condition::parse(c).ok_or_else(|| {
                    Refusal::invalid(format!("condition: `{c}` is not a condition"))
                })?)
            }
        },
        threshold_ms: number("threshold_ms", &input.threshold_ms)?,
        threshold_n: number("threshold_n", &input.threshold_n)?,
        for_secs: number("for_secs", &input.for_secs)?,
        percent: number("percent", &input.percent)?,
        name: input.name,
        queue: input.queue,
        kind: input.kind,
        game: input.game,
        workflow: input.workflow,
        notify_url: input.notify_url,
        payload,
    })
}

#[async_trait::async_trait]
impl AlertsConsole for ServerConsole {
    async fn alerts(&self) -> Result<AlertsPage, Refusal> {
        let op = operator(Role::Viewer)?;
        let firing = self
            .alerts
            .incidents(Some(true), None, FIRING_SHOWN)
            .await
            .map_err(refused)?;
        let resolved = self
            .alerts
            .incidents(Some(false), None, RESOLVED_SHOWN)
            .await
            .map_err(refused)?;
        let rules = self.alerts.rules().await.map_err(refused)?;
        Ok(AlertsPage {
            now_ms: self.now_ms().await?,
            firing: firing.into_iter().map(incident).collect(),
            resolved: resolved.into_iter().map(incident).collect(),
            rules: rules.into_iter().map(rule).collect(),
            may_acknowledge: op.may(Role::Operator),
            may_manage: op.may(Role::Admin),
        })
    }

    async fn acknowledge_alert(&self, id: i64) -> Result<(), Refusal> {
        let act = Act {
            action: "alert.acknowledge".into(),
            target: Some(format!("incident {id}")),
            filter: None,
        };
        self.act(
            act,
            |_| None,
            async |work| {
                let by = operator(Role::Operator)?.user.name;
                self.alerts
                    .acknowledge_with(conn(work).await?, id, &by)
                    .await
                    .map(drop)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn create_alert_rule(&self, input: NewRuleInput) -> Result<(), Refusal> {
        let act = Act {
            action: "alert_rule.create".into(),
            target: Some(format!("rule {}", input.name.trim())),
            filter: None,
        };
        self.act_as(
            Role::Admin,
            act,
            |_| None,
            async |work| {
                let by = operator(Role::Admin)?.user.name;
                let spec = spec(input)?;
                self.alerts
                    .create_rule_with(conn(work).await?, spec, Some(&by))
                    .await
                    .map(drop)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn set_alert_rule(&self, id: i64, enabled: bool) -> Result<(), Refusal> {
        let act = Act {
            action: if enabled {
                "alert_rule.enable"
            } else {
                "alert_rule.disable"
            }
            .into(),
            target: Some(format!("rule {id}")),
            filter: None,
        };
        self.act_as(
            Role::Admin,
            act,
            |_| None,
            async |work| {
                self.alerts
                    .set_enabled_with(conn(work).await?, id, enabled)
                    .await
                    .map(drop)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn delete_alert_rule(&self, id: i64) -> Result<(), Refusal> {
        let act = Act {
            action: "alert_rule.delete".into(),
            target: Some(format!("rule {id}")),
            filter: None,
        };
        self.act_as(
            Role::Admin,
            act,
            |_| None,
            async |work| {
                self.alerts
                    .delete_rule_with(conn(work).await?, id)
                    .await
                    .map(drop)
                    .map_err(refused)
            },
        )
        .await
    }
}
