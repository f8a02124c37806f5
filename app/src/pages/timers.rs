//! Pending timers (`/timers`): jobs waiting for their time, in time order, with a live countdown;
//! jobs past their time are marked with how late they are.

use leptos::prelude::*;

use crate::components::live::use_live;
use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::table::{Column, DataTable};
use crate::components::time::{use_clock, Countdown, When};
use crate::console::jobs::{list_timers, JobAction, TimersPage as Timers};
use crate::pages::jobs::JobButtons;

const TIMER_COLUMNS: &[Column] = &[
    ("Due", false),
    ("At", true),
    ("Job", false),
    ("Kind", false),
    ("Queue", true),
    ("State", false),
    ("Args", true),
    ("Actions", false),
];

#[component]
pub fn TimersPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let action = ServerAction::<JobAction>::new();
    let timers = Resource::new(
        // The versions are the key: an unchanged key would not refetch.
        move || (live.version.get(), action.version().get()),
        |_| list_timers(),
    );
    clock.follow(timers, |t: &Timers| t.now_ms);
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Pending timers"</h1>
                <a class="button primary" href=crate::base::href("/jobs/new")>"New job"</a>
            </div>
            <ActionError error=failure(action.value())/>
            <Loaded resource=timers render=move |t: Timers| {
                if t.rows.is_empty() {
                    return view! { <p class="empty">"No job is waiting for its time."</p> }.into_any();
                }
                let now = t.now_ms;
                view! {
                    <DataTable label="Pending timers" columns=TIMER_COLUMNS>
                                {t.rows
                                    .into_iter()
                                    .map(|j| {
                                        let id = j.id;
                                        let badge = format!("badge state-{}", j.state);
                                        view! {
                                            <tr data-job=id>
                                                <td><Countdown at_ms=j.scheduled_ms base_ms=now/></td>
                                                <td class="wide"><When at_ms=j.scheduled_ms base_ms=now/></td>
                                                <td><a href=crate::base::href(&format!("/jobs/{id}"))>{id}</a></td>
                                                <td>{j.kind.clone()}</td>
                                                <td class="wide">{j.queue.clone()}</td>
                                                <td><span class=badge>{j.state.clone()}</span></td>
                                                <td class="wide"><code class="args">{j.args_preview.clone()}</code></td>
                                                <td><JobButtons j action/></td>
                                            </tr>
                                        }
                                    })
                                    .collect_view()}
                            </DataTable>
                }
                .into_any()
            }/>
        </section>
    }
}
