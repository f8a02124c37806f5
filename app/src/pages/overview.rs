//! The overview: counts per state (each a link to the filtered list), the queues, completed and
//! failed jobs per minute over the last hour, and the nodes alive with the current leader.

use leptos::prelude::*;

use crate::components::live::use_live;
use crate::components::loaded::Loaded;
use crate::components::replica_lag::ReplicaLag;
use crate::components::state_counts::StateCounts;
use crate::components::table::{Column, DataTable};
use crate::components::throughput::ThroughputChart;
use crate::components::time::{use_clock, When};
use crate::console::overview::{get_overview, Overview};
use crate::pages::queues::QueueTable;

const NODE_COLUMNS: &[Column] = &[
    ("Node", false),
    ("Host", true),
    ("Started", true),
    ("Last heartbeat", false),
];

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
