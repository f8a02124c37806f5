//! The use cases every surface shares: what the REST handlers, the dashboard's server functions
//! and the CLI's local commands call, so that each is written once. A surface parses its input,
//! checks the caller's role, calls an operation and renders its answer; the rules (who may search
//! what, the confirmation's snapshot, what a shift carries along, the order of its steps, what
//! each step records in the audit log) live here or below, in the engine and the services.
//!
//! Operations that are one call of the engine (retry, cancel, run now, delete, reschedule, a
//! question's or a schedule's action) are that call, made by each surface inside its audit entry:
//! they need no layer of their own. Those here take more than one step or more than one service:
//! - `bulk.rs`: the count that confirms a filter's snapshot, and the walk over every job a
//!   confirmed filter matches, in batches, with its audit entries;
//! - `shift.rs`: moving jobs in time (a postponed game), the questions they belong to and those
//!   of the game moving with them, first and in one transaction;
//! - `schedules.rs`: changing a schedule as its caller sees it (what it may not see of the
//!   template kept, or the change refused);
//! - `insert.rs`: a job with its audit entry, in one statement when it can.
//!
//! Its floor is above the engine, the questions and the audit log, below `http` and `cli`.

mod bulk;
mod insert;
mod schedules;
mod services;
mod shift;

pub use bulk::{Confirmation, COUNT_CAP};
pub use services::Operations;
pub use shift::{Selection, ShiftBy, ShiftReport};
