//! The overview: counts per state (each a link to the filtered list), the queues, completed and
//! failed jobs per minute over the last hour, and the nodes alive with the current leader.

use leptos::prelude::*;

use crate::components::live::use_live;
use crate::components::loaded::Loaded;
use crate::components::state_counts::StateCounts;
use crate::components::throughput::ThroughputChart;
use crate::components::time::{use_clock, When};
use crate::console::{get_overview, Overview};
use crate::pages::queues::QueueTable;

#[component]
pub fn OverviewPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let overview = Resource::new(move || live.version.get(), |_| get_overview());
    Effect::new(move |_| {
        if let Some(Ok(o)) = overview.get() {
            clock.sync(o.now_ms);
        }
    });
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Overview"</h1>
            </div>
            <Loaded resource=overview render=move |o: Overview| {
                let now = o.now_ms;
                view! {
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
                            <div class="table-wrap">
                                <table class="grid" aria-label="Nodes">
                                    <thead>
                                        <tr>
                                            <th scope="col">"Node"</th>
                                            <th scope="col">"Host"</th>
                                            <th scope="col">"Started"</th>
                                            <th scope="col">"Last heartbeat"</th>
                                        </tr>
                                    </thead>
                                    <tbody>
                                        {o.nodes
                                            .into_iter()
                                            .map(|n| view! {
                                                <tr>
                                                    <th scope="row">
                                                        <code>{n.id.clone()}</code>
                                                        {n.leader.then(|| view! { " " <span class="badge state-completed">"leader"</span> })}
                                                    </th>
                                                    <td>{format!("{} (pid {})", n.hostname, n.pid)}</td>
                                                    <td><When at_ms=n.started_ms base_ms=now/></td>
                                                    <td><When at_ms=n.heartbeat_ms base_ms=now/></td>
                                                </tr>
                                            })
                                            .collect_view()}
                                    </tbody>
                                </table>
                            </div>
                        }
                        .into_any()
                    }}
                }
            }/>
        </section>
    }
}
