//! Maintenance services: the rescuer and the deadline keeper (every node), and the pruner and the count folder (the
//! leader only; the schedules' runs ahead, `schedules::enqueuer`, has the same shape). Each has a `XxxConfig` with documented defaults and `validate()`,
//! `run_once()` (which tests call directly) and `run(shutdown)`, which loops and logs only when it
//! did something.

pub mod count_folder;
pub mod deadlines;
pub mod pruner;
pub mod rescuer;

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Calls `once` every `interval` until `shutdown`; errors are logged and the loop goes on.
pub(crate) async fn run_every<F, Fut, R>(
    name: &'static str,
    interval: Duration,
    shutdown: CancellationToken,
    mut once: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R, sqlx::Error>>,
    R: Report,
{
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match once().await {
            Ok(report) if report.did_something() => {
                tracing::info!(service = name, report = ?report, "maintenance")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(service = name, error = %e, "maintenance run failed"),
        }
    }
}

/// What a `run_once` reports.
pub trait Report: std::fmt::Debug {
    fn did_something(&self) -> bool;
}
