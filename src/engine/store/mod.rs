//! All of the engine's SQL, one module per table. Callers (client, services, HTTP) call these
//! functions and never hold SQL themselves. Functions are named table first, then verb.

pub mod errors;
pub mod history;
pub mod jobs;
pub mod kinds;
pub mod leader;
pub mod nodes;
pub mod queues;
pub mod replica;
pub mod schedules;
pub mod schema;
pub mod stats;
pub mod workflows;
