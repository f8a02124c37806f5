//! Job counts per state, as a list of labelled figures, each linking to the filtered list.

use leptos::prelude::*;

#[component]
pub fn StateCounts(states: Vec<(String, i64)>) -> impl IntoView {
    view! {
        <ul class="state-counts" aria-label="Jobs by state">
            {states
                .into_iter()
                .map(|(state, n)| {
                    let class = format!("state-count state-{state}");
                    let label = format!("{state} jobs");
                    let data = state.clone();
                    let href = format!("/jobs?state={state}");
                    view! {
                        <li class=class data-state=data>
                            <a href=crate::base::href(&href)>
                                <span class="count" aria-label=label>{n}</span>
                                <span class="label">{state}</span>
                            </a>
                        </li>
                    }
                })
                .collect_view()}
        </ul>
    }
}
