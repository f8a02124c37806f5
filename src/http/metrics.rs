//! `GET /metrics`: Prometheus text exposition (format 0.0.4) of this node and of the database's
//! jobs. Behind the API's bearer tokens (a read token is enough): Prometheus sends one with
//! `authorization: { credentials: ... }` in its scrape config.
//!
//! Node metrics (attempts, durations, lateness, claims, rescues, leader, pool, live-stream clients)
//! are this process's; `kickoff_jobs` counts the whole database, so every node reports the same
//! numbers (aggregate it with `max`, not `sum`).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::error::AppError;
use super::state::AppState;
use crate::engine::metrics::Histogram;
use crate::engine::schedules::Schedules;
use crate::engine::JobState;

pub async fn metrics(State(state): State<AppState>) -> Result<Response, AppError> {
    let counts = state.client.counts().await?;
    let snap = state.metrics.snapshot();
    let mut out = String::with_capacity(4096);
    let node = &*state.node_id;

    family(
        &mut out,
        "kickoff_jobs",
        "gauge",
        "Jobs in the database by queue and state.",
    );
    // Every state of every queue that has jobs, zeros included: a series that vanishes when its
    // count reaches 0 would leave graphs and alerts on the last non-zero value.
    let mut by_queue: std::collections::BTreeMap<&str, [i64; 7]> = Default::default();
    for (queue, job_state, n) in &counts {
        let i = JobState::ALL
            .iter()
            .position(|s| s == job_state)
            .unwrap_or(0);
        by_queue.entry(queue.as_str()).or_default()[i] += n;
    }
    for (queue, ns) in &by_queue {
        for (job_state, n) in JobState::ALL.iter().zip(ns) {
            sample(
                &mut out,
                "kickoff_jobs",
                &[("queue", queue), ("state", job_state.as_str())],
                *n as f64,
            );
        }
    }

    family(
        &mut out,
        "kickoff_attempts_total",
        "counter",
        "Attempts finished on this node by kind and outcome.",
    );
    for ((kind, outcome), n) in &snap.outcomes {
        sample(
            &mut out,
            "kickoff_attempts_total",
            &[("kind", kind), ("outcome", outcome.as_str())],
            *n as f64,
        );
    }
    family(
        &mut out,
        "kickoff_attempt_duration_seconds",
        "histogram",
        "Execution time of attempts on this node by kind.",
    );
    for (kind, h) in &snap.duration {
        histogram(
            &mut out,
            "kickoff_attempt_duration_seconds",
            ("kind", kind),
            h,
        );
    }
    family(
        &mut out,
        "kickoff_lateness_seconds",
        "histogram",
        "Start of an attempt minus its due time, by queue.",
    );
    for (queue, h) in &snap.lateness {
        histogram(&mut out, "kickoff_lateness_seconds", ("queue", queue), h);
    }
    family(
        &mut out,
        "kickoff_claimed_total",
        "counter",
        "Jobs claimed by this node.",
    );
    sample(&mut out, "kickoff_claimed_total", &[], snap.claimed as f64);
    family(
        &mut out,
        "kickoff_rescued_total",
        "counter",
        "Jobs whose lease expired, taken back by this node.",
    );
    sample(&mut out, "kickoff_rescued_total", &[], snap.rescued as f64);
    family(
        &mut out,
        "kickoff_leader",
        "gauge",
        "1 while this node holds the leader lease.",
    );
    sample(
        &mut out,
        "kickoff_leader",
        &[("node", node)],
        if snap.leader { 1.0 } else { 0.0 },
    );

    let size = state.pool.pool().size() as f64;
    let idle = state.pool.pool().num_idle() as f64;
    family(
        &mut out,
        "kickoff_db_pool_connections",
        "gauge",
        "Database connections of this node's main pool.",
    );
    sample(
        &mut out,
        "kickoff_db_pool_connections",
        &[("state", "busy")],
        (size - idle).max(0.0),
    );
    sample(
        &mut out,
        "kickoff_db_pool_connections",
        &[("state", "idle")],
        idle,
    );
    family(
        &mut out,
        "kickoff_db_pool_max_connections",
        "gauge",
        "The main pool's limit.",
    );
    sample(
        &mut out,
        "kickoff_db_pool_max_connections",
        &[],
        state.pool.pool().options().get_max_connections() as f64,
    );
    family(
        &mut out,
        "kickoff_sse_clients",
        "gauge",
        "Open live-update streams (dashboard and API).",
    );
    sample(
        &mut out,
        "kickoff_sse_clients",
        &[],
        state.sse_clients.load(Ordering::Relaxed) as f64,
    );

    family(
        &mut out,
        "kickoff_rate_limited_total",
        "counter",
        "Claims of this node that left available jobs behind because a limit across every node (a rate, a global concurrency) held them back.",
    );
    for (queue, n) in &snap.limited {
        sample(
            &mut out,
            "kickoff_rate_limited_total",
            &[("queue", queue)],
            *n as f64,
        );
    }
    family(
        &mut out,
        "kickoff_request_rate_limited_total",
        "counter",
        "Requests this node refused with 429 because a limit shared by every node was reached: an API token's calls (scope token, KICKOFF_API_RATE_LIMIT) or an address's sign-in attempts (scope address, KICKOFF_SIGN_IN_RATE_LIMIT).",
    );
    let (by_token, by_address) = state.accounts.requests_rate_limited();
    for (scope, n) in [("token", by_token), ("address", by_address)] {
        sample(
            &mut out,
            "kickoff_request_rate_limited_total",
            &[("scope", scope)],
            n as f64,
        );
    }
    limit_metrics(&state, &mut out).await?;
    schedule_metrics(&state, &mut out).await?;
    alert_metrics(&state, &mut out).await?;

    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response())
}

/// Each alert rule's firing incidents and the incidents it opened (database-wide, like
/// `kickoff_jobs`: every node reports the same numbers). Both are kept on the rule: a scrape reads
/// the rules, never the incidents.
async fn alert_metrics(state: &AppState, out: &mut String) -> Result<(), AppError> {
    let counts = state.alerts.counts().await?;
    family(
        out,
        "kickoff_alerts_firing",
        "gauge",
        "Alert incidents firing now, by rule and condition.",
    );
    for (rule, condition, firing, _) in &counts {
        sample(
            out,
            "kickoff_alerts_firing",
            &[("rule", rule), ("condition", condition)],
            *firing as f64,
        );
    }
    family(
        out,
        "kickoff_alert_incidents_total",
        "counter",
        "Alert incidents opened since the rule was made, by rule and condition (pruning resolved incidents does not lower it; a deleted rule takes it).",
    );
    for (rule, condition, _, total) in &counts {
        sample(
            out,
            "kickoff_alert_incidents_total",
            &[("rule", rule), ("condition", condition)],
            *total as f64,
        );
    }
    Ok(())
}

/// The current rate window's use of each rate-limited queue, and the paused kinds
/// (database-wide, like `kickoff_jobs`).
async fn limit_metrics(state: &AppState, out: &mut String) -> Result<(), AppError> {
    let windows = state.client.queue_window_use().await?;
    family(
        out,
        "kickoff_queue_rate_window_used",
        "gauge",
        "Attempts started in a rate-limited queue's current window, all nodes and keys together.",
    );
    for (queue, used, _) in &windows {
        sample(
            out,
            "kickoff_queue_rate_window_used",
            &[("queue", queue)],
            *used as f64,
        );
    }
    family(
        out,
        "kickoff_queue_rate_limit",
        "gauge",
        "A rate-limited queue's attempts allowed per window (per key when partitioned).",
    );
    for (queue, _, limit) in &windows {
        sample(
            out,
            "kickoff_queue_rate_limit",
            &[("queue", queue)],
            *limit as f64,
        );
    }
    family(
        out,
        "kickoff_kind_paused",
        "gauge",
        "1 for each job kind paused on every node.",
    );
    for p in state.client.paused_kinds().await? {
        sample(out, "kickoff_kind_paused", &[("kind", &p.kind)], 1.0);
    }
    Ok(())
}

/// Each schedule's counters and its latest run's lateness (database-wide, like `kickoff_jobs`).
async fn schedule_metrics(state: &AppState, out: &mut String) -> Result<(), AppError> {
    let views = Schedules::new(state.client.clone()).list().await?;
    let families = [
        ("kickoff_schedule_runs_enqueued_total", "counter", "Runs a schedule inserted (slots, missed slots run, and runs triggered by hand)."),
        ("kickoff_schedule_runs_skipped_total", "counter", "Slots a schedule passed over: missed while no node ran (by its missed-run policy) or skipped by its overlap policy."),
        ("kickoff_schedule_last_run_lateness_seconds", "gauge", "How late the latest run of a schedule started after its due time (first attempt)."),
        ("kickoff_schedule_next_run_timestamp_seconds", "gauge", "When a schedule's next run is due (Unix time); absent while it is paused or ended."),
        ("kickoff_schedule_paused", "gauge", "1 while a schedule is paused."),
    ];
    for (name, kind, help) in families {
        family(out, name, kind, help);
        for v in &views {
            let labels = [("schedule", v.name.as_str())];
            let value = match name {
                "kickoff_schedule_runs_enqueued_total" => Some(v.runs_enqueued as f64),
                "kickoff_schedule_runs_skipped_total" => Some(v.runs_skipped as f64),
                "kickoff_schedule_last_run_lateness_seconds" => v
                    .last_run
                    .as_ref()
                    .and_then(|l| l.late_ms)
                    .map(|ms| ms / 1000.0),
                "kickoff_schedule_next_run_timestamp_seconds" => {
                    v.next_run_at.map(|t| t.timestamp_millis() as f64 / 1000.0)
                }
                _ => Some(if v.paused { 1.0 } else { 0.0 }),
            };
            if let Some(value) = value {
                sample(out, name, &labels, value);
            }
        }
    }
    Ok(())
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {}", number(value));
}

fn histogram(out: &mut String, name: &str, label: (&str, &str), h: &Histogram) {
    let bucket = format!("{name}_bucket");
    for (le, n) in h.cumulative() {
        let le = if le.is_infinite() {
            "+Inf".to_string()
        } else {
            number(le)
        };
        sample(out, &bucket, &[label, ("le", &le)], n as f64);
    }
    sample(out, &format!("{name}_sum"), &[label], h.sum);
    sample(out, &format!("{name}_count"), &[label], h.count as f64);
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_written_in_the_text_format() {
        let mut out = String::new();
        sample(&mut out, "m", &[("a", "x\"y\\z\nw")], 2.0);
        sample(&mut out, "n", &[], 0.25);
        assert_eq!(out, "m{a=\"x\\\"y\\\\z\\nw\"} 2\nn 0.25\n");
        let mut h = Histogram::new(&[0.5]);
        h.observe(0.1);
        h.observe(1.0);
        let mut out = String::new();
        histogram(&mut out, "h", ("q", "d"), &h);
        assert_eq!(
            out,
            "h_bucket{q=\"d\",le=\"0.5\"} 1\nh_bucket{q=\"d\",le=\"+Inf\"} 2\nh_sum{q=\"d\"} 1.1\nh_count{q=\"d\"} 2\n"
        );
    }
}
