//! The closed part of long history series, kept in memory for a while.
//!
//! A 30-day chart reads about 15,000 rollup rows; its page refetches whenever jobs change (live
//! updates, up to four times a second), though only its last steps can change. The steps that
//! ended [`CLOSED_AFTER`] ago or more are read once per key (filter, split, step, range start
//! and the cut between closed and open steps) and kept up to [`KEPT_FOR`]; the open steps after
//! the cut are read on each call, and the two joined. The key changes as the range moves (each
//! step), so an entry serves one step's worth of calls at most.
//!
//! An attempt whose record is written later than `CLOSED_AFTER` after it ended (a completer cut
//! off from the database that long, a standby lagging that much) shows in the closed steps once
//! their entry is read again, within `KEPT_FOR`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::store::history::{self as history_store, HistoryFilter, HistoryGroup, HistoryPoint};
use crate::db::Db;

/// Steps that ended this long ago are closed: every attempt of theirs has its record.
pub const CLOSED_AFTER: Duration = Duration::from_secs(600);
/// How long a closed part is used before it is read again.
pub const KEPT_FOR: Duration = Duration::from_secs(300);
/// Entries kept (the history page's ranges, split by queue or kind, with room for the API's).
const ENTRIES: usize = 16;
/// A range with fewer closed steps is read whole each time.
const MIN_CLOSED_STEPS: i64 = 4;

#[derive(Debug, Clone, PartialEq)]
struct Key {
    filter: HistoryFilter,
    group: HistoryGroup,
    from: DateTime<Utc>,
    cut: DateTime<Utc>,
    step: Duration,
}

struct Entry {
    key: Key,
    read_at: Instant,
    points: Arc<Vec<HistoryPoint>>,
}

#[derive(Default)]
pub struct HistoryCache {
    entries: Mutex<Vec<Entry>>,
}

impl HistoryCache {
    /// The series of [`history_store::job_history_series`], the closed part from memory when
    /// it was read lately. `now` is the database's clock.
    #[allow(clippy::too_many_arguments)]
    pub async fn series(
        &self,
        db: &Db,
        filter: &HistoryFilter,
        group: HistoryGroup,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        step: Duration,
        now: DateTime<Utc>,
    ) -> Result<Vec<HistoryPoint>, sqlx::Error> {
        let Some(cut) = cut(from, to, step, now) else {
            return history_store::job_history_series(db, filter, group, from, to, step).await;
        };
        let key = Key {
            filter: filter.clone(),
            group,
            from,
            cut,
            step,
        };
        let closed = match self.get(&key) {
            Some(points) => points,
            None => {
                let points = Arc::new(
                    history_store::job_history_series(db, filter, group, from, cut, step).await?,
                );
                self.put(key, points.clone());
                points
            }
        };
        let open = history_store::job_history_series(db, filter, group, cut, to, step).await?;
        Ok(history_store::join_series(
            closed.iter().cloned().chain(open),
            group,
            from,
            to,
            step,
        ))
    }

    fn get(&self, key: &Key) -> Option<Arc<Vec<HistoryPoint>>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .iter()
            .find(|e| e.key == *key && e.read_at.elapsed() < KEPT_FOR)
            .map(|e| e.points.clone())
    }

    fn put(&self, key: Key, points: Arc<Vec<HistoryPoint>>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.key != key && e.read_at.elapsed() < KEPT_FOR);
        if entries.len() >= ENTRIES {
            entries.remove(0);
        }
        entries.push(Entry {
            key,
            read_at: Instant::now(),
            points,
        });
    }
}

/// Where the closed steps of `from..to` end: the start of the first step that ended less than
/// [`CLOSED_AFTER`] before `now` (or `to`). `None` when fewer than [`MIN_CLOSED_STEPS`] are
/// closed, or when `from` is not on the rollups' grain (a whole hour for steps of hours, a
/// minute otherwise): a rollup row across the cut would count on both sides.
fn cut(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: Duration,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let step_s = step.as_secs() as i64;
    let grain = if step_s % 3600 == 0 { 3600 } else { 60 };
    if step_s < 60 || from.timestamp_subsec_nanos() != 0 || from.timestamp() % grain != 0 {
        return None;
    }
    let closed_until = (now - chrono::Duration::from_std(CLOSED_AFTER).ok()?).min(to);
    let steps = (closed_until - from).num_seconds().div_euclid(step_s);
    (steps >= MIN_CLOSED_STEPS).then(|| from + chrono::Duration::seconds(steps * step_s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn the_cut_falls_on_a_step_that_ended_ten_minutes_ago() {
        let from = at("2026-11-05T04:00:00Z");
        let to = at("2026-12-05T08:00:00Z");
        let four_hours = Duration::from_secs(4 * 3600);
        // 07:05 now: the step 04:00-08:00 is open; the one before ended at 04:00.
        assert_eq!(
            cut(from, to, four_hours, at("2026-12-05T07:05:00Z")),
            Some(at("2026-12-05T04:00:00Z"))
        );
        // 08:05: 04:00-08:00 ended five minutes ago, still open.
        assert_eq!(
            cut(from, to, four_hours, at("2026-12-05T08:05:00Z")),
            Some(at("2026-12-05T04:00:00Z"))
        );
        assert_eq!(
            cut(from, to, four_hours, at("2026-12-05T08:10:00Z")),
            Some(at("2026-12-05T08:00:00Z"))
        );
        // An hour in minutes: all but the last ten are closed.
        let minute = Duration::from_secs(60);
        assert_eq!(
            cut(
                at("2026-12-05T07:00:00Z"),
                at("2026-12-05T08:00:00Z"),
                minute,
                at("2026-12-05T07:59:30Z")
            ),
            Some(at("2026-12-05T07:49:00Z"))
        );
        // Too few closed steps, or off the grain: read whole.
        assert_eq!(cut(from, to, four_hours, at("2026-11-05T16:00:00Z")), None);
        assert_eq!(
            cut(
                at("2026-11-05T04:30:00Z"),
                to,
                four_hours,
                at("2026-12-05T07:05:00Z")
            ),
            None
        );
    }
}
