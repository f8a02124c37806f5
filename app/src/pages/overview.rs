//! The overview: counts per state (each a link to the filtered list), the queues, completed and
//! failed jobs per minute over the last hour, and the nodes alive with the current leader.

use leptos::prelude::*;

use crate::components::live::use_live;
use crate::components::loaded::Loaded;
use crate::components::replica_lag::ReplicaLag;
use crate::components::series_chart::{Line, SeriesChart};
use crate::components::state_counts::StateCounts;
use crate::components::table::{Column, DataTable};
use crate::components::throughput::ThroughputChart;
use crate::components::time::{fine_span, use_clock, When};
use crate::console::history::HistoryStep;
use crate::console::overview::{get_overview, Overview};
use crate::pages::queues::QueueTable;

const NODE_COLUMNS: &[Column] = &[
    ("Node", false),
    ("Host", true),
    ("Started", true),
    ("Last heartbeat", false),
];

/// How long after their due time the last hour's attempts started: the hour's p50 and p99, and
/// both per minute.
#[component]
fn LatenessPanel(steps: Vec<HistoryStep>, p50: Option<f64>, p99: Option<f64>) -> impl IntoView {
    let (Some(p50), Some(p99)) = (p50, p99) else {
        return view! { <p class="empty">"No attempt ended in the last hour."</p> }.into_any();
    };
    let lines = vec![
        Line {
            name: "p50".into(),
            values: steps.iter().map(|s| s.late_p50_ms).collect(),
            dashed: false,
            colour: 0,
        },
        Line {
            name: "p99".into(),
            values: steps.iter().map(|s| s.late_p99_ms).collect(),
            dashed: true,
            colour: 0,
        },
    ];
    view! {
        <p class="lateness-headline" data-lateness="">
            "Half of the attempts started within " <strong>{fine_span(p50)}</strong>
            " of their due time, 99 % within " <strong>{fine_span(p99)}</strong> "."
            " " <a href=crate::base::href("/history")>"History"</a>
        </p>
        <SeriesChart title="Lateness p50 and p99 per minute".to_string() unit="ms"
            from_label="−60 min".to_string() to_label="now".to_string() lines=lines log=true/>
    }
    .into_any()
}

#[component]
pub fn OverviewPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let overview = Resource::new(move || live.version.get(), |_| get_overview());
    clock.follow(overview, |o: &Overview| o.now_ms);
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Overview"</h1>
            </div>
            <Loaded resource=overview render=move |o: Overview| {
                let now = o.now_ms;
                view! {
                    <ReplicaLag lag_ms=o.replica_lag_ms/>
                    <StateCounts states=o.states/>
                    <h2>"Throughput, last hour"</h2>
                    <ThroughputChart points=o.throughput/>
                    <h2>"Lateness, last hour"</h2>
                    <LatenessPanel steps=o.lateness p50=o.late_p50_ms p99=o.late_p99_ms/>
                    <h2>"Queues"</h2>
                    <QueueTable rows=o.queues/>
                    <h2>"Nodes"</h2>
                    {if o.nodes.is_empty() {
                        view! { <p class="empty">"No node is alive: jobs wait until a server starts."</p> }.into_any()
                    } else {
                        view! {
                            <DataTable label="Nodes" columns=NODE_COLUMNS>
                                        {o.nodes
                                            .into_iter()
                                            .map(|n| view! {
                                                <tr>
                                                    <th scope="row">
                                                        <code>{n.id.clone()}</code>
                                                        {n.leader.then(|| view! { " " <span class="badge state-completed">"leader"</span> })}
                                                    </th>
                                                    <td class="wide">{format!("{} (pid {})", n.hostname, n.pid)}</td>
                                                    <td class="wide"><When at_ms=n.started_ms base_ms=now/></td>
                                                    <td><When at_ms=n.heartbeat_ms base_ms=now/></td>
                                                </tr>
                                            })
                                            .collect_view()}
                                    </DataTable>
                        }
                        .into_any()
                    }}
                }
            }/>
        </section>
    }
}
