//! The history page: the attempts' rollups as series, through the same query as
//! `GET /api/v1/stats/history` (one set of rules for both).

use kickoff_app::console::history::{
    HistoryConsole, HistoryPage, HistoryQuery as PageQuery, HistorySeries, HistoryStep,
    LATE_FROM_MS, RANGES,
};
use kickoff_app::console::Refusal;

use super::{ms, operator, refused, ServerConsole};
use crate::accounts::Role;
use crate::engine::history::{
    by_series, late_quantile, HistoryGroup, HistoryPoint, LATE_BOUNDS_MS,
};
use crate::engine::HistoryQuery;

/// How many attempts of histogram `buckets` started `from_ms` or more late (`from_ms` a bucket
/// bound).
fn late_from(buckets: &[i64], from_ms: f64) -> i64 {
    let first = LATE_BOUNDS_MS
        .iter()
        .position(|b| *b >= from_ms)
        .map_or(LATE_BOUNDS_MS.len(), |i| i + 1);
    buckets.iter().skip(first).sum()
}

/// The series of `points` (ordered by series, then step) as the page shows them.
pub(super) fn series(points: Vec<HistoryPoint>) -> Vec<HistorySeries> {
    by_series(points)
        .into_iter()
        .map(|(name, steps)| HistorySeries {
            name,
            steps: steps
                .into_iter()
                .map(|p| HistoryStep {
                    at_ms: ms(p.at),
                    completed: p.completed,
                    failed: p.failed + p.discarded + p.lost,
                    cancelled: p.cancelled,
                    snoozed: p.snoozed,
                    late: late_from(&p.late_buckets, LATE_FROM_MS as f64),
                    late_p50_ms: late_quantile(&p.late_buckets, 0.5),
                    late_p99_ms: late_quantile(&p.late_buckets, 0.99),
                })
                .collect(),
        })
        .collect()
}

#[async_trait::async_trait]
impl HistoryConsole for ServerConsole {
    async fn history(&self, q: PageQuery) -> Result<HistoryPage, Refusal> {
        operator(Role::Viewer)?;
        let range = q.range.clone().unwrap_or_else(|| "1h".into());
        let Some(&(_, secs, step)) = RANGES.iter().find(|(n, _, _)| *n == range) else {
            return Err(Refusal::invalid(format!(
                "range: one of {}",
                RANGES.map(|r| r.0).join(", ")
            )));
        };
        let by = q.by.clone().unwrap_or_else(|| "queue".into());
        let group = match by.as_str() {
            "queue" => HistoryGroup::Queue,
            "kind" => HistoryGroup::Kind,
            other => {
                return Err(Refusal::invalid(format!(
                    "by: `{other}` is not queue or kind"
                )))
            }
        };
        let reader = &self.reader.client;
        let filter = reader
            .history_filter(q.queue.clone(), q.kind.clone(), q.schedule.as_deref())
            .await
            .map_err(refused)?;
        let now = reader.db_now().await.map_err(refused)?;
        // Whole steps, the last one holding now.
        let step_ms = step * 1000;
        let to_ms = (ms(now) / step_ms + 1) * step_ms;
        let from_ms = to_ms - secs * 1000;
        let query = HistoryQuery {
            filter,
            group,
            from: chrono::DateTime::from_timestamp_millis(from_ms).unwrap_or(now),
            to: chrono::DateTime::from_timestamp_millis(to_ms).unwrap_or(now),
            step: std::time::Duration::from_secs(step as u64),
        };
        let points = reader.history(&query).await.map_err(refused)?;
        Ok(HistoryPage {
            now_ms: ms(now),
            range,
            by,
            from_ms,
            to_ms,
            step_secs: step,
            series: series(points),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::history::LATE_BUCKETS;

    #[test]
    fn late_counts_the_buckets_from_a_second_on() {
        // Bucket k holds [bound k-1, bound k): bound 9 is 1,000 ms, so bucket 10 is the first.
        let mut b = vec![0; LATE_BUCKETS];
        b[9] = 5; // 500 to 1,000 ms
        b[10] = 2; // 1,000 to 2,000 ms
        b[LATE_BUCKETS - 1] = 1;
        assert_eq!(late_from(&b, 1000.0), 3);
    }
}
