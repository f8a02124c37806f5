//! Schedules: recurring jobs by a cron expression or an interval, in an IANA time zone.
//!
//! A schedule is a row of `schedules` (its rule, zone, job template and policies). Its runs are
//! ordinary jobs, inserted ahead of their slots, so each fires with the engine's precision, shows
//! on the Timers page, survives restarts and is rescued like any job:
//! - **Exactly one run per slot.** A run's unique key is `schedule:<id>:<slot ms>`, and it is
//!   inserted in the transaction that moves the schedule's `last_slot` past it, under the
//!   schedule row's lock ([`service::Schedules::fill`]). Two leaders, or a leader and an operator,
//!   serialise on that lock and the second finds the slot taken.
//! - **None lost to a leader change.** The leader inserts every run due within its horizon
//!   (twice the time a failover takes) ahead, at least the next one, each second
//!   (`schedules::enqueuer`). A schedule created or resumed through the API gets its runs in
//!   the same transaction.
//! - **Downtime** (slots that passed while no node ran): the missed-run policy picks what runs,
//!   once, when a node starts (nodes starting together take turns:
//!   [`service::Schedules::reconcile_missed`]) and on the leader's tick for slots never inserted.
//!   A run held by something else (a pause, a limit, a backlog), triggered by hand or snoozed is
//!   not missed.
//! - **Overlap** (a run comes due while the previous one is not final): checked when the run
//!   starts ([`gate`]): run anyway, skip it (cancelled with the reason), or cancel the previous.
//! - Daylight saving: see [`rule`].

pub mod enqueuer;
pub mod error;
pub mod gate;
pub mod missed;
pub mod rule;
pub mod service;
pub mod spec;

/// A schedule as stored (what `Schedules::row_with` answers).
pub use crate::engine::store::schedules::ScheduleRow;
pub use error::ScheduleError;
pub use rule::{CronError, Rule};
pub use service::{ScheduleView, Schedules, SlotPreview};
pub use spec::*;

pub use crate::engine::job::{META_SCHEDULE_ID, RESERVED_META};
