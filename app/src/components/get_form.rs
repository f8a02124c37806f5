//! A search or filter form (`GET`) of the dashboard, under its base (see `crate::base`).
//!
//! Posted before the page is hydrated (or without JavaScript), the browser loads `action` under
//! the base with the fields as its query. Hydrated, the router goes there without loading a page.
//! (The router's own `Form` writes `action` as given and, once hydrated, adds the base again:
//! an action under the base would be doubled, one without it wrong before hydration.)

use leptos::prelude::*;
use leptos_router::hooks::use_navigate;

/// A `GET` form to `action`, a path inside the dashboard (`/jobs`).
#[component]
pub fn GetForm(
    /// The page the form loads, inside the dashboard.
    #[prop(into)]
    action: String,
    /// The form's fields and buttons.
    children: Children,
) -> impl IntoView {
    let navigate = use_navigate();
    let to = action.clone();
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        if ev.default_prevented() {
            return;
        }
        // The fields (and the button that sent them) as the browser would write the query.
        let Some(query) = leptos::form::form_data_from_event(&ev)
            .ok()
            .and_then(|data| {
                leptos::web_sys::UrlSearchParams::new_with_str_sequence_sequence(&data).ok()
            })
            .map(|params| String::from(params.to_string()))
        else {
            return;
        };
        ev.prevent_default();
        navigate(&format!("{to}?{query}"), Default::default());
    };
    view! {
        <form method="get" action=crate::base::href(&action) on:submit=on_submit>
            {children()}
        </form>
    }
}
