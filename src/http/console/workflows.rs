//! Workflows: the runs, one run with its steps, what each waits for and its signals; an
//! operator's actions on a run, through the engine's own (`engine::workflow_actions`), audited.

use kickoff_app::console::workflows::{
    SignalView, StepAttemptView, StepView, TasksView, WaitView, WorkflowDetail, WorkflowRow,
    WorkflowsConsole, WorkflowsPage,
};
use kickoff_app::console::Refusal;
use serde_json::Value;

use super::{conn, ms, operator, refused, Act, ServerConsole, LIST_ROWS};
use crate::accounts::Role;
use crate::engine::workflow::RunRow;
use crate::engine::workflow_actions::RetryMode;

fn workflow_row(r: &RunRow) -> WorkflowRow {
    WorkflowRow {
        id: r.id,
        name: r.name.clone(),
        key: r.key.clone(),
        state: r.state.clone(),
        created_ms: ms(r.created_at),
        finished_ms: r.finished_at.map(ms),
        steps: r.steps,
        blocked: r.blocked,
        ready: r.ready,
        completed: r.completed,
        failed: r.failed,
        skipped: r.skipped,
        cancelled: r.cancelled,
        rerun_of: r.rerun_of,
        progressed_ms: ms(r.progressed_at),
    }
}

#[async_trait::async_trait]
impl WorkflowsConsole for ServerConsole {
    async fn workflows(&self, waiting: Option<String>) -> Result<WorkflowsPage, Refusal> {
        operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let longer_than = match &waiting {
            None => None,
            Some(w) => {
                let ms = crate::engine::job_edit::parse_duration_ms(w)
                    .map_err(|e| Refusal::invalid(format!("waiting: {e}")))?;
                if ms <= 0 {
                    return Err(Refusal::invalid("waiting: a duration after zero, like 1h"));
                }
                Some(std::time::Duration::from_millis(ms as u64))
            }
        };
        let runs = self
            .client
            .workflow_runs(None, None, LIST_ROWS, longer_than)
            .await
            .map_err(refused)?;
        Ok(WorkflowsPage {
            now_ms,
            rows: runs.iter().map(workflow_row).collect(),
            waiting,
        })
    }

    async fn workflow(&self, id: i64) -> Result<WorkflowDetail, Refusal> {
        let op = operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let run = self.client.workflow_run(id).await.map_err(refused)?;
        let sight = op.sight(self.client.workers());
        let seen = self
            .client
            .workflow_seen(&run, &sight)
            .await
            .map_err(refused)?;
        let (steps, signals) = (&seen.steps, seen.signals.clone());
        let edges = self.client.workflow_edges(id).await.map_err(refused)?;
        let names: Vec<String> = signals.iter().map(|s| s.name.clone()).collect();
        let times = match &run.times {
            Value::Object(times) => times
                .iter()
                .filter_map(|(name, at)| {
                    let at: chrono::DateTime<chrono::Utc> =
                        serde_json::from_value(at.clone()).ok()?;
                    Some((name.clone(), ms(at)))
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(WorkflowDetail {
            now_ms,
            row: workflow_row(&run),
            created_by: run.created_by.clone(),
            times,
            steps: steps
                .iter()
                .map(|s| StepView {
                    name: s.name.clone(),
                    state: s.state.clone(),
                    kind: s.kind.clone(),
                    queue: s.queue.clone(),
                    job_id: s.job_id.map(|j| j.0),
                    after: edges
                        .iter()
                        .filter(|(step, _, _)| step == &s.name)
                        .map(|(_, dep, on)| (dep.clone(), on.clone()))
                        .collect(),
                    waits: s.wait(&names).map(|w| {
                        let (before, at, after) = w.parts();
                        WaitView {
                            before,
                            at_ms: at.map(ms),
                            after,
                        }
                    }),
                    signal: s.signal.clone(),
                    finished_ms: s.finished_at.map(ms),
                    kept_from: s.kept_from,
                    skipped_by_hand: s.skipped_by_hand,
                    output: s.output.as_ref().map(|o| o.to_string()),
                    tasks: s.tasks.map(|total| TasksView {
                        total,
                        done: s.tasks_done,
                        failed: s.tasks_failed + s.tasks_cancelled,
                        items: s.items,
                    }),
                })
                .collect(),
            signals: signals
                .into_iter()
                .map(|g| SignalView {
                    name: g.name,
                    source: g.source,
                    received_ms: ms(g.received_at),
                    payload: g.payload.to_string(),
                })
                .collect(),
            attempts: seen
                .attempts
                .iter()
                .map(|(step, r)| StepAttemptView {
                    step: step.clone(),
                    job_id: r.job_id.0,
                    attempt: r.attempt,
                    started_ms: ms(r.started_at),
                    ended_ms: ms(r.finished_at),
                    outcome: r.outcome.clone(),
                    error: r.error.clone(),
                })
                .collect(),
        })
    }

    async fn workflow_action(
        &self,
        id: i64,
        action: String,
        detail: Option<String>,
    ) -> Result<Option<i64>, Refusal> {
        let act = Act {
            action: format!("workflow.{action}"),
            target: Some(match &detail {
                Some(d) => format!("workflow run {id} / {d}"),
                None => format!("workflow run {id}"),
            }),
            filter: None,
        };
        let by = operator(Role::Viewer).ok().map(|op| op.user.name.clone());
        let source = by
            .as_ref()
            .map(|name| format!("console:{name}"))
            .unwrap_or_else(|| "console".into());
        let client = &self.client;
        self.act(
            act,
            |_| None,
            async |work| {
                let conn = conn(work).await?;
                match (action.as_str(), detail.as_deref()) {
                    ("cancel", _) => client.cancel_workflow_with(conn, id).await?,
                    ("retry", mode) => {
                        let name = mode.unwrap_or("failed");
                        let mode = RetryMode::named(name)
                            .ok_or_else(|| Refusal::invalid(format!("mode: no mode {name:?}")))?;
                        self.questions
                            .retry_workflow_with(conn, id, mode)
                            .await
                            .map_err(super::refused)?
                    }
                    ("skip", Some(step)) => client.skip_workflow_step_with(conn, id, step).await?,
                    ("signal", Some(name)) => {
                        client
                            .signal_workflow_with(conn, id, name, &Value::Null, &source)
                            .await?;
                        return Ok(None);
                    }
                    ("rerun", Some(step)) => {
                        let again = self
                            .questions
                            .rerun_workflow_with(conn, id, step, by.as_deref())
                            .await
                            .map_err(super::refused)?;
                        return Ok(Some(again.id));
                    }
                    ("move", Some(by)) => {
                        let times = moved_by(&client.workflow_run(id).await?, by)?;
                        self.questions
                            .move_workflow_times_with(conn, id, &times)
                            .await
                            .map_err(super::refused)?
                    }
                    ("skip" | "signal" | "rerun" | "move", None) => {
                        return Err(Refusal::invalid(format!(
                            "{action}: name the step, the signal or the time"
                        )))
                    }
                    _ => return Err(Refusal::invalid(format!("action: no action {action:?}"))),
                };
                Ok(None)
            },
        )
        .await
    }
}

/// The run's time moved as `by` says (`kickoff_at=30m`, `kickoff_at=-1h`: a name of its times
/// and a signed duration), as the API's move takes it.
fn moved_by(
    run: &crate::engine::workflow::RunRow,
    by: &str,
) -> Result<std::collections::BTreeMap<String, chrono::DateTime<chrono::Utc>>, Refusal> {
    let (name, duration) = by
        .split_once('=')
        .ok_or_else(|| Refusal::invalid("move: a time and by how much, kickoff_at=30m"))?;
    let ms = crate::engine::job_edit::parse_duration_ms(duration)
        .map_err(|e| Refusal::invalid(format!("by: {e}")))?;
    let at: chrono::DateTime<chrono::Utc> = run
        .times
        .get(name.trim())
        .and_then(|t| serde_json::from_value(t.clone()).ok())
        .ok_or_else(|| {
            Refusal::invalid(format!(
                "time: workflow run {} has no time {name:?}",
                run.id
            ))
        })?;
    let moved = at
        .checked_add_signed(chrono::Duration::milliseconds(ms))
        .ok_or_else(|| Refusal::invalid(format!("by: `{duration}` is too far")))?;
    Ok([(name.trim().to_string(), moved)].into())
}

/// The run page's graph: where each step is drawn (the app's `layout`, tested here where the test
/// command runs).
#[cfg(test)]
mod tests {
    use kickoff_app::console::workflows::{layout, StepView};

    fn step(name: &str, after: &[&str]) -> StepView {
        StepView {
            name: name.into(),
            state: "blocked".into(),
            kind: "noop".into(),
            queue: "default".into(),
            job_id: None,
            after: after
                .iter()
                .map(|d| (d.to_string(), "fail".to_string()))
                .collect(),
            waits: None,
            signal: None,
            finished_ms: None,
            kept_from: None,
            skipped_by_hand: false,
            output: None,
            tasks: None,
        }
    }

    #[test]
    fn each_step_is_drawn_after_its_deepest_dependency() {
        let steps = [
            step("lock", &[]),
            step("await", &["lock"]),
            step("settle", &["await"]),
            step("notify_a", &["settle"]),
            step("notify_b", &["settle"]),
            step("leaderboard", &["notify_a", "notify_b", "lock"]),
            step("audit", &[]),
        ];
        assert_eq!(
            layout(&steps),
            [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (4, 0), (0, 1)]
        );
    }
}
