//! SQL of the attempts' records and their rollups: `job_attempts` (one row per attempt that ended,
//! written with its outcome, see `jobs::attempts`), `job_history_deltas` (appended by a trigger
//! on `job_attempts`), `job_history_minute` (the deltas folded per minute, kept for a day) and
//! `job_history_hour` (the same deltas folded per hour, kept for the retention). Each attempt
//! counts in its queue and kind's rows (schedule 0), and a schedule's run in its schedule's rows
//! too. See the migration `20261217000001_attempt_history.sql`.
//!
//! Every reader of the rollups adds the deltas not folded yet, in one statement: a fold (one
//! statement) is seen entirely or not at all, so the series are exact whenever the folder last
//! ran, and the current minute is never missing.

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;

use crate::engine::job::JobId;

/// The lateness histogram's bucket bounds in ms, as `kickoff_late_bounds()` holds them: bucket 0
/// counts attempts under 1 ms late, bucket `k` those from `LATE_BOUNDS_MS[k - 1]` up to
/// `LATE_BOUNDS_MS[k]`, the last those a minute late or more.
pub const LATE_BOUNDS_MS: [f64; 15] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 30000.0,
    60000.0,
];
/// How many buckets a histogram has.
pub const LATE_BUCKETS: usize = LATE_BOUNDS_MS.len() + 1;

/// How long rollups are kept per minute (the hours, kept beside them, hold them after).
pub const MINUTES_KEPT: Duration = Duration::from_secs(24 * 3600);

/// One attempt's record.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AttemptRecord {
    pub job_id: JobId,
    pub attempt: i32,
    pub node: String,
    pub due_at: DateTime<Utc>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub late_ms: f64,
    pub duration_ms: f64,
    /// `completed`, `failed`, `discarded`, `cancelled`, `snoozed` or `lost`.
    pub outcome: String,
    pub error: Option<String>,
    pub output: Option<Value>,
    pub logs: Option<Value>,
    pub logs_dropped: i32,
}

/// The records of a job's attempts, oldest first.
pub async fn job_attempts_of<'e>(
    db: impl PgExecutor<'e>,
    job: JobId,
) -> Result<Vec<AttemptRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT job_id, attempt, node, due_at, started_at, finished_at, late_ms, duration_ms,
                outcome, error, output, logs, logs_dropped
         FROM job_attempts WHERE job_id = $1 ORDER BY id",
    )
    .bind(job)
    .fetch_all(db)
    .await
}

/// The latest record of each of these jobs' attempts that ended as `outcome` (the lock of a
/// question: its lock job's completion).
pub async fn job_attempts_last<'e>(
    db: impl PgExecutor<'e>,
    jobs: &[JobId],
    outcome: &str,
) -> Result<Vec<AttemptRecord>, sqlx::Error> {
    let ids: Vec<i64> = jobs.iter().map(|j| j.0).collect();
    sqlx::query_as(
        "SELECT DISTINCT ON (job_id) job_id, attempt, node, due_at, started_at, finished_at,
                late_ms, duration_ms, outcome, error, output, logs, logs_dropped
         FROM job_attempts WHERE job_id = ANY($1) AND outcome = $2
         ORDER BY job_id, id DESC",
    )
    .bind(&ids)
    .bind(outcome)
    .fetch_all(db)
    .await
}

/// What one fold of the rollups did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct HistoryFolded {
    pub deltas: i64,
    pub minutes: i64,
}

/// The lateness histogram's columns (`late_0` to `late_15`), each as `each` writes it.
fn late_columns(each: impl Fn(String) -> String) -> String {
    (0..LATE_BUCKETS)
        .map(|k| each(format!("late_{k}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The sums of the counters of the rollup rows of a group, in the tables' column order, named
/// as the columns.
fn summed() -> String {
    format!(
        "sum(completed)::bigint AS completed, sum(failed)::bigint AS failed,
         sum(discarded)::bigint AS discarded, sum(cancelled)::bigint AS cancelled,
         sum(snoozed)::bigint AS snoozed, sum(lost)::bigint AS lost, {},
         sum(duration_sum_ms) AS duration_sum_ms, max(duration_max_ms) AS duration_max_ms",
        late_columns(|c| format!("sum({c})::bigint AS {c}"))
    )
}

/// Adds an `excluded` rollup row into the row `m` it conflicts with.
fn added() -> String {
    format!(
        "completed = m.completed + excluded.completed, failed = m.failed + excluded.failed,
         discarded = m.discarded + excluded.discarded,
         cancelled = m.cancelled + excluded.cancelled, snoozed = m.snoozed + excluded.snoozed,
         lost = m.lost + excluded.lost, {},
         duration_sum_ms = m.duration_sum_ms + excluded.duration_sum_ms,
         duration_max_ms = greatest(m.duration_max_ms, excluded.duration_max_ms)",
        late_columns(|c| format!("{c} = m.{c} + excluded.{c}"))
    )
}

static FOLD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH folded AS (DELETE FROM job_history_deltas RETURNING *),
         minutes AS (
             INSERT INTO job_history_minute AS m
             SELECT minute, queue, kind, schedule_id, {summed}
             FROM folded GROUP BY minute, queue, kind, schedule_id
             ON CONFLICT (minute, queue, kind, schedule_id) DO UPDATE SET {added}
             RETURNING 1),
         hours AS (
             INSERT INTO job_history_hour AS m
             SELECT date_trunc('hour', minute), queue, kind, schedule_id, {summed}
             FROM folded GROUP BY 1, queue, kind, schedule_id
             ON CONFLICT (minute, queue, kind, schedule_id) DO UPDATE SET {added}
             RETURNING 1)
         SELECT (SELECT count(*) FROM folded) AS deltas, (SELECT count(*) FROM minutes) AS minutes",
        summed = summed(),
        added = added()
    )
});

/// Folds every committed rollup delta into `job_history_minute` and `job_history_hour`, in one
/// statement. Two folds at once are safe: the second waits on the rows the first deletes, then
/// skips them.
pub async fn job_history_deltas_fold<'e>(
    db: impl PgExecutor<'e>,
) -> Result<HistoryFolded, sqlx::Error> {
    sqlx::query_as(FOLD.as_str()).fetch_one(db).await
}

/// Deletes the minutes of every whole hour that ended more than `keep` ago (their hours hold
/// them). Returns how many rows.
pub async fn job_history_minutes_delete_old<'e>(
    db: impl PgExecutor<'e>,
    keep: Duration,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "DELETE FROM job_history_minute
         WHERE minute < date_trunc('hour', now() - make_interval(secs => $1))",
    )
    .bind(keep.as_secs_f64())
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Deletes the hours that started more than `retention` ago. Returns how many rows.
pub async fn job_history_delete_old<'e>(
    db: impl PgExecutor<'e>,
    retention: Duration,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "DELETE FROM job_history_hour WHERE minute < now() - make_interval(secs => $1)",
    )
    .bind(retention.as_secs_f64())
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Which attempts a series counts, and how it is split.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistoryFilter {
    pub queue: Option<String>,
    pub kind: Option<String>,
    pub schedule_id: Option<i64>,
}

/// How a series is split into several.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HistoryGroup {
    /// One series.
    #[default]
    All,
    Queue,
    Kind,
}

/// The attempts that ended in one step of a series.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct HistoryPoint {
    /// The series it belongs to: the queue or kind, or empty for [`HistoryGroup::All`].
    pub series: String,
    /// The step's start.
    pub at: DateTime<Utc>,
    pub completed: i64,
    pub failed: i64,
    pub discarded: i64,
    pub cancelled: i64,
    pub snoozed: i64,
    pub lost: i64,
    /// The lateness histogram (see [`LATE_BOUNDS_MS`]).
    pub late_buckets: Vec<i64>,
    pub duration_sum_ms: f64,
    pub duration_max_ms: f64,
}

impl HistoryPoint {
    /// Every attempt that ended in the step.
    pub fn attempts(&self) -> i64 {
        self.completed + self.failed + self.discarded + self.cancelled + self.snoozed + self.lost
    }
}

/// The series query over one rollup table (`job_history_minute` or `job_history_hour`, from its
/// row that holds `$1`) and the deltas not folded yet.
fn series_sql(table: &str, from: &str) -> String {
    format!(
        "WITH r AS (
             SELECT * FROM {table} WHERE minute >= {from} AND minute < $2
             UNION ALL
             SELECT * FROM job_history_deltas WHERE minute >= $1 AND minute < $2)
         SELECT CASE $7 WHEN 'queue' THEN queue WHEN 'kind' THEN kind ELSE '' END AS series,
                date_bin(make_interval(secs => $3), greatest(minute, $1), $1) AS at,
                sum(completed)::bigint AS completed, sum(failed)::bigint AS failed,
                sum(discarded)::bigint AS discarded, sum(cancelled)::bigint AS cancelled,
                sum(snoozed)::bigint AS snoozed, sum(lost)::bigint AS lost,
                ARRAY[{}] AS late_buckets,
                sum(duration_sum_ms) AS duration_sum_ms, max(duration_max_ms) AS duration_max_ms
         FROM r
         WHERE schedule_id = coalesce($6::bigint, 0)
           AND ($4::text IS NULL OR queue = $4) AND ($5::text IS NULL OR kind = $5)
         GROUP BY 1, 2
         ORDER BY 1, 2",
        late_columns(|c| format!("sum({c})::bigint"))
    )
}

static SERIES_MINUTES: LazyLock<String> = LazyLock::new(|| series_sql("job_history_minute", "$1"));
static SERIES_HOURS: LazyLock<String> =
    LazyLock::new(|| series_sql("job_history_hour", "date_trunc('hour', $1)"));

/// The series of the attempts `filter` selects, split as `group` says, in steps of `step` from
/// `from` (included) to `to` (excluded), every step present in each series that has any attempt
/// in the range (and in the one series of [`HistoryGroup::All`] always), oldest first. Steps of
/// whole hours read the hours (an hour that began before `from` counts in the first step); finer
/// steps read the minutes.
///
/// The database sums only the steps that have rows; the empty steps are filled here. Filled in
/// SQL (a cross join of the steps and the series) the plan's estimate crossed the JIT's
/// threshold, and compiling it took most of a 30-day page's 450 ms.
pub async fn job_history_series<'e>(
    db: impl PgExecutor<'e>,
    filter: &HistoryFilter,
    group: HistoryGroup,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Duration,
) -> Result<Vec<HistoryPoint>, sqlx::Error> {
    let group_name = match group {
        HistoryGroup::All => "all",
        HistoryGroup::Queue => "queue",
        HistoryGroup::Kind => "kind",
    };
    // Whole hours read the hours; anything finer reads the minutes (kept for a day: see
    // `HistoryQuery::check`).
    let sql = if step.as_secs().is_multiple_of(3600) {
        &SERIES_HOURS
    } else {
        &SERIES_MINUTES
    };
    let rows: Vec<HistoryPoint> = sqlx::query_as(sql.as_str())
        .bind(from)
        .bind(to)
        .bind(step.as_secs_f64())
        .bind(&filter.queue)
        .bind(&filter.kind)
        .bind(filter.schedule_id)
        .bind(group_name)
        .fetch_all(db)
        .await?;
    Ok(fill_steps(rows, group, from, to, step))
}

/// The points of several parts of one range (each from [`job_history_series`] over its own
/// steps, in any order) as one answer over `from..to`: ordered by series, then step, every step
/// present in each series.
pub fn join_series(
    points: impl IntoIterator<Item = HistoryPoint>,
    group: HistoryGroup,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Duration,
) -> Vec<HistoryPoint> {
    let mut points: Vec<HistoryPoint> = points.into_iter().collect();
    // The parts do not overlap: each step's point comes from the one part that read it.
    points.sort_by(|a, b| a.series.cmp(&b.series).then(a.at.cmp(&b.at)));
    fill_steps(points, group, from, to, step)
}

/// `rows` (ordered by series, then step) with every step of the range present in each series.
fn fill_steps(
    rows: Vec<HistoryPoint>,
    group: HistoryGroup,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Duration,
) -> Vec<HistoryPoint> {
    let step_us = (step.as_micros() as i64).max(1);
    let span_us = (to - from).num_microseconds().unwrap_or(0).max(0);
    let steps = ((span_us + step_us - 1) / step_us) as usize;
    let empty = |series: &str, k: usize| HistoryPoint {
        series: series.to_string(),
        at: from + chrono::Duration::microseconds(step_us * k as i64),
        completed: 0,
        failed: 0,
        discarded: 0,
        cancelled: 0,
        snoozed: 0,
        lost: 0,
        late_buckets: vec![0; LATE_BUCKETS],
        duration_sum_ms: 0.0,
        duration_max_ms: 0.0,
    };
    let mut names: Vec<String> = Vec::new();
    for r in &rows {
        if names.last() != Some(&r.series) {
            names.push(r.series.clone());
        }
    }
    if names.is_empty() && group == HistoryGroup::All {
        names.push(String::new());
    }
    let mut out: Vec<HistoryPoint> = Vec::with_capacity(names.len() * steps);
    let mut rows = rows.into_iter().peekable();
    for name in names {
        let start = out.len();
        out.extend((0..steps).map(|k| empty(&name, k)));
        while let Some(r) = rows.next_if(|r| r.series == name) {
            let k = (r.at - from).num_microseconds().unwrap_or(0) / step_us;
            if let Some(slot) = usize::try_from(k).ok().filter(|k| *k < steps) {
                out[start + slot] = r;
            }
        }
    }
    out
}

/// `points` (ordered by series, then step, as [`job_history_series`] returns them) as one list
/// a series: its name and its steps.
pub fn by_series(points: Vec<HistoryPoint>) -> Vec<(String, Vec<HistoryPoint>)> {
    let mut series: Vec<(String, Vec<HistoryPoint>)> = Vec::new();
    for p in points {
        match series.last_mut() {
            Some((name, steps)) if *name == p.series => steps.push(p),
            _ => series.push((p.series.clone(), vec![p])),
        }
    }
    series
}

/// The lateness under which a share `q` (0 to 1) of the attempts of histogram `buckets` started,
/// in ms, read linearly within its bucket; `None` when it counts no attempt. At or past the last
/// bound it is that bound (a minute): the histogram knows no more.
pub fn late_quantile(buckets: &[i64], q: f64) -> Option<f64> {
    let total: i64 = buckets.iter().sum();
    if total <= 0 {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
    let mut below = 0.0;
    for (k, n) in buckets.iter().enumerate() {
        let n = *n as f64;
        if n > 0.0 && below + n >= rank {
            let low = if k == 0 { 0.0 } else { LATE_BOUNDS_MS[k - 1] };
            let Some(high) = LATE_BOUNDS_MS.get(k) else {
                return Some(low);
            };
            return Some(low + (high - low) * ((rank - below) / n));
        }
        below += n;
    }
    LATE_BOUNDS_MS.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_read_within_their_bucket() {
        let mut b = vec![0; LATE_BUCKETS];
        assert_eq!(late_quantile(&b, 0.5), None);
        // 100 attempts between 2 and 5 ms late.
        b[2] = 100;
        assert_eq!(late_quantile(&b, 0.5), Some(3.5));
        assert_eq!(late_quantile(&b, 1.0), Some(5.0));
        // One more, over a minute late: the p99 stays in the 2-5 ms bucket, the max is a minute.
        b[LATE_BUCKETS - 1] = 1;
        assert!(late_quantile(&b, 0.99).unwrap() <= 5.0);
        assert_eq!(late_quantile(&b, 1.0), Some(60000.0));
    }
}
