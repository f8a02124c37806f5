//! Completed and failed jobs per minute as a server-rendered SVG bar chart (no chart service, no
//! script): one stacked bar a minute, failures on top in red.

use leptos::prelude::*;

use crate::console::overview::MinutePoint;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 140.0;
const TOP: f64 = 14.0;

#[component]
pub fn ThroughputChart(points: Vec<MinutePoint>) -> impl IntoView {
    let total_done: i64 = points.iter().map(|p| p.completed).sum();
    let total_failed: i64 = points.iter().map(|p| p.failed).sum();
    let max = points
        .iter()
        .map(|p| p.completed + p.failed)
        .max()
        .unwrap_or(0)
        .max(1);
    let n = points.len().max(1) as f64;
    let slot = WIDTH / n;
    let bar = (slot - 2.0).max(1.0);
    let scale = (HEIGHT - TOP) / max as f64;
    let summary = format!(
        "{total_done} completed and {total_failed} failed in the last {} minutes; busiest minute {max}",
        points.len()
    );
    let bars = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let x = i as f64 * slot + 1.0;
            let done_h = p.completed as f64 * scale;
            let fail_h = p.failed as f64 * scale;
            let minute = chrono::DateTime::from_timestamp_millis(p.minute_ms)
                .map(|t| t.format("%H:%M UTC").to_string())
                .unwrap_or_default();
            let title = format!("{minute}: {} completed, {} failed", p.completed, p.failed);
            view! {
                <g>
                    <title>{title}</title>
                    <rect class="bar-done" x=format!("{x:.1}") y=format!("{:.1}", HEIGHT - done_h)
                        width=format!("{bar:.1}") height=format!("{done_h:.1}")/>
                    <rect class="bar-failed" x=format!("{x:.1}") y=format!("{:.1}", HEIGHT - done_h - fail_h)
                        width=format!("{bar:.1}") height=format!("{fail_h:.1}")/>
                </g>
            }
        })
        .collect_view();
    view! {
        <figure class="chart">
            <svg
                viewBox=format!("0 0 {WIDTH} {}", HEIGHT + 16.0)
                role="img"
                aria-label=summary.clone()
                preserveAspectRatio="none"
            >
                <line class="axis" x1="0" y1=HEIGHT x2=WIDTH y2=HEIGHT/>
                <text class="tick" x="0" y="10">{format!("{max}/min")}</text>
                {bars}
                <text class="tick" x="0" y=HEIGHT + 14.0>"−60 min"</text>
                <text class="tick" x=WIDTH y=HEIGHT + 14.0 text-anchor="end">"now"</text>
            </svg>
            <figcaption>
                <span class="key key-done"></span>" completed "
                <span class="key key-failed"></span>" failed · "
                {summary}
            </figcaption>
        </figure>
    }
}
