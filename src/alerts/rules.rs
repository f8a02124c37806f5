//! What a rule watches and its thresholds: the conditions, the checks of a new rule (a field that
//! does not apply to its condition is refused, not ignored), the rule as stored, and the rule in
//! words. The store reads and writes these types; this module needs nothing of the store.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The most rules a database holds.
pub const MAX_RULES: i64 = 200;

/// How far back a rule whose subjects fire once ([`Condition::once_per_subject`]) looks: its
/// resolved incidents are the record that a subject fired, so they are kept at least this long
/// whatever the retention, or a subject would fire again.
pub const ONCE_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The least `threshold_ms` of a `late_start` rule: the attempts it reads are those a second
/// late or more (see migration `20261218000001`).
pub const LATE_START_MIN_MS: i64 = 1_000;

/// What a rule watches.
#[derive(schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// A question's lock job started more than `threshold_ms` after game time, or has not started
    /// that long after it (scope: `game`). Resolves when the question is locked. Fires once per
    /// question, for game times from an hour before the rule was made and within the last day
    /// ([`ONCE_WINDOW`]).
    LateLock,
    /// A question still open `threshold_ms` after its game time (scope: `game`).
    QuestionOpen,
    /// A job discarded (out of attempts, or a fatal error) since the rule was made (scope:
    /// `queue`, `kind`). Resolves when the job is retried or deleted.
    JobDiscarded,
    /// More than `threshold_n` jobs available in a queue for more than `for_secs` (scope:
    /// `queue`).
    QueueBacklog,
    /// Over `percent` % of the attempts finished in the last 5 minutes failed, once at least
    /// `threshold_n` finished (scope: `queue`).
    FailureRate,
    /// A node's heartbeat older than `threshold_ms`.
    NodeLost,
    /// Waiting jobs due more than `threshold_ms` ago and not started (scope: `queue`).
    Overdue,
    /// Attempts that started more than `threshold_ms` (1,000 or more) after their due time
    /// within the last 5 minutes, those their late-start policy skipped or discarded among them
    /// (scope: `queue`, `kind`). One subject per queue; resolves when 5 minutes pass without one.
    LateStart,
    /// A workflow step failed because its deadline passed without its signal (a partner that
    /// never sent the final result), for deadlines from an hour before the rule was made
    /// (scope: `workflow`, the runs' name). Resolves when the step is retried, skipped or its
    /// run deleted.
    WorkflowDeadline,
}

impl Condition {
    pub const ALL: [Condition; 9] = [
        Condition::LateLock,
        Condition::QuestionOpen,
        Condition::JobDiscarded,
        Condition::QueueBacklog,
        Condition::FailureRate,
        Condition::NodeLost,
        Condition::Overdue,
        Condition::LateStart,
        Condition::WorkflowDeadline,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Condition::LateLock => "late_lock",
            Condition::QuestionOpen => "question_open",
            Condition::JobDiscarded => "job_discarded",
            Condition::QueueBacklog => "queue_backlog",
            Condition::FailureRate => "failure_rate",
            Condition::NodeLost => "node_lost",
            Condition::Overdue => "overdue",
            Condition::LateStart => "late_start",
            Condition::WorkflowDeadline => "workflow_deadline",
        }
    }

    pub fn parse(s: &str) -> Option<Condition> {
        Condition::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// A subject fires at most once, ever (a lock that started late stays late): it is not
    /// fired again after its incident resolved.
    pub fn once_per_subject(self) -> bool {
        matches!(self, Condition::LateLock)
    }

    fn scopes(self) -> &'static [&'static str] {
        match self {
            Condition::LateLock | Condition::QuestionOpen => &["game"],
            Condition::JobDiscarded | Condition::LateStart => &["queue", "kind"],
            Condition::QueueBacklog | Condition::FailureRate | Condition::Overdue => &["queue"],
            Condition::NodeLost => &[],
            Condition::WorkflowDeadline => &["workflow"],
        }
    }

    /// The default of `threshold_ms`, for the conditions that read it.
    fn default_ms(self) -> Option<i64> {
        match self {
            Condition::LateLock | Condition::QuestionOpen => Some(1_000),
            Condition::NodeLost => Some(30_000),
            Condition::Overdue | Condition::LateStart => Some(60_000),
            _ => None,
        }
    }
}

/// How a notification's body is shaped.
#[derive(schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Payload {
    /// `{"type": "alert.fired" | "alert.resolved", "timestamp": ..., "data": {...}}`.
    Standard,
    /// `{"text": "..."}`, as Slack's (and Mattermost's, Discord's `/slack`) incoming webhooks
    /// take it.
    Slack,
}

impl Payload {
    pub fn as_str(self) -> &'static str {
        match self {
            Payload::Standard => "standard",
            Payload::Slack => "slack",
        }
    }
}

/// A new rule, as the API and the dashboard take it.
#[derive(schemars::JsonSchema, Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[schemars(transform = FieldsOfEachCondition)]
pub struct RuleSpec {
    /// 1 to 100 characters, not blank; unique (else 409).
    #[schemars(length(min = 1, max = 100), regex(pattern = crate::schema_rules::NOT_BLANK))]
    pub name: String,
    /// Needed. Each condition reads its own fields: one it does not read is refused.
    pub condition: Option<Condition>,
    /// Only this queue (`job_discarded`, `queue_backlog`, `failure_rate`, `overdue`,
    /// `late_start`).
    #[schemars(length(max = 100), regex(pattern = crate::schema_rules::NO_NUL))]
    pub queue: Option<String>,
    /// Only this job kind (`job_discarded`, `late_start`).
    #[schemars(length(max = 100), regex(pattern = crate::schema_rules::NO_NUL))]
    pub kind: Option<String>,
    /// Only this game's questions (`late_lock`, `question_open`).
    #[schemars(length(max = 200), regex(pattern = crate::schema_rules::NO_NUL))]
    pub game: Option<String>,
    /// Only this workflow's runs (`workflow_deadline`).
    #[schemars(length(max = 128), regex(pattern = crate::schema_rules::NO_NUL))]
    pub workflow: Option<String>,
    /// Milliseconds, 0 to 86,400,000: after game time (`late_lock`, `question_open`, default
    /// 1,000), since the heartbeat (`node_lost`, default 30,000), past due (`overdue`, default
    /// 60,000), a start after the due time (`late_start`, 1,000 or more, default 60,000).
    #[schemars(range(min = 0, max = 86_400_000))]
    pub threshold_ms: Option<i64>,
    /// A count: available jobs (`queue_backlog`, needed), attempts finished in 5 minutes before
    /// the rate counts (`failure_rate`, default 10).
    #[schemars(range(min = 1, max = 1_000_000_000))]
    pub threshold_n: Option<i64>,
    /// Seconds the condition must hold before it fires, 0 to 86,400 (default 0; `queue_backlog`
    /// 60).
    #[schemars(range(min = 0, max = 86_400))]
    pub for_secs: Option<i32>,
    /// Percent of failed attempts, above 0 and at most 100 (`failure_rate`, needed).
    #[schemars(extend("exclusiveMinimum" = 0), range(max = 100))]
    pub percent: Option<f64>,
    /// Where each firing and resolution is sent: a webhook call (it must pass
    /// `KICKOFF_WEBHOOK_ALLOWED_HOSTS`, else 422 `notify_url_refused`; signed when under a
    /// webhook endpoint). An absolute `http(s)` URL; blank or absent: shown on the dashboard and
    /// counted in `/metrics` only.
    #[schemars(length(max = 2048), regex(pattern = crate::schema_rules::NOTIFY_URL_PATTERN))]
    #[schemars(extend("x-message" = "notify_url: an absolute http(s) URL (https://hooks.example.com/alerts)"))]
    pub notify_url: Option<String>,
    /// Default `standard`.
    pub payload: Option<Payload>,
}

/// A rule that passed its checks, ready to store.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedRule {
    pub name: String,
    pub condition: Condition,
    pub queue: Option<String>,
    pub kind: Option<String>,
    pub game: Option<String>,
    pub workflow: Option<String>,
    pub threshold_ms: Option<i64>,
    pub threshold_n: Option<i64>,
    pub for_secs: i32,
    pub percent: Option<f64>,
    pub notify_url: Option<String>,
    pub payload: Payload,
}

fn trimmed(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The fields each condition reads, as [`RuleSpec::check`] holds them: per condition, the scopes
/// it does not read absent (or `null`), the thresholds it needs given and those it has not
/// absent.
struct FieldsOfEachCondition;

impl schemars::transform::Transform for FieldsOfEachCondition {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        use serde_json::json;
        let absent = json!({ "type": "null" });
        let given = || json!({ "not": { "type": "null" } });
        let mut rules = vec![json!({
            "required": ["condition"],
            "properties": { "condition": given() },
            "x-message": format!(
                "condition: one of {}",
                Condition::ALL.map(Condition::as_str).join(", ")
            ),
        })];
        for c in Condition::ALL {
            let name = c.as_str();
            let mut props = serde_json::Map::new();
            let mut required = Vec::new();
            // A field the condition does not read: absent or `null`, in the check's words.
            let unread = |field: &str, what: &str| {
                json!({
                    "type": "null",
                    "x-message": format!("{field}: a {name} rule has no {what}"),
                })
            };
            for scope in ["queue", "kind", "game", "workflow"] {
                if !c.scopes().contains(&scope) {
                    // A blank scope is read as none.
                    props.insert(
                        scope.into(),
                        json!({
                            "anyOf": [absent.clone(), { "type": "string", "pattern": r"^\s*$" }],
                            "x-message": format!("{scope}: a {name} rule is not scoped by {scope}"),
                        }),
                    );
                }
            }
            match (c.default_ms(), c) {
                (None, _) => {
                    props.insert(
                        "threshold_ms".into(),
                        unread("threshold_ms", "time threshold"),
                    );
                }
                (Some(_), Condition::LateStart) => {
                    props.insert(
                        "threshold_ms".into(),
                        json!({
                            "anyOf": [absent.clone(), { "minimum": LATE_START_MIN_MS }],
                            "x-message": format!(
                                "threshold_ms: a late_start rule watches starts \
                                 {LATE_START_MIN_MS} ms late or more (1000 to 86400000)"
                            ),
                        }),
                    );
                }
                (Some(_), _) => {}
            }
            match c {
                Condition::QueueBacklog => {
                    required.push("threshold_n");
                    props.insert("threshold_n".into(), given());
                }
                Condition::FailureRate => {}
                _ => {
                    props.insert(
                        "threshold_n".into(),
                        unread("threshold_n", "count threshold"),
                    );
                }
            }
            if c == Condition::FailureRate {
                required.push("percent");
                props.insert("percent".into(), given());
            } else {
                props.insert("percent".into(), unread("percent", "rate"));
            }
            let words = match c {
                Condition::QueueBacklog => {
                    "threshold_n: a queue_backlog rule needs the count of available jobs it allows"
                }
                Condition::FailureRate => {
                    "percent: a failure_rate rule needs the percent of failed attempts it allows"
                }
                _ => "a field the condition does not read is refused",
            };
            rules.push(json!({
                "if": { "required": ["condition"], "properties": { "condition": { "const": c.as_str() } } },
                "then": { "required": required, "properties": props, "x-message": words },
            }));
        }
        crate::schema_rules::add_rules(schema, rules);
    }
}

impl RuleSpec {
    /// The rule, or why it cannot be one (naming the field).
    pub fn check(self) -> Result<CheckedRule, String> {
        // Postgres text cannot hold NUL.
        for (field, value) in [
            ("name", Some(&self.name)),
            ("queue", self.queue.as_ref()),
            ("kind", self.kind.as_ref()),
            ("game", self.game.as_ref()),
            ("workflow", self.workflow.as_ref()),
            ("notify_url", self.notify_url.as_ref()),
        ] {
            if value.is_some_and(|v| v.contains('\0')) {
                return Err(format!("{field}: must not contain NUL characters"));
            }
        }
        let name = self.name.trim().to_string();
        if name.is_empty() || name.chars().count() > 100 {
            return Err("name: 1 to 100 characters".into());
        }
        let condition = self.condition.ok_or_else(|| {
            format!(
                "condition: one of {}",
                Condition::ALL.map(Condition::as_str).join(", ")
            )
        })?;
        let scopes = condition.scopes();
        let queue = trimmed(self.queue);
        let kind = trimmed(self.kind);
        let game = trimmed(self.game);
        let workflow = trimmed(self.workflow);
        for (field, value, max) in [
            ("queue", &queue, 100),
            ("kind", &kind, 100),
            ("game", &game, 200),
            ("workflow", &workflow, 128),
        ] {
            if let Some(v) = value {
                if !scopes.contains(&field) {
                    return Err(format!(
                        "{field}: a {} rule is not scoped by {field}",
                        condition.as_str()
                    ));
                }
                if v.chars().count() > max {
                    return Err(format!("{field}: at most {max} characters"));
                }
            }
        }
        let threshold_ms = match (condition.default_ms(), self.threshold_ms) {
            (None, Some(_)) => {
                return Err(format!(
                    "threshold_ms: a {} rule has no time threshold",
                    condition.as_str()
                ))
            }
            (_, Some(ms)) if !(0..=86_400_000).contains(&ms) => {
                return Err("threshold_ms: 0 to 86400000 (a day)".into())
            }
            (_, Some(ms)) if condition == Condition::LateStart && ms < LATE_START_MIN_MS => {
                return Err(format!(
                    "threshold_ms: a late_start rule watches starts {LATE_START_MIN_MS} ms late \
                     or more (1000 to 86400000)"
                ))
            }
            (Some(default), given) => Some(given.unwrap_or(default)),
            (None, None) => None,
        };
        let threshold_n =
            match (condition, self.threshold_n) {
                (Condition::QueueBacklog, None) => return Err(
                    "threshold_n: a queue_backlog rule needs the count of available jobs it allows"
                        .into(),
                ),
                (Condition::QueueBacklog | Condition::FailureRate, Some(n))
                    if !(1..=1_000_000_000).contains(&n) =>
                {
                    return Err("threshold_n: 1 to 1000000000".into())
                }
                (Condition::QueueBacklog, n) => n,
                (Condition::FailureRate, n) => Some(n.unwrap_or(10)),
                (_, Some(_)) => {
                    return Err(format!(
                        "threshold_n: a {} rule has no count threshold",
                        condition.as_str()
                    ))
                }
                (_, None) => None,
            };
        let percent =
            match (condition, self.percent) {
                (Condition::FailureRate, None) => return Err(
                    "percent: a failure_rate rule needs the percent of failed attempts it allows"
                        .into(),
                ),
                (Condition::FailureRate, Some(p)) if !(p > 0.0 && p <= 100.0) => {
                    return Err("percent: above 0 and at most 100".into())
                }
                (Condition::FailureRate, p) => p,
                (_, Some(_)) => {
                    return Err(format!(
                        "percent: a {} rule has no rate",
                        condition.as_str()
                    ))
                }
                (_, None) => None,
            };
        let default_for = if condition == Condition::QueueBacklog {
            60
        } else {
            0
        };
        let for_secs = self.for_secs.unwrap_or(default_for);
        if !(0..=86_400).contains(&for_secs) {
            return Err("for_secs: 0 to 86400 (a day)".into());
        }
        let notify_url = trimmed(self.notify_url);
        if notify_url.as_ref().is_some_and(|u| u.len() > 2048) {
            return Err("notify_url: at most 2048 characters".into());
        }
        Ok(CheckedRule {
            name,
            condition,
            queue,
            kind,
            game,
            workflow,
            threshold_ms,
            threshold_n,
            for_secs,
            percent,
            notify_url,
            payload: self.payload.unwrap_or(Payload::Standard),
        })
    }
}

/// A rule as stored.
#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct RuleRow {
    pub id: i64,
    pub name: String,
    /// `late_lock`, `question_open`, `job_discarded`, `queue_backlog`, `failure_rate`,
    /// `node_lost`, `overdue`, `late_start` or `workflow_deadline`.
    pub condition: String,
    pub queue: Option<String>,
    pub kind: Option<String>,
    pub game: Option<String>,
    pub workflow: Option<String>,
    pub threshold_ms: Option<i64>,
    pub threshold_n: Option<i64>,
    pub for_secs: i32,
    pub percent: Option<f64>,
    pub notify_url: Option<String>,
    /// `standard` or `slack`.
    pub payload: String,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub created_by: Option<String>,
    /// The rule in words.
    #[sqlx(skip)]
    pub words: String,
}

impl RuleRow {
    pub fn condition(&self) -> Option<Condition> {
        Condition::parse(&self.condition)
    }

    /// The row with its words filled in (they are not stored).
    pub fn with_words(mut self) -> Self {
        self.words = describe(&self);
        self
    }
}

/// A rule in words, as the dashboard and the notifications say it.
pub fn describe(rule: &RuleRow) -> String {
    let Some(condition) = rule.condition() else {
        return rule.condition.clone();
    };
    let (queue, kind, game) = (
        rule.queue.as_deref(),
        rule.kind.as_deref(),
        rule.game.as_deref(),
    );
    let (threshold_ms, threshold_n, for_secs, percent) = (
        rule.threshold_ms,
        rule.threshold_n,
        rule.for_secs,
        rule.percent,
    );
    let ms = threshold_ms.unwrap_or(0);
    let n = threshold_n.unwrap_or(0);
    let in_queue = queue.map(|q| format!(" in queue {q}")).unwrap_or_default();
    let of_game = game.map(|g| format!(" of {g}")).unwrap_or_default();
    let mut words = match condition {
        Condition::LateLock => {
            format!("a question's lock{of_game} starts more than {ms} ms after game time")
        }
        Condition::QuestionOpen => {
            format!("a question{of_game} is still open {ms} ms after game time")
        }
        Condition::JobDiscarded => {
            let of_kind = kind.map(|k| format!(" {k}")).unwrap_or_default();
            format!("a{of_kind} job is discarded{in_queue}")
        }
        Condition::QueueBacklog => {
            format!(
                "more than {n} jobs are available{}",
                queue
                    .map(|q| format!(" in queue {q}"))
                    .unwrap_or_else(|| " in a queue".into())
            )
        }
        Condition::FailureRate => format!(
            "over {}% of the attempts{in_queue} in 5 minutes fail (once {n} finished)",
            percent.unwrap_or(0.0)
        ),
        Condition::NodeLost => format!("a node's heartbeat is older than {ms} ms"),
        Condition::Overdue => format!("jobs{in_queue} wait more than {ms} ms past their due time"),
        Condition::LateStart => {
            let of_kind = kind.map(|k| format!(" of a {k} job")).unwrap_or_default();
            format!(
                "an attempt{of_kind}{in_queue} starts more than {ms} ms after its due time \
                 (those its late-start policy skips or discards that late counted among them)"
            )
        }
        Condition::WorkflowDeadline => {
            let of = rule
                .workflow
                .as_deref()
                .map(|w| format!(" of a {w} run"))
                .unwrap_or_default();
            format!("a workflow step{of} fails because its deadline passed without its signal")
        }
    };
    if for_secs > 0 {
        words.push_str(&format!(" for more than {for_secs} s"));
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(condition: Condition) -> RuleSpec {
        RuleSpec {
            name: "r".into(),
            condition: Some(condition),
            ..RuleSpec::default()
        }
    }

    #[test]
    fn thresholds_get_their_defaults_and_foreign_fields_are_refused() {
        let late = spec(Condition::LateLock).check().unwrap();
        assert_eq!(late.threshold_ms, Some(1_000));
        assert_eq!(late.for_secs, 0);
        assert_eq!(late.payload, Payload::Standard);
        let backlog = RuleSpec {
            threshold_n: Some(100),
            ..spec(Condition::QueueBacklog)
        }
        .check()
        .unwrap();
        assert_eq!((backlog.threshold_n, backlog.for_secs), (Some(100), 60));
        let rate = RuleSpec {
            percent: Some(20.0),
            ..spec(Condition::FailureRate)
        }
        .check()
        .unwrap();
        assert_eq!(rate.threshold_n, Some(10));

        for (bad, field) in [
            (spec(Condition::QueueBacklog), "threshold_n"),
            (spec(Condition::FailureRate), "percent"),
            (
                RuleSpec {
                    percent: Some(0.0),
                    ..spec(Condition::FailureRate)
                },
                "percent",
            ),
            (
                RuleSpec {
                    game: Some("g".into()),
                    ..spec(Condition::NodeLost)
                },
                "game",
            ),
            (
                RuleSpec {
                    threshold_ms: Some(5),
                    ..spec(Condition::JobDiscarded)
                },
                "threshold_ms",
            ),
            (
                RuleSpec {
                    threshold_ms: Some(-1),
                    ..spec(Condition::LateLock)
                },
                "threshold_ms",
            ),
            (
                RuleSpec {
                    threshold_ms: Some(999),
                    ..spec(Condition::LateStart)
                },
                "threshold_ms",
            ),
            (
                RuleSpec {
                    game: Some("g".into()),
                    ..spec(Condition::LateStart)
                },
                "game",
            ),
            (
                RuleSpec {
                    name: " ".into(),
                    ..spec(Condition::LateLock)
                },
                "name",
            ),
            (
                RuleSpec {
                    condition: None,
                    ..spec(Condition::LateLock)
                },
                "condition",
            ),
        ] {
            let e = bad.clone().check().unwrap_err();
            assert!(e.starts_with(field), "{bad:?}: {e}");
        }
    }

    #[test]
    fn conditions_round_trip_their_names() {
        for c in Condition::ALL {
            assert_eq!(Condition::parse(c.as_str()), Some(c));
        }
        assert_eq!(Condition::parse("nope"), None);
    }
}
