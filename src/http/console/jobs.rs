//! Jobs: listings and their filters, one job and its actions, the new-job form, bulk actions and
//! the timers page.

use chrono::{DateTime, Utc};
use kickoff_app::console::jobs::{
    AttemptRow, BulkChangeInput, BulkCount, BulkDone, DeliveryRow, EditJobInput, JobChoices,
    JobDetail, JobPage, JobQuery, JobRow, JobsConsole, LogLineRow, NewJobInput, TimersPage,
};
use kickoff_app::console::Refusal;
use serde_json::Value;

use super::job_forms::{bulk_change, edit_of, job_filter, job_limits, new_job};
use super::{conn, entry, from_ms, ms, operator, refused, Act, ServerConsole, LIST_ROWS};
use crate::accounts::Role;
use crate::engine::editing::Edited;
use crate::engine::history::AttemptRecord;
use crate::engine::job_edit::JobEdit;
use crate::engine::sight::SearchRefused;
use crate::engine::JobFilter;
use crate::engine::{BulkChange, BulkReport, Job, JobId, JobState};
use crate::http::api_job_tools::{stream_export, ExportFormat, Viewer};
use crate::http::error::AppError;
use crate::operations::{Selection, ShiftBy};

/// How many upcoming timers the timers page shows.
const TIMER_ROWS: i64 = 200;
/// How many new jobs the "N new" note counts.
const NEWER_CAP: i64 = 100;
/// How long an args preview in a list is.
const ARGS_PREVIEW_CHARS: usize = 80;

/// A search the caller's sight refuses (`Sight::check_search`, `Sight::check_walk`), as the
/// dashboard answers it: beside the filter's field.
fn refused_search(e: SearchRefused) -> Refusal {
    Refusal::invalid(format!("{}: {}", e.field, e.message))
}

/// A job's row in a list, its args as given (pass them through [`crate::engine::sight::Sight`] first).
pub(super) fn job_row(j: &Job) -> JobRow {
    let mut preview = j.args.to_string();
    if preview.chars().count() > ARGS_PREVIEW_CHARS {
        preview = preview.chars().take(ARGS_PREVIEW_CHARS).collect::<String>() + "…";
    }
    JobRow {
        id: j.id.0,
        kind: j.kind.clone(),
        queue: j.queue.clone(),
        state: j.state.as_str().to_string(),
        priority: j.priority,
        attempt: j.attempt,
        max_attempts: j.max_attempts,
        scheduled_ms: ms(j.scheduled_at),
        finalized_ms: j.finalized_at.map(ms),
        last_error: j.errors.last().map(|e| e.message.clone()),
        args_preview: preview,
    }
}

/// The timeline of a job's attempts: the records of those that ended, then the one running. A
/// job whose attempts ended before records were kept shows its recorded failures instead.
fn attempts(j: &Job, records: Vec<AttemptRecord>) -> Vec<AttemptRow> {
    if records.is_empty() {
        return attempts_from_errors(j);
    }
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    // The running attempt's lines so far come last, as a record whose outcome is `running`.
    let (records, so_far): (Vec<_>, Vec<_>) =
        records.into_iter().partition(|r| r.outcome != "running");
    let so_far = so_far.into_iter().next();
    let mut rows: Vec<AttemptRow> = records
        .into_iter()
        .map(|r| AttemptRow {
            attempt: r.attempt,
            started_ms: Some(ms(r.started_at)),
            ended_ms: Some(ms(r.finished_at)),
            node: Some(r.node),
            outcome: r.outcome,
            error: r.error,
            late_ms: Some(r.late_ms),
            duration_ms: Some(r.duration_ms),
            output_json: r.output.as_ref().map(pretty),
            logs: match r.logs {
                Some(Value::Array(lines)) => lines.iter().map(log_line).collect(),
                _ => Vec::new(),
            },
            logs_dropped: r.logs_dropped,
        })
        .collect();
    if j.state == JobState::Executing {
        let (output_json, logs, logs_dropped) = match so_far {
            Some(r) => (
                r.output.as_ref().map(pretty),
                match r.logs {
                    Some(Value::Array(lines)) => lines.iter().map(log_line).collect(),
                    _ => Vec::new(),
                },
                r.logs_dropped,
            ),
            None => (None, Vec::new(), 0),
        };
        rows.push(AttemptRow {
            started_ms: j.attempted_at.map(ms),
            node: j.attempted_by.clone(),
            output_json,
            logs,
            logs_dropped,
            ..bare_attempt(j.attempt, "running")
        });
    }
    rows
}

fn log_line(v: &Value) -> LogLineRow {
    LogLineRow {
        at_ms: v["at"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| ms(t.with_timezone(&Utc))),
        level: v["level"].as_str().unwrap_or("INFO").to_string(),
        message: v["message"].as_str().unwrap_or_default().to_string(),
    }
}

fn bare_attempt(attempt: i32, outcome: &str) -> AttemptRow {
    AttemptRow {
        attempt,
        started_ms: None,
        ended_ms: None,
        node: None,
        outcome: outcome.into(),
        error: None,
        late_ms: None,
        duration_ms: None,
        output_json: None,
        logs: Vec::new(),
        logs_dropped: 0,
    }
}

/// The timeline from the job's row alone: every recorded failure, then the latest attempt's
/// outcome.
fn attempts_from_errors(j: &Job) -> Vec<AttemptRow> {
    let mut rows: Vec<AttemptRow> = j
        .errors
        .iter()
        .map(|e| AttemptRow {
            started_ms: e.started_at.map(ms),
            ended_ms: Some(ms(e.at)),
            node: e.node.clone(),
            error: Some(e.message.clone()),
            ..bare_attempt(e.attempt, "failed")
        })
        .collect();
    let latest_recorded = j.errors.iter().any(|e| e.attempt == j.attempt);
    if j.attempt > 0 && !latest_recorded {
        let outcome = match j.state {
            JobState::Executing => "running",
            JobState::Completed => "completed",
            JobState::Cancelled => "cancelled",
            JobState::Discarded => "discarded",
            // Handed back at a graceful stop, or snoozed by its handler: it runs again.
            _ => "interrupted",
        };
        let ended = match j.state {
            JobState::Executing => None,
            _ => j.finalized_at.map(ms),
        };
        rows.push(AttemptRow {
            started_ms: j.attempted_at.map(ms),
            ended_ms: ended,
            node: j.attempted_by.clone(),
            ..bare_attempt(j.attempt, outcome)
        });
    }
    rows.sort_by_key(|r| (r.attempt, r.ended_ms));
    rows
}

#[async_trait::async_trait]
impl JobsConsole for ServerConsole {
    async fn jobs(&self, query: JobQuery) -> Result<JobPage, Refusal> {
        let op = operator(Role::Viewer)?;
        let sight = op.sight(self.client.workers());
        let filter = job_filter(&query)?;
        sight.check_search(&filter).map_err(refused_search)?;
        let now_ms = self.now_ms().await?;
        let reader = &self.reader.client;
        let (rows, next_before) = crate::http::api_jobs::page_as_seen(
            reader,
            &sight,
            &filter,
            query.before.map(JobId),
            LIST_ROWS,
        )
        .await
        .map_err(refused)?;
        let newer = match (query.max_id, query.before) {
            (Some(max_id), None) => {
                let head = JobFilter {
                    max_id: None,
                    ..filter.clone()
                };
                let head = reader.list(&head, None, NEWER_CAP).await.map_err(refused)?;
                sight
                    .jobs_matching(head, &filter)
                    .iter()
                    .filter(|j| j.id.0 > max_id)
                    .count() as i64
            }
            _ => 0,
        };
        Ok(JobPage {
            replica_lag_ms: self.reader.lag_past_bound().await,
            now_ms,
            rows: rows.iter().map(job_row).collect(),
            next_before: next_before.map(|id| id.0),
            newer,
        })
    }

    async fn job(&self, id: i64) -> Result<JobDetail, Refusal> {
        let op = operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let stored = self.client.get(JobId(id)).await.map_err(refused)?;
        let mut records = self.client.attempts(stored.id).await.map_err(refused)?;
        records.extend(self.client.attempt_so_far(&stored).await.map_err(refused)?);
        let records = op.sight(self.client.workers()).attempts(&stored, records);
        let j = op.sight(self.client.workers()).job(stored);
        let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
        Ok(JobDetail {
            now_ms,
            job: job_row(&j),
            args_json: pretty(&j.args),
            meta_json: pretty(&j.meta),
            tags: j.tags.clone(),
            unique_key: j.unique_key.clone(),
            created_by: j.created_by.clone(),
            inserted_ms: ms(j.inserted_at),
            lease_ms: j.lease_expires_at.map(ms),
            attempts: attempts(&j, records),
            schedule: j
                .meta
                .get("schedule")
                .filter(|_| {
                    j.meta
                        .get(crate::engine::schedules::META_SCHEDULE_ID)
                        .is_some()
                })
                .and_then(|s| s.as_str())
                .map(String::from),
            held: self.held(&j).await?,
            deliveries: self
                .deliveries(&j, &op.sight(self.client.workers()))
                .await?,
            limits: job_limits(),
        })
    }

    async fn job_action(&self, id: i64, action: String) -> Result<(), Refusal> {
        let act = Act {
            action: format!("job.{action}"),
            target: Some(format!("job {id}")),
            filter: None,
        };
        self.act(
            act,
            |_| None,
            async |work| {
                let id = JobId(id);
                let client = &self.client;
                let done = match action.as_str() {
                    "cancel" => client
                        .cancel_one_with(conn(work).await?, id)
                        .await
                        .map(drop),
                    "retry" => client.retry_with(conn(work).await?, id).await.map(drop),
                    "run_now" => client.run_now_with(conn(work).await?, id).await.map(drop),
                    "delete" => client.delete_with(conn(work).await?, id).await,
                    other => {
                        return Err(Refusal::invalid(format!("`{other}` is not a job action")))
                    }
                };
                done.map_err(refused)
            },
        )
        .await
    }

    async fn reschedule_job(&self, id: i64, at_ms: i64) -> Result<(), Refusal> {
        let act = Act {
            action: "job.reschedule".to_string(),
            target: Some(format!(
                "job {id} to {}",
                DateTime::from_timestamp_millis(at_ms)
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_default()
            )),
            filter: None,
        };
        self.act(
            act,
            |_| None,
            async |work| {
                let at = from_ms("at", at_ms)?;
                self.client
                    .reschedule_with(conn(work).await?, JobId(id), at)
                    .await
                    .map(drop)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn clone_job(&self, id: i64) -> Result<i64, Refusal> {
        let act = Act {
            action: "job.clone".to_string(),
            target: Some(format!("job {id}")),
            filter: None,
        };
        self.act(
            act,
            |_| None,
            async |work| {
                self.client
                    .clone_job_with(conn(work).await?, JobId(id))
                    .await
                    .map(|j| j.id.0)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn job_choices(&self) -> Result<JobChoices, Refusal> {
        operator(Role::Viewer)?;
        let s = self.client.job_suggestions().await.map_err(refused)?;
        let mut kinds: Vec<String> = self
            .client
            .workers()
            .insertable_kinds()
            .into_iter()
            .map(String::from)
            .collect();
        kinds.sort();
        Ok(JobChoices {
            kinds,
            seen_kinds: s.kinds,
            queues: s.queues,
            tags: s.tags,
            args_keys: s.args_keys,
            limits: Some(job_limits()),
        })
    }

    async fn create_job(&self, input: NewJobInput) -> Result<i64, Refusal> {
        let act = Act {
            action: "job.create".to_string(),
            target: Some(format!("{} in {}", input.kind.trim(), input.queue.trim())),
            filter: None,
        };
        let op = self
            .operator_for(Role::Operator, &act.action, act.target.as_deref())
            .await?;
        let entry = entry(&op, &act.action, act.target.clone(), act.filter.clone());
        let inserted = match new_job(input) {
            Ok(job) => self
                .operations()
                .insert::<AppError>(entry, &job.created_by(op.user.name.clone()))
                .await
                .map_err(refused),
            Err(invalid) => Err(Refusal::from(invalid)),
        };
        match inserted {
            Ok(inserted) => Ok(inserted.job.id.0),
            Err(refusal) => {
                let refused: Result<(), Refusal> = Err(refusal.clone());
                self.record(&op, &act.action, act.target, act.filter, None, &refused)
                    .await;
                Err(refusal)
            }
        }
    }

    async fn bulk_preview(&self, query: JobQuery) -> Result<BulkCount, Refusal> {
        let op = operator(Role::Viewer)?;
        // The newest job now is the snapshot: a former confirmation's is not kept.
        let filter = JobFilter {
            max_id: None,
            ..job_filter(&query)?
        };
        let sight = op.sight(self.client.workers());
        sight.check_walk(&filter).map_err(refused_search)?;
        let c = self.operations().confirm(&sight, &filter).await?;
        Ok(BulkCount {
            count: c.count,
            capped: c.capped,
            max_id: c.max_id.map(|id| id.0),
        })
    }

    async fn bulk(
        &self,
        action: String,
        ids: Vec<i64>,
        query: JobQuery,
        input: BulkChangeInput,
    ) -> Result<BulkDone, Refusal> {
        let change = bulk_change(&action, &input);
        let mut recorded = ids
            .is_empty()
            .then(|| serde_json::to_value(&query).unwrap_or_default());
        if matches!(change, Ok(BulkChange::Shift { .. } | BulkChange::Edit(_))) {
            let shown = serde_json::to_value(&input).unwrap_or_default();
            let record = recorded.get_or_insert_with(|| serde_json::json!({}));
            record["change"] = shown;
        }
        let act = Act {
            action: format!("jobs.bulk_{action}"),
            target: (!ids.is_empty()).then(|| {
                format!(
                    "jobs {}",
                    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
                )
            }),
            filter: recorded,
        };
        let op = self
            .operator_for(Role::Operator, &act.action, act.target.as_deref())
            .await?;
        let selection = match (change, ids.is_empty()) {
            (Err(refusal), _) => Err(refusal),
            (Ok(change), false) => {
                Ok((change, Selection::Ids(ids.into_iter().map(JobId).collect())))
            }
            (Ok(change), true) => job_filter(&query)
                .map_err(Refusal::from)
                .and_then(|filter| match filter.max_id {
                    Some(_) => Ok((change, Selection::Filter(filter))),
                    None => Err(Refusal::invalid(
                        "confirm the count first: the action needs its snapshot",
                    )),
                }),
        };
        let (change, selection) = match selection {
            Ok(planned) => planned,
            Err(refusal) => {
                let refused: Result<(), Refusal> = Err(refusal.clone());
                self.record(&op, &act.action, act.target, act.filter, None, &refused)
                    .await;
                return Err(refusal);
            }
        };
        // The operation records every outcome, a refusal's included.
        let entry = entry(&op, &act.action, act.target, act.filter);
        let sight = op.sight(self.client.workers());
        let ops = self.operations();
        let why = |e: &AppError| e.to_string();
        let report = match (change, &selection) {
            (BulkChange::Shift { by_ms }, _) => {
                let by = ShiftBy::Ms(by_ms);
                ops.shift(&sight, entry, &selection, by, input.game.as_deref(), why)
                    .await
                    .map(|shifted| shifted.jobs)
            }
            (change, Selection::Filter(filter)) => {
                ops.bulk_filter(&sight, entry, change, filter, why).await
            }
            (change, Selection::Ids(ids)) => ops.bulk_ids(entry, change, ids, why).await,
        };
        done(action, report.map_err(refused)?)
    }

    async fn edit_job(&self, id: i64, input: EditJobInput) -> Result<(), Refusal> {
        let act = Act {
            action: "job.edit".to_string(),
            target: Some(format!("job {id}")),
            filter: None,
        };
        let op = self
            .operator_for(Role::Operator, &act.action, act.target.as_deref())
            .await?;
        let entry = entry(&op, &act.action, act.target.clone(), None);
        let sight = op.sight(self.client.workers());
        let result = self
            .auditor
            .run_noting(
                entry,
                |e: &(JobEdit, Edited), entry| {
                    entry.filter = Some(crate::http::api_job_tools::edit_record(
                        self.client.workers(),
                        &e.0,
                        &e.1,
                    ))
                },
                async |work| {
                    let conn = conn(work).await?;
                    self.client
                        .edit_as_with(conn, JobId(id), &sight, |seen| edit_of(seen, &input))
                        .await
                },
            )
            .await;
        if let Err(refusal) = &result {
            let refused: Result<(), Refusal> = Err(refusal.clone());
            self.record(&op, &act.action, act.target, None, None, &refused)
                .await;
        }
        result.map(drop)
    }

    async fn timers(&self) -> Result<TimersPage, Refusal> {
        let op = operator(Role::Viewer)?;
        let sight = op.sight(self.client.workers());
        let (jobs, now) = self.client.timers(TIMER_ROWS).await.map_err(refused)?;
        Ok(TimersPage {
            now_ms: ms(now),
            rows: jobs.into_iter().map(|j| job_row(&sight.job(j))).collect(),
        })
    }
}

/// A bulk confirmation's result; an edit that no matching job could take is refused with the
/// first job's reason.
fn done(action: String, report: BulkReport) -> Result<BulkDone, Refusal> {
    if report.changed == 0 && report.refused > 0 {
        return Err(Refusal::invalid(report.refusal.unwrap_or_default()));
    }
    Ok(BulkDone {
        action,
        changed: report.changed,
        skipped: report.skipped + report.refused,
    })
}

impl ServerConsole {
    /// What holds a waiting job back besides its time: its kind paused, its queue paused, or its
    /// queue's limits across every node (which may or may not be full now).
    /// A webhook job's delivery record, as `sight` sees it.
    async fn deliveries(
        &self,
        j: &Job,
        sight: &crate::engine::sight::Sight<'_>,
    ) -> Result<Vec<DeliveryRow>, Refusal> {
        if j.kind != crate::workers::webhook::KIND {
            return Ok(Vec::new());
        }
        let rows = self
            .endpoints
            .deliveries_of_job(j.id.0)
            .await
            .map_err(refused)?;
        Ok(
            crate::webhooks::deliveries::DeliveryRow::all_as_seen_by(rows, sight)
                .into_iter()
                .map(delivery_row)
                .collect(),
        )
    }

    async fn held(&self, j: &Job) -> Result<Option<String>, Refusal> {
        if !matches!(
            j.state,
            JobState::Available | JobState::Scheduled | JobState::Retryable
        ) {
            return Ok(None);
        }
        let paused = self.client.paused_kinds().await.map_err(refused)?;
        if let Some(p) = paused.iter().find(|p| p.kind == j.kind) {
            return Ok(Some(format!(
                "its kind {} is paused on every node (since {} UTC)",
                p.kind,
                p.paused_at.format("%Y-%m-%d %H:%M:%S")
            )));
        }
        let Some(q) = self.client.queue(&j.queue).await.map_err(refused)? else {
            return Ok(None);
        };
        if q.paused {
            return Ok(Some(format!("its queue {} is paused", q.name)));
        }
        let limits = q.limits();
        let Some(described) = limits.describe() else {
            return Ok(None);
        };
        let general = format!(
            "its queue {} has limits across every node ({described})",
            q.name
        );
        // Only a job that could start now is held by them; a scheduled one waits for its time.
        if j.state != JobState::Available {
            return Ok(Some(format!("{general}: it starts when they leave room")));
        }
        let room = self
            .client
            .queue_limit_room(&q.name, j)
            .await
            .map_err(refused)?;
        let Some(room) = room else {
            return Ok(None);
        };
        if let (Some(rate), Some(ends)) = (limits.rate, room.window_ends_in) {
            if room.used >= rate.n as i64 {
                let whose = match &limits.per {
                    Some(per) => format!(" for its {per} `{}`", room.key),
                    None => String::new(),
                };
                return Ok(Some(format!(
                    "{general}: this window's rate is used up{whose} ({} of {} started); it \
                     waits for the next window, in {}",
                    room.used,
                    rate.n,
                    super::queues::seconds_in_words(ends)
                )));
            }
        }
        if let Some(global) = limits.global {
            if room.executing >= global as i64 {
                return Ok(Some(format!(
                    "{general}: {} executing on all nodes reach its global concurrency; it \
                     starts when one ends",
                    room.executing
                )));
            }
        }
        Ok(Some(format!(
            "{general}: they leave room now, so it starts at the next claim"
        )))
    }
}

pub(super) fn delivery_row(d: crate::webhooks::deliveries::DeliveryRow) -> DeliveryRow {
    DeliveryRow {
        id: d.id,
        job_id: d.job_id,
        attempt: d.attempt,
        started_ms: ms(d.started_at),
        late_ms: d.late_ms,
        duration_ms: d.duration_ms,
        address: d.address,
        status: d.status,
        headers: d
            .response_headers
            .map(|h| h.0.into_iter().collect())
            .unwrap_or_default(),
        body: d.response_body,
        error: d.error,
    }
}

/// The export's options beside the list's filters in the address.
#[derive(Debug, serde::Deserialize)]
pub struct ExportOptions {
    format: Option<ExportFormat>,
    max_rows: Option<i64>,
}

/// `GET /jobs/export?<the list's filters>&format=csv|jsonl`: the list's "Export" links, for the
/// signed-in operator (the API's export with the session instead of a token, and the list's own
/// filter form: wall times in the zone it names).
pub async fn export(
    axum::extract::State(state): axum::extract::State<crate::http::state::AppState>,
    axum::Extension(op): axum::Extension<crate::http::session::Operator>,
    axum::extract::Query(query): axum::extract::Query<JobQuery>,
    axum::extract::Query(options): axum::extract::Query<ExportOptions>,
) -> Result<axum::response::Response, AppError> {
    let filter = job_filter(&query).map_err(AppError::invalid)?;
    let sight = op.sight(state.client.workers());
    sight
        .check_search(&filter)
        .map_err(|e| AppError::invalid(refused_search(e).message))?;
    let client = &state.reader.client;
    let viewer = Viewer::of(&sight);
    let format = options.format.unwrap_or_default();
    stream_export(client, viewer, filter, format, options.max_rows).await
}
