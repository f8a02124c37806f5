//! A job's policy for an attempt that would start too late: run it anyway (the default), skip it
//! (the job is cancelled, saying how late it was) or discard it. A reminder that is pointless
//! after kick-off says "skip after 60 s"; a run an operator must hear about says "discard", which
//! the job-discarded alert rule watches.
//!
//! The policy is kept in the job's `meta` under [`META_LATE`] (`{"after_ms": 60000, "then":
//! "skip"}`), so a schedule's template carries it to every run, and it is checked at insert like
//! the rest of a job. The executor applies it at the start itself, by the database's clock, before
//! the handler runs: the skipped attempt is recorded (its lateness, the reason) like any other.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The key of `meta` that holds the policy.
pub const META_LATE: &str = "late";
/// The longest `after_ms`: a day.
pub const MAX_AFTER_MS: u64 = 86_400_000;

/// What happens to an attempt that would start more than `after_ms` late.
#[derive(
    schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum OnLate {
    /// Run it anyway.
    #[default]
    Run,
    /// Cancel the job, saying how late it was.
    Skip,
    /// Discard the job (the job-discarded alert rule sees it).
    Discard,
}

/// A job's late-start policy, as `meta.late` holds it.
#[derive(schemars::JsonSchema, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatePolicy {
    /// How late (ms after the due time, by the database's clock) an attempt may start.
    #[schemars(range(min = 0, max = 86400000))]
    pub after_ms: u64,
    /// What happens to an attempt that would start later.
    pub then: OnLate,
}

/// Why a late start ends the attempt before its handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LateEnd {
    Skip(String),
    Discard(String),
}

impl LatePolicy {
    /// The policy `meta` holds, if any, or why it is not one.
    pub fn from_meta(meta: &Value) -> Result<Option<LatePolicy>, String> {
        let Some(v) = meta.get(META_LATE) else {
            return Ok(None);
        };
        let p: LatePolicy = serde_json::from_value(v.clone()).map_err(|e| {
            format!(
                "{META_LATE}: {e}; expected {{\"after_ms\": 0 to {MAX_AFTER_MS}, \"then\": \
                 \"run\", \"skip\" or \"discard\"}}"
            )
        })?;
        if p.after_ms > MAX_AFTER_MS {
            return Err(format!(
                "{META_LATE}.after_ms: at most {MAX_AFTER_MS} (a day)"
            ));
        }
        Ok(Some(p))
    }

    /// What becomes of an attempt that starts `late` after its due time.
    pub fn decide(&self, late: Duration) -> Option<LateEnd> {
        if late <= Duration::from_millis(self.after_ms) {
            return None;
        }
        let why = format!(
            "started {:.1} ms after its due time, past its limit of {} ms",
            late.as_secs_f64() * 1000.0,
            self.after_ms
        );
        match self.then {
            OnLate::Run => None,
            OnLate::Skip => Some(LateEnd::Skip(why)),
            OnLate::Discard => Some(LateEnd::Discard(why)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_policy_is_read_from_meta_and_refused_when_malformed() {
        assert_eq!(LatePolicy::from_meta(&json!({})), Ok(None));
        let p = LatePolicy::from_meta(&json!({"late": {"after_ms": 500, "then": "skip"}}))
            .unwrap()
            .unwrap();
        assert_eq!(p.decide(Duration::from_millis(500)), None);
        assert!(matches!(
            p.decide(Duration::from_millis(501)),
            Some(LateEnd::Skip(m)) if m.contains("past its limit of 500 ms")
        ));
        for bad in [
            json!({"late": 5}),
            json!({"late": {"after_ms": 5}}),
            json!({"late": {"after_ms": -1, "then": "skip"}}),
            json!({"late": {"after_ms": 5, "then": "later"}}),
            json!({"late": {"after_ms": 86_400_001u64, "then": "skip"}}),
            json!({"late": {"after_ms": 5, "then": "skip", "x": 1}}),
        ] {
            assert!(LatePolicy::from_meta(&bad).is_err(), "{bad}");
        }
        let run = LatePolicy::from_meta(&json!({"late": {"after_ms": 0, "then": "run"}}))
            .unwrap()
            .unwrap();
        assert_eq!(run.decide(Duration::from_secs(60)), None);
    }
}
