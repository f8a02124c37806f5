//! SQL of workflows (issue 49): a run's insert (its steps, their dependencies, the jobs of the
//! steps that wait for nothing) and its reading. A step's unblocking is not here: it is in the
//! database (`kickoff_step_settle`, migration `20261224000001_workflows.sql`), run by a trigger
//! in the transaction that settles the step's job, whichever path settles it (a completion, a
//! handler's own transaction, a failure, a cancel, a rescue, a delete).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};

use crate::engine::job::JobId;

/// A run as stored, with its steps counted by state.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct RunRow {
    pub id: i64,
    pub name: String,
    pub key: Option<String>,
    /// `running`, `completed`, `failed` or `cancelled`.
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub created_by: Option<String>,
    pub steps: i32,
    pub blocked: i32,
    pub ready: i32,
    pub completed: i32,
    pub failed: i32,
    pub skipped: i32,
    pub cancelled: i32,
    /// The run this one runs again (`Client::rerun_workflow`).
    pub rerun_of: Option<i64>,
    /// Its named times (`{"kickoff_at": "…"}`).
    pub times: Value,
    /// When one of its steps last changed state (its insert, a retry).
    pub progressed_at: DateTime<Utc>,
}

/// A step of a run as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct StepRow {
    pub id: i64,
    pub run_id: i64,
    pub name: String,
    /// `blocked`, `ready`, `completed`, `failed`, `skipped` or `cancelled`.
    pub state: String,
    /// Dependencies not yet settled in a way that lets it run.
    pub deps_left: i32,
    pub queue: String,
    pub kind: String,
    pub job_id: Option<JobId>,
    pub output: Option<Value>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The step of the run this one reruns whose completion it keeps (its job and output).
    pub kept_from: Option<i64>,
    /// Its dependencies.
    pub deps: i64,
    /// Its timer: the run's time and the offset from it in ms.
    pub at_time: Option<String>,
    pub at_ms: Option<i64>,
    /// The signal it waits for, since when (once its dependencies allowed it), and until when.
    pub signal: Option<String>,
    pub waiting_since: Option<DateTime<Utc>>,
    pub deadline_at: Option<DateTime<Utc>>,
    /// When its job is due, while it waits for its time (`scheduled`).
    pub due_at: Option<DateTime<Utc>>,
    /// Skipped by an operator (not by a dependency's policy).
    pub skipped_by_hand: bool,
    /// A map step's tasks, and those whose current job completed, failed or was cancelled.
    pub tasks: Option<i32>,
    pub tasks_done: i32,
    pub tasks_failed: i32,
    pub tasks_cancelled: i32,
    /// The items its tasks checkpointed as done (its progress).
    pub items: i64,
}

/// A signal a run received.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct SignalRow {
    pub name: String,
    pub payload: Value,
    pub source: String,
    pub received_at: DateTime<Utc>,
}

/// A step to insert: the job it becomes (checked like any new job), and how many dependencies
/// it waits for.
pub struct StepInsert<'a> {
    pub name: &'a str,
    pub queue: &'a str,
    pub kind: &'a str,
    pub args: &'a Value,
    pub priority: i16,
    pub max_attempts: i32,
    pub tags: &'a [String],
    pub meta: &'a Value,
    pub created_by: Option<&'a str>,
    pub call_host: Option<String>,
    pub deps: i32,
    /// Its timer: a time of the run's and an offset in ms.
    pub at: Option<(&'a str, i64)>,
    pub signal: Option<&'a str>,
    pub deadline: Option<(&'a str, i64)>,
    /// A map step's tasks.
    pub tasks: Option<i32>,
}

/// Inserts a run of `steps` steps, all blocked; `None` when a live run holds `key` (nothing is
/// written).
pub async fn run_insert(
    conn: &mut PgConnection,
    name: &str,
    key: Option<&str>,
    created_by: Option<&str>,
    steps: i32,
    times: &Value,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO workflow_runs (name, key, created_by, steps, blocked, times)
         VALUES ($1, $2, $3, $4, $4, $5)
         ON CONFLICT (key) WHERE key IS NOT NULL AND finished_at IS NULL DO NOTHING
         RETURNING id",
    )
    .bind(name)
    .bind(key)
    .bind(created_by)
    .bind(steps)
    .bind(times)
    .fetch_optional(conn)
    .await
}

/// The live run holding `key`.
pub async fn run_live_by_key<'e>(
    db: impl PgExecutor<'e>,
    key: &str,
) -> Result<Option<RunRow>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM workflow_runs WHERE key = $1 AND finished_at IS NULL")
        .bind(key)
        .fetch_optional(db)
        .await
}

/// The live run holding `key`, when it is a run of one of `names`.
pub async fn run_live_by_key_of<'e>(
    db: impl PgExecutor<'e>,
    key: &str,
    names: &[String],
) -> Result<Option<RunRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT * FROM workflow_runs WHERE key = $1 AND finished_at IS NULL AND name = ANY($2)",
    )
    .bind(key)
    .bind(names)
    .fetch_optional(db)
    .await
}

/// Inserts the steps of run `run`, blocked, in the order given (their ids follow it).
pub async fn steps_insert(
    conn: &mut PgConnection,
    run: i64,
    steps: &[StepInsert<'_>],
) -> Result<(), sqlx::Error> {
    let col = |f: fn(&StepInsert<'_>) -> Value| steps.iter().map(f).collect::<Vec<_>>();
    sqlx::query(
        "INSERT INTO workflow_steps (run_id, name, state, deps_left, queue, kind, args, priority,
                                     max_attempts, tags, meta, created_by, call_host, at_time,
                                     at_ms, signal, deadline_time, deadline_ms, tasks)
         SELECT $1, s.name, 'blocked', s.deps, s.queue, s.kind, s.args, s.priority,
                s.max_attempts, ARRAY(SELECT jsonb_array_elements_text(s.tags)), s.meta,
                s.created_by, s.call_host, s.at_time, s.at_ms, s.signal, s.deadline_time,
                s.deadline_ms, s.tasks
         FROM unnest($2::text[], $3::int[], $4::text[], $5::text[], $6::jsonb[], $7::int2[],
                     $8::int[], $9::jsonb[], $10::jsonb[], $11::text[], $12::text[], $13::text[],
                     $14::int8[], $15::text[], $16::text[], $17::int8[], $18::int[])
              WITH ORDINALITY AS s(name, deps, queue, kind, args, priority, max_attempts, tags,
                                   meta, created_by, call_host, at_time, at_ms, signal,
                                   deadline_time, deadline_ms, tasks, n)
         ORDER BY s.n",
    )
    .bind(run)
    .bind(steps.iter().map(|s| s.name).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.deps).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.queue).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.kind).collect::<Vec<_>>())
    .bind(col(|s| s.args.clone()))
    .bind(steps.iter().map(|s| s.priority).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.max_attempts).collect::<Vec<_>>())
    .bind(col(|s| Value::from(s.tags.to_vec())))
    .bind(col(|s| s.meta.clone()))
    .bind(steps.iter().map(|s| s.created_by).collect::<Vec<_>>())
    .bind(
        steps
            .iter()
            .map(|s| s.call_host.clone())
            .collect::<Vec<_>>(),
    )
    .bind(steps.iter().map(|s| s.at.map(|a| a.0)).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.at.map(|a| a.1)).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.signal).collect::<Vec<_>>())
    .bind(
        steps
            .iter()
            .map(|s| s.deadline.map(|a| a.0))
            .collect::<Vec<_>>(),
    )
    .bind(
        steps
            .iter()
            .map(|s| s.deadline.map(|a| a.1))
            .collect::<Vec<_>>(),
    )
    .bind(steps.iter().map(|s| s.tasks).collect::<Vec<_>>())
    .execute(conn)
    .await?;
    Ok(())
}

/// Inserts the dependencies of run `run`'s steps, by name: `steps[i]` waits for `deps[i]`, which
/// failing does `on_failure[i]` to it.
pub async fn edges_insert(
    conn: &mut PgConnection,
    run: i64,
    deps: &[&str],
    steps: &[&str],
    on_failure: &[&str],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO workflow_edges (dep_id, step_id, on_failure)
         SELECT d.id, s.id, e.on_failure
         FROM unnest($2::text[], $3::text[], $4::text[]) AS e(dep, step, on_failure)
         JOIN workflow_steps d ON d.run_id = $1 AND d.name = e.dep
         JOIN workflow_steps s ON s.run_id = $1 AND s.name = e.step",
    )
    .bind(run)
    .bind(deps)
    .bind(steps)
    .bind(on_failure)
    .execute(conn)
    .await?;
    Ok(())
}

/// Makes the jobs of run `run`'s steps that wait for nothing, in step order; returns each one's
/// queue.
pub async fn steps_start_free(
    conn: &mut PgConnection,
    run: i64,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT queue FROM (SELECT queue, kickoff_step_start(id) AS job FROM workflow_steps
                            WHERE run_id = $1 AND deps_left = 0 ORDER BY id) started
         WHERE job IS NOT NULL",
    )
    .bind(run)
    .fetch_all(conn)
    .await
}

pub async fn run_get<'e>(db: impl PgExecutor<'e>, id: i64) -> Result<Option<RunRow>, sqlx::Error> {
    sqlx::query_as("SELECT * FROM workflow_runs WHERE id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// Runs newest first, in `state` if given, with an id below `before`: at most `limit` (`state,
/// id` is indexed).
pub async fn runs_list<'e>(
    db: impl PgExecutor<'e>,
    state: Option<&str>,
    before: Option<i64>,
    limit: i64,
    waiting_secs: Option<f64>,
) -> Result<Vec<RunRow>, sqlx::Error> {
    // Waiting: running, no step changed for that long (the running runs walked newest first).
    sqlx::query_as(
        "SELECT * FROM workflow_runs
         WHERE ($1::text IS NULL OR state = $1) AND ($2::bigint IS NULL OR id < $2)
           AND ($4::float8 IS NULL
                OR (state = 'running'
                    AND progressed_at < clock_timestamp() - make_interval(secs => $4)))
         ORDER BY id DESC LIMIT $3",
    )
    .bind(state)
    .bind(before)
    .bind(limit)
    .bind(waiting_secs)
    .fetch_all(db)
    .await
}

/// The steps of run `run`, in the order they were declared.
pub async fn run_steps<'e>(db: impl PgExecutor<'e>, run: i64) -> Result<Vec<StepRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.id, s.run_id, s.name, s.state, s.deps_left, s.queue, s.kind, s.job_id, s.output,
                s.finished_at, s.kept_from,
                (SELECT count(*) FROM workflow_edges e WHERE e.step_id = s.id) AS deps,
                s.at_time, s.at_ms, s.signal, s.waiting_since, s.deadline_at,
                CASE WHEN s.tasks IS NULL THEN
                    (SELECT j.scheduled_at FROM jobs j
                     WHERE j.id = s.job_id AND j.state = 'scheduled')
                ELSE
                    (SELECT min(j.scheduled_at) FROM workflow_tasks t JOIN jobs j ON j.id = t.job_id
                     WHERE t.step_id = s.id AND t.state = 'pending' AND j.state = 'scheduled')
                END AS due_at,
                s.skipped_by_hand, s.tasks, s.tasks_done, s.tasks_failed, s.tasks_cancelled,
                CASE WHEN s.tasks IS NULL THEN 0::bigint
                     -- Kept by a rerun: its tasks were the rerun run's.
                     WHEN s.kept_from IS NOT NULL THEN coalesce((s.output ->> 'items')::bigint, 0)
                     ELSE (SELECT coalesce(sum(t.items), 0)::bigint FROM workflow_tasks t
                           WHERE t.step_id = s.id) END AS items
         FROM workflow_steps s WHERE s.run_id = $1 ORDER BY s.id",
    )
    .bind(run)
    .fetch_all(db)
    .await
}

/// The output of step `name` of the run that step `step` belongs to: `None` when the run has no
/// such step, `Some(None)` when it recorded none (or has not completed).
pub async fn sibling_output<'e>(
    db: impl PgExecutor<'e>,
    step: i64,
    name: &str,
) -> Result<Option<Option<Value>>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT d.output FROM workflow_steps s
         JOIN workflow_steps d ON d.run_id = s.run_id AND d.name = $2
         WHERE s.id = $1",
    )
    .bind(step)
    .bind(name)
    .fetch_optional(db)
    .await
}

/// Step `name` of the run step `step` belongs to, as another step of the run sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SiblingStep {
    pub run_id: i64,
    /// `blocked` (its dependencies, or a signal, outstanding), `ready`, `completed`, `failed`,
    /// `skipped` or `cancelled`.
    pub state: String,
    /// While it waits for a signal: when it fails unless the signal came.
    pub deadline_at: Option<DateTime<Utc>>,
}

/// Step `name` of the run step `step` belongs to (`None`: the run has no such step); with
/// `hold`, its row held (`FOR SHARE`) until the caller's transaction ends: it keeps its state
/// until then (a step starts, settles or is skipped only under its row's lock).
pub async fn sibling_step<'e>(
    db: impl PgExecutor<'e>,
    step: i64,
    name: &str,
    hold: bool,
) -> Result<Option<SiblingStep>, sqlx::Error> {
    let held = if hold { " FOR SHARE OF d" } else { "" };
    sqlx::query_as(&format!(
        "SELECT d.run_id, d.state::text AS state, d.deadline_at FROM workflow_steps s
         JOIN workflow_steps d ON d.run_id = s.run_id AND d.name = $2
         WHERE s.id = $1{held}"
    ))
    .bind(step)
    .bind(name)
    .fetch_optional(db)
    .await
}

/// Makes the job of step `name` of the run step `step` belongs to due now, if it waits for a
/// later time (`scheduled`): whether one was.
pub async fn sibling_wake<'e>(
    db: impl PgExecutor<'e>,
    step: i64,
    name: &str,
) -> Result<bool, sqlx::Error> {
    let woken = sqlx::query(
        "UPDATE jobs j SET scheduled_at = statement_timestamp()
         FROM workflow_steps s JOIN workflow_steps d ON d.run_id = s.run_id AND d.name = $2
         WHERE s.id = $1 AND j.id = d.job_id AND j.state = 'scheduled'
           AND j.scheduled_at > statement_timestamp()",
    )
    .bind(step)
    .bind(name)
    .execute(db)
    .await?;
    Ok(woken.rows_affected() > 0)
}

/// Cancels run `run`'s blocked steps under its lock; returns the jobs of its ready steps (to
/// cancel next, in the same transaction), or `None` when the run is not running.
pub async fn run_cancel_steps(
    conn: &mut PgConnection,
    run: i64,
) -> Result<Option<Vec<i64>>, sqlx::Error> {
    sqlx::query_scalar("SELECT kickoff_run_cancel_steps($1)")
        .bind(run)
        .fetch_one(conn)
        .await
}

/// Ends run `run` `cancelled` once none of its steps is blocked or ready.
pub async fn run_mark_cancelled(conn: &mut PgConnection, run: i64) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT kickoff_run_cancelled($1)")
        .bind(run)
        .execute(conn)
        .await?;
    Ok(())
}

/// Retries run `run`'s steps by `mode` (`failed`, `failed_and_following`, `all`): `ok` or why not
/// (`kickoff_run_retry`, migration `20261225000001_workflow_actions.sql`).
pub async fn run_retry(
    conn: &mut PgConnection,
    run: i64,
    mode: &str,
) -> Result<String, sqlx::Error> {
    let answer: String = sqlx::query_scalar("SELECT kickoff_run_retry($1, $2)")
        .bind(run)
        .bind(mode)
        .fetch_one(&mut *conn)
        .await?;
    if answer == "ok" {
        // Running again from now (a retried step that only waits changes no count).
        sqlx::query("UPDATE workflow_runs SET progressed_at = clock_timestamp() WHERE id = $1")
            .bind(run)
            .execute(conn)
            .await?;
    }
    Ok(answer)
}

/// Skips step `step` of run `run`: `skipped` and the step's job (to cancel next), or why not.
pub async fn step_skip(
    conn: &mut PgConnection,
    run: i64,
    step: &str,
) -> Result<(String, Option<i64>), sqlx::Error> {
    sqlx::query_as("SELECT outcome, job FROM kickoff_step_skip($1, $2)")
        .bind(run)
        .bind(step)
        .fetch_one(conn)
        .await
}

/// Runs settled run `run` again from step `from` as a new run: `created` and its id, or why not.
pub async fn run_rerun(
    conn: &mut PgConnection,
    run: i64,
    from: &str,
    by: Option<&str>,
) -> Result<(String, Option<i64>), sqlx::Error> {
    sqlx::query_as("SELECT outcome, new_run FROM kickoff_run_rerun($1, $2, $3)")
        .bind(run)
        .bind(from)
        .bind(by)
        .fetch_one(conn)
        .await
}

/// The signals run `run` received, in the order they came.
pub async fn run_signals<'e>(
    db: impl PgExecutor<'e>,
    run: i64,
) -> Result<Vec<SignalRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT name, payload, source, received_at FROM workflow_signals
         WHERE run_id = $1 ORDER BY received_at, name",
    )
    .bind(run)
    .fetch_all(db)
    .await
}

/// Stores signal `name` of run `run` and starts the steps waiting for it (`kickoff_signal`):
/// the signal, and whether it was stored (`false`: one of that name came first and stands).
/// Refused (SQLSTATE class `KO`) as the SQL function refuses it.
pub async fn run_signal(
    conn: &mut PgConnection,
    run: i64,
    name: &str,
    payload: &Value,
    source: &str,
) -> Result<(SignalRow, bool), sqlx::Error> {
    let (name, payload, source, received_at, stored) = sqlx::query_as(
        "SELECT name, payload, source, received_at, stored FROM kickoff_signal($1, $2, $3, $4)",
    )
    .bind(run)
    .bind(name)
    .bind(payload)
    .bind(source)
    .fetch_one(conn)
    .await?;
    let signal = SignalRow {
        name,
        payload,
        source,
        received_at,
    };
    Ok((signal, stored))
}

/// The payload of signal `name` of the run step `step` belongs to, if it came.
pub async fn step_signal<'e>(
    db: impl PgExecutor<'e>,
    step: i64,
    name: &str,
) -> Result<Option<Value>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT g.payload FROM workflow_steps s
         JOIN workflow_signals g ON g.run_id = s.run_id AND g.name = $2
         WHERE s.id = $1",
    )
    .bind(step)
    .bind(name)
    .fetch_optional(db)
    .await
}

/// Moves run `run`'s named times (`kickoff_run_move_times`): `moved` or why not.
pub async fn run_move_times(
    conn: &mut PgConnection,
    run: i64,
    moved: &Value,
) -> Result<String, sqlx::Error> {
    sqlx::query_scalar("SELECT kickoff_run_move_times($1, $2)")
        .bind(run)
        .bind(moved)
        .fetch_one(conn)
        .await
}

/// Fails the steps whose deadline passed while they waited for their signal, at most `limit`,
/// in run order (`kickoff_step_deadline` takes each run's lock): how many.
pub async fn deadlines_pass<'e>(db: impl PgExecutor<'e>, limit: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE failed) FROM (
             SELECT kickoff_step_deadline(id) AS failed FROM (
                 SELECT id FROM workflow_steps
                 WHERE state = 'blocked' AND deadline_at <= clock_timestamp()
                 ORDER BY run_id, id LIMIT $1) due) done",
    )
    .bind(limit)
    .fetch_one(db)
    .await
}

/// The dependencies of run `run`'s steps: (the step, the step it waits for, `on_failure`), in
/// the order the steps were declared.
pub async fn run_edges<'e>(
    db: impl PgExecutor<'e>,
    run: i64,
) -> Result<Vec<(String, String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.name, d.name, e.on_failure FROM workflow_edges e
         JOIN workflow_steps s ON s.id = e.step_id
         JOIN workflow_steps d ON d.id = e.dep_id
         WHERE s.run_id = $1 ORDER BY s.id, d.id",
    )
    .bind(run)
    .fetch_all(db)
    .await
}

/// Locks the jobs of run `run`'s ready steps (all, or step `name`'s), in id order, before the
/// run's own lock is taken: a completion locks its job, then the run (its settle), so an action
/// that cancels those jobs takes them in that order too, and does not wait on a completion
/// that waits on it (docs/workflows.md, "A cancel racing a completion").
pub async fn lock_ready_jobs(
    conn: &mut PgConnection,
    run: i64,
    name: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT j.id FROM jobs j
         WHERE j.id IN (SELECT l.job FROM kickoff_run_live_jobs($1) l
                        JOIN workflow_steps s ON s.id = l.step
                        WHERE $2::text IS NULL OR s.name = $2)
         ORDER BY j.id FOR UPDATE OF j",
    )
    .bind(run)
    .bind(name)
    .execute(conn)
    .await?;
    Ok(())
}

/// The jobs of map step `name` of run `run` whose tasks have not settled (a skip cancels them).
pub async fn step_task_jobs(
    conn: &mut PgConnection,
    run: i64,
    name: &str,
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT t.job_id FROM workflow_steps s
         JOIN workflow_tasks t ON t.step_id = s.id AND t.state = 'pending'
         WHERE s.run_id = $1 AND s.name = $2 ORDER BY t.job_id",
    )
    .bind(run)
    .bind(name)
    .fetch_all(conn)
    .await
}

/// The current jobs of map step `step`'s first `limit` tasks: (task, job).
pub async fn step_task_jobs_first<'e>(
    db: impl PgExecutor<'e>,
    step: i64,
    limit: i64,
) -> Result<Vec<(i32, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT task, job_id FROM workflow_tasks WHERE step_id = $1 ORDER BY task LIMIT $2",
    )
    .bind(step)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The ids of step `step`'s jobs, the newest `limit` of them, oldest first (a retried step has
/// one a try; a map step's tasks carry its id too). Read by `jobs_step_idx`.
pub async fn step_jobs<'e>(
    db: impl PgExecutor<'e>,
    step: i64,
    limit: i64,
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM (SELECT id FROM jobs WHERE step_id = $1 ORDER BY id DESC LIMIT $2) newest
         ORDER BY id",
    )
    .bind(step)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// A map step's task as its job's handler reads it.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct TaskRow {
    /// Its index, 0 to `tasks - 1`.
    pub task: i32,
    /// The step's number of tasks.
    pub tasks: i32,
    /// What its handler checkpointed last (across its attempts and the step's retries).
    pub cursor: Option<Value>,
    /// The items it checkpointed as done.
    pub items: i64,
}

/// The task job `job` is the current job of, if it is a map step's.
pub async fn task_of_job<'e>(
    db: impl PgExecutor<'e>,
    job: i64,
) -> Result<Option<TaskRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT t.task, s.tasks, t.cursor, t.items FROM workflow_tasks t
         JOIN workflow_steps s ON s.id = t.step_id
         WHERE t.job_id = $1",
    )
    .bind(job)
    .fetch_optional(db)
    .await
}

/// Keeps `cursor` and `items` for task job `job`, if claim `token` still holds it: the job's row
/// is locked (`FOR SHARE`) until the caller's transaction ends, so a rescue or another claim
/// waits for it and then reads the cursor it committed, or this one sees it lost. Whether the
/// claim held.
pub async fn task_checkpoint(
    conn: &mut PgConnection,
    job: i64,
    token: i64,
    cursor: &Value,
    items: i64,
) -> Result<bool, sqlx::Error> {
    let held: Option<i64> = sqlx::query_scalar(
        "SELECT id FROM jobs WHERE id = $1 AND state = 'executing' AND claim_token = $2 FOR SHARE",
    )
    .bind(job)
    .bind(token)
    .fetch_optional(&mut *conn)
    .await?;
    if held.is_none() {
        return Ok(false);
    }
    let updated = sqlx::query(
        "UPDATE workflow_tasks SET cursor = $2, items = $3, checkpointed_at = clock_timestamp()
         WHERE job_id = $1 AND state = 'pending'",
    )
    .bind(job)
    .bind(cursor)
    .bind(items)
    .execute(conn)
    .await?;
    Ok(updated.rows_affected() == 1)
}
