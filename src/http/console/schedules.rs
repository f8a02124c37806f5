//! Schedules: the list, one schedule with its runs, the form's live preview, create and edit,
//! pause, resume, trigger and delete. Viewers read; operators act; every change is audited.

use std::time::Duration;

use chrono::Utc;
use kickoff_app::console::schedules::{
    LastRunInfo, RulePreview, ScheduleDetail, ScheduleForm, ScheduleRow, SchedulesConsole,
    SchedulesPage, Slot,
};
use kickoff_app::console::Refusal;
use serde_json::Value;

use super::jobs::job_row;
use super::{conn, operator, refused, Act, ServerConsole};
use crate::accounts::Role;
use crate::engine::schedules::rule::{MAX_EVERY, MIN_EVERY};
use crate::engine::schedules::service::MAX_PREVIEW;
use crate::engine::schedules::{
    Missed, Overlap, Rule, ScheduleSpec, ScheduleView, Schedules, SlotPreview,
};
use crate::engine::{LatePolicy, OnLate};

/// How many runs the detail page lists, and how many coming slots.
const RUNS_SHOWN: i64 = 50;
const SLOTS_SHOWN: usize = 5;

fn row_of(v: &ScheduleView) -> ScheduleRow {
    ScheduleRow {
        name: v.name.clone(),
        rule: match (&v.cron, v.every_ms) {
            (Some(c), _) => c.clone(),
            (None, Some(ms)) => format!("every {} s", ms as f64 / 1000.0),
            (None, None) => String::new(),
        },
        rule_text: v.rule_text.clone(),
        time_zone: v.time_zone.clone(),
        kind: v.job.kind.clone(),
        queue: v.job.queue.clone(),
        paused: v.paused,
        overlap: v.overlap.as_str().to_string(),
        missed: v.missed.as_str().to_string(),
        source: v.source.clone(),
        next_ms: v.next_run_at.map(|t| t.timestamp_millis()),
        next_job: v.next_run_id.map(|id| id.0),
        last: v.last_run.as_ref().map(|l| LastRunInfo {
            job_id: l.job_id.0,
            state: l.state.clone(),
            late_ms: l.late_ms,
        }),
        runs_enqueued: v.runs_enqueued,
        runs_skipped: v.runs_skipped,
    }
}

fn slot_of(s: &SlotPreview, zone: chrono_tz::Tz) -> Slot {
    Slot {
        at_ms: s.at.timestamp_millis(),
        in_zone: s
            .at
            .with_timezone(&zone)
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string(),
    }
}

/// The form's rule as a spec's `cron` / `every_ms`.
fn rule_fields(form: &ScheduleForm) -> Result<(Option<String>, Option<i64>), Refusal> {
    match form.rule_type.as_str() {
        "cron" => Ok((Some(form.cron.trim().to_string()), None)),
        "every" => {
            let secs: f64 = form.every_secs.trim().parse().map_err(|_| {
                Refusal::invalid(format!(
                    "every: `{}` is not a number of seconds",
                    form.every_secs.trim()
                ))
            })?;
            let (min, max) = (MIN_EVERY.as_secs_f64(), MAX_EVERY.as_secs_f64());
            if !secs.is_finite() || !(min..=max).contains(&secs) {
                return Err(Refusal::invalid(format!(
                    "every: must be between {min} and {max} seconds"
                )));
            }
            Ok((None, Some((secs * 1000.0).round() as i64)))
        }
        other => Err(Refusal::invalid(format!(
            "`{other}` is not a kind of rule (cron or every)"
        ))),
    }
}

impl ServerConsole {
    fn schedules_service(&self) -> Schedules {
        Schedules::new(self.client.clone())
    }
}

#[async_trait::async_trait]
impl SchedulesConsole for ServerConsole {
    async fn schedules(&self) -> Result<SchedulesPage, Refusal> {
        operator(Role::Viewer)?;
        let views = self.schedules_service().list().await.map_err(refused)?;
        Ok(SchedulesPage {
            now_ms: self.now_ms().await?,
            rows: views.iter().map(row_of).collect(),
        })
    }

    async fn schedule(&self, name: String) -> Result<ScheduleDetail, Refusal> {
        let op = operator(Role::Viewer)?;
        let sight = op.sight(self.client.workers());
        let s = self.schedules_service();
        let runs = s.runs(&name, None, RUNS_SHOWN).await.map_err(refused)?;
        let now = self.client.db_now().await.map_err(refused)?;
        let (view, next) = s
            .upcoming(&name, SLOTS_SHOWN, Some(now))
            .await
            .map_err(refused)?;
        let view = sight.schedule(view);
        let zone =
            crate::engine::schedules::rule::zone(&view.time_zone).unwrap_or(chrono_tz::Tz::UTC);
        let next = next.iter().map(|p| slot_of(p, zone)).collect();
        let late = LatePolicy::from_meta(&view.job.meta).ok().flatten();
        let form = ScheduleForm {
            name: view.name.clone(),
            rule_type: if view.cron.is_some() { "cron" } else { "every" }.into(),
            cron: view.cron.clone().unwrap_or_default(),
            every_secs: view
                .every_ms
                .map(|ms| (ms as f64 / 1000.0).to_string())
                .unwrap_or_default(),
            time_zone: view.time_zone.clone(),
            kind: view.job.kind.clone(),
            queue: view.job.queue.clone(),
            args: serde_json::to_string_pretty(&view.job.args).unwrap_or_default(),
            overlap: view.overlap.as_str().into(),
            missed: view.missed.as_str().into(),
            late_after_secs: late
                .map(|p| (p.after_ms as f64 / 1000.0).to_string())
                .unwrap_or_default(),
            late_then: match late.map(|p| p.then) {
                Some(OnLate::Skip) => "skip",
                Some(OnLate::Discard) => "discard",
                _ => "run",
            }
            .into(),
        };
        Ok(ScheduleDetail {
            now_ms: now.timestamp_millis(),
            row: row_of(&view),
            form,
            priority: view.job.priority,
            max_attempts: view.job.max_attempts,
            created_by: view.created_by.clone(),
            version: view.version,
            runs: runs.into_iter().map(|j| job_row(&sight.job(j))).collect(),
            next,
        })
    }

    async fn schedule_kinds(&self) -> Result<Vec<String>, Refusal> {
        operator(Role::Viewer)?;
        let mut kinds: Vec<String> = self
            .client
            .workers()
            .insertable_kinds()
            .into_iter()
            .map(String::from)
            .collect();
        kinds.sort();
        Ok(kinds)
    }

    async fn preview_rule(
        &self,
        rule_type: String,
        cron: String,
        every_secs: String,
        time_zone: String,
    ) -> Result<RulePreview, Refusal> {
        operator(Role::Viewer)?;
        let form = ScheduleForm {
            rule_type,
            cron,
            every_secs,
            ..ScheduleForm::default()
        };
        let (cron, every_ms) = rule_fields(&form)?;
        let zone = crate::engine::schedules::rule::zone(&time_zone).map_err(Refusal::invalid)?;
        let rule = match (cron, every_ms) {
            (Some(c), _) => Rule::cron(&c).map_err(|e| Refusal::invalid(format!("cron: {e}")))?,
            (None, Some(ms)) => Rule::every(Duration::from_millis(ms.max(0) as u64))
                .map_err(|e| Refusal::invalid(format!("every: {e}")))?,
            (None, None) => return Err(Refusal::invalid("no rule")),
        };
        let now = self.client.db_now().await.unwrap_or_else(|_| Utc::now());
        let slots = crate::engine::schedules::service::slots(
            &rule,
            zone,
            None,
            None,
            now,
            SLOTS_SHOWN.min(MAX_PREVIEW),
        );
        Ok(RulePreview {
            rule_text: rule.describe(zone),
            slots: slots.iter().map(|p| slot_of(p, zone)).collect(),
        })
    }

    async fn save_schedule(
        &self,
        original: Option<String>,
        form: ScheduleForm,
    ) -> Result<String, Refusal> {
        let name = original
            .clone()
            .unwrap_or_else(|| form.name.trim().to_string());
        let act = Act {
            action: if original.is_some() {
                "schedule.update".into()
            } else {
                "schedule.create".into()
            },
            target: Some(format!("schedule {name}")),
            filter: None,
        };
        let s = self.schedules_service();
        self.act(
            act,
            |_| None,
            async |work| {
                let op = operator(Role::Operator)?;
                let (cron, every_ms) = rule_fields(&form)?;
                let args: Value = serde_json::from_str(form.args.trim())
                    .map_err(|e| Refusal::invalid(format!("args: not JSON: {e}")))?;
                let overlap = Overlap::parse(&form.overlap)
                    .ok_or_else(|| Refusal::invalid("overlap: allow, skip or cancel_previous"))?;
                let missed = Missed::parse(&form.missed)
                    .ok_or_else(|| Refusal::invalid("missed: skip, run_once or run_all"))?;
                let late =
                    LatePolicy::from_form(Some(&form.late_after_secs), Some(&form.late_then))
                        .map_err(Refusal::invalid)?;
                let conn = conn(work).await?;
                match &original {
                    Some(original) => {
                        let sight = op.sight(self.client.workers());
                        // The form filled from the schedule as the operator saw it: args given
                        // back as shown keep what is stored.
                        let apply = |spec: &mut ScheduleSpec| {
                            spec.job.args = args;
                            spec.cron = cron;
                            spec.every_ms = every_ms;
                            spec.time_zone = form.time_zone.trim().to_string();
                            spec.job.kind = form.kind.trim().to_string();
                            spec.job.queue = form.queue.trim().to_string();
                            spec.overlap = overlap;
                            spec.missed = missed;
                            LatePolicy::put_in_meta(late, &mut spec.job.meta);
                            Ok::<_, crate::http::error::AppError>(())
                        };
                        self.operations()
                            .change_schedule_with(conn, &sight, original, apply)
                            .await
                            .map_err(refused)?;
                        Ok(original.clone())
                    }
                    None => {
                        let mut spec = ScheduleSpec::cron(
                            form.name.trim(),
                            "",
                            crate::engine::schedules::JobTemplate::new(form.kind.trim(), args),
                        );
                        spec.cron = cron;
                        spec.every_ms = every_ms;
                        spec.time_zone = form.time_zone.trim().to_string();
                        spec.job.queue = form.queue.trim().to_string();
                        spec.overlap = overlap;
                        spec.missed = missed;
                        LatePolicy::put_in_meta(late, &mut spec.job.meta);
                        let row = s
                            .create_with(conn, &spec, Some(&op.user.name), "api")
                            .await
                            .map_err(refused)?;
                        Ok(row.name)
                    }
                }
            },
        )
        .await
    }

    async fn schedule_action(&self, name: String, action: String) -> Result<(), Refusal> {
        let act = Act {
            action: format!("schedule.{action}"),
            target: Some(format!("schedule {name}")),
            filter: None,
        };
        let s = self.schedules_service();
        self.act(
            act,
            |_| None,
            async |work| {
                let op = operator(Role::Operator)?;
                let conn = conn(work).await?;
                match action.as_str() {
                    "pause" => s.set_paused_with(conn, &name, true).await.map(drop),
                    "resume" => s.set_paused_with(conn, &name, false).await.map(drop),
                    "trigger" => s
                        .trigger_with(conn, &name, Some(&op.user.name))
                        .await
                        .map(drop),
                    "delete" => s.delete_with(conn, &name).await.map(drop),
                    other => {
                        return Err(Refusal::invalid(format!(
                            "`{other}` is not a schedule action"
                        )))
                    }
                }
                .map_err(refused)
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_s_rule_becomes_a_cron_or_an_interval() {
        let mut form = ScheduleForm {
            rule_type: "every".into(),
            every_secs: "1.5".into(),
            ..ScheduleForm::default()
        };
        assert_eq!(rule_fields(&form).unwrap(), (None, Some(1500)));
        form.every_secs = "0.2".into();
        assert!(rule_fields(&form).is_err());
        form.every_secs = "soon".into();
        assert!(rule_fields(&form).is_err());
        form.rule_type = "cron".into();
        form.cron = " 0 6 * * * ".into();
        assert_eq!(
            rule_fields(&form).unwrap(),
            (Some("0 6 * * *".into()), None)
        );
        form.rule_type = "sometimes".into();
        assert!(rule_fields(&form).is_err());
    }
}
