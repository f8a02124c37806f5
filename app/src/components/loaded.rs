//! The loading / error scaffold every page's data goes through: the previous content stays while
//! a live refresh loads (a `Transition`), and a failed load says why.

use leptos::prelude::*;
use serde::{de::DeserializeOwned, Serialize};

/// The operator-facing text of a server function's error.
pub fn error_text(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(message) => message.clone(),
        other => other.to_string(),
    }
}

/// Renders a resource's value with `render`, a loading note before the first value, and the error
/// when the load failed.
#[component]
pub fn Loaded<T, F, V>(resource: Resource<Result<T, ServerFnError>>, render: F) -> impl IntoView
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    F: Fn(T) -> V + Clone + Send + Sync + 'static,
    V: IntoView + 'static,
{
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || {
                let render = render.clone();
                Suspend::new(async move {
                    match resource.await {
                        Ok(value) => render(value).into_any(),
                        Err(e) => view! { <p class="error" role="alert">{error_text(&e)}</p> }.into_any(),
                    }
                })
            }}
        </Transition>
    }
}

/// The refusal of an action's last submission as text, if it was refused (a job that finished
/// meanwhile, say).
pub fn failure<T>(value: MappedSignal<Option<Result<T, ServerFnError>>>) -> Signal<Option<String>>
where
    T: Send + Sync + 'static,
{
    Signal::derive(move || {
        value.with(|v| match v {
            Some(Err(e)) => Some(error_text(e)),
            _ => None,
        })
    })
}

/// Shows an action's refusal.
#[component]
pub fn ActionError(error: Signal<Option<String>>) -> impl IntoView {
    move || {
        error
            .get()
            .map(|e| view! { <p class="error" role="alert">{e}</p> })
    }
}
