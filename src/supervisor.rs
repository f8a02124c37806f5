//! The server's background tasks, owned by one [`Supervisor`]: each is started with the
//! supervisor's stop token and named; [`Supervisor::stop`] cancels the token and awaits every task
//! (River's start and stop of all services together), so none outlives the pools it uses. The
//! server stops it after HTTP has stopped and before it closes the pools.
//!
//! A task that has not ended within the grace after the stop is aborted and named in the log:
//! a stop never waits for ever on one loop.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

/// How long [`Supervisor::stop`] waits for the tasks to end before it aborts the rest.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// Background tasks started together and stopped together.
pub struct Supervisor {
    stop: CancellationToken,
    tasks: JoinSet<()>,
    names: HashMap<Id, &'static str>,
}

/// What a stop found: the tasks that ended, and those aborted after the grace.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stopped {
    pub ended: Vec<&'static str>,
    pub aborted: Vec<&'static str>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new()
    }
}

impl Supervisor {
    pub fn new() -> Self {
        Supervisor {
            stop: CancellationToken::new(),
            tasks: JoinSet::new(),
            names: HashMap::new(),
        }
    }

    /// Starts `task`, made from the supervisor's stop token: it is to end soon after the token is
    /// cancelled.
    pub fn spawn<F, Fut>(&mut self, name: &'static str, task: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let handle = self.tasks.spawn(task(self.stop.clone()));
        self.names.insert(handle.id(), name);
    }

    /// How many tasks run (or ended, not yet awaited).
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Cancels the stop token and awaits every task, for at most `grace`; the ones still running
    /// then are aborted (and awaited), each named in the log.
    pub async fn stop(mut self, grace: Duration) -> Stopped {
        self.stop.cancel();
        let mut stopped = Stopped::default();
        let deadline = tokio::time::Instant::now() + grace;
        while let Ok(joined) =
            tokio::time::timeout_at(deadline, self.tasks.join_next_with_id()).await
        {
            match joined {
                None => return stopped,
                Some(Ok((id, ()))) => stopped.ended.push(self.names[&id]),
                Some(Err(e)) => {
                    let name = self.names[&e.id()];
                    tracing::error!(task = name, error = %e, "a background task failed");
                    stopped.ended.push(name);
                }
            }
        }
        self.tasks.abort_all();
        while let Some(joined) = self.tasks.join_next_with_id().await {
            let id = match &joined {
                Ok((id, ())) => *id,
                Err(e) => e.id(),
            };
            let name = self.names[&id];
            if joined.is_ok() {
                stopped.ended.push(name);
            } else {
                tracing::warn!(
                    task = name,
                    "a background task did not stop within {grace:?}: aborted"
                );
                stopped.aborted.push(name);
            }
        }
        stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stop_awaits_every_task_and_aborts_one_that_will_not_end() {
        let mut supervisor = Supervisor::new();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for name in ["sweep", "watch"] {
            let done = done_tx.clone();
            supervisor.spawn(name, move |stop| async move {
                stop.cancelled().await;
                // Work after the cancel (a last write) still happens before the stop returns.
                tokio::task::yield_now().await;
                done.send(name).unwrap();
            });
        }
        supervisor.spawn("stubborn", |_stop| std::future::pending());
        assert_eq!(supervisor.len(), 3);
        let stopped = supervisor.stop(Duration::from_millis(200)).await;
        let mut ended = stopped.ended;
        ended.sort();
        assert_eq!(ended, ["sweep", "watch"]);
        assert_eq!(stopped.aborted, ["stubborn"]);
        let mut done = vec![done_rx.recv().await.unwrap(), done_rx.recv().await.unwrap()];
        done.sort();
        assert_eq!(done, ["sweep", "watch"]);
    }
}
