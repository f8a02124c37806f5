//! What an operator did to a job, as the history's acknowledged calls tell it: by its id, or by
//! a bulk action whose filter may have matched it.

use crate::chaos::history::record::{Event, History, JobRow};

/// Acknowledged requests that named `job` on `route`, and the application's actions from SQL
/// there (a cancel: `kickoff_cancel_job`) that may have committed: one whose answer was lost
/// (the database crashed at its commit) may have.
pub(super) fn on_job<'a>(
    h: &'a History,
    route: &'static str,
    job: i64,
) -> impl Iterator<Item = &'a Event> {
    let from_sql = h.events.iter().filter(move |e| {
        e.method == "SQL" && e.route == route && super::workflows::may_have_done(e)
    });
    h.acknowledged("POST", route)
        .chain(from_sql)
        .filter(move |e| e.subject == Some(job))
}

/// Whether an operator retried, ran now or rescheduled `job`, by name or on a filter.
pub(super) fn moved_by_hand(h: &History, job: &JobRow) -> bool {
    [
        "/jobs/{id}/retry",
        "/jobs/{id}/run-now",
        "/jobs/{id}/reschedule",
    ]
    .into_iter()
    .any(|route| on_job(h, route, job.id).next().is_some())
        || ["retry", "run_now"]
            .into_iter()
            .any(|action| bulk_on(h, action, job).next().is_some())
}

/// Acknowledged bulk actions `action` on a filter that may have matched `job`, as far as the
/// record tells: its queue, when the filter names one; its id, under the filter's `max_id`; and
/// its error, when the filter searches a text: a history's errors hold no planted secret but the
/// ones their own job sent (echoed by the receiver), so the text is in the job's args.
pub(super) fn bulk_on<'a>(
    h: &'a History,
    action: &'static str,
    job: &'a JobRow,
) -> impl Iterator<Item = &'a Event> + 'a {
    h.acknowledged("POST", "/jobs/bulk").filter(move |e| {
        let body = e.body.as_ref();
        let Some(filter) = body.and_then(|b| b.get("filter")) else {
            return false;
        };
        let text = |key: &str| filter.get(key).and_then(|v| v.as_str());
        body.and_then(|b| b.get("action")?.as_str()) == Some(action)
            && text("queue").is_none_or(|q| q == job.queue)
            && filter
                .get("max_id")
                .and_then(|v| v.as_i64())
                .is_none_or(|max| job.id <= max)
            // The search is case-insensitive (`ILIKE`).
            && text("error").is_none_or(|t| {
                let sent = job.args.to_string().to_lowercase();
                sent.contains(&t.to_lowercase())
            })
    })
}
