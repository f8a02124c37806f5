//! What a feature adds to every attempt without the executor naming it. A hook is told when an
//! attempt starts and may end a run before its handler: a schedule's runs (`schedules::gate`)
//! record their start and apply their overlap policy this way. The runtime gives the executor its
//! hooks; the executor calls each in order at its step of the attempt (see `executor.rs`).
//!
//! A hook with nothing to do for a job answers from the job alone (a meta lookup): no future is
//! made, nothing awaits, on the path of every attempt.

use std::sync::Arc;
use std::time::Duration;

use super::job::Job;
use super::worker::{BoxFuture, WorkError};

/// One feature's part in every attempt.
pub trait AttemptHook: Send + Sync + 'static {
    /// The attempt of `job` started, `late` after its due time, before its handler runs. Must not
    /// wait: what it writes goes to a task of its own, so that the handler is not held up.
    fn started(&self, _job: &Job, _late: Duration) {}

    /// Whether the handler may run, checked before each run of it (within the attempt's timeout):
    /// `None` when this hook has nothing to check for `job`; an error ends the attempt with it
    /// (`WorkError::Cancel` to skip it).
    fn gate<'a>(&'a self, _job: &'a Job) -> Option<BoxFuture<'a, Result<(), WorkError>>> {
        None
    }
}

/// A node's hooks, in the order they are called. Cheap to clone.
#[derive(Clone, Default)]
pub struct AttemptHooks(Arc<[Arc<dyn AttemptHook>]>);

impl AttemptHooks {
    pub fn new(hooks: Vec<Arc<dyn AttemptHook>>) -> Self {
        AttemptHooks(hooks.into())
    }

    pub(crate) fn started(&self, job: &Job, late: Duration) {
        for hook in self.0.iter() {
            hook.started(job, late);
        }
    }

    /// Every hook's gate, in order; the first refusal ends the attempt.
    pub(crate) async fn gate(&self, job: &Job) -> Result<(), WorkError> {
        for hook in self.0.iter() {
            if let Some(check) = hook.gate(job) {
                check.await?;
            }
        }
        Ok(())
    }
}
