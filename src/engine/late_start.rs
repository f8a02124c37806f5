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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatePolicy {
    /// How late (ms after the due time, by the database's clock) an attempt may start.
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

    /// The policy of a form's two fields: `then` is `run`, `skip` or `discard` (empty, or
    /// `run` with no limit: none), `after_secs` how late an attempt may start, in seconds (to
    /// the millisecond).
    pub fn from_form(after_secs: Option<&str>, then: Option<&str>) -> Result<Option<Self>, String> {
        let after = after_secs.map(str::trim).filter(|s| !s.is_empty());
        let then = match then.map(str::trim).unwrap_or_default() {
            "" => OnLate::Run,
            "run" => OnLate::Run,
            "skip" => OnLate::Skip,
            "discard" => OnLate::Discard,
            other => return Err(format!("late: `{other}` is not run, skip or discard")),
        };
        let Some(after) = after else {
            return match then {
                OnLate::Run => Ok(None),
                _ => Err("late: say after how many seconds late it is skipped or discarded".into()),
            };
        };
        let secs: f64 = after
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && *s >= 0.0)
            .ok_or_else(|| format!("late: `{after}` is not a number of seconds from 0"))?;
        let after_ms = (secs * 1000.0).round();
        if after_ms > MAX_AFTER_MS as f64 {
            return Err("late: at most 86,400 seconds (a day)".into());
        }
        Ok((then != OnLate::Run).then_some(LatePolicy {
            after_ms: after_ms as u64,
            then,
        }))
    }

    /// Writes `policy` into `meta` (an object, or made one), or takes a policy out for `None`.
    pub fn put_in_meta(policy: Option<LatePolicy>, meta: &mut Value) {
        if !meta.is_object() {
            *meta = Value::Object(Default::default());
        }
        if let Value::Object(m) = meta {
            match policy.map(serde_json::to_value) {
                Some(Ok(p)) => {
                    m.insert(META_LATE.to_string(), p);
                }
                _ => {
                    m.remove(META_LATE);
                }
            }
        }
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

    #[test]
    fn a_forms_fields_give_a_policy_or_say_what_is_wrong() {
        assert_eq!(LatePolicy::from_form(None, None), Ok(None));
        assert_eq!(LatePolicy::from_form(Some(" "), Some("run")), Ok(None));
        assert_eq!(LatePolicy::from_form(Some("60"), Some("run")), Ok(None));
        assert_eq!(
            LatePolicy::from_form(Some("1.5"), Some("skip")),
            Ok(Some(LatePolicy {
                after_ms: 1500,
                then: OnLate::Skip
            }))
        );
        assert_eq!(
            LatePolicy::from_form(Some("0"), Some("discard")),
            Ok(Some(LatePolicy {
                after_ms: 0,
                then: OnLate::Discard
            }))
        );
        for (after, then) in [
            (None, Some("skip")),
            (Some("-1"), Some("skip")),
            (Some("soon"), Some("skip")),
            (Some("86401"), Some("discard")),
            (Some("5"), Some("later")),
        ] {
            assert!(
                LatePolicy::from_form(after, then).is_err(),
                "{after:?} {then:?}"
            );
        }
    }
}
