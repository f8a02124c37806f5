//! Editing waiting jobs and moving them in time: what an edit may change, how it merges into a
//! job, and the checks it goes through (the kind's worker checks the edited job as it checks an
//! insert).
//!
//! A job may be edited or moved while it waits (`scheduled`, `available`, `retryable`): never
//! while it runs or once it ended, and never a job that belongs to something else (a question's
//! lock job, `meta.owner`), which its owner moves.

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::job::{Job, NewJob, Schedule, MAX_SCHEDULE_AHEAD_DAYS, MAX_SCHEDULE_PAST_HOURS};

/// Why an edit cannot be made: the field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq)]
pub struct EditRefused {
    pub field: &'static str,
    pub message: String,
    /// The job as it is refuses it (its attempts made), not the edit itself.
    pub by_the_job: bool,
}

fn invalid(field: &'static str, message: impl Into<String>) -> EditRefused {
    EditRefused {
        field,
        message: message.into(),
        by_the_job: false,
    }
}

/// What an edit changes; absent fields stay as they are. At least one is given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEdit {
    /// The new args, whole (a JSON object). Not with `args_patch`.
    #[serde(default)]
    pub args: Option<Value>,
    /// A JSON merge patch (RFC 7386) of the args: its keys replace the args' keys of the same
    /// name (objects merge, `null` removes). Not with `args`.
    #[serde(default)]
    pub args_patch: Option<Value>,
    /// Lower is claimed first (0 is the highest).
    pub priority: Option<i16>,
    /// 1 to 64 of a-z, 0-9, `_` and `-`.
    pub queue: Option<String>,
    /// Not below the attempts the job already made.
    pub max_attempts: Option<i32>,
    /// The new tags, all of them (at most 20 of 1 to 100 characters).
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// A JSON merge patch (RFC 7386) of the meta. The keys Kickoff sets (`owner`, a schedule
    /// run's) are refused.
    #[serde(default)]
    pub meta_patch: Option<Value>,
}

impl JobEdit {
    /// Whether it changes the job's args or meta (what may carry a job's secrets).
    pub fn touches_args_or_meta(&self) -> bool {
        self.args.is_some() || self.args_patch.is_some() || self.meta_patch.is_some()
    }

    /// What is wrong with the edit itself, before any job is read.
    pub fn check(&self) -> Result<(), EditRefused> {
        if *self == JobEdit::default() {
            return Err(invalid("edit", "nothing to change"));
        }
        if self.args.is_some() && self.args_patch.is_some() {
            return Err(invalid("args", "give either args or args_patch, not both"));
        }
        if self.args.as_ref().is_some_and(|a| !a.is_object()) {
            return Err(invalid("args", "must be a JSON object"));
        }
        if self.args_patch.as_ref().is_some_and(|a| !a.is_object()) {
            return Err(invalid("args_patch", "must be a JSON object"));
        }
        match &self.meta_patch {
            Some(m) if !m.is_object() => {
                return Err(invalid("meta_patch", "must be a JSON object"));
            }
            Some(m) if m.get("owner").is_some() => {
                return Err(invalid(
                    "meta_patch",
                    "meta.owner is set by Kickoff on the jobs a question owns (reserved)",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// `job` with the edit applied, as a new job to check like an insert (due now: the check of
    /// its time is not the edit's).
    pub fn applied_to(&self, job: &Job) -> Result<NewJob, EditRefused> {
        let mut args = self.args.clone().unwrap_or_else(|| job.args.clone());
        if let Some(patch) = &self.args_patch {
            merge_patch(&mut args, patch);
        }
        let mut meta = job.meta.clone();
        if let Some(patch) = &self.meta_patch {
            merge_patch(&mut meta, patch);
        }
        let max_attempts = self.max_attempts.unwrap_or(job.max_attempts);
        // Its next attempt is number `attempt + 1`: it must still be allowed.
        if self.max_attempts.is_some() && job.attempt > 0 && max_attempts <= job.attempt {
            return Err(EditRefused {
                by_the_job: true,
                ..invalid(
                    "max_attempts",
                    format!(
                        "job {} already made {} attempts: at least {} lets it run again",
                        job.id,
                        job.attempt,
                        job.attempt + 1
                    ),
                )
            });
        }
        Ok(NewJob {
            kind: job.kind.clone(),
            args,
            queue: self.queue.clone().unwrap_or_else(|| job.queue.clone()),
            priority: self.priority.unwrap_or(job.priority),
            max_attempts,
            schedule: Schedule::Now,
            unique_key: job.unique_key.clone(),
            on_conflict: Default::default(),
            tags: self.tags.clone().unwrap_or_else(|| job.tags.clone()),
            meta,
            created_by: job.created_by.clone(),
        })
    }
}

/// RFC 7386: `patch`'s members replace `target`'s (objects merge recursively, `null` removes).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let Value::Object(object) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            object.remove(key);
        } else {
            merge_patch(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// How far a shift moves the matching jobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShiftBy {
    /// By this many ms (negative: earlier).
    Ms(i64),
    /// The earliest matching job to this instant, the others keeping their distance to it.
    To(DateTime<Utc>),
}

/// The longest a shift may move jobs: the furthest a job may be scheduled ahead.
pub const MAX_SHIFT_MS: i64 = MAX_SCHEDULE_AHEAD_DAYS * 86_400_000;

/// The instants a moved job's new due time must stay within (a job moved outside is left where
/// it is and counted as skipped).
pub fn shift_window(now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    (
        now - ChronoDuration::hours(MAX_SCHEDULE_PAST_HOURS),
        now + ChronoDuration::days(MAX_SCHEDULE_AHEAD_DAYS),
    )
}

/// A signed duration as `90s`, `-2h`, `1h30m`, `1500ms`, `3d`: in ms.
pub fn parse_duration_ms(text: &str) -> Result<i64, String> {
    let t = text.trim();
    let (sign, rest) = match t.strip_prefix('-') {
        Some(r) => (-1, r),
        None => (1, t.strip_prefix('+').unwrap_or(t)),
    };
    let mut total: i64 = 0;
    let mut number = String::new();
    let mut chars = rest.chars().peekable();
    let bad = || format!("`{text}` is not a duration like 90s, -2h, 1h30m, 1500ms or 3d");
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match (c, chars.peek()) {
            ('m', Some('s')) => {
                chars.next();
                1
            }
            ('s', _) => 1_000,
            ('m', _) => 60_000,
            ('h', _) => 3_600_000,
            ('d', _) => 86_400_000,
            _ => return Err(bad()),
        };
        let n: i64 = number.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
        number.clear();
    }
    if !number.is_empty() || rest.is_empty() {
        return Err(bad());
    }
    Ok(sign * total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(parse_duration_ms("90s"), Ok(90_000));
        assert_eq!(parse_duration_ms("-2h"), Ok(-7_200_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("1500ms"), Ok(1_500));
        assert_eq!(parse_duration_ms("+3d"), Ok(259_200_000));
        for bad in ["", "2", "h", "2x", "1h30", "99999999999999999999d"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_merge_patch_replaces_merges_and_removes() {
        let mut args = json!({"url": "https://old", "headers": {"a": "1", "b": "2"}, "n": 1});
        merge_patch(
            &mut args,
            &json!({"url": "https://new", "headers": {"b": null, "c": "3"}, "n": null}),
        );
        assert_eq!(
            args,
            json!({"url": "https://new", "headers": {"a": "1", "c": "3"}})
        );
    }

    #[test]
    fn an_edit_is_checked_before_any_job_is_read() {
        assert!(JobEdit::default().check().is_err());
        let both = JobEdit {
            args: Some(json!({})),
            args_patch: Some(json!({})),
            ..JobEdit::default()
        };
        assert!(both.check().is_err());
        let owner = JobEdit {
            meta_patch: Some(json!({"owner": "me"})),
            ..JobEdit::default()
        };
        assert!(owner.check().is_err());
        let fine = JobEdit {
            priority: Some(3),
            ..JobEdit::default()
        };
        assert!(fine.check().is_ok());
    }
}
