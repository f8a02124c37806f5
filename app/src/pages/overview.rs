//! The overview: job counts per state, refreshed live.

use leptos::prelude::*;

use crate::components::live::{use_live_events, LiveBadge};
use crate::components::state_counts::StateCounts;
use crate::console::get_overview;

#[component]
pub fn OverviewPage() -> impl IntoView {
    let live = use_live_events();
    let overview = Resource::new(move || live.version.get(), |_| get_overview());
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Overview"</h1>
                <LiveBadge live/>
            </div>
            <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match overview.await {
                        Ok(o) => view! { <StateCounts overview=o/> }.into_any(),
                        Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}
