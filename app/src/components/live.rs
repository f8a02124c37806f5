//! Live updates: one `EventSource` on `/events` for the whole app (job state changes from every
//! node). Each burst of changes bumps a version signal, at most four times a second, which pages
//! key their data on. The operator can pause live updates; changes that arrive meanwhile are
//! counted and applied on resume.

use leptos::prelude::*;

/// The live connection's state, provided once by the app.
#[derive(Clone, Copy)]
pub struct Live {
    /// Bumped after job changes; pages key their resources on it.
    pub version: RwSignal<u64>,
    /// Whether the stream is connected.
    pub connected: RwSignal<bool>,
    /// Paused by the operator: no refreshes until resumed.
    pub paused: RwSignal<bool>,
    /// Change notifications that arrived while paused.
    pub missed: RwSignal<u64>,
}

/// Creates the app's live state and (in the browser) opens the stream.
pub fn provide_live() -> Live {
    let live = Live {
        version: RwSignal::new(0),
        connected: RwSignal::new(false),
        paused: RwSignal::new(false),
        missed: RwSignal::new(0),
    };
    provide_context(live);
    // Signed out, the stream would only answer 401.
    #[cfg(feature = "hydrate")]
    if crate::components::session::use_me().is_some() {
        // Read here, with the app's context: a reopening runs from a timer, outside it.
        let url: &'static str = crate::base::href("/events").leak();
        Effect::new(move |prev: Option<()>| {
            if prev.is_none() {
                connect(url, live, StoredValue::new(0));
            }
        });
    }
    live
}

/// The app's live state.
pub fn use_live() -> Live {
    expect_context::<Live>()
}

impl Live {
    /// Resumes after a pause, refreshing once if anything changed meanwhile.
    pub fn set_paused(&self, paused: bool) {
        self.paused.set(paused);
        if !paused && self.missed.get_untracked() > 0 {
            self.missed.set(0);
            self.version.update(|v| *v += 1);
        }
    }
}

/// The longest wait before the stream is opened again after the server refused it.
#[cfg(feature = "hydrate")]
const MAX_REOPEN_DELAY_MS: u64 = 30_000;

/// Opens the stream at `url`. `refusals` counts the refusals in a row (for the wait before the
/// next try).
#[cfg(feature = "hydrate")]
fn connect(url: &'static str, live: Live, refusals: StoredValue<u32>) {
    use std::time::Duration;
    use wasm_bindgen::prelude::*;

    let Ok(source) = web_sys::EventSource::new(url) else {
        return;
    };
    let pending = StoredValue::new(false);
    let on_change =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |_: web_sys::MessageEvent| {
            if live.paused.get_untracked() {
                live.missed.update(|m| *m += 1);
                return;
            }
            if pending.get_value() {
                return;
            }
            pending.set_value(true);
            set_timeout(
                move || {
                    pending.set_value(false);
                    if live.paused.get_untracked() {
                        live.missed.update(|m| *m += 1);
                    } else {
                        live.version.update(|v| *v += 1);
                    }
                },
                Duration::from_millis(250),
            );
        });
    let _ = source.add_event_listener_with_callback("jobs", on_change.as_ref().unchecked_ref());
    let _ = source.add_event_listener_with_callback("lagged", on_change.as_ref().unchecked_ref());
    on_change.forget();
    let on_open = Closure::<dyn FnMut()>::new(move || {
        refusals.set_value(0);
        live.connected.set(true);
        // Whatever changed while disconnected: refetch.
        live.version.update(|v| *v += 1);
    });
    source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    on_open.forget();
    // The browser reconnects by itself after a dropped connection, but not after an answer that is
    // no stream (a 503 while the server is busy, a 401 of a session being renewed): it closes the
    // source for good, and the badge would say "Connecting…" until the page is reloaded. That
    // source is closed here and a new one opened after a wait that doubles, up to 30 s.
    let closed_source = source.clone();
    let on_error = Closure::<dyn FnMut()>::new(move || {
        live.connected.set(false);
        if closed_source.ready_state() != web_sys::EventSource::CLOSED {
            return;
        }
        closed_source.set_onerror(None);
        closed_source.set_onopen(None);
        let tries = refusals.get_value();
        refusals.set_value(tries.saturating_add(1));
        let delay = (1_000u64 << tries.min(5)).min(MAX_REOPEN_DELAY_MS);
        set_timeout(
            move || connect(url, live, refusals),
            Duration::from_millis(delay),
        );
    });
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    on_error.forget();
}

/// Shows whether live updates are flowing, with the pause toggle.
#[component]
pub fn LiveBadge() -> impl IntoView {
    let live = use_live();
    let label = move || {
        if live.paused.get() {
            let missed = live.missed.get();
            if missed > 0 {
                format!("Paused ({missed} changes)")
            } else {
                "Paused".to_string()
            }
        } else if live.connected.get() {
            "Live".to_string()
        } else {
            "Connecting…".to_string()
        }
    };
    view! {
        <span class="live">
            <span
                class="live-badge"
                class:on=move || live.connected.get() && !live.paused.get()
                role="status"
            >
                {label}
            </span>
            <button
                type="button"
                class="link-button"
                aria-pressed=move || live.paused.get().to_string()
                on:click=move |_| live.set_paused(!live.paused.get_untracked())
            >
                {move || if live.paused.get() { "Resume live updates" } else { "Pause live updates" }}
            </button>
        </span>
    }
}
