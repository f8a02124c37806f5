//! What callers do with schedules (the REST API, the dashboard, the CLI, the leader, a service's
//! code): create, change, pause, resume, delete, trigger, preview, and insert the runs ahead.
//! Every change locks the schedule's row first (see the module doc of `schedules`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sqlx::PgConnection;

use super::error::ScheduleError;
use super::missed;
use super::rule::Rule;
use super::spec::{JobTemplate, Missed, Overlap, ScheduleSpec};
use crate::engine::client::{Client, ClientError};
use crate::engine::job::META_SCHEDULE_ID;
use crate::engine::job::{Job, JobId, NewJob, OnConflict};
use crate::engine::store::jobs as job_store;
use crate::engine::store::nodes as node_store;
pub use crate::engine::store::schedules::RECONCILE_LOCK;
use crate::engine::store::schedules::{self as store, ScheduleFields, ScheduleRow, ScheduleRuns};

/// Runs due this soon are inserted ahead (the leader sets twice its failover time).
pub const DEFAULT_HORIZON: Duration = Duration::from_secs(12);
/// A slot that came due at most this long ago is still given its run as usual (it came due while
/// the run was being computed); an older one that has no run was missed.
pub const RUN_GRACE: Duration = Duration::from_secs(1);
/// The most runs one fill inserts ahead.
const MAX_RUNS_AHEAD: usize = 100;
/// The most slots a preview lists.
pub const MAX_PREVIEW: usize = 100;

/// A slot of a preview: the instant, and the wall-clock time in the schedule's zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlotPreview {
    pub at: DateTime<Utc>,
    /// RFC 3339 with the zone's offset at that instant.
    pub local: String,
}

/// The latest run of a schedule that came due.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastRun {
    pub job_id: JobId,
    pub state: String,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub attempted_at: Option<DateTime<Utc>>,
    /// How late its first attempt started after its due time, in ms, by the clock of the node
    /// that started it (absent until it started).
    pub late_ms: Option<f64>,
}

/// A schedule as callers see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleView {
    pub name: String,
    pub cron: Option<String>,
    pub every_ms: Option<i64>,
    pub time_zone: String,
    /// The rule in words, e.g. "at 06:00 (Europe/London)".
    pub rule_text: String,
    pub job: JobTemplate,
    pub paused: bool,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub overlap: Overlap,
    pub missed: Missed,
    pub missed_limit: i32,
    /// `api` (the API, dashboard or CLI) or `code` (declared by a service at start).
    pub source: String,
    pub version: i32,
    /// The latest slot given a run or passed over.
    pub last_slot: Option<DateTime<Utc>>,
    pub runs_enqueued: i64,
    pub runs_skipped: i64,
    pub next_run_at: Option<DateTime<Utc>>,
    pub next_run_id: Option<JobId>,
    pub last_run: Option<LastRun>,
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The schedules of one database. Cheap to clone.
#[derive(Clone)]
pub struct Schedules {
    client: Client,
    horizon: Duration,
}

impl Schedules {
    pub fn new(client: Client) -> Self {
        Schedules {
            client,
            horizon: DEFAULT_HORIZON,
        }
    }

    /// Inserts the runs due within `horizon` ahead (and always the next one).
    pub fn with_horizon(mut self, horizon: Duration) -> Self {
        self.horizon = horizon;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Checks a spec fully: its rule and zone, and its job template as the engine would insert it.
    pub async fn check_with(
        &self,
        conn: &mut PgConnection,
        spec: &ScheduleSpec,
    ) -> Result<(Rule, Tz), ScheduleError> {
        let checked = spec.check()?;
        let probe = template_job(&spec.job);
        self.client.validate_with(conn, &probe).await?;
        Ok(checked)
    }

    /// Creates a schedule and inserts its runs ahead, in one transaction.
    pub async fn create(
        &self,
        spec: &ScheduleSpec,
        created_by: Option<&str>,
    ) -> Result<ScheduleView, ScheduleError> {
        let mut tx = self.client.pool().begin().await?;
        let row = self.create_with(&mut tx, spec, created_by, "api").await?;
        tx.commit().await?;
        self.view(row).await
    }

    /// [`Self::create`] in the caller's transaction (`source` is `api` or `code`).
    pub async fn create_with(
        &self,
        conn: &mut PgConnection,
        spec: &ScheduleSpec,
        created_by: Option<&str>,
        source: &str,
    ) -> Result<ScheduleRow, ScheduleError> {
        self.check_with(&mut *conn, spec).await?;
        check_not_ended(&mut *conn, spec).await?;
        let fields = fields_of(spec, source);
        let Some(row) = store::schedule_insert(&mut *conn, &fields, created_by).await? else {
            return Err(ScheduleError::Conflict(format!(
                "a schedule named `{}` exists",
                spec.name
            )));
        };
        self.fill(&mut *conn, &row, &[]).await?;
        store::schedule_get(&mut *conn, &row.name)
            .await?
            .ok_or_else(|| ScheduleError::NotFound(row.name.clone()))
    }

    /// Replaces a schedule's settings with `spec` (same name). A change of anything its runs carry
    /// (rule, zone, template, start, end, overlap) cancels the runs inserted ahead and starts the
    /// slots again from now; the missed-run settings apply from the next downtime.
    pub async fn replace(
        &self,
        spec: &ScheduleSpec,
        source: &str,
    ) -> Result<ScheduleView, ScheduleError> {
        let mut tx = self.client.pool().begin().await?;
        let row = self.replace_with(&mut tx, spec, source).await?;
        tx.commit().await?;
        self.view(row).await
    }

    pub async fn replace_with(
        &self,
        conn: &mut PgConnection,
        spec: &ScheduleSpec,
        source: &str,
    ) -> Result<ScheduleRow, ScheduleError> {
        self.check_with(&mut *conn, spec).await?;
        let old = lock(&mut *conn, &spec.name).await?;
        if old.ends_at != spec.ends_at {
            check_not_ended(&mut *conn, spec).await?;
        }
        let fields = fields_of(spec, source);
        let runs_change = old.cron.as_deref() != fields.cron
            || old.every_ms != fields.every_ms
            || old.time_zone != fields.time_zone
            || old.kind != fields.kind
            || &old.args != fields.args
            || old.queue != fields.queue
            || old.priority != fields.priority
            || old.max_attempts != fields.max_attempts
            || old.tags != fields.tags
            || &old.meta != fields.meta
            || old.starts_at != fields.starts_at
            || old.ends_at != fields.ends_at
            || old.overlap != fields.overlap
            || old.paused != fields.paused;
        let restart_at = if runs_change {
            store::schedule_runs_cancel_ahead(&mut *conn, old.id).await?;
            Some(job_store::db_now(&mut *conn).await?)
        } else {
            None
        };
        let row = store::schedule_update(&mut *conn, old.id, &fields, restart_at).await?;
        self.fill(&mut *conn, &row, &[]).await?;
        lock(&mut *conn, &row.name).await
    }

    /// Pauses (`true`) or resumes a schedule. Pausing cancels the runs inserted ahead; the slots
    /// of a pause are neither run nor counted as missed.
    pub async fn set_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleView, ScheduleError> {
        let mut tx = self.client.pool().begin().await?;
        let row = self.set_paused_with(&mut tx, name, paused).await?;
        tx.commit().await?;
        self.view(row).await
    }

    pub async fn set_paused_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleRow, ScheduleError> {
        let row = lock(&mut *conn, name).await?;
        if row.paused == paused {
            return Ok(row);
        }
        if paused {
            store::schedule_runs_cancel_ahead(&mut *conn, row.id).await?;
        }
        let now = job_store::db_now(&mut *conn).await?;
        let row = store::schedule_set_paused(&mut *conn, row.id, paused, now).await?;
        self.fill(&mut *conn, &row, &[]).await?;
        lock(&mut *conn, name).await
    }

    /// Deletes a schedule and cancels its runs inserted ahead (its past runs stay, as jobs).
    pub async fn delete(&self, name: &str) -> Result<ScheduleRow, ScheduleError> {
        let mut tx = self.client.pool().begin().await?;
        let row = self.delete_with(&mut tx, name).await?;
        tx.commit().await?;
        Ok(row)
    }

    pub async fn delete_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
    ) -> Result<ScheduleRow, ScheduleError> {
        let row = lock(&mut *conn, name).await?;
        store::schedule_runs_cancel_ahead(&mut *conn, row.id).await?;
        store::schedule_delete(&mut *conn, row.id).await?;
        Ok(row)
    }

    /// Runs a schedule now, outside its slots (even while it is paused). The run is the
    /// schedule's, like any of its runs: its creator is the schedule's creator, so whoever may see
    /// the template's secrets sees them in the run, and nobody else (a trigger must not hand an
    /// admin's header to the operator who clicked "run now"). `by`, who triggered it, goes in the
    /// run's `meta.triggered_by` (and the caller's audit entry).
    pub async fn trigger(&self, name: &str, by: Option<&str>) -> Result<Job, ScheduleError> {
        let mut tx = self.client.pool().begin().await?;
        let job = self.trigger_with(&mut tx, name, by).await?;
        tx.commit().await?;
        Ok(job)
    }

    pub async fn trigger_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
        by: Option<&str>,
    ) -> Result<Job, ScheduleError> {
        let row = lock(&mut *conn, name).await?;
        let now = job_store::db_now(&mut *conn).await?;
        let mut new = run_job(&row, now, true);
        new.unique_key = None;
        if let Some(meta) = new.meta.as_object_mut() {
            meta.insert("trigger".into(), Value::Bool(true));
            if let Some(by) = by {
                meta.insert("triggered_by".into(), json!(by));
            }
        }
        let inserted = self.client.insert_own_with(&mut *conn, &new).await?;
        store::schedule_record_slots(&mut *conn, row.id, None, 1, 0, None).await?;
        Ok(inserted.job)
    }

    /// The next `n` slots of a spec (not saved) after `from` (now when `None`).
    pub fn preview(
        &self,
        spec: &ScheduleSpec,
        n: usize,
        from: DateTime<Utc>,
    ) -> Result<Vec<SlotPreview>, ScheduleError> {
        let (rule, zone) = spec.check()?;
        Ok(slots(
            &rule,
            zone,
            spec.starts_at,
            spec.ends_at,
            from,
            n.min(MAX_PREVIEW),
        ))
    }

    pub async fn get(&self, name: &str) -> Result<ScheduleView, ScheduleError> {
        let row = store::schedule_get(self.client.pool(), name)
            .await?
            .ok_or_else(|| ScheduleError::NotFound(name.to_string()))?;
        self.view(row).await
    }

    /// The stored row (for callers that need its spec, e.g. to patch it).
    /// The schedule `name` and its next `n` slots (1 to [`MAX_PREVIEW`]) after `from`, now by
    /// the database clock when `None`: what its page, `GET /api/v1/schedules/{name}/preview`
    /// and `kickoff schedule show` show.
    pub async fn upcoming(
        &self,
        name: &str,
        n: usize,
        from: Option<DateTime<Utc>>,
    ) -> Result<(ScheduleView, Vec<SlotPreview>), ScheduleError> {
        if !(1..=MAX_PREVIEW).contains(&n) {
            return Err(ScheduleError::invalid(
                "n",
                format!("must be between 1 and {MAX_PREVIEW}"),
            ));
        }
        let row = self.row(name).await?;
        let from = match from {
            Some(from) => from,
            None => self.client.db_now().await?,
        };
        let slots = self.preview(&spec_of(&row), n, from)?;
        Ok((self.view(row).await?, slots))
    }

    pub async fn row(&self, name: &str) -> Result<ScheduleRow, ScheduleError> {
        store::schedule_get(self.client.pool(), name)
            .await?
            .ok_or_else(|| ScheduleError::NotFound(name.to_string()))
    }

    /// The stored row, locked until the caller's transaction ends.
    pub async fn row_with(
        &self,
        conn: &mut PgConnection,
        name: &str,
    ) -> Result<ScheduleRow, ScheduleError> {
        lock(conn, name).await
    }

    pub async fn list(&self) -> Result<Vec<ScheduleView>, ScheduleError> {
        let rows = store::schedule_list(self.client.pool()).await?;
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let runs = store::schedule_runs_summary(self.client.pool(), &ids).await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let summary = runs.iter().find(|s| s.schedule_id == r.id);
                view_of(r, summary)
            })
            .collect())
    }

    /// Upserts the schedules a service declares in its code, by name: creates the missing ones;
    /// with `code_wins`, replaces a stored one that differs (keeping an operator's pause).
    /// Returns how many were created or changed.
    pub async fn declare(
        &self,
        specs: &[ScheduleSpec],
        code_wins: bool,
    ) -> Result<usize, ScheduleError> {
        let mut changed = 0;
        for spec in specs {
            let mut tx = self.client.pool().begin().await?;
            match store::schedule_lock(&mut tx, &spec.name).await? {
                None => {
                    self.create_with(&mut tx, spec, None, "code").await?;
                    changed += 1;
                }
                Some(row) if code_wins => {
                    let mut wanted = spec.clone();
                    wanted.paused = row.paused;
                    if spec_of(&row) != wanted || row.source != "code" {
                        self.replace_with(&mut tx, &wanted, "code").await?;
                        changed += 1;
                    }
                }
                Some(_) => {}
            }
            tx.commit().await?;
        }
        Ok(changed)
    }

    /// A page of a schedule's runs, newest first, before job `before`.
    pub async fn runs(
        &self,
        name: &str,
        before: Option<JobId>,
        limit: i64,
    ) -> Result<Vec<Job>, ScheduleError> {
        let row = self.row(name).await?;
        Ok(store::schedule_runs(self.client.pool(), row.id, before, limit.clamp(1, 500)).await?)
    }

    /// How callers see a stored row (with its latest and next run).
    pub async fn view(&self, row: ScheduleRow) -> Result<ScheduleView, ScheduleError> {
        let runs = store::schedule_runs_summary(self.client.pool(), &[row.id]).await?;
        Ok(view_of(row, runs.first()))
    }

    /// Inserts the runs due within the horizon of every active schedule whose next slot enters it
    /// (the leader's tick), and applies the missed-run policy to slots that passed with no run
    /// inserted. Schedules whose next slot is further away are not touched: an idle schedule
    /// costs no transaction. One schedule's failure is reported and the others go on. Returns
    /// (runs inserted, slots skipped, failures).
    pub async fn fill_all(&self) -> Result<(usize, u64, Vec<(String, String)>), sqlx::Error> {
        let names =
            store::schedule_names_due(self.client.pool(), self.horizon.as_secs_f64()).await?;
        let mut report = (0, 0, Vec::new());
        for name in names {
            match self.fill_one(&name, None).await {
                Ok((n, skipped)) => {
                    report.0 += n;
                    report.1 += skipped;
                }
                Err(e) => report.2.push((name, e.to_string())),
            }
        }
        Ok(report)
    }

    /// When a node starts, the runs that missed their slot while no node was running go by each
    /// schedule's missed-run policy: the runs inserted ahead before the downtime whose slot passed
    /// with no node to start them ([`store::schedule_runs_overdue`]: never the runs that waited
    /// for a pause, a limit or a backlog, a run triggered by hand or a snoozed one), and the slots
    /// never given a run. Called before the node claims.
    ///
    /// One node at a time (a transaction-scoped advisory lock, [`RECONCILE_LOCK`]): nodes that
    /// start together wait for each other here, before claiming, so none starts a run another is
    /// about to skip; the second finds the work done. A node alive since before a run's slot was
    /// there to start it, so such a run is late, not missed. One schedule's failure is logged and
    /// the others go on. Returns (runs inserted, slots skipped).
    pub async fn reconcile_missed(
        &self,
        node_id: &str,
        alive_within: Duration,
    ) -> Result<(usize, u64), ScheduleError> {
        let mut guard = self.client.pool().begin().await?;
        store::schedule_reconcile_lock(&mut guard).await?;
        let alive = node_store::node_list_alive(&mut *guard, alive_within.as_secs_f64()).await?;
        let alive_since = alive
            .iter()
            .filter(|n| n.id != node_id)
            .map(|n| n.started_at)
            .min();
        let names =
            store::schedule_names_to_reconcile(&mut *guard, RUN_GRACE.as_secs_f64()).await?;
        let mut total = (0, 0);
        for name in names {
            match self.fill_one(&name, Some(Downtime { alive_since })).await {
                Ok((n, skipped)) => {
                    total.0 += n;
                    total.1 += skipped;
                }
                Err(e) => {
                    tracing::warn!(schedule = %name, error = %e, "schedules: applying the missed-run policy failed")
                }
            }
        }
        guard.commit().await?;
        Ok(total)
    }

    async fn fill_one(
        &self,
        name: &str,
        downtime: Option<Downtime>,
    ) -> Result<(usize, u64), ScheduleError> {
        let mut tx = self.client.pool().begin().await?;
        let Some(row) = store::schedule_lock(&mut tx, name).await? else {
            return Ok((0, 0));
        };
        let overdue = match downtime {
            Some(d) if !row.paused => {
                store::schedule_runs_overdue(
                    &mut tx,
                    row.id,
                    RUN_GRACE.as_secs_f64(),
                    d.alive_since,
                )
                .await?
            }
            _ => Vec::new(),
        };
        let done = self.fill(&mut tx, &row, &overdue).await?;
        tx.commit().await?;
        Ok(done)
    }

    /// Inserts the runs of `row` (locked by the caller) due within the horizon, at least the next
    /// one, and applies the missed-run policy to the slots after its `last_slot` that passed more
    /// than [`RUN_GRACE`] ago, together with `overdue` (runs inserted earlier that never started,
    /// with their slots). Returns (runs inserted, slots skipped).
    pub async fn fill(
        &self,
        conn: &mut PgConnection,
        row: &ScheduleRow,
        overdue: &[(JobId, i64)],
    ) -> Result<(usize, u64), ScheduleError> {
        let now = job_store::db_now(&mut *conn).await?;
        if row.paused || row.ends_at.is_some_and(|e| e <= now) {
            return Ok((0, 0));
        }
        let (rule, zone) = rule_of(row)?;
        let floor = now - chrono::Duration::from_std(RUN_GRACE).unwrap_or_default();
        let anchor = row.starts_at;
        let not_before = |t: DateTime<Utc>| match anchor {
            Some(s) => t.max(s - chrono::Duration::milliseconds(1)),
            None => t,
        };
        let mut last = row.last_slot;
        let mut inserted = 0usize;
        let mut skipped = 0u64;

        // Missed slots: those inserted before and never started (`overdue`), then those never
        // given a run, after `last_slot` up to `floor`.
        let mut missed: Vec<Missing> = overdue
            .iter()
            .map(|&(id, ms)| Missing::Inserted(id, ms))
            .collect();
        if let Some(l) = last.filter(|l| *l < floor) {
            let keep = match Missed::parse(&row.missed).unwrap_or_default() {
                Missed::Skip => 0,
                Missed::RunOnce => 1,
                Missed::RunAll => row.missed_limit.max(1) as usize,
            };
            // Bounded, but CPU work that may take milliseconds after a long downtime: off the
            // async runtime.
            let (walk_rule, ends_at, after) = (rule.clone(), row.ends_at, not_before(l));
            let walk = tokio::task::spawn_blocking(move || {
                missed::missed_slots(&walk_rule, zone, anchor, ends_at, after, floor, keep.max(1))
            })
            .await
            .map_err(|e| ScheduleError::invalid("rule", format!("walking missed slots: {e}")))?;
            skipped += walk.count - walk.latest.len() as u64;
            last = Some(walk.latest.last().map_or(l, |at| (*at).max(l)));
            missed.extend(walk.latest.into_iter().map(Missing::Slot));
        }
        if !missed.is_empty() {
            missed.sort_by_key(Missing::slot_ms);
            let keep = match Missed::parse(&row.missed).unwrap_or_default() {
                Missed::Skip => 0,
                Missed::RunOnce => 1,
                Missed::RunAll => row.missed_limit.max(1) as usize,
            };
            let cut = missed.len().saturating_sub(keep);
            let mut cancel = Vec::new();
            for (i, m) in missed.iter().enumerate() {
                match (i < cut, m) {
                    (true, Missing::Inserted(id, _)) => cancel.push(*id),
                    (true, Missing::Slot(_)) => {}
                    (false, Missing::Inserted(..)) => {}
                    (false, Missing::Slot(at)) => {
                        let new = run_job(row, *at, true);
                        if !self
                            .client
                            .insert_run_with(&mut *conn, &new)
                            .await?
                            .existing
                        {
                            inserted += 1;
                        }
                    }
                }
            }
            skipped += cut as u64;
            if !cancel.is_empty() {
                self.client.cancel_with(&mut *conn, &cancel).await?;
            }
            if let Some(latest) = missed.last() {
                let at = DateTime::from_timestamp_millis(latest.slot_ms()).unwrap_or(now);
                last = Some(last.map_or(at, |l| l.max(at)));
            }
        }

        // The runs ahead.
        let until = now + chrono::Duration::from_std(self.horizon).unwrap_or_default();
        let mut ahead = last.is_some_and(|l| l > now);
        let mut after = not_before(match last {
            Some(l) => l.max(floor),
            None => now,
        });
        // The first slot left without a run: the tick comes back when it enters the horizon.
        let mut pending = None;
        for i in 0..=MAX_RUNS_AHEAD {
            let Some(at) = rule.next_after(after, zone, anchor) else {
                break;
            };
            if let Some(end) = row.ends_at.filter(|e| at >= *e) {
                pending = Some(end);
                break;
            }
            if (ahead && at > until) || i == MAX_RUNS_AHEAD {
                pending = Some(at);
                break;
            }
            ahead = true;
            let new = run_job(row, at, false);
            if !self
                .client
                .insert_run_with(&mut *conn, &new)
                .await?
                .existing
            {
                inserted += 1;
            }
            last = Some(at);
            after = at;
        }
        // No slot found at all (a rule with none left): look again in a day.
        let pending = pending.unwrap_or(now + chrono::Duration::days(1));
        if inserted > 0 || skipped > 0 || last != row.last_slot || row.next_slot_at != Some(pending)
        {
            store::schedule_record_slots(
                &mut *conn,
                row.id,
                last,
                inserted as i64,
                skipped as i64,
                Some(pending),
            )
            .await?;
        }
        Ok((inserted, skipped))
    }
}

/// A reconciliation after a downtime: the earliest start among the other nodes alive now.
#[derive(Debug, Clone, Copy)]
struct Downtime {
    alive_since: Option<DateTime<Utc>>,
}

/// A missed slot: a run inserted before (its job, its slot in ms), or a slot never given one.
enum Missing {
    Inserted(JobId, i64),
    Slot(DateTime<Utc>),
}

impl Missing {
    fn slot_ms(&self) -> i64 {
        match self {
            Missing::Inserted(_, ms) => *ms,
            Missing::Slot(at) => at.timestamp_millis(),
        }
    }
}

/// A schedule given an end that has passed would never run: refused.
async fn check_not_ended(
    conn: &mut PgConnection,
    spec: &ScheduleSpec,
) -> Result<(), ScheduleError> {
    if let Some(end) = spec.ends_at {
        if end <= job_store::db_now(&mut *conn).await? {
            return Err(ScheduleError::Client(ClientError::OutOfWindow {
                field: "ends_at",
                message: "has passed: the schedule would never run".into(),
            }));
        }
    }
    Ok(())
}

async fn lock(conn: &mut PgConnection, name: &str) -> Result<ScheduleRow, ScheduleError> {
    store::schedule_lock(conn, name)
        .await?
        .ok_or_else(|| ScheduleError::NotFound(name.to_string()))
}

/// The rule and zone of a stored schedule.
pub fn rule_of(row: &ScheduleRow) -> Result<(Rule, Tz), ScheduleError> {
    let zone =
        super::rule::zone(&row.time_zone).map_err(|m| ScheduleError::invalid("time_zone", m))?;
    let rule = match (&row.cron, row.every_ms) {
        (Some(expr), _) => Rule::cron(expr).map_err(ScheduleError::Cron)?,
        (None, Some(ms)) => Rule::every(Duration::from_millis(ms.max(0) as u64))
            .map_err(|m| ScheduleError::invalid("every_ms", m))?,
        (None, None) => return Err(ScheduleError::invalid("cron", "no rule")),
    };
    Ok((rule, zone))
}

/// The next `n` slots after `from` within the schedule's start and end.
pub fn slots(
    rule: &Rule,
    zone: Tz,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
    from: DateTime<Utc>,
    n: usize,
) -> Vec<SlotPreview> {
    let mut out = Vec::with_capacity(n);
    let mut after = match starts_at {
        Some(s) => from.max(s - chrono::Duration::milliseconds(1)),
        None => from,
    };
    while out.len() < n {
        let Some(at) = rule.next_after(after, zone, starts_at) else {
            break;
        };
        if ends_at.is_some_and(|e| at >= e) {
            break;
        }
        out.push(SlotPreview {
            at,
            local: at.with_timezone(&zone).to_rfc3339(),
        });
        after = at;
    }
    out
}

fn fields_of<'a>(spec: &'a ScheduleSpec, source: &'a str) -> ScheduleFields<'a> {
    ScheduleFields {
        name: &spec.name,
        cron: spec.cron.as_deref().map(str::trim),
        every_ms: spec.every_ms,
        time_zone: spec.time_zone.trim(),
        kind: &spec.job.kind,
        args: &spec.job.args,
        queue: &spec.job.queue,
        priority: spec.job.priority,
        max_attempts: spec.job.max_attempts,
        tags: &spec.job.tags,
        meta: &spec.job.meta,
        paused: spec.paused,
        starts_at: spec.starts_at,
        ends_at: spec.ends_at,
        overlap: spec.overlap.as_str(),
        missed: spec.missed.as_str(),
        missed_limit: spec.missed_limit,
        source,
    }
}

/// The spec a stored schedule was given.
pub fn spec_of(row: &ScheduleRow) -> ScheduleSpec {
    ScheduleSpec {
        name: row.name.clone(),
        cron: row.cron.clone(),
        every_ms: row.every_ms,
        time_zone: row.time_zone.clone(),
        job: JobTemplate {
            kind: row.kind.clone(),
            args: row.args.clone(),
            queue: row.queue.clone(),
            priority: row.priority,
            max_attempts: row.max_attempts,
            tags: row.tags.clone(),
            meta: row.meta.clone(),
        },
        paused: row.paused,
        starts_at: row.starts_at,
        ends_at: row.ends_at,
        overlap: Overlap::parse(&row.overlap).unwrap_or_default(),
        missed: Missed::parse(&row.missed).unwrap_or_default(),
        missed_limit: row.missed_limit,
    }
}

fn view_of(row: ScheduleRow, runs: Option<&ScheduleRuns>) -> ScheduleView {
    let rule_text = rule_of(&row)
        .map(|(rule, zone)| rule.describe(zone))
        .unwrap_or_else(|e| format!("(unreadable rule: {e})"));
    let spec = spec_of(&row);
    let (last_run_id, last_run_late_ms) = (row.last_run_id, row.last_run_late_ms);
    ScheduleView {
        name: row.name,
        cron: row.cron,
        every_ms: row.every_ms,
        time_zone: row.time_zone,
        rule_text,
        job: spec.job,
        paused: row.paused,
        starts_at: row.starts_at,
        ends_at: row.ends_at,
        overlap: spec.overlap,
        missed: spec.missed,
        missed_limit: row.missed_limit,
        source: row.source,
        version: row.version,
        last_slot: row.last_slot,
        runs_enqueued: row.runs_enqueued,
        runs_skipped: row.runs_skipped,
        next_run_at: runs.and_then(|r| r.next_at),
        next_run_id: runs.and_then(|r| r.next_id),
        last_run: runs.and_then(|r| {
            let job_id = r.last_id?;
            Some(LastRun {
                job_id,
                state: r.last_state.clone()?,
                scheduled_at: r.last_scheduled_at,
                attempted_at: r.last_attempted_at,
                // Recorded by the node that started it.
                late_ms: last_run_late_ms.filter(|_| last_run_id == Some(job_id)),
            })
        }),
        created_by: row.created_by,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

/// The job a template makes (for checking it).
fn template_job(t: &JobTemplate) -> NewJob {
    NewJob::new(t.kind.clone(), t.args.clone())
        .with_queue(t.queue.clone())
        .with_priority(t.priority)
        .with_max_attempts(t.max_attempts)
        .with_tags(t.tags.clone())
        .with_meta(t.meta.clone())
}

/// The run of `row` for `slot`: due at the slot, or now (`due_now`, a missed slot).
fn run_job(row: &ScheduleRow, slot: DateTime<Utc>, due_now: bool) -> NewJob {
    let mut meta = match &row.meta {
        Value::Object(m) => m.clone(),
        _ => Default::default(),
    };
    // A schedule stored before the template's check refused them: the markers are Kickoff's.
    for key in crate::engine::job::RESERVED_META {
        meta.remove(key);
    }
    meta.insert(META_SCHEDULE_ID.into(), json!(row.id));
    meta.insert("schedule".into(), json!(row.name));
    meta.insert("slot".into(), json!(slot.to_rfc3339()));
    meta.insert("slot_ms".into(), json!(slot.timestamp_millis()));
    if row.overlap != "allow" {
        meta.insert("overlap".into(), json!(row.overlap));
    }
    let spec = spec_of(row);
    let mut new = template_job(&spec.job)
        .with_meta(Value::Object(meta))
        .with_unique_key(
            format!(
                "{}{}:{}",
                crate::engine::validation::SCHEDULE_KEY_PREFIX,
                row.id,
                slot.timestamp_millis()
            ),
            OnConflict::Keep,
        );
    if !due_now {
        new = new.at(slot);
    }
    new.created_by = row.created_by.clone();
    new
}
