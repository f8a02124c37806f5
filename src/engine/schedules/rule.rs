//! A schedule's rule: a cron expression or a fixed interval, in an IANA time zone, and the slots
//! (instants) it gives.
//!
//! Cron expressions are parsed and evaluated by `croner` (5 or 6 fields: an optional seconds field
//! first; `L`, `W`, `#`, names of months and weekdays; `@yearly`, `@monthly`, `@weekly`, `@daily`,
//! `@hourly`), in the zone's wall-clock time, with the daylight-saving rules of the Open Cron
//! Pattern Specification:
//! - **A fixed time of day** (single second, minute and hour, e.g. `30 2 * * *`) runs once a day
//!   even when the clock jumps: when it falls in the hour a spring-forward skips, it runs at the
//!   first instant after the gap (03:00 that day); when the hour repeats in the autumn, it runs at
//!   the first of the two 02:30s only.
//! - **Intervals and wildcards** (`*/15 * * * *`, `0 * * * *`) follow the real clock: they skip
//!   the wall-clock times that do not exist and run in both passes of a repeated hour (they are
//!   different instants an hour apart).
//!
//! An interval (`every`) is a fixed length of real time, aligned to `starts_at` when the schedule
//! has one and to the Unix epoch otherwise, so every node computes the same slots.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

/// The shortest interval, and the finest cron resolution (a seconds field).
pub const MIN_EVERY: Duration = Duration::from_millis(MIN_EVERY_MS as u64);
/// The longest interval (a year and a bit: longer rules are cron expressions).
pub const MAX_EVERY: Duration = Duration::from_millis(MAX_EVERY_MS as u64);
/// [`MIN_EVERY`] and [`MAX_EVERY`] in ms, as a spec's `every_ms` and the API's schema state them.
pub const MIN_EVERY_MS: i64 = 1_000;
pub const MAX_EVERY_MS: i64 = 400 * 86_400_000;
/// The longest expression accepted.
pub const MAX_CRON_CHARS: usize = 200;

/// Why a cron expression was refused: where (a 0-based character offset into the expression as
/// given, and the field's name when one field is at fault) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (at character {position}{})", field.map(|f| format!(", the {f} field")).unwrap_or_default())]
pub struct CronError {
    pub position: usize,
    pub field: Option<&'static str>,
    pub reason: String,
}

/// What a schedule repeats on.
#[derive(Debug, Clone)]
pub enum Rule {
    /// A cron expression, evaluated in the schedule's zone.
    Cron { expr: String, cron: Box<Cron> },
    /// Every so long, in real time.
    Every(Duration),
}

const FIVE: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
const SIX: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
];

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

impl Rule {
    /// Parses a cron expression; a refusal says which field is at fault and where it starts.
    pub fn cron(expr: &str) -> Result<Rule, CronError> {
        let trimmed = expr.trim();
        let lead = expr.len() - expr.trim_start().len();
        if trimmed.is_empty() {
            return Err(CronError {
                position: 0,
                field: None,
                reason: "the expression is empty".into(),
            });
        }
        if trimmed.chars().count() > MAX_CRON_CHARS {
            return Err(CronError {
                position: MAX_CRON_CHARS,
                field: None,
                reason: format!("longer than {MAX_CRON_CHARS} characters"),
            });
        }
        match parser().parse(trimmed) {
            Ok(cron) => {
                // A pattern that parses but never matches (`0 0 30 2 *`) would make every search
                // for the next slot fail: refuse it now.
                let probe = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
                if cron.find_next_occurrence(&probe, false).is_err() {
                    return Err(CronError {
                        position: lead,
                        field: None,
                        reason: "the expression never matches a date".into(),
                    });
                }
                Ok(Rule::Cron {
                    expr: trimmed.to_string(),
                    cron: Box::new(cron),
                })
            }
            Err(e) => Err(locate(expr, lead, trimmed, e)),
        }
    }

    /// An interval rule.
    pub fn every(every: Duration) -> Result<Rule, String> {
        if every < MIN_EVERY || every > MAX_EVERY {
            return Err(format!(
                "must be between {} and {} seconds",
                MIN_EVERY.as_secs(),
                MAX_EVERY.as_secs()
            ));
        }
        if !every.subsec_nanos().is_multiple_of(1_000_000) {
            return Err("must be a whole number of milliseconds".into());
        }
        Ok(Rule::Every(every))
    }

    /// The first slot strictly after `after`. `anchor` aligns intervals (the schedule's start);
    /// `None` when the rule has no further slot.
    pub fn next_after(
        &self,
        after: DateTime<Utc>,
        zone: Tz,
        anchor: Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        match self {
            Rule::Cron { cron, .. } => {
                let local = after.with_timezone(&zone);
                cron.find_next_occurrence(&local, false)
                    .ok()
                    .map(|t| t.with_timezone(&Utc))
            }
            Rule::Every(every) => {
                let every = every.as_millis() as i64;
                let base = anchor.map_or(0, |a| a.timestamp_millis());
                let since = after.timestamp_millis() - base;
                let n = since.div_euclid(every) + 1;
                DateTime::from_timestamp_millis(base + n * every)
            }
        }
    }

    /// The rule in words, e.g. "at 06:00 every day (Europe/London)".
    pub fn describe(&self, zone: Tz) -> String {
        match self {
            Rule::Cron { expr, cron } => {
                let words = cron.describe();
                let words = words.trim_end_matches('.');
                let mut first = words.chars();
                let mut words = match first.next() {
                    Some(c) => c.to_lowercase().collect::<String>() + first.as_str(),
                    None => String::new(),
                };
                // croner leaves the days out when they are all wildcards ("At 06:00"): say them.
                let at_a_time = words.as_bytes().windows(5).any(|w| {
                    w[0].is_ascii_digit()
                        && w[1].is_ascii_digit()
                        && w[2] == b':'
                        && w[3].is_ascii_digit()
                        && w[4].is_ascii_digit()
                });
                if every_day(expr) && words.starts_with("at ") && at_a_time {
                    words = format!("every day {words}");
                }
                format!("{words} ({zone})")
            }
            Rule::Every(every) => format!("every {}", words_for(*every)),
        }
    }

    /// The expression or the interval, as stored.
    pub fn cron_expr(&self) -> Option<&str> {
        match self {
            Rule::Cron { expr, .. } => Some(expr),
            Rule::Every(_) => None,
        }
    }

    pub fn every_ms(&self) -> Option<i64> {
        match self {
            Rule::Cron { .. } => None,
            Rule::Every(d) => Some(d.as_millis() as i64),
        }
    }
}

/// Whether an expression's day-of-month, month and day-of-week are all wildcards.
fn every_day(expr: &str) -> bool {
    let e = expr.trim().to_ascii_lowercase();
    if e == "@daily" || e == "@midnight" {
        return true;
    }
    let fields: Vec<&str> = e.split_whitespace().collect();
    fields.len() >= 5
        && fields[fields.len() - 3..]
            .iter()
            .all(|f| *f == "*" || *f == "?")
}

/// An RFC 3339 instant within the years 1970 to 9999 in UTC: the years 1970 to 9999 but their
/// first and last day (an offset could take them out).
pub const INSTANT_PATTERN: &str = r"^(?!1970-01-01|9999-12-31)(19[7-9][0-9]|[2-9][0-9]{3})-";

/// Parses an IANA zone name (`Europe/London`, `UTC`).
pub fn zone(name: &str) -> Result<Tz, String> {
    Tz::from_str(name.trim()).map_err(|_| {
        format!(
            "`{name}` is not an IANA time zone (e.g. `Europe/London`, `America/New_York`, `UTC`)"
        )
    })
}

fn words_for(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    let units = [
        (86_400_000, "day"),
        (3_600_000, "hour"),
        (60_000, "minute"),
        (1_000, "second"),
    ];
    for (size, name) in units {
        if ms.is_multiple_of(size) {
            let n = ms / size;
            return if n == 1 {
                name.to_string()
            } else {
                format!("{n} {name}s")
            };
        }
    }
    format!("{ms} ms")
}

/// Finds where a refused expression goes wrong: the field whose own value croner refuses (each
/// field is tried alone among wildcards), or the field count.
fn locate(expr: &str, lead: usize, trimmed: &str, e: croner::errors::CronError) -> CronError {
    let reason = e.to_string();
    if trimmed.starts_with('@') {
        return CronError {
            position: lead,
            field: None,
            reason: format!(
                "unknown nickname (use @yearly, @annually, @monthly, @weekly, @daily or @hourly): {reason}"
            ),
        };
    }
    // Fields with their character offsets in `expr`.
    let mut fields = Vec::new();
    let mut start = None;
    for (i, c) in expr.char_indices() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                fields.push((s, &expr[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        fields.push((s, &expr[s..]));
    }
    let names: &[&'static str] = match fields.len() {
        5 => &FIVE,
        6 => &SIX,
        n => {
            let position = if n > 6 { fields[6].0 } else { expr.len() };
            return CronError {
                position,
                field: None,
                reason: format!("{n} fields: a cron expression has 5 (minute hour day-of-month month day-of-week) or 6 (a seconds field first)"),
            };
        }
    };
    for (i, (offset, text)) in fields.iter().enumerate() {
        let mut probe: Vec<&str> = vec!["*"; fields.len()];
        probe[i] = text;
        if let Err(e) = parser().parse(&probe.join(" ")) {
            return CronError {
                position: *offset,
                field: Some(names[i]),
                reason: format!("`{text}`: {e}"),
            };
        }
    }
    CronError {
        position: lead,
        field: None,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    /// The slots of `rule` after `from`, as RFC 3339 in UTC.
    fn slots(rule: &Rule, zone: &str, from: &str, n: usize) -> Vec<String> {
        let zone = super::zone(zone).unwrap();
        let mut at = utc(from);
        let mut out = Vec::new();
        for _ in 0..n {
            at = rule.next_after(at, zone, None).unwrap();
            out.push(at.format("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
        out
    }

    #[test]
    fn a_daily_time_in_the_skipped_hour_runs_once_at_the_end_of_the_gap() {
        let daily = Rule::cron("30 2 * * *").unwrap();
        // Europe/London skips 01:00-02:00 on 2027-03-28; use 01:30 there.
        let london = Rule::cron("30 1 * * *").unwrap();
        assert_eq!(
            slots(&london, "Europe/London", "2027-03-27T00:00:00Z", 3),
            // 01:30 GMT; 02:00 BST (the end of the gap) = 01:00 UTC; 01:30 BST = 00:30 UTC.
            [
                "2027-03-27T01:30:00Z",
                "2027-03-28T01:00:00Z",
                "2027-03-29T00:30:00Z"
            ]
        );
        // America/New_York skips 02:00-03:00 on 2027-03-14.
        assert_eq!(
            slots(&daily, "America/New_York", "2027-03-13T00:00:00Z", 3),
            [
                "2027-03-13T07:30:00Z",
                "2027-03-14T07:00:00Z",
                "2027-03-15T06:30:00Z"
            ]
        );
        // Australia/Sydney skips 02:00-03:00 on 2027-10-03 (AEST +10 to AEDT +11).
        assert_eq!(
            slots(&daily, "Australia/Sydney", "2027-10-01T00:00:00Z", 3),
            [
                "2027-10-01T16:30:00Z",
                "2027-10-02T16:00:00Z",
                "2027-10-03T15:30:00Z"
            ]
        );
    }

    #[test]
    fn a_daily_time_in_the_repeated_hour_runs_once_at_its_first_pass() {
        // Europe/London repeats 01:00-02:00 on 2027-10-31 (BST +1 then GMT).
        let london = Rule::cron("30 1 * * *").unwrap();
        assert_eq!(
            slots(&london, "Europe/London", "2027-10-30T00:00:00Z", 3),
            [
                "2027-10-30T00:30:00Z",
                "2027-10-31T00:30:00Z",
                "2027-11-01T01:30:00Z"
            ]
        );
        // America/New_York repeats 01:00-02:00 on 2027-11-07.
        let ny = Rule::cron("30 1 * * *").unwrap();
        assert_eq!(
            slots(&ny, "America/New_York", "2027-11-06T00:00:00Z", 3),
            [
                "2027-11-06T05:30:00Z",
                "2027-11-07T05:30:00Z",
                "2027-11-08T06:30:00Z"
            ]
        );
        // Australia/Sydney repeats 02:00-03:00 on 2027-04-04 (AEDT +11 then AEST +10).
        let sydney = Rule::cron("30 2 * * *").unwrap();
        assert_eq!(
            slots(&sydney, "Australia/Sydney", "2027-04-02T00:00:00Z", 3),
            [
                "2027-04-02T15:30:00Z",
                "2027-04-03T15:30:00Z",
                "2027-04-04T16:30:00Z"
            ]
        );
    }

    #[test]
    fn an_hourly_rule_follows_the_real_clock_across_both_switches() {
        let hourly = Rule::cron("0 * * * *").unwrap();
        // The repeated hour in New York: 01:00 EDT and 01:00 EST are both slots, an hour apart.
        assert_eq!(
            slots(&hourly, "America/New_York", "2027-11-07T04:30:00Z", 3),
            [
                "2027-11-07T05:00:00Z",
                "2027-11-07T06:00:00Z",
                "2027-11-07T07:00:00Z"
            ]
        );
        // The skipped hour: 01:00 EST, then 03:00 EDT, an hour later in real time.
        assert_eq!(
            slots(&hourly, "America/New_York", "2027-03-14T05:30:00Z", 2),
            ["2027-03-14T06:00:00Z", "2027-03-14T07:00:00Z"]
        );
    }

    #[test]
    fn intervals_align_to_the_epoch_or_to_the_start() {
        let every = Rule::every(Duration::from_secs(90)).unwrap();
        let utc_zone = super::zone("UTC").unwrap();
        let next = every.next_after(utc("2026-12-02T10:00:00Z"), utc_zone, None);
        // 10:00 UTC is a multiple of 90 s since the epoch: the next slot is 90 s later.
        assert_eq!(next, Some(utc("2026-12-02T10:01:30Z")));
        let anchored = every.next_after(
            utc("2026-12-02T10:00:00Z"),
            utc_zone,
            Some(utc("2026-12-02T09:59:59Z")),
        );
        assert_eq!(anchored, Some(utc("2026-12-02T10:01:29Z")));
        assert!(Rule::every(Duration::from_millis(500)).is_err());
        assert!(Rule::every(Duration::from_millis(1500)).is_ok());
        assert!(Rule::every(Duration::from_micros(1_500_500)).is_err());
        assert!(Rule::every(Duration::from_secs(500 * 86_400)).is_err());
    }

    #[test]
    fn seconds_nicknames_and_special_characters_parse() {
        for good in [
            "*/5 * * * * *",
            "@hourly",
            "@daily",
            "0 0 L * *",
            "0 9 * * MON#1",
            "0 9 15W * *",
            "0 12 * * 1-5",
            "0 0 1 JAN *",
        ] {
            assert!(Rule::cron(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn a_refused_expression_says_which_field_and_where() {
        let e = Rule::cron("0 25 * * *").unwrap_err();
        assert_eq!((e.position, e.field), (2, Some("hour")), "{e}");
        let e = Rule::cron("0 0 * * * * *").unwrap_err();
        assert_eq!(e.position, 12, "{e}");
        assert!(e.reason.contains("7 fields"), "{e}");
        let e = Rule::cron("0 0 *").unwrap_err();
        assert!(e.reason.contains("3 fields"), "{e}");
        let e = Rule::cron("61 * * * * *").unwrap_err();
        assert_eq!((e.position, e.field), (0, Some("second")), "{e}");
        let e = Rule::cron("* * * FOO *").unwrap_err();
        assert_eq!((e.position, e.field), (6, Some("month")), "{e}");
        let e = Rule::cron("@often").unwrap_err();
        assert!(e.reason.contains("nickname"), "{e}");
        let e = Rule::cron("0 0 30 2 *").unwrap_err();
        assert!(e.reason.contains("never"), "{e}");
        assert!(Rule::cron("   ").is_err());
    }

    #[test]
    fn rules_read_as_words() {
        let london = super::zone("Europe/London").unwrap();
        let d = Rule::cron("0 6 * * *").unwrap().describe(london);
        assert_eq!(d, "every day at 06:00 (Europe/London)");
        let weekdays = Rule::cron("0 6 * * 1-5").unwrap().describe(london);
        assert!(!weekdays.starts_with("every day"), "{weekdays}");
        let hourly = Rule::cron("@hourly").unwrap().describe(london);
        assert!(!hourly.starts_with("every day"), "{hourly}");
        assert_eq!(
            Rule::every(Duration::from_secs(300))
                .unwrap()
                .describe(london),
            "every 5 minutes"
        );
        assert!(super::zone("Mars/Olympus").is_err());
    }
}
