//! What the dashboard's job forms and filters say, read into the engine's types: a listing's
//! filter (the API's fields read by the same code), a new job, a bulk change, an edit (the fields
//! changed from what the page showed), and the engine's ranges the forms show.

use chrono::{DateTime, Utc};
use kickoff_app::console::jobs::{BulkChangeInput, EditJobInput, JobLimits, JobQuery, NewJobInput};
use kickoff_app::console::Refusal;
use kickoff_app::local_time::instant_ms;
use serde_json::Value;

use super::from_ms;
use crate::engine::job::{check_max_attempts, check_priority};
use crate::engine::job_edit::{parse_duration_ms, JobEdit};
use crate::engine::job_filter::{split_tags, FilterFields};
use crate::engine::{
    BulkAction, BulkChange, Job, JobFilter, JobId, LatePolicy, NewJob, OnConflict, Schedule,
};

/// The engine's filter for a listing's query; bad input is the operator's to fix. The fields the
/// API has too are read by the same code ([`FilterFields`]).
pub(super) fn job_filter(q: &JobQuery) -> Result<JobFilter, String> {
    let time = |field: &str,
                v: &Option<String>,
                which: &Option<String>|
     -> Result<Option<DateTime<Utc>>, String> {
        match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => {
                let ms = instant_ms(s, q.zone.as_deref(), which.as_deref())
                    .map_err(|e| format!("{field}: {e}"))?;
                from_ms(field, ms).map(Some)
            }
        }
    };
    let late = match q.late.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(t) => Some(
            t.parse::<f64>()
                .map_err(|_| format!("late: `{t}` is not a number of ms"))?,
        ),
    };
    let fields = FilterFields {
        states: q.state.as_deref(),
        queue: q.queue.as_deref(),
        kind: q.kind.as_deref(),
        args: q.args.as_deref(),
        tags: q.tags.as_deref(),
        error: q.error.as_deref(),
        late_by_ms: late,
    };
    Ok(JobFilter {
        scheduled_from: time("from", &q.from, &q.from_which)?,
        scheduled_to: time("to", &q.to, &q.to_which)?,
        max_id: q.max_id.map(JobId),
        ..fields
            .into_filter()
            .map_err(|e| e.replace("late_by_ms", "late"))?
    })
}

/// The new-job form read as the engine's new job (its creator set by the caller).
pub(super) fn new_job(input: NewJobInput) -> Result<NewJob, String> {
    let number = |field: &str, v: &Option<String>| -> Result<Option<f64>, String> {
        match v.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
            None => Ok(None),
            Some(s) => s
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .map(Some)
                .ok_or_else(|| format!("{field}: `{s}` is not a number")),
        }
    };
    let args: Value = serde_json::from_str(input.args.trim())
        .map_err(|e| format!("args: not valid JSON ({e})"))?;
    let schedule = match input.when.as_str() {
        "" | "now" => Schedule::Now,
        "in" => {
            let minutes = number("in_minutes", &input.in_minutes)?
                .ok_or("in_minutes: say in how many minutes")?;
            let most = (crate::engine::job::MAX_SCHEDULE_AHEAD_DAYS * 24 * 60) as f64;
            if !(0.0..=most).contains(&minutes) {
                return Err(format!(
                    "in_minutes: must be between 0 and {most} (ten years)"
                ));
            }
            Schedule::In(std::time::Duration::from_secs_f64(minutes * 60.0))
        }
        "at" => {
            let at = input
                .at
                .as_deref()
                .filter(|s| !s.trim().is_empty())
                .ok_or("at: give a date and time")?;
            let ms = instant_ms(at, input.zone.as_deref(), input.which.as_deref())
                .map_err(|e| format!("at: {e}"))?;
            Schedule::At(from_ms("at", ms)?)
        }
        other => return Err(format!("when: `{other}` is not now, in or at")),
    };
    let mut job = NewJob::new(input.kind.trim(), args).with_queue(input.queue.trim());
    job.schedule = schedule;
    // A fraction is refused as a value out of range is: the rule names whole numbers.
    let whole = |field: &str, x: f64, check: fn(i64) -> Result<(), String>| {
        let n = if x.fract() == 0.0 { x as i64 } else { i64::MAX };
        check(n).map(|()| n).map_err(|m| format!("{field}: {m}"))
    };
    if let Some(p) = number("priority", &input.priority)? {
        job = job.with_priority(whole("priority", p, check_priority)? as i16);
    }
    if let Some(m) = number("max_attempts", &input.max_attempts)? {
        job = job.with_max_attempts(whole("max_attempts", m, check_max_attempts)? as i32);
    }
    if let Some(key) = input
        .unique_key
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
    {
        job = job.with_unique_key(key, OnConflict::Keep);
    }
    if let Some(policy) =
        LatePolicy::from_form(input.late_after_secs.as_deref(), input.late_then.as_deref())?
    {
        job = job.with_late_policy(policy);
    }
    Ok(job)
}

/// The change a bulk confirmation asks for: an action, a move in time or an edit.
pub(super) fn bulk_change(action: &str, input: &BulkChangeInput) -> Result<BulkChange, Refusal> {
    let text = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
    };
    let number = |field: &str, v: &Option<String>| -> Result<Option<i64>, Refusal> {
        text(v)
            .map(|t| {
                t.parse::<i64>()
                    .map_err(|_| Refusal::invalid(format!("{field}: `{t}` is not a whole number")))
            })
            .transpose()
    };
    match action {
        "shift" => {
            let by = text(&input.by).ok_or_else(|| Refusal::invalid("by: how far to move them"))?;
            let by_ms = parse_duration_ms(&by).map_err(|e| Refusal::invalid(format!("by: {e}")))?;
            // Its range is the operation's (`operations::shift`).
            Ok(BulkChange::Shift { by_ms })
        }
        "edit" => {
            let edit = JobEdit {
                priority: number("priority", &input.priority)?
                    .map(|p| i16::try_from(p).unwrap_or(i16::MAX)),
                queue: text(&input.queue),
                max_attempts: number("max_attempts", &input.max_attempts)?
                    .map(|m| i32::try_from(m).unwrap_or(i32::MAX)),
                tags: text(&input.tags).map(|t| split_tags(&t)),
                ..JobEdit::default()
            };
            edit.check()
                .map_err(|e| Refusal::invalid(format!("{}: {}", e.field, e.message)))?;
            Ok(BulkChange::Edit(edit))
        }
        other => other
            .parse::<BulkAction>()
            .map(BulkChange::Action)
            .map_err(Refusal::invalid),
    }
}

/// The engine's ranges of a job's numbers, for the forms.
pub(super) fn job_limits() -> JobLimits {
    use crate::engine::job::{MAX_ATTEMPTS_MAX, MAX_ATTEMPTS_MIN, PRIORITY_MAX, PRIORITY_MIN};
    JobLimits {
        priority_min: PRIORITY_MIN,
        priority_max: PRIORITY_MAX,
        max_attempts_min: MAX_ATTEMPTS_MIN,
        max_attempts_max: MAX_ATTEMPTS_MAX,
    }
}

/// The edit a job page's form asks for: the fields it changed from `shown` (the job as the page
/// showed it).
pub(super) fn edit_of(shown: &Job, input: &EditJobInput) -> Result<JobEdit, Refusal> {
    let mut edit = JobEdit::default();
    if input.args.trim() != input.args_shown.trim() {
        let args: Value = serde_json::from_str(&input.args)
            .map_err(|e| Refusal::invalid(format!("args: not JSON ({e})")))?;
        if args != shown.args {
            edit.args = Some(args);
        }
    }
    let number = |field: &str, t: &str| -> Result<i64, Refusal> {
        t.trim()
            .parse::<i64>()
            .map_err(|_| Refusal::invalid(format!("{field}: `{t}` is not a whole number")))
    };
    let priority = number("priority", &input.priority)?;
    if priority != i64::from(shown.priority) {
        edit.priority = Some(i16::try_from(priority).unwrap_or(i16::MAX));
    }
    let max_attempts = number("max_attempts", &input.max_attempts)?;
    if max_attempts != i64::from(shown.max_attempts) {
        edit.max_attempts = Some(i32::try_from(max_attempts).unwrap_or(i32::MAX));
    }
    if input.queue.trim() != shown.queue {
        edit.queue = Some(input.queue.trim().to_string());
    }
    // Compared as the page showed them first: a tag holding a comma survives an edit of
    // something else.
    if input.tags.trim() != shown.tags.join(", ") {
        let tags = split_tags(&input.tags);
        if tags != shown.tags {
            edit.tags = Some(tags);
        }
    }
    if edit == JobEdit::default() {
        return Err(Refusal::invalid("nothing changed"));
    }
    Ok(edit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_filter_refuses_unknown_states_and_bad_times() {
        let q = |state: &str, from: &str| JobQuery {
            state: Some(state.into()),
            from: Some(from.into()),
            ..JobQuery::default()
        };
        assert!(job_filter(&q("retryable,discarded", "")).is_ok());
        assert!(job_filter(&q("exploded", "")).is_err());
        assert!(job_filter(&q("", "yesterday")).is_err());
        // Each bound gets its zone's offset on its own date, across a daylight-saving switch.
        let f = job_filter(&JobQuery {
            from: Some("2027-01-10T19:00".into()),
            to: Some("2027-07-10T19:00".into()),
            zone: Some("America/New_York".into()),
            ..JobQuery::default()
        })
        .unwrap();
        assert_eq!(
            f.scheduled_from.unwrap().to_rfc3339(),
            "2027-01-11T00:00:00+00:00"
        );
        assert_eq!(
            f.scheduled_to.unwrap().to_rfc3339(),
            "2027-07-10T23:00:00+00:00"
        );
        // A repeated hour needs its bound's own answer.
        let repeated = |to_which: Option<&str>| {
            job_filter(&JobQuery {
                to: Some("2026-11-01T01:30".into()),
                zone: Some("America/New_York".into()),
                to_which: to_which.map(String::from),
                ..JobQuery::default()
            })
        };
        assert!(repeated(None)
            .unwrap_err()
            .starts_with("to: 2026-11-01 01:30 happens twice"));
        assert_eq!(
            repeated(Some("later"))
                .unwrap()
                .scheduled_to
                .unwrap()
                .to_rfc3339(),
            "2026-11-01T06:30:00+00:00"
        );
    }

    #[test]
    fn new_job_input_is_checked() {
        let input = |when: &str| NewJobInput {
            kind: "noop".into(),
            args: "{}".into(),
            queue: "default".into(),
            when: when.into(),
            in_minutes: Some("1.5".into()),
            ..NewJobInput::default()
        };
        assert_eq!(
            new_job(input("in")).unwrap().schedule,
            Schedule::In(std::time::Duration::from_secs(90))
        );
        assert!(new_job(input("later")).is_err());
        assert!(new_job(NewJobInput {
            args: "{oops".into(),
            ..input("now")
        })
        .is_err());
        assert!(new_job(NewJobInput {
            priority: Some("12".into()),
            ..input("now")
        })
        .is_err());
        let late = new_job(NewJobInput {
            late_after_secs: Some("90".into()),
            late_then: Some("skip".into()),
            ..input("now")
        })
        .unwrap();
        assert_eq!(
            late.meta,
            serde_json::json!({"late": {"after_ms": 90_000, "then": "skip"}})
        );
        assert!(new_job(NewJobInput {
            late_then: Some("discard".into()),
            ..input("now")
        })
        .is_err());
    }
}
