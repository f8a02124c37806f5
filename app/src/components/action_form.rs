//! A server function's form that posts under the dashboard's base (see `crate::base`).
//!
//! Leptos's `ActionForm` writes its server function's path as the form's `action`, which a
//! browser posts to before the page is hydrated (or without JavaScript): under a base, the path
//! without it is not the dashboard's. This one writes the path under the base, and once hydrated
//! dispatches the action as Leptos's does.

use leptos::form::FromFormData;
use leptos::prelude::*;
use leptos::server_fn::client::Client;
use leptos::server_fn::codec::PostUrl;
use leptos::server_fn::error::{IntoAppError, ServerFnErrorErr};
use leptos::server_fn::request::ClientReq;
use leptos::server_fn::{Http, ServerFn};
use serde::de::DeserializeOwned;

/// As `leptos::form::ActionForm`, posting to the server function's path under the base.
#[component]
pub fn ActionForm<ServFn, OutputProtocol>(
    /// The action the form dispatches.
    action: ServerAction<ServFn>,
    /// Where the `<form>` element is kept, for a page that resets it.
    #[prop(optional)]
    node_ref: Option<NodeRef<leptos::html::Form>>,
    /// The form's fields and buttons.
    children: Children,
) -> impl IntoView
where
    ServFn: DeserializeOwned
        + ServerFn<Protocol = Http<PostUrl, OutputProtocol>>
        + Clone
        + Send
        + Sync
        + 'static,
    <<ServFn::Client as Client<ServFn::Error>>::Request as ClientReq<ServFn::Error>>::FormData:
        From<leptos::web_sys::FormData>,
    ServFn::Output: Send + Sync + 'static,
    ServFn::Error: Send + Sync + 'static,
    <ServFn as ServerFn>::Client: Client<<ServFn as ServerFn>::Error>,
{
    let node_ref = node_ref.unwrap_or_default();
    let (version, value) = (action.version(), action.value());
    let on_submit = move |ev: leptos::ev::SubmitEvent| {
        if ev.default_prevented() {
            return;
        }
        ev.prevent_default();
        match ServFn::from_event(&ev) {
            Ok(input) => {
                action.dispatch(input);
            }
            Err(err) => {
                value.set(Some(Err(
                    ServerFnErrorErr::Serialization(err.to_string()).into_app_error()
                )));
                version.update(|n| *n += 1);
            }
        }
    };
    view! {
        <form action=crate::base::href(ServFn::url()) method="post" node_ref=node_ref on:submit=on_submit>
            {children()}
        </form>
    }
}
