//! Limits a queue has across every node, enforced by the database in the claim: a rate (`N` attempts
//! started per period, optionally per partition key) and a global concurrency (at most `N`
//! executing on all nodes together). They live in the queue's row of the `queues` table; the
//! claim of a limited queue is `kickoff_claim_limited` (migration `20261210000001`), where the
//! claims of that queue take turns on the row's lock. Unlimited queues claim as before, without
//! the lock.
//!
//! **Windows.** A rate counts attempts *started* (claimed) in fixed windows aligned to the period
//! by the database clock: `100/s` allows 100 claims from one whole second to the next. Jobs over
//! the limit stay `available`, lose no attempt, and are claimed when a window has room. A limited
//! queue claims nothing ahead of its due jobs' time (the claim-ahead), so a run counts in the
//! window it starts in; the fetch-ahead buffer still serves it (its jobs are claimed, and count).
//!
//! **Partitions.** Each job's key is kept with it (`jobs.rate_key`, migration `20261214000101`):
//! written at insert from its queue's `per`, again when that changes (a trigger on `queues` starts
//! the claims keying the waiting jobs in batches, which pass over executing ones) and whenever
//! the job goes back to waiting: an operator's retry, a failure to be retried, a snooze, a
//! hand-back, a rescue (`store::jobs`), so that a job executing at the change never comes back
//! under its old key. Under `per: host` the key is the host its worker says the call goes
//! to ([`crate::engine::Worker::call_host`], kept in `jobs.call_host`): read once, by the parse
//! the call uses, so that no spelling of a host is a key of its own. A partitioned claim walks
//! the keys that have available jobs (one index probe each, however long a key's backlog), at
//! most [`PARTITION_KEYS`] of them, from where the queue's last claim stopped; each key with room
//! gives its next jobs, and the keys take turns (every key's first job before any key's second).
//! So a job of a key with room starts at the next claim, whatever waits in other keys.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The most keys with available jobs a partitioned claim (and its wait) looks at; with more, the
/// next claim goes on from where this one stopped, so every key gets its turn.
pub const PARTITION_KEYS: i32 = 500;

/// The most available jobs of a queue the dashboard reads (in claim order) to count those its
/// limits hold back.
pub const PARTITION_SCAN: i32 = 5_000;

pub use crate::rate::Rate;

/// What a partitioned rate is counted by: each key gets the whole rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partition {
    /// The job's kind.
    Kind,
    /// The host the job calls, as its worker reads it at insert ([`crate::engine::Worker::call_host`]:
    /// for webhooks, the host of `url` as the call parses it), lower case, without port. Rows
    /// without it (a kind that names none, SQL outside the engine) use the host of their `url`
    /// argument as a regex reads it.
    Host,
    /// A top-level field of the job's args, as text.
    Arg(String),
}

impl FromStr for Partition {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "kind" => Ok(Partition::Kind),
            "host" => Ok(Partition::Host),
            other => {
                let field = other.strip_prefix("args.").ok_or_else(|| {
                    format!("`{other}` is not a partition: use kind, host or args.<field>")
                })?;
                let ok = (1..=64).contains(&field.len())
                    && field
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if !ok {
                    return Err(format!(
                        "`{field}`: an args field is 1 to 64 of A-Z, a-z, 0-9, `_`, `-`"
                    ));
                }
                Ok(Partition::Arg(field.to_string()))
            }
        }
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Partition::Kind => f.write_str("kind"),
            Partition::Host => f.write_str("host"),
            Partition::Arg(field) => write!(f, "args.{field}"),
        }
    }
}

/// The range of a queue's global concurrency (attempts executing on all nodes together): the
/// API's schema, the settings and the dashboard's check all take it from here.
pub const GLOBAL_CONCURRENCY_MIN: i64 = 1;
pub const GLOBAL_CONCURRENCY_MAX: i64 = 100_000;

/// Whether `g` is a global concurrency (see [`GLOBAL_CONCURRENCY_MIN`]).
pub fn check_global(g: i64) -> Result<u32, String> {
    if (GLOBAL_CONCURRENCY_MIN..=GLOBAL_CONCURRENCY_MAX).contains(&g) {
        Ok(g as u32)
    } else {
        Err(format!(
            "a global concurrency is {GLOBAL_CONCURRENCY_MIN} to {GLOBAL_CONCURRENCY_MAX}"
        ))
    }
}

/// A queue's limits across every node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueLimits {
    pub rate: Option<Rate>,
    /// Each key gets the whole rate (needs a rate).
    pub per: Option<Partition>,
    /// At most this many attempts executing on all nodes together.
    pub global: Option<u32>,
}

impl QueueLimits {
    pub fn is_limited(&self) -> bool {
        self.rate.is_some() || self.global.is_some()
    }

    /// In words: `100/s per host, 20 on all nodes`; `None` without limits.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(rate) = &self.rate {
            parts.push(match &self.per {
                Some(per) => format!("{rate} per {}", per.to_string().replace("args.", "")),
                None => rate.to_string(),
            });
        }
        if let Some(g) = self.global {
            parts.push(format!("{g} on all nodes"));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    pub fn check(&self) -> Result<(), String> {
        if let Some(rate) = &self.rate {
            rate.check()?;
        }
        if self.per.is_some() && self.rate.is_none() {
            return Err("a partition (per=) needs a rate (rate=)".into());
        }
        if let Some(g) = self.global {
            check_global(i64::from(g))?;
        }
        Ok(())
    }

    /// Reads one option of `KICKOFF_QUEUES` (`rate=100/s`, `per=host`, `global=20`).
    pub fn set_option(&mut self, option: &str) -> Result<(), String> {
        let (key, value) = option
            .split_once('=')
            .ok_or_else(|| format!("`{option}` is not key=value"))?;
        match key.trim() {
            "rate" => self.rate = Some(value.parse()?),
            "per" => self.per = Some(value.parse()?),
            "global" => {
                self.global =
                    Some(value.trim().parse().map_err(|_| {
                        format!("`{value}`: a global concurrency is a whole number")
                    })?)
            }
            other => {
                return Err(format!(
                    "`{other}` is not a queue option: use rate=, per= or global="
                ))
            }
        }
        Ok(())
    }
}

/// The limits of a queue's row, as the API and the dashboard show them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitsView {
    /// `N/period`, e.g. `100/s` (null: no rate).
    pub rate: Option<String>,
    /// `kind`, `host` or `args.<field>` (null: one count for the queue).
    pub per: Option<String>,
    /// Attempts executing on all nodes together (null: only each node's concurrency).
    pub global_concurrency: Option<i32>,
    /// Who set them: `config` (a node's KICKOFF_QUEUES) or `operator`.
    pub set_by: String,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rates_parse_and_print_in_their_shortest_unit() {
        for (text, n, ms, shown) in [
            ("100/s", 100, 1_000, "100/s"),
            ("5000/min", 5000, 60_000, "5000/min"),
            ("10/h", 10, 3_600_000, "10/h"),
            ("1/day", 1, 86_400_000, "1/day"),
            ("50/500ms", 50, 500, "50/500ms"),
            ("20/10s", 20, 10_000, "20/10s"),
            (" 7 / 60s ", 7, 60_000, "7/min"),
        ] {
            let rate: Rate = text.parse().unwrap();
            assert_eq!((rate.n, rate.period.as_millis() as u64), (n, ms), "{text}");
            assert_eq!(rate.to_string(), shown);
        }
        for bad in [
            "100",
            "x/s",
            "100/",
            "100/fortnight",
            "0/s",
            "10/2day",
            "-1/s",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn options_build_limits_and_refuse_what_cannot_work() {
        let mut l = QueueLimits::default();
        for o in ["rate=100/s", "per=host", "global=20"] {
            l.set_option(o).unwrap();
        }
        assert_eq!(l.rate, Some(Rate::new(100, Duration::from_secs(1))));
        assert_eq!(l.per, Some(Partition::Host));
        assert_eq!(l.global, Some(20));
        l.check().unwrap();
        assert_eq!(
            l.describe().as_deref(),
            Some("100/s per host, 20 on all nodes")
        );
        assert_eq!(QueueLimits::default().describe(), None);
        assert_eq!(
            "args.game_id".parse::<Partition>(),
            Ok(Partition::Arg("game_id".into()))
        );
        assert!("args.".parse::<Partition>().is_err());
        assert!("args.a b".parse::<Partition>().is_err());
        assert!("tenant".parse::<Partition>().is_err());
        let per_alone = QueueLimits {
            per: Some(Partition::Kind),
            ..QueueLimits::default()
        };
        assert!(per_alone.check().is_err());
        assert!(QueueLimits::default().set_option("burst=3").is_err());
        assert!(QueueLimits::default().set_option("global=many").is_err());
    }
}
