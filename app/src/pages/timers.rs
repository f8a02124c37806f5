//! Pending timers (`/timers`): jobs waiting for their time, in time order, with a live countdown;
//! jobs past their time are marked with how late they are.

use leptos::prelude::*;

use crate::components::live::use_live;
use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::time::{use_clock, Countdown, When};
use crate::console::{list_timers, JobAction, TimersPage as Timers};
use crate::pages::jobs::JobButtons;

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
    Effect::new(move |_| {
        if let Some(Ok(t)) = timers.get() {
            clock.sync(t.now_ms);
        }
    });
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Pending timers"</h1>
                <a class="button primary" href="/jobs/new">"New job"</a>
            </div>
            <ActionError error=failure(action.value())/>
            <Loaded resource=timers render=move |t: Timers| {
                if t.rows.is_empty() {
                    return view! { <p class="empty">"No job is waiting for its time."</p> }.into_any();
                }
                let now = t.now_ms;
                view! {
                    <div class="table-wrap">
                        <table class="grid" aria-label="Pending timers">
                            <thead>
                                <tr>
                                    <th scope="col">"Due"</th>
                                    <th scope="col">"At"</th>
                                    <th scope="col">"Job"</th>
                                    <th scope="col">"Kind"</th>
                                    <th scope="col" class="wide">"Queue"</th>
                                    <th scope="col">"State"</th>
                                    <th scope="col" class="wide">"Args"</th>
                                    <th scope="col">"Actions"</th>
                                </tr>
                            </thead>
                            <tbody>
                                {t.rows
                                    .into_iter()
                                    .map(|j| {
                                        let id = j.id;
                                        let badge = format!("badge state-{}", j.state);
                                        view! {
                                            <tr data-job=id>
                                                <td><Countdown at_ms=j.scheduled_ms base_ms=now/></td>
                                                <td><When at_ms=j.scheduled_ms base_ms=now/></td>
                                                <td><a href=format!("/jobs/{id}")>{id}</a></td>
                                                <td>{j.kind.clone()}</td>
                                                <td class="wide">{j.queue.clone()}</td>
                                                <td><span class=badge>{j.state.clone()}</span></td>
                                                <td class="wide"><code class="args">{j.args_preview.clone()}</code></td>
                                                <td><JobButtons j action/></td>
                                            </tr>
                                        }
                                    })
                                    .collect_view()}
                            </tbody>
                        </table>
                    </div>
                }
                .into_any()
            }/>
        </section>
    }
}
