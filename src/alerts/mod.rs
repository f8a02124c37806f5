//! Alerts (issue 17): rules that watch for a game-time promise at risk (a late lock, a question
//! open after game time, a discarded job, a backlog, a failure rate, a lost node, overdue jobs),
//! the incidents they open and resolve, and their notifications.
//!
//! - `rules`: the conditions and their thresholds, the checks of a new rule, the rule as stored
//!   and in words.
//! - `store`: the SQL (the rules, the incidents; each condition's bounded read in
//!   `store::conditions`; the marks of the notification jobs in `store::notifications`).
//! - `evaluator`: the leader's evaluation, every few seconds, in one transaction under an advisory
//!   lock; each incident notifies once when it fires and once when it resolves, whichever node
//!   leads; then the upkeep (resolved incidents pruned with the retention).
//! - `notifier`: the notifications of an evaluation (`webhook` jobs inserted with the incidents,
//!   ten per rule and event, then one digest), marked so that no rule ever takes one for a
//!   subject.
//! - `payload`: the notification's body, Kickoff's shape or Slack's (escaped as Slack reads it).
//! - `service`: managing rules and acknowledging incidents, for the API and the dashboard.
//!
//! Floor 2: it uses the engine (the notifications are jobs) and reads the game's tables.

pub mod evaluator;
pub mod notifier;
pub mod payload;
pub mod rules;
pub mod service;
pub mod store;

pub use evaluator::Evaluator;
pub use rules::{Condition, Payload, RuleRow, RuleSpec};
pub use service::{AlertError, Alerts};
pub use store::IncidentRow;
