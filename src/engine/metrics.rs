//! What a node measures about its own work, for the Prometheus endpoint: attempts by kind and
//! outcome, their durations and their lateness (start minus due time), claims and rescues.
//!
//! Counters live in memory and start at zero with the process, as Prometheus counters do (its
//! `rate()` handles restarts). Numbers about the whole database (jobs by state) are read from the
//! database when scraped, not kept here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the execution-duration buckets: 1 ms to 5 min.
pub const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Upper bounds (seconds) of the lateness buckets: fine below 10 ms, where "on time" lives.
pub const LATENESS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 60.0,
];

/// How an attempt ended, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    Completed,
    /// Failed with a retryable error (retried, or discarded when out of attempts).
    Failed,
    /// Failed with a fatal error: discarded.
    Fatal,
    Cancelled,
    Snoozed,
    /// Lost its job meanwhile (cancelled or rescued): its result was not written.
    Fenced,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Fatal => "fatal",
            Outcome::Cancelled => "cancelled",
            Outcome::Snoozed => "snoozed",
            Outcome::Fenced => "fenced",
        }
    }
}

/// A cumulative histogram with fixed buckets, as Prometheus exposes one.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub bounds: &'static [f64],
    /// Observations at most each bound (not cumulative here; the exposition sums them).
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, seconds: f64) {
        if let Some(i) = self.bounds.iter().position(|b| seconds <= *b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// `(upper bound, observations at most it)` for each bucket, cumulative, ending with `+Inf`.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut total = 0;
        let mut out: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(b, c)| {
                total += c;
                (*b, total)
            })
            .collect();
        out.push((f64::INFINITY, self.count));
        out
    }
}

/// The node's measurements (shared by its services; cheap to update).
#[derive(Debug, Default)]
pub struct Metrics {
    leader: AtomicBool,
    claimed: AtomicU64,
    rescued: AtomicU64,
    attempts: Mutex<Attempts>,
}

#[derive(Debug, Default)]
struct Attempts {
    /// Attempts by (kind, outcome).
    outcomes: BTreeMap<(String, Outcome), u64>,
    /// Execution time by kind.
    duration: BTreeMap<String, Histogram>,
    /// Start minus due time by queue.
    lateness: BTreeMap<String, Histogram>,
    /// Claims held back by a limit across every node (a rate, a global concurrency), by queue.
    limited: BTreeMap<String, u64>,
}

/// A copy of the measurements at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    /// This node holds the leader lease.
    pub leader: bool,
    pub claimed: u64,
    pub rescued: u64,
    pub outcomes: Vec<((String, Outcome), u64)>,
    pub duration: Vec<(String, Histogram)>,
    pub lateness: Vec<(String, Histogram)>,
    pub limited: Vec<(String, u64)>,
}

impl Metrics {
    pub fn new() -> Self {
        Metrics::default()
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
    }

    pub fn claimed(&self, n: usize) {
        self.claimed.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn rescued(&self, n: usize) {
        self.rescued.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// An attempt of a job of `queue` started `late` after its due time (zero when early).
    pub fn started(&self, queue: &str, late: Duration) {
        if let Ok(mut a) = self.attempts.lock() {
            a.lateness
                .entry(queue.to_string())
                .or_insert_with(|| Histogram::new(LATENESS_BUCKETS))
                .observe(late.as_secs_f64());
        }
    }

    /// A claim of `queue` left available jobs behind because a limit held them back.
    pub fn limited(&self, queue: &str) {
        if let Ok(mut a) = self.attempts.lock() {
            *a.limited.entry(queue.to_string()).or_default() += 1;
        }
    }

    /// An attempt of `kind` ended with `outcome` after running `took`.
    pub fn finished(&self, kind: &str, outcome: Outcome, took: Duration) {
        if let Ok(mut a) = self.attempts.lock() {
            *a.outcomes.entry((kind.to_string(), outcome)).or_default() += 1;
            a.duration
                .entry(kind.to_string())
                .or_insert_with(|| Histogram::new(DURATION_BUCKETS))
                .observe(took.as_secs_f64());
        }
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let a = self.attempts.lock().map(|a| {
            (
                a.outcomes.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                a.duration
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                a.lateness
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                a.limited.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            )
        });
        let (outcomes, duration, lateness, limited) = a.unwrap_or_default();
        MetricsSnapshot {
            leader: self.leader.load(Ordering::Relaxed),
            claimed: self.claimed.load(Ordering::Relaxed),
            rescued: self.rescued.load(Ordering::Relaxed),
            outcomes,
            duration,
            lateness,
            limited,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_into_cumulative_buckets() {
        let mut h = Histogram::new(&[0.001, 0.01, 0.1]);
        for s in [0.0005, 0.001, 0.005, 0.05, 3.0] {
            h.observe(s);
        }
        assert_eq!(
            h.cumulative(),
            vec![(0.001, 2), (0.01, 3), (0.1, 4), (f64::INFINITY, 5)]
        );
        assert_eq!(h.count, 5);
        assert!((h.sum - 3.0565).abs() < 1e-9);
    }

    #[test]
    fn attempts_are_counted_by_kind_and_outcome() {
        let m = Metrics::new();
        m.finished("noop", Outcome::Completed, Duration::from_millis(3));
        m.finished("noop", Outcome::Completed, Duration::from_millis(4));
        m.finished("webhook", Outcome::Failed, Duration::from_millis(40));
        m.started("default", Duration::from_micros(800));
        m.claimed(3);
        let s = m.snapshot();
        assert_eq!(
            s.outcomes,
            vec![
                (("noop".to_string(), Outcome::Completed), 2),
                (("webhook".to_string(), Outcome::Failed), 1)
            ]
        );
        assert_eq!(s.duration[0].1.count, 2);
        assert_eq!(s.lateness[0].0, "default");
        assert_eq!(s.lateness[0].1.cumulative()[1], (0.001, 1));
        assert_eq!(s.claimed, 3);
    }
}
