//! Alerts (issue 17): rules that watch for a game-time promise at risk (a late lock, a question
//! open after game time, a discarded job, a backlog, a failure rate, a lost node, overdue jobs),
//! the incidents they open and resolve, and their notifications.
//!
//! - `rules`: the conditions and their thresholds, the checks of a new rule, the rule in words.
//! - `store`: the SQL (the rules, the incidents, and each condition's bounded read).
//! - `evaluator`: the leader's evaluation, every few seconds, in one transaction under an advisory
//!   lock; each incident notifies once when it fires and once when it resolves, whichever node
//!   leads (the notification is a `webhook` job inserted with the incident).
//! - `payload`: the notification's body, Kickoff's shape or Slack's.
//! - `service`: managing rules and acknowledging incidents, for the API and the dashboard.
//!
//! Floor 2: it uses the engine (the notifications are jobs) and reads the game's tables.

pub mod evaluator;
pub mod payload;
pub mod rules;
pub mod service;
pub mod store;

pub use evaluator::Evaluator;
pub use rules::{Condition, Payload, RuleSpec};
pub use service::{AlertError, Alerts};
pub use store::{IncidentRow, RuleRow};
