//! Lines over time as a server-rendered SVG (no chart service, no script): one line per series,
//! each in its own colour, a gap where a step has no value; a logarithmic scale for quantities
//! that span orders of magnitude (lateness, from a tenth of a millisecond to a minute). Readable
//! without JavaScript: the chart's summary is its accessible name, and each line names itself.

use leptos::prelude::*;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 150.0;
const TOP: f64 = 14.0;
/// The floor of a logarithmic scale: a tenth of the unit (0.1 ms).
const LOG_FLOOR: f64 = 0.1;

/// One line: a value per step (`None`: nothing to draw there).
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub values: Vec<Option<f64>>,
    /// Drawn dashed (a second quantity of the same series: p99 beside p50).
    pub dashed: bool,
    /// The colour's index (lines of one series share it).
    pub colour: usize,
}

/// Formats a value of the chart's unit for its labels.
fn amount(v: f64, unit: &str) -> String {
    if unit == "ms" {
        crate::components::time::fine_span(v)
    } else if v == 1.0 {
        // "1 job", not "1 jobs".
        format!("1 {}", unit.strip_suffix('s').unwrap_or(unit))
    } else if v >= 10.0 || v == v.trunc() {
        format!("{v:.0} {unit}")
    } else {
        format!("{v:.1} {unit}")
    }
}

#[component]
pub fn SeriesChart(
    /// What the chart shows, opening its summary ("Completed per 15 min").
    title: String,
    unit: &'static str,
    /// The first step's start and the range's end, for the axis labels.
    from_label: String,
    to_label: String,
    lines: Vec<Line>,
    #[prop(optional)] log: bool,
) -> impl IntoView {
    let steps = lines
        .iter()
        .map(|l| l.values.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let max = lines
        .iter()
        .flat_map(|l| l.values.iter().flatten())
        .fold(0.0_f64, |a, b| a.max(*b));
    let y_of = {
        let top = if log {
            max.max(LOG_FLOOR * 10.0).log10()
        } else {
            max.max(1.0)
        };
        let bottom = if log { LOG_FLOOR.log10() } else { 0.0 };
        move |v: f64| {
            let v = if log { v.max(LOG_FLOOR).log10() } else { v };
            HEIGHT - (v - bottom) / (top - bottom) * (HEIGHT - TOP)
        }
    };
    let slot = WIDTH / steps as f64;
    let summary = {
        let parts: Vec<String> = lines
            .iter()
            .filter(|l| !l.dashed)
            .map(|l| {
                let vals: Vec<f64> = l.values.iter().flatten().copied().collect();
                if log {
                    let top = vals.iter().fold(0.0_f64, |a, b| a.max(*b));
                    format!("{}: highest {}", l.name, amount(top, unit))
                } else {
                    format!("{}: {} in all", l.name, amount(vals.iter().sum(), unit))
                }
            })
            .collect();
        if parts.is_empty() {
            format!("{title}: nothing in this range")
        } else {
            format!("{title}: {}", parts.join("; "))
        }
    };
    let paths = lines
        .iter()
        .map(|l| {
            // One path of segments: a step without a value breaks the line.
            let mut d = String::new();
            let mut pen_down = false;
            for (i, v) in l.values.iter().enumerate() {
                match v {
                    Some(v) => {
                        let x = i as f64 * slot + slot / 2.0;
                        let y = y_of(*v);
                        d.push_str(&format!(
                            "{}{x:.1},{y:.1} ",
                            if pen_down { "L" } else { "M" }
                        ));
                        pen_down = true;
                    }
                    None => pen_down = false,
                }
            }
            let class = format!(
                "series-line colour-{}{}",
                l.colour % 8,
                if l.dashed { " dashed" } else { "" }
            );
            view! {
                <path class=class d=d>
                    <title>{l.name.clone()}</title>
                </path>
            }
        })
        .collect_view();
    let legend = lines
        .iter()
        .map(|l| {
            let class = format!(
                "key series-key colour-{}{}",
                l.colour % 8,
                if l.dashed { " dashed" } else { "" }
            );
            view! { <span class="legend-item"><span class=class></span>{l.name.clone()}</span> }
        })
        .collect_view();
    view! {
        <figure class="chart series-chart">
            <svg
                viewBox=format!("0 0 {WIDTH} {}", HEIGHT + 16.0)
                role="img"
                aria-label=summary.clone()
                preserveAspectRatio="none"
            >
                <line class="axis" x1="0" y1=HEIGHT x2=WIDTH y2=HEIGHT/>
                <text class="tick" x="0" y="10">
                    {if max > 0.0 { amount(max, unit) } else { format!("0 {unit}") }}
                    {log.then_some(" (log scale)")}
                </text>
                {paths}
                <text class="tick" x="0" y=HEIGHT + 14.0>{from_label}</text>
                <text class="tick" x=WIDTH y=HEIGHT + 14.0 text-anchor="end">{to_label}</text>
            </svg>
            <figcaption>{legend}<span class="chart-summary">{summary}</span></figcaption>
        </figure>
    }
}

/// A tiny line of values (a queue's attempts per hour), for a table cell; its summary is its
/// accessible name.
#[component]
pub fn Sparkline(values: Vec<i64>, label: String) -> impl IntoView {
    let (w, h) = (96.0, 20.0);
    let max = values.iter().copied().max().unwrap_or(0).max(1) as f64;
    let n = values.len().max(2) as f64 - 1.0;
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "{:.1},{:.1}",
                i as f64 / n * w,
                h - 1.0 - *v as f64 / max * (h - 2.0)
            )
        })
        .collect();
    view! {
        <svg class="sparkline" viewBox=format!("0 0 {w} {h}") width=w height=h role="img" aria-label=label>
            <polyline points=points.join(" ")/>
        </svg>
    }
}
