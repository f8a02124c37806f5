//! The slots a downtime missed: how many slots of a rule fell in `(after, upto]`, and the latest
//! `keep` of them, at a cost bounded however long the downtime was.
//!
//! The latest slots are found by looking back from `upto` over a window that grows fourfold until
//! it holds `keep` slots (or reaches `after`), so a three-day outage of a schedule every second
//! walks about as many slots as it keeps, not 259,200. The count is exact for intervals
//! (arithmetic) and for cron rules up to [`MAX_COUNTED`] slots; past that it is estimated from
//! the walked slots' mean gap (it only feeds the `runs_skipped` counter). The walk is CPU work:
//! callers run it off the async runtime (`spawn_blocking`).

use std::collections::VecDeque;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;

use super::rule::Rule;

/// Cron slots counted one by one before the rest is estimated.
pub const MAX_COUNTED: u64 = 10_000;

/// What a downtime missed.
#[derive(Debug, Clone, PartialEq)]
pub struct MissedSlots {
    /// How many slots fell in the range.
    pub count: u64,
    /// The latest `keep` of them (fewer if fewer fell), oldest first.
    pub latest: Vec<DateTime<Utc>>,
}

/// The slots of `rule` strictly after `after`, at most `upto`, and before `ends_at`.
pub fn missed_slots(
    rule: &Rule,
    zone: Tz,
    anchor: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
    after: DateTime<Utc>,
    upto: DateTime<Utc>,
    keep: usize,
) -> MissedSlots {
    // The last instant a slot may take: `ends_at` is exclusive.
    let upto = match ends_at {
        Some(e) => upto.min(e - Duration::milliseconds(1)),
        None => upto,
    };
    if upto <= after {
        return MissedSlots {
            count: 0,
            latest: Vec::new(),
        };
    }
    let latest = latest_slots(rule, zone, anchor, after, upto, keep);
    let count = match rule.every_ms() {
        Some(every) => {
            let base = anchor.map_or(0, |a| a.timestamp_millis());
            let index = |t: DateTime<Utc>| (t.timestamp_millis() - base).div_euclid(every);
            (index(upto) - index(after)).max(0) as u64
        }
        None => count_cron(rule, zone, anchor, after, upto),
    };
    MissedSlots {
        count: count.max(latest.len() as u64),
        latest,
    }
}

/// The latest `keep` slots in `(after, upto]`: a window looking back from `upto`, grown fourfold
/// until it holds `keep` slots or starts at `after`.
fn latest_slots(
    rule: &Rule,
    zone: Tz,
    anchor: Option<DateTime<Utc>>,
    after: DateTime<Utc>,
    upto: DateTime<Utc>,
    keep: usize,
) -> Vec<DateTime<Utc>> {
    if keep == 0 {
        return Vec::new();
    }
    let mut span = match rule.every_ms() {
        Some(every) => Duration::milliseconds(every.saturating_mul(keep as i64 + 1)),
        None => Duration::seconds(keep as i64 + 1),
    };
    loop {
        let from = if upto - after <= span {
            after
        } else {
            upto - span
        };
        let mut found: VecDeque<DateTime<Utc>> = VecDeque::with_capacity(keep + 1);
        let mut at = from;
        while let Some(next) = rule.next_after(at, zone, anchor) {
            if next > upto {
                break;
            }
            found.push_back(next);
            if found.len() > keep {
                found.pop_front();
            }
            at = next;
        }
        if found.len() >= keep || from == after {
            return found.into();
        }
        span = span * 4;
    }
}

/// The number of cron slots in `(after, upto]`: counted up to [`MAX_COUNTED`], then estimated.
fn count_cron(
    rule: &Rule,
    zone: Tz,
    anchor: Option<DateTime<Utc>>,
    after: DateTime<Utc>,
    upto: DateTime<Utc>,
) -> u64 {
    let mut count = 0u64;
    let mut at = after;
    while let Some(next) = rule.next_after(at, zone, anchor) {
        if next > upto {
            return count;
        }
        count += 1;
        at = next;
        if count == MAX_COUNTED {
            let mean_gap_ms = ((at - after).num_milliseconds() / count as i64).max(1);
            return count + ((upto - at).num_milliseconds() / mean_gap_ms).max(0) as u64;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn an_interval_s_missed_slots_are_counted_and_the_latest_kept() {
        let every = Rule::every(std::time::Duration::from_secs(1)).unwrap();
        let after = at("2026-01-01T00:00:00Z");
        let upto = at("2026-01-04T00:00:00.500Z");
        let m = missed_slots(&every, chrono_tz::UTC, None, None, after, upto, 3);
        assert_eq!(m.count, 3 * 86_400);
        assert_eq!(
            m.latest,
            [
                at("2026-01-03T23:59:58Z"),
                at("2026-01-03T23:59:59Z"),
                at("2026-01-04T00:00:00Z")
            ]
        );
    }

    #[test]
    fn a_cron_rule_s_latest_slot_is_the_last_before_the_end_of_a_long_downtime() {
        let minutely = Rule::cron("* * * * *").unwrap();
        let after = at("2025-01-01T00:00:00Z");
        let upto = at("2026-01-01T00:00:30Z");
        let m = missed_slots(&minutely, chrono_tz::UTC, None, None, after, upto, 1);
        assert_eq!(m.latest, [at("2026-01-01T00:00:00Z")]);
        // 525,600 minutes: counted to 10,000, the rest estimated from the mean gap.
        assert_eq!(m.count, 525_600);
    }

    #[test]
    fn a_sparse_rule_finds_its_latest_slot_far_back_and_the_end_bounds_the_range() {
        let new_year = Rule::cron("0 0 1 1 *").unwrap();
        let after = at("2020-06-01T00:00:00Z");
        let upto = at("2026-06-01T00:00:00Z");
        let m = missed_slots(&new_year, chrono_tz::UTC, None, None, after, upto, 2);
        assert_eq!(
            m.latest,
            [at("2025-01-01T00:00:00Z"), at("2026-01-01T00:00:00Z")]
        );
        assert_eq!(m.count, 6);
        let ended = missed_slots(
            &new_year,
            chrono_tz::UTC,
            None,
            Some(at("2026-01-01T00:00:00Z")),
            after,
            upto,
            1,
        );
        assert_eq!(
            (ended.count, ended.latest),
            (5, vec![at("2025-01-01T00:00:00Z")])
        );
        let none = missed_slots(&new_year, chrono_tz::UTC, None, None, upto, upto, 1);
        assert_eq!((none.count, none.latest.len()), (0, 0));
    }
}
