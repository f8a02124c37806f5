//! A rate, `N` per period (`100/s`, `5000/min`, `20/10s`): the queues' limits across every node
//! (`engine::limits`) and the request limits of the accounts (`accounts::request_limit`) are
//! written this way. Beside the floors: any of them may use it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// `n` attempts started per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub n: u32,
    pub period: Duration,
}

impl Rate {
    pub fn new(n: u32, period: Duration) -> Self {
        Rate { n, period }
    }

    pub fn period_ms(&self) -> i32 {
        self.period.as_millis().min(i32::MAX as u128) as i32
    }

    pub fn check(&self) -> Result<(), String> {
        if !(1..=1_000_000).contains(&self.n) {
            return Err("a rate allows 1 to 1000000 per period".into());
        }
        if self.period < Duration::from_millis(1) || self.period > Duration::from_secs(86_400) {
            return Err("a rate's period is 1 ms to 1 day".into());
        }
        Ok(())
    }
}

/// Parses `100/s`, `5000/min`, `10/h`, `1/day`, `50/500ms`, `20/10s`.
impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{s}` is not a rate: write N/period, e.g. 100/s, 5000/min, 20/10s");
        let (n, period) = s.trim().split_once('/').ok_or_else(bad)?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        let period = period.trim();
        let digits = period
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(period.len());
        let (count, unit) = period.split_at(digits);
        let count: u64 = if count.is_empty() {
            1
        } else {
            count.parse().map_err(|_| bad())?
        };
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" | "sec" | "second" => 1_000,
            "m" | "min" | "minute" => 60_000,
            "h" | "hour" => 3_600_000,
            "d" | "day" => 86_400_000,
            _ => return Err(bad()),
        };
        let rate = Rate::new(n, Duration::from_millis(count.saturating_mul(unit_ms)));
        rate.check()?;
        Ok(rate)
    }
}

/// Written in the shortest unit that divides the period: `100/s`, `5000/min`, `20/10s`.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.period.as_millis() as u64;
        let (count, unit) = [
            (86_400_000, "day"),
            (3_600_000, "h"),
            (60_000, "min"),
            (1_000, "s"),
            (1, "ms"),
        ]
        .into_iter()
        .find(|(u, _)| ms.is_multiple_of(*u))
        .map(|(u, name)| (ms / u, name))
        .unwrap_or((ms, "ms"));
        if count == 1 {
            write!(f, "{}/{unit}", self.n)
        } else {
            write!(f, "{}/{count}{unit}", self.n)
        }
    }
}
