//! [`Promise::LimitsHold`](super::Promise::LimitsHold): a queue's rate and its global concurrency,
//! by the database clock (docs/limits.md), checked on the attempts the final table still shows.
//!
//! The table keeps one start per job (`attempted_at`, its last claim: a limited claim writes the
//! instant it counted the attempt in its window) and, for a finished job, the end of that attempt
//! (`finalized_at`). Earlier attempts are not kept (per-attempt records are issue 34's), so the
//! checks see a subset of the attempts: whatever they report happened, though not everything
//! that happened is seen.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use crate::chaos::history::plan::QUEUES;
use crate::chaos::history::record::{History, JobRow, Snapshot};

/// How long after a change's answer every node surely claims under it: a node learns of it by
/// a notification at once, or by its backstop poll (1 s) when the notification was lost.
const APPLIED: Duration = Duration::milliseconds(1_500);

/// A completion's instant is its transaction's start: a claim that saw it committed may carry
/// an instant a little before it (the completion's commit lies between).
const COMMIT_SLACK: Duration = Duration::milliseconds(5);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Limits {
    global: Option<i64>,
    /// Attempts per period (ms).
    rate: Option<(i64, i64)>,
    /// What the rate is partitioned by (docs/limits.md, "Per key"): `kind`, `host`,
    /// `args.<field>`.
    per: Option<String>,
}

/// A job's key under `per`, as docs/limits.md defines it: its kind, the host its webhook calls
/// (lower case, no port or user info; none for a job without a `url`) or a top-level argument
/// as text (none when absent or null); a job without one counts under the empty key.
fn key_of(per: &str, job: &JobRow) -> String {
    let text = match per {
        "kind" => Some(job.kind.clone()),
        "host" => job
            .args
            .get("url")
            .and_then(Value::as_str)
            .and_then(|u| reqwest::Url::parse(u).ok())
            .and_then(|u| u.host_str().map(str::to_lowercase)),
        field => match field.strip_prefix("args.").and_then(|f| job.args.get(f)) {
            Some(Value::String(v)) => Some(v.clone()),
            Some(Value::Null) | None => None,
            Some(v) => Some(v.to_string()),
        },
    };
    text.unwrap_or_default()
}

/// Whether the checker knows how to key by `per`.
fn readable_per(per: &str) -> bool {
    matches!(per, "kind" | "host") || per.strip_prefix("args.").is_some_and(|f| !f.is_empty())
}

/// A time during which a queue's limits were surely `limits` on every node.
#[derive(Debug)]
struct Span {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limits: Limits,
}

/// `N/period` as the history writes it (`4/s`, `3/500ms`); `None` for anything else.
fn rate(text: &str) -> Option<(i64, i64)> {
    let (n, period) = text.split_once('/')?;
    let n = n.parse().ok()?;
    let ms = if let Some(ms) = period.strip_suffix("ms") {
        ms.parse().ok()?
    } else {
        let secs = period.strip_suffix('s')?;
        if secs.is_empty() {
            1_000
        } else {
            secs.parse::<i64>().ok()? * 1_000
        }
    };
    Some((n, ms))
}

/// The spans of surely known limits of `queue`: none at first (the nodes' `KICKOFF_QUEUES`
/// sets none), each acknowledged `PATCH` setting all of them from its answer on (plus
/// [`APPLIED`]); a `PATCH` without a verdict (no answer, a 5xx) leaves them unknown until the
/// next change; a refused one (4xx) changes nothing.
fn spans(h: &History, queue: &str, end: DateTime<Utc>) -> Vec<Span> {
    let path = format!("/queues/{queue}");
    let mut changes: Vec<_> = h
        .events
        .iter()
        .filter(|e| e.method == "PATCH" && e.path == path && !(400..500).contains(&e.status))
        .collect();
    changes.sort_by_key(|e| e.sent);
    let none = Limits {
        global: None,
        rate: None,
        per: None,
    };
    let mut known = Some(none.clone());
    let mut current = Some((DateTime::<Utc>::MIN_UTC, none.clone()));
    let mut out = Vec::new();
    for e in changes {
        if let Some((from, limits)) = current.take() {
            if from < e.sent {
                out.push(Span {
                    from,
                    to: e.sent,
                    limits,
                });
            }
        }
        let body = e.body.clone().unwrap_or(Value::Null);
        // Absent fields keep theirs (known only if they were), `null` removes one.
        let set = |field: &str| body.get(field).is_some();
        let mut limits = match (known, set("global_concurrency"), set("rate"), set("per")) {
            (Some(l), _, _, _) => Some(l),
            (None, true, true, true) => Some(none.clone()),
            _ => None,
        };
        if let Some(l) = &mut limits {
            if let Some(v) = body.get("global_concurrency") {
                l.global = v.as_i64();
            }
            match body.get("rate") {
                Some(Value::String(r)) => l.rate = rate(r),
                Some(_) => l.rate = None,
                None => {}
            }
            if let Some(v) = body.get("per") {
                l.per = v.as_str().map(str::to_string);
            }
            if l.rate.is_none() {
                l.per = None;
            }
        }
        let unreadable = matches!(body.get("rate"), Some(Value::String(r)) if rate(r).is_none())
            || matches!(body.get("per"), Some(Value::String(p)) if !readable_per(p));
        known = if e.ok() && !unreadable { limits } else { None };
        current = known.clone().map(|l| (e.answered + APPLIED, l));
    }
    if let Some((from, limits)) = current {
        if from < end {
            out.push(Span {
                from,
                to: end,
                limits,
            });
        }
    }
    out
}

pub(super) fn limits_hold(h: &History, s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for queue in QUEUES {
        let jobs: Vec<_> = s.jobs.iter().filter(|j| j.queue == queue).collect();
        // Whole attempts: a finished job's last claim and its end.
        let attempts: Vec<(DateTime<Utc>, DateTime<Utc>)> = jobs
            .iter()
            .filter(|j| matches!(j.state.as_str(), "completed" | "discarded"))
            .filter_map(|j| Some((j.attempted_at?, j.finalized_at?)))
            .filter(|(start, end)| start <= end)
            .collect();
        for span in spans(h, queue, s.now) {
            if let Some(global) = span.limits.global {
                out.extend(global_held(queue, &span, global, &attempts));
            }
            if let Some((n, period_ms)) = span.limits.rate {
                let starts = jobs.iter().filter_map(|j| {
                    let key = span.limits.per.as_deref().map(|p| key_of(p, j));
                    Some((j.attempted_at?, key.unwrap_or_default()))
                });
                out.extend(rate_held(queue, &span, n, period_ms, starts));
            }
        }
    }
    out
}

/// At each claim under a global concurrency `global`: the attempts it started and those still
/// executing elsewhere were at most `global`.
fn global_held(
    queue: &str,
    span: &Span,
    global: i64,
    attempts: &[(DateTime<Utc>, DateTime<Utc>)],
) -> Vec<String> {
    let mut out = Vec::new();
    let mut claims: Vec<DateTime<Utc>> = attempts
        .iter()
        .map(|a| a.0)
        .filter(|t| *t >= span.from && *t < span.to)
        .collect();
    claims.sort();
    claims.dedup();
    for at in claims {
        let together = attempts.iter().filter(|(start, _)| *start == at).count()
            + attempts
                .iter()
                .filter(|(start, end)| *start < at && *end > at + COMMIT_SLACK)
                .count();
        if together as i64 > global {
            out.push(format!(
                "queue {queue}: {together} attempts executing at {at}, its global concurrency {global}"
            ));
        }
    }
    out
}

/// In each whole window of `period_ms` inside the span (aligned to the period by the database
/// clock), at most `n` starts per key.
fn rate_held(
    queue: &str,
    span: &Span,
    n: i64,
    period_ms: i64,
    starts: impl Iterator<Item = (DateTime<Utc>, String)>,
) -> Vec<String> {
    let mut windows: HashMap<(i64, String), i64> = HashMap::new();
    let (from, to) = (span.from.timestamp_millis(), span.to.timestamp_millis());
    for (at, key) in starts {
        let w = at.timestamp_millis().div_euclid(period_ms);
        if w * period_ms >= from && (w + 1) * period_ms <= to {
            *windows.entry((w, key)).or_default() += 1;
        }
    }
    let mut out: Vec<String> =
        windows
            .into_iter()
            .filter(|(_, used)| *used > n)
            .map(|((w, key), used)| {
                let start =
                    DateTime::<Utc>::from_timestamp_millis(w * period_ms).unwrap_or_default();
                format!(
                "queue {queue}: {used} attempts{} started in the window of {period_ms} ms from \
                 {start}, its rate {n}",
                if key.is_empty() { String::new() } else { format!(" of key {key}") }
            )
            })
            .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rates_a_history_sets_are_read() {
        assert_eq!(rate("4/s"), Some((4, 1_000)));
        assert_eq!(rate("3/500ms"), Some((3, 500)));
        assert_eq!(rate("20/10s"), Some((20, 10_000)));
        assert_eq!(rate("5/min"), None);
    }
}
