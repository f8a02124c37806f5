//! The plan of a history: the operator actions and faults it will try, drawn from a seed before
//! anything runs. A step names what it acts on by a number (`pick`) that the driver reduces to one
//! of the things that exist when the step runs (the jobs acknowledged so far, the questions made,
//! ...), so any subsequence of a plan is a plan too: that is what lets a failing history shrink.
//!
//! To add an action: a variant here (with its weight in [`draw`]), its request in `drive.rs`, and
//! what it may explain or promise in `promises.rs` (docs/ARCHITECTURE.md, "History checker").

use serde::Serialize;

/// The queues a history's jobs go to; every node runs them all.
pub const QUEUES: [&str; 3] = ["default", "limited", "hooks"];
/// The kinds a history pauses and resumes (the built-in ones its jobs use).
pub const KINDS: [&str; 2] = ["noop", "webhook"];
/// How many schedule names a history draws from (a name may be made, deleted and made again).
pub const SCHEDULE_NAMES: u8 = 4;

/// The dependencies of a workflow's steps, `(step, waits for)` by index, each step waiting only
/// for steps before it: a chain, a fan-in, a diamond, and a fan-out joined again.
pub const WORKFLOW_SHAPES: [&[(usize, usize)]; 4] = [
    &[(1, 0), (2, 1)],
    &[(2, 0), (2, 1)],
    &[(1, 0), (2, 0), (3, 1), (3, 2)],
    &[(1, 0), (2, 0), (3, 1), (4, 2), (4, 3)],
];

/// A dependency's `on_failure`, by the two bits drawn for it.
pub const ON_FAILURE: [&str; 4] = ["fail", "skip", "skip_following", "run"];

/// What a workflow run's steps wait for besides their dependencies, by the top four bits of its
/// `policies`: `(Some(deadline in ms after kickoff_at), None)` for step `s1` waiting for the
/// signal `go`, `(None, Some(ms after kickoff_at))` for a timer of step `s0`, or neither.
pub fn wait_of(policies: u16) -> (Option<i64>, Option<i64>) {
    match policies >> 12 {
        w @ 0..=5 => (Some([400, 1_500, 60_000][w as usize % 3]), None),
        w @ 6..=8 => (None, Some([150, 600, 2_000][w as usize - 6])),
        _ => (None, None),
    }
}

/// Which step of a workflow run of `steps` steps is a map step, and of how many tasks, by bits
/// 10 and 11 of its `policies`: the first (3 tasks, it starts at once), the second or the last
/// (2 tasks), or none.
pub fn tasks_of(policies: u16, steps: usize) -> Option<(usize, u8)> {
    match (policies >> 10) & 3 {
        1 => Some((1, 2)),
        2 => Some((steps - 1, 2)),
        3 => Some((0, 3)),
        _ => None,
    }
}

/// The modes of a workflow run's retry.
pub const RETRY_MODES: [&str; 3] = ["failed", "failed_and_following", "all"];

/// Who sends a request: the bootstrap token (admin), an operator's token, a viewer's token (or
/// the operator's and the viewer's dashboard sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Operator,
    Viewer,
}

/// What an inserted job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    /// `noop` raising a tally of its own in its completing transaction (an effect that must happen
    /// once per completion), sleeping `sleep_ms`, failing its first `fail_attempts` attempts.
    Noop { sleep_ms: u64, fail_attempts: u8 },
    /// `webhook` to the history's receiver; with `secret`, an `authorization` header holding a
    /// planted secret (inserted by the admin: no other role may ever see it).
    Webhook { secret: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobAction {
    Cancel,
    Retry,
    RunNow,
    Delete,
    /// To `delay_ms` from now (0: now).
    Reschedule {
        delay_ms: u64,
    },
    Read,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    Cancel,
    Retry,
    RunNow,
    /// Delete the waiting jobs (a question's live lock job is skipped).
    DeleteWaiting,
    /// Delete the finished jobs.
    DeleteFinal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleAction {
    Pause,
    Resume,
    Trigger,
    Delete,
}

/// What a read asks for (the answers are searched for secrets the role may not see).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadWhat {
    Jobs,
    Schedules,
    /// Every webhook call's delivery record (the newest 500).
    Deliveries,
    Endpoints,
    /// `GET /jobs/export` as JSON lines, and as CSV: text, not JSON.
    ExportJsonl,
    ExportCsv,
    /// One job, its attempts, its delivery record: the read's `pick` chooses among the jobs
    /// carrying a planted secret (the ones a careless receiver may echo).
    Job,
    Attempts,
    JobDeliveries,
    /// The audit log, every page, as the dashboard serves it to the role's session: an admin's
    /// error search is among its entries.
    Audit,
}

/// An admin's action on every job whose last error holds a text (a planted secret: where did a
/// credential leak?); its audit entry keeps the search, nested in the filter for an edit and a
/// shift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorSearchAct {
    /// `POST /jobs/bulk` cancel.
    Cancel,
    /// `POST /jobs/edit` of their priority.
    Edit { priority: u8 },
    /// `POST /jobs/shift`, later or not at all: `DueByDatabaseClock` holds a job's first call to
    /// the time its insert answered unless a run now, reschedule or retry moved it.
    Shift { by_ms: u64 },
}

/// The alert rules a history may make (each on the receiver), by the condition they watch.
pub const ALERT_RULES: [(&str, &str); 6] = [
    ("discards", r#"{"condition": "job_discarded"}"#),
    (
        "overdue",
        r#"{"condition": "overdue", "threshold_ms": 500}"#,
    ),
    (
        "backlog",
        r#"{"condition": "queue_backlog", "threshold_n": 3, "for_secs": 0}"#,
    ),
    (
        "failures",
        r#"{"condition": "failure_rate", "percent": 10, "threshold_n": 2}"#,
    ),
    (
        "late locks",
        r#"{"condition": "late_lock", "threshold_ms": 100}"#,
    ),
    (
        "open questions",
        r#"{"condition": "question_open", "threshold_ms": 300}"#,
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL a node and start it again (a new node id, as after a real crash).
    Kill { node: usize },
    /// SIGTERM a node (its graceful stop) and start it again.
    Restart { node: usize },
    /// Crash PostgreSQL (immediate stop) and start it again.
    CrashDatabase,
    /// Terminate every database connection of one node.
    CutConnections { node: usize },
    /// Terminate only the node's listening connection: the notifications sent until it listens
    /// again are lost to it.
    CutListener { node: usize },
    /// Restart a node with its wall clock moved by `secs` (libfaketime; its monotonic clock, which
    /// timers use, is left alone): everything that promises a time goes by the database's clock.
    Clock { node: usize, secs: i32 },
    /// Kill the primary (SIGKILL), promote its synchronous standby and move the database's
    /// address to it: every connection fails and connects again, to the new primary. Never
    /// drawn: a history run with `--failover` takes it once, at its plan's middle (the seeds'
    /// plans stay what they are).
    Failover,
}

/// A schedule as a history makes or changes it: `s<name>`, a `noop` every `every_ms` on a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ScheduleSpec {
    pub name: u8,
    pub every_ms: u64,
    pub queue: usize,
    pub overlap: &'static str,
    pub missed: &'static str,
}

/// One step of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    Insert {
        queue: usize,
        work: Work,
        delay_ms: u64,
        /// A unique key drawn from a few, so that inserts collide.
        unique: Option<u8>,
        role: Role,
    },
    /// A `noop` job added from SQL (`kickoff_add_job`, docs/embedding.md) in the application's
    /// own transaction with its own row (in `history_app_rows`), committed or rolled back:
    /// the engine must run a committed one like any other, and a rolled-back one never exists.
    SqlInsert {
        queue: usize,
        delay_ms: u64,
        rollback: bool,
    },
    /// An action on a job made before (the `pick`th). An operator's or admin's cancel whose
    /// pick has bit 41 set is sent as the application does, from SQL in its own transaction
    /// (`kickoff_cancel_job`, with its own row), rolled back when bit 42 is set too.
    Job {
        action: JobAction,
        pick: usize,
        role: Role,
    },
    /// A bulk action on a filter: every job of a queue in the states it applies to.
    Bulk {
        action: BulkAction,
        queue: usize,
    },
    PauseQueue {
        queue: usize,
    },
    ResumeQueue {
        queue: usize,
    },
    PauseKind {
        kind: usize,
    },
    ResumeKind {
        kind: usize,
    },
    /// `PATCH /queues/{name}`: a per-node concurrency, a global concurrency or none, a rate or
    /// none, partitioned (by kind, by the webhook's host, by an argument) or not.
    Limits {
        queue: usize,
        concurrency: u32,
        global: Option<u32>,
        rate: Option<&'static str>,
        per: Option<&'static str>,
    },
    ScheduleCreate(ScheduleSpec),
    Schedule {
        name: u8,
        action: ScheduleAction,
    },
    /// `PATCH /schedules/{name}`: its interval, queue and policies.
    ScheduleEdit(ScheduleSpec),
    QuestionCreate {
        game_in_ms: u64,
    },
    QuestionMove {
        pick: usize,
        game_in_ms: u64,
    },
    Predict {
        pick: usize,
        player: u8,
        choice: u8,
    },
    Settle {
        pick: usize,
        choice: u8,
    },
    QuestionDelete {
        pick: usize,
    },
    /// A webhook endpoint for the receiver with a default header holding a planted secret.
    EndpointCreate,
    /// `PATCH` an endpoint made before: a new planted secret in its default header.
    EndpointEdit {
        pick: usize,
    },
    /// Rotate an endpoint's signing secret (the new one is a planted secret too).
    EndpointRotate {
        pick: usize,
    },
    /// An alert rule ([`ALERT_RULES`]) notifying the receiver.
    AlertRuleCreate {
        rule: usize,
    },
    /// Switch an alert rule made before on or off.
    AlertRuleSwitch {
        pick: usize,
        enabled: bool,
    },
    Read {
        what: ReadWhat,
        role: Role,
        /// The job a read of one job reads (unused by the other reads).
        pick: usize,
    },
    /// An operator's insert whose meta sets a key Kickoff writes
    /// (`crate::engine::job::RESERVED_META`, the `key`th modulo their number): a schedule's
    /// markers forge a run of one the history made (the `pick`th), the others stand alone.
    ForgedMeta {
        key: usize,
        pick: usize,
    },
    /// An admin's action on the jobs whose error holds a planted secret (the `pick`th of those
    /// planted so far; a new one when none is).
    ErrorSearch {
        act: ErrorSearchAct,
        pick: usize,
    },
    Fault {
        fault: Fault,
    },
    /// A workflow run (`POST /workflows`): `noop` steps of `queue` counting their effect, in the
    /// [`WORKFLOW_SHAPES`]`[shape]`, the `fail`th step failing for good (none when past the
    /// shape's steps), each dependency's `on_failure` drawn from `policies` (two bits an edge),
    /// its key one of a few (so that runs collide) or none. Its time `kickoff_at` is when it is
    /// sent; `policies`' top four bits may make step `s1` wait for the signal `go` until a
    /// deadline after it, or give step `s0` a timer after it ([`wait_of`]); its bits 10 and 11
    /// may make a step a map step of a few tasks ([`tasks_of`]).
    WorkflowInsert {
        queue: usize,
        shape: usize,
        fail: u8,
        policies: u16,
        key: Option<u8>,
        role: Role,
    },
    /// Cancel a workflow run inserted before (the `pick`th): nothing of it may start after.
    WorkflowCancel {
        pick: usize,
        role: Role,
    },
    /// Retry a workflow run made before (the `pick`th) by [`RETRY_MODES`]`[mode]`: a step runs
    /// again only as the mode says.
    WorkflowRetry {
        pick: usize,
        mode: u8,
        role: Role,
    },
    /// Skip step `s{nth}` of a run made before (the `pick`th; a step it does not have, or one
    /// settled, is refused): it stays skipped, its job cancelled.
    WorkflowSkip {
        pick: usize,
        nth: u8,
        role: Role,
    },
    /// Run a run made before (the `pick`th) again from step `s{from}`: a new run keeping the
    /// completions before it, which later steps may pick in turn.
    WorkflowRerun {
        pick: usize,
        from: u8,
        role: Role,
    },
    /// Send a run made before (the `pick`th) its signal `go`, or `other` (which no step waits
    /// for): the first of a name stands, and the steps waiting for it start. `signed`: as a
    /// partner, through the inbound route, signed with its endpoint's secret, to the live run of
    /// the key of a run that has one (the `pick`th of those; none: through the API). Else, an
    /// operator's or admin's whose pick has bit 41 set is sent from SQL in the application's
    /// transaction (`kickoff_signal`, with its own row), rolled back when bit 42 is set too.
    WorkflowSignal {
        pick: usize,
        other: bool,
        role: Role,
        signed: bool,
    },
    /// Move a run's (the `pick`th) `kickoff_at` to `in_ms` from now: its timers and deadlines
    /// move with it.
    WorkflowMoveTimes {
        pick: usize,
        in_ms: u64,
        role: Role,
    },
    /// Nothing for a while: time for timers, leases and schedules to act.
    Wait {
        ms: u64,
    },
}

/// Draws `steps` steps from `seed` for `nodes` nodes, with faults or without.
pub fn draw(seed: u64, steps: usize, nodes: usize, faults: bool) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let nodes = nodes.max(1);
    (0..steps).map(|_| one(&mut rng, nodes, faults)).collect()
}

fn role(rng: &mut fastrand::Rng) -> Role {
    // The viewer too: its attempts to act must be refused and change nothing.
    match rng.u8(..20) {
        0..=11 => Role::Operator,
        12..=17 => Role::Admin,
        _ => Role::Viewer,
    }
}

fn one(rng: &mut fastrand::Rng, nodes: usize, faults: bool) -> Step {
    let queue = rng.usize(..QUEUES.len());
    let pick = rng.usize(..usize::MAX);
    let overlap = ["allow", "skip", "cancel_previous"];
    let missed = ["skip", "run_once", "run_all"];
    // Kinds are appended at the end of the range (from 108), the waits staying last, so that the
    // old kinds keep their shares among themselves.
    match rng.u32(..133) {
        0..=2 => Step::SqlInsert {
            queue,
            delay_ms: [0, 150, 700][rng.usize(..3)],
            rollback: rng.u8(..3) == 0,
        },
        3..=29 => {
            let work = if rng.u8(..3) == 0 {
                Work::Webhook { secret: rng.bool() }
            } else {
                Work::Noop {
                    sleep_ms: [0, 0, 5, 50, 400][rng.usize(..5)],
                    fail_attempts: [0, 0, 0, 1][rng.usize(..4)],
                }
            };
            let role = match (work, role(rng)) {
                // Planted secrets come from the admin only; a viewer's insert is refused anyway.
                (Work::Webhook { secret: true }, _) => Role::Admin,
                (_, r) => r,
            };
            Step::Insert {
                queue,
                work,
                delay_ms: [0, 0, 20, 150, 700, 2_000][rng.usize(..6)],
                unique: (rng.u8(..5) == 0).then(|| rng.u8(..3)),
                role,
            }
        }
        30..=44 => Step::Job {
            action: match rng.u8(..12) {
                0..=2 => JobAction::Cancel,
                3..=4 => JobAction::Retry,
                5..=6 => JobAction::RunNow,
                7 => JobAction::Delete,
                8..=9 => JobAction::Reschedule {
                    delay_ms: [0, 100, 1_000][rng.usize(..3)],
                },
                _ => JobAction::Read,
            },
            pick,
            role: role(rng),
        },
        45..=47 => Step::Bulk {
            action: [
                BulkAction::Cancel,
                BulkAction::Retry,
                BulkAction::RunNow,
                BulkAction::DeleteWaiting,
                BulkAction::DeleteFinal,
            ][rng.usize(..5)],
            queue,
        },
        48..=51 => Step::PauseQueue { queue },
        52..=56 => Step::ResumeQueue { queue },
        57 => Step::PauseKind {
            kind: rng.usize(..KINDS.len()),
        },
        58..=59 => Step::ResumeKind {
            kind: rng.usize(..KINDS.len()),
        },
        60..=63 => {
            let rate = [None, None, Some("4/s"), Some("3/500ms"), Some("10/s")][rng.usize(..5)];
            Step::Limits {
                queue,
                concurrency: [1, 2, 5, 20][rng.usize(..4)],
                global: [None, Some(1), Some(3)][rng.usize(..3)],
                rate,
                per: if rate.is_some() {
                    [None, Some("kind"), Some("host"), Some("args.sleep_ms")][rng.usize(..4)]
                } else {
                    None
                },
            }
        }
        // A schedule's interval is a second at least (an edit tries a shorter one, refused).
        64..=66 => Step::ScheduleCreate(ScheduleSpec {
            name: rng.u8(..SCHEDULE_NAMES),
            every_ms: [1_000, 1_500, 3_000][rng.usize(..3)],
            queue,
            overlap: overlap[rng.usize(..3)],
            missed: missed[rng.usize(..3)],
        }),
        67..=70 => Step::Schedule {
            name: rng.u8(..SCHEDULE_NAMES),
            action: [
                ScheduleAction::Pause,
                ScheduleAction::Resume,
                ScheduleAction::Trigger,
                ScheduleAction::Trigger,
                ScheduleAction::Delete,
            ][rng.usize(..5)],
        },
        71..=72 => Step::ScheduleEdit(ScheduleSpec {
            name: rng.u8(..SCHEDULE_NAMES),
            every_ms: [1_000, 2_000, 500][rng.usize(..3)],
            queue,
            overlap: overlap[rng.usize(..3)],
            missed: missed[rng.usize(..3)],
        }),
        73..=76 => Step::QuestionCreate {
            game_in_ms: [150, 400, 900, 2_500][rng.usize(..4)],
        },
        77 => Step::QuestionMove {
            pick,
            game_in_ms: [100, 600, 1_500][rng.usize(..3)],
        },
        78..=83 => Step::Predict {
            pick,
            player: rng.u8(..6),
            choice: rng.u8(..3),
        },
        84 => Step::Settle {
            pick,
            choice: rng.u8(..2),
        },
        85 => Step::QuestionDelete { pick },
        86 => Step::EndpointCreate,
        87 => {
            if rng.bool() {
                Step::EndpointEdit { pick }
            } else {
                Step::EndpointRotate { pick }
            }
        }
        88 => Step::AlertRuleCreate {
            rule: rng.usize(..ALERT_RULES.len()),
        },
        89 => Step::AlertRuleSwitch {
            pick,
            enabled: rng.bool(),
        },
        90..=95 => Step::Read {
            what: [
                ReadWhat::Jobs,
                ReadWhat::Schedules,
                ReadWhat::Deliveries,
                ReadWhat::Endpoints,
            ][rng.usize(..4)],
            role: [Role::Viewer, Role::Operator][rng.usize(..2)],
            pick,
        },
        96..=100 if faults => Step::Fault {
            fault: {
                let node = rng.usize(..nodes);
                match rng.u8(..11) {
                    0..=2 => Fault::Kill { node },
                    3..=4 => Fault::Restart { node },
                    5 => Fault::CrashDatabase,
                    6..=7 => Fault::CutConnections { node },
                    8..=9 => Fault::CutListener { node },
                    _ => Fault::Clock {
                        node,
                        secs: [-90, -5, 5, 90][rng.usize(..4)],
                    },
                }
            },
        },
        // More of the admin's webhook jobs with a planted secret, so that some meet the
        // receiver's echo (by their id, `receiver::echoes`) before a reader looks.
        108..=110 => Step::Insert {
            queue,
            work: Work::Webhook { secret: true },
            delay_ms: [0, 0, 20, 150][rng.usize(..4)],
            unique: None,
            role: Role::Admin,
        },
        111..=117 => Step::Read {
            what: [
                ReadWhat::ExportJsonl,
                ReadWhat::ExportCsv,
                ReadWhat::Job,
                ReadWhat::Attempts,
                ReadWhat::JobDeliveries,
                ReadWhat::JobDeliveries,
                ReadWhat::Audit,
                ReadWhat::Audit,
            ][rng.usize(..8)],
            role: [Role::Viewer, Role::Operator][rng.usize(..2)],
            pick,
        },
        118..=119 => Step::ForgedMeta {
            key: rng.usize(..usize::MAX),
            pick,
        },
        120..=122 => Step::ErrorSearch {
            act: match rng.u8(..3) {
                0 => ErrorSearchAct::Cancel,
                1 => ErrorSearchAct::Edit {
                    priority: rng.u8(..10),
                },
                _ => ErrorSearchAct::Shift {
                    by_ms: [0, 250, 1_000][rng.usize(..3)],
                },
            },
            pick,
        },
        123..=125 => Step::WorkflowInsert {
            queue,
            shape: rng.usize(..WORKFLOW_SHAPES.len()),
            fail: rng.u8(..8),
            policies: rng.u16(..),
            key: (rng.u8(..3) == 0).then(|| rng.u8(..2)),
            role: role(rng),
        },
        126..=127 => Step::WorkflowCancel {
            pick,
            role: role(rng),
        },
        128 => Step::WorkflowRetry {
            pick,
            mode: rng.u8(..RETRY_MODES.len() as u8),
            role: role(rng),
        },
        129 => Step::WorkflowSkip {
            pick,
            nth: rng.u8(..5),
            role: role(rng),
        },
        130 => Step::WorkflowRerun {
            pick,
            from: rng.u8(..5),
            role: role(rng),
        },
        131 => Step::WorkflowSignal {
            pick,
            other: rng.u8(..4) == 0,
            role: role(rng),
            // From the pick's bits, not a draw of its own: the plans of the seeds stay as they
            // were.
            signed: pick & (1 << 40) != 0,
        },
        132 => Step::WorkflowMoveTimes {
            pick,
            in_ms: [0, 300, 1_500, 60_000][rng.usize(..4)],
            role: role(rng),
        },
        _ => Step::Wait {
            ms: [20, 100, 400][rng.usize(..3)],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suite's histories (`tests/it/history.rs`: seeds 1, 2, 3 and 6, 200 steps) send
    /// cancels from SQL, committed and rolled back, and signals (rarer: a rolled-back one is
    /// `tests/it/sql_actions.rs`'), beside the API's.
    #[test]
    fn the_suites_seeds_cancel_and_signal_from_sql() {
        let (mut cancels, mut signals) = (Vec::new(), Vec::new());
        for seed in [1, 2, 3, 6] {
            for step in draw(seed, 200, 2, true) {
                match step {
                    Step::Job {
                        action: JobAction::Cancel,
                        pick,
                        role,
                    } if role != Role::Viewer && pick & (1 << 41) != 0 => {
                        cancels.push(pick & (1 << 42) != 0)
                    }
                    Step::WorkflowSignal {
                        pick,
                        role,
                        signed: false,
                        ..
                    } if role != Role::Viewer && pick & (1 << 41) != 0 => {
                        signals.push(pick & (1 << 42) != 0)
                    }
                    _ => {}
                }
            }
        }
        assert!(
            cancels.contains(&true) && cancels.contains(&false),
            "cancels from SQL, rolled back or not: {cancels:?}"
        );
        assert!(signals.contains(&false), "signals from SQL: {signals:?}");
        // And webhook jobs the receiver refuses for good at their first call (the driver asks
        // it to for the steps `i % 4 == 1` without a planted secret), in the seeds' plans.
        let refused = [1, 2, 3, 6]
            .into_iter()
            .flat_map(|seed| draw(seed, 200, 2, true).into_iter().enumerate())
            .filter(|(i, step)| {
                i % 4 == 1
                    && matches!(
                        step,
                        Step::Insert {
                            work: Work::Webhook { secret: false },
                            ..
                        }
                    )
            })
            .count();
        assert!(
            refused >= 2,
            "{refused} webhook jobs ask for kickoff-no-retry"
        );
    }

    #[test]
    fn a_seed_draws_the_same_plan_and_another_seed_another() {
        assert_eq!(draw(7, 200, 2, true), draw(7, 200, 2, true));
        assert_ne!(draw(7, 200, 2, true), draw(8, 200, 2, true));
        assert!(draw(7, 400, 2, false)
            .iter()
            .all(|s| !matches!(s, Step::Fault { .. })));
        assert!(draw(7, 400, 2, true)
            .iter()
            .any(|s| matches!(s, Step::Fault { .. })));
    }

    /// The seeds of `tests/it/history.rs` (6 without faults).
    const TEST_SEEDS: [u64; 3] = [1, 2, 6];

    #[test]
    fn a_plan_of_the_tests_length_holds_the_reads_and_acts_that_find_leaks() {
        // The test command's seeds run 200 steps each: every one of them forges meta, searches
        // errors as an admin, inserts a workflow run and reads what a careless receiver echoed
        // and the audit log.
        for seed in TEST_SEEDS {
            let plan = draw(seed, 200, 2, seed != 6);
            let has = |f: &dyn Fn(&Step) -> bool| plan.iter().any(f);
            assert!(
                has(&|s| matches!(s, Step::ForgedMeta { .. })),
                "seed {seed}"
            );
            assert!(
                has(&|s| matches!(s, Step::ErrorSearch { .. })),
                "seed {seed}"
            );
            assert!(
                has(&|s| matches!(s, Step::WorkflowInsert { .. })),
                "seed {seed}: no workflow run"
            );
            for what in [ReadWhat::Audit, ReadWhat::JobDeliveries] {
                assert!(
                    has(&|s| matches!(s, Step::Read { what: w, .. } if *w == what)),
                    "seed {seed}: no {what:?} read"
                );
            }
        }
        // Across them, a run retried, a step skipped and a run run again.
        let plans: Vec<Step> = TEST_SEEDS
            .into_iter()
            .flat_map(|seed| draw(seed, 200, 2, seed != 6))
            .collect();
        assert!(plans.iter().any(|s| matches!(s, Step::WorkflowSkip { .. })));
        assert!(plans
            .iter()
            .any(|s| matches!(s, Step::WorkflowRerun { .. })));
        // And a map step.
        assert!(plans.iter().any(
            |s| matches!(s, Step::WorkflowInsert { policies, .. } if tasks_of(*policies, 3).is_some())
        ));
    }
}
