//! Webhook endpoints (`/webhooks`, admins): the URL prefixes whose calls are signed (Standard
//! Webhooks); make one (its secret is shown once), rotate a secret with an overlap during which
//! both sign, delete one.

use leptos::prelude::*;

use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::session::Csrf;
use crate::components::table::{Column, DataTable};
use crate::components::time::{use_clock, When};
use crate::console::webhooks::{
    get_endpoints, CreateEndpoint, DeleteEndpoint, EndpointsPage, NewEndpointSecret, RotateEndpoint,
};

const COLUMNS: &[Column] = &[
    ("URL prefix", false),
    ("Created", true),
    ("Secret", false),
    ("", false),
];

/// A secret just made, with the warning that it is shown only now.
#[component]
fn NewSecretBox(made: NewEndpointSecret) -> impl IntoView {
    view! {
        <div class="notice" role="status">
            <p>"The signing secret of " <code>{made.url_prefix.clone()}</code> ". Copy it now: it is not shown again."</p>
            <pre class="token"><code data-new-secret=made.id>{made.secret}</code></pre>
            <p class="muted">
                "Give it to the receiver, which verifies each call's " <code>"webhook-signature"</code>
                " with a Standard Webhooks library (Python and npm " <code>"standardwebhooks"</code> ", and others)."
            </p>
        </div>
    }
}

#[component]
pub fn WebhooksPage() -> impl IntoView {
    let clock = use_clock();
    let create = ServerAction::<CreateEndpoint>::new();
    let rotate = ServerAction::<RotateEndpoint>::new();
    let delete = ServerAction::<DeleteEndpoint>::new();
    // The versions are the key: an unchanged key would not refetch.
    let page = Resource::new(
        move || {
            (
                create.version().get(),
                rotate.version().get(),
                delete.version().get(),
            )
        },
        |_| get_endpoints(),
    );
    clock.follow(page, |p: &EndpointsPage| p.now_ms);
    let made = move || {
        create.value().with(|v| match v {
            Some(Ok(m)) => Some(view! { <NewSecretBox made=m.clone()/> }),
            _ => None,
        })
    };
    let rotated = move || {
        rotate.value().with(|v| match v {
            Some(Ok(m)) => Some(view! { <NewSecretBox made=m.clone()/> }),
            _ => None,
        })
    };
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Webhook endpoints"</h1>
            </div>
            <p class="muted">
                "Webhook calls whose URL starts with an endpoint's prefix are signed with its secret "
                "(" <code>"webhook-signature"</code> ", Standard Webhooks). The database keeps secrets "
                "sealed with the server's key; a secret is shown once, when it is made."
            </p>
            <ActionError error=failure(rotate.value())/>
            <ActionError error=failure(delete.value())/>
            {rotated}
            <Loaded resource=page render=move |p: EndpointsPage| {
                let now = p.now_ms;
                if p.endpoints.is_empty() {
                    return view! { <p class="empty">"No webhook endpoints yet: calls go unsigned."</p> }.into_any();
                }
                view! {
                    <DataTable label="Webhook endpoints" columns=COLUMNS>
                        {p.endpoints
                            .into_iter()
                            .map(|e| {
                                let rotate_label = format!("Rotate the secret of {}", e.url_prefix);
                                let overlap_label = format!("Hours the old secret of {} keeps signing", e.url_prefix);
                                let delete_label = format!("Delete endpoint {}", e.url_prefix);
                                view! {
                                    <tr data-endpoint=e.id>
                                        <td><code>{e.url_prefix.clone()}</code></td>
                                        <td class="wide">
                                            <When at_ms=e.created_ms base_ms=now/>
                                            {e.created_by.clone().map(|by| view! { <span class="muted">" by " {by}</span> })}
                                        </td>
                                        <td>
                                            {match (e.rotated_ms, e.previous_until_ms) {
                                                (_, Some(until)) if until > now => view! {
                                                    <span>"rotated; the old one signs too until " <When at_ms=until base_ms=now/></span>
                                                }.into_any(),
                                                (Some(at), _) => view! { <span>"rotated " <When at_ms=at base_ms=now/></span> }.into_any(),
                                                _ => view! { <span class="muted">"as made"</span> }.into_any(),
                                            }}
                                        </td>
                                        <td>
                                            <ActionForm action=rotate attr:class="inline-form">
                                                <Csrf/>
                                                <input type="hidden" name="id" value=e.id/>
                                                <input name="overlap_hours" value="24" size="4" inputmode="decimal" aria-label=overlap_label/>
                                                <button type="submit" aria-label=rotate_label>"Rotate secret"</button>
                                            </ActionForm>
                                            <ActionForm action=delete attr:class="inline-form">
                                                <Csrf/>
                                                <input type="hidden" name="id" value=e.id/>
                                                <button type="submit" class="danger" aria-label=delete_label>"Delete"</button>
                                            </ActionForm>
                                        </td>
                                    </tr>
                                }
                            })
                            .collect_view()}
                    </DataTable>
                }
                .into_any()
            }/>
            <ActionForm action=create attr:class="form-card" attr:aria-label="New webhook endpoint">
                <Csrf/>
                <div class="row">
                    <label>
                        "URL prefix"
                        <input name="url_prefix" required maxlength="2048" placeholder="https://partner.example/hooks/" autocomplete="off"/>
                    </label>
                </div>
                <button type="submit" class="primary">"Make endpoint"</button>
            </ActionForm>
            <ActionError error=failure(create.value())/>
            {made}
        </section>
    }
}
