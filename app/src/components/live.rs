//! Live updates: an `EventSource` on `/events` (job state changes from every node). Each burst of
//! changes bumps a version signal, at most four times a second, which pages use to refetch.

use leptos::prelude::*;

/// The live connection's state, shared with the page that uses it.
#[derive(Clone, Copy)]
pub struct Live {
    /// Bumped after job changes; pages key their resources on it.
    pub version: RwSignal<u64>,
    /// Whether the stream is connected.
    pub connected: RwSignal<bool>,
}

/// Opens the live stream (in the browser only; on the server it stays disconnected).
pub fn use_live_events() -> Live {
    let live = Live {
        version: RwSignal::new(0),
        connected: RwSignal::new(false),
    };
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| connect(live));
    live
}

#[cfg(feature = "hydrate")]
fn connect(live: Live) {
    use std::time::Duration;
    use wasm_bindgen::prelude::*;

    let Ok(source) = web_sys::EventSource::new("/events") else {
        return;
    };
    let pending = StoredValue::new(false);
    let on_change =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |_: web_sys::MessageEvent| {
            if pending.get_value() {
                return;
            }
            pending.set_value(true);
            set_timeout(
                move || {
                    pending.set_value(false);
                    live.version.update(|v| *v += 1);
                },
                Duration::from_millis(250),
            );
        });
    let _ = source.add_event_listener_with_callback("jobs", on_change.as_ref().unchecked_ref());
    let _ = source.add_event_listener_with_callback("lagged", on_change.as_ref().unchecked_ref());
    on_change.forget();
    let on_open = Closure::<dyn FnMut()>::new(move || {
        live.connected.set(true);
        // Whatever changed while disconnected: refetch.
        live.version.update(|v| *v += 1);
    });
    source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    on_open.forget();
    // EventSource reconnects by itself after an error.
    let on_error = Closure::<dyn FnMut()>::new(move || live.connected.set(false));
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    on_error.forget();
}

/// Shows whether live updates are flowing.
#[component]
pub fn LiveBadge(live: Live) -> impl IntoView {
    view! {
        <span class="live-badge" class:on=move || live.connected.get() role="status">
            {move || if live.connected.get() { "Live" } else { "Connecting…" }}
        </span>
    }
}
