//! Webhook endpoints (`/webhooks`, admins): the URL prefixes whose calls are signed (Standard
//! Webhooks), carry default headers (shown by name only) and may be allowed (the allowlist kept
//! in the database); make one (its secret is shown once), change one, rotate a secret with an
//! overlap during which both sign, delete one.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::session::Csrf;
use crate::components::table::{Column, DataTable};
use crate::components::time::{use_clock, When};
use crate::console::webhooks::{
    get_endpoints, CreateEndpoint, DeleteEndpoint, EndpointsPage, NewEndpointSecret,
    RotateEndpoint, UpdateEndpoint,
};

const COLUMNS: &[Column] = &[
    ("URL prefix", false),
    ("Calls", false),
    ("Default headers", false),
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

/// An endpoint's settings in a form: whether it allows calls (and to private addresses), and its
/// default headers, one `Name: value` a line (when `changing`, an empty field keeps them).
#[component]
fn EndpointFields(
    allow_calls: bool,
    private_network: bool,
    changing: bool,
    header_methods: String,
    signal_workflows: String,
) -> impl IntoView {
    let hint = if changing {
        "One \"Name: value\" a line; replaces them all. Left empty: the headers stay as they are."
    } else {
        "One \"Name: value\" a line, sent with every call beneath the job's own headers (an Authorization, say)."
    };
    view! {
        <div class="row">
            <label class="inline">
                <input type="checkbox" name="allow_calls" value="on" checked=allow_calls/>
                "Webhook jobs may call URLs under this prefix"
            </label>
            <label class="inline">
                <input type="checkbox" name="private_network" value="on" checked=private_network/>
                "... and its host may resolve to a private address"
            </label>
        </div>
        <div class="row">
            <label>
                "Default headers"
                <textarea name="headers" rows="2" cols="48" autocomplete="off" spellcheck="false" placeholder="Authorization: Bearer …"></textarea>
            </label>
            {changing.then(|| view! {
                <label class="inline">
                    <input type="checkbox" name="clear_headers" value="on"/>
                    "Remove the default headers"
                </label>
            })}
            <label>
                "Methods the headers go with"
                <input name="header_methods" value=header_methods size="24" autocomplete="off" placeholder="POST"/>
            </label>
        </div>
        <div class="row">
            <label>
                "Workflows it may signal (signed calls to /api/v1/inbound/…/signals)"
                <input name="signal_workflows" value=signal_workflows size="32" autocomplete="off" placeholder="game"/>
            </label>
        </div>
        <p class="muted">{hint}</p>
        <p class="muted">"The default headers are credentials: a webhook job under this prefix with another method is refused. The answer to a call that carried them is shown to admins and the job's creator only."</p>
    }
}

#[component]
pub fn WebhooksPage() -> impl IntoView {
    let clock = use_clock();
    let create = ServerAction::<CreateEndpoint>::new();
    let rotate = ServerAction::<RotateEndpoint>::new();
    let delete = ServerAction::<DeleteEndpoint>::new();
    let update = ServerAction::<UpdateEndpoint>::new();
    // The versions are the key: an unchanged key would not refetch.
    let page = Resource::new(
        move || {
            (
                create.version().get(),
                rotate.version().get(),
                delete.version().get(),
                update.version().get(),
            )
        },
        |_| get_endpoints(),
    );
    clock.follow(page, |p: &EndpointsPage| p.now_ms);
    // A made endpoint empties the form: its header field may hold a credential, which should
    // not stay on the screen.
    let create_form: NodeRef<leptos::html::Form> = NodeRef::new();
    Effect::new(move |_| {
        if matches!(create.value().get(), Some(Ok(_))) {
            if let Some(form) = create_form.get() {
                form.reset();
            }
        }
    });
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
                "(" <code>"webhook-signature"</code> ", Standard Webhooks) and carry its default headers "
                "beneath the job's own. An endpoint that allows calls lets webhook jobs call under its "
                "prefix, beside " <code>"KICKOFF_WEBHOOK_ALLOWED_HOSTS"</code> ". The database keeps "
                "secrets and header values sealed with the server's key; a secret is shown once, when "
                "it is made, and a header's value never."
            </p>
            <ActionError error=failure(rotate.value())/>
            <ActionError error=failure(delete.value())/>
            <ActionError error=failure(update.value())/>
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
                                let change_label = format!("Change endpoint {}", e.url_prefix);
                                let save_label = format!("Save endpoint {}", e.url_prefix);
                                let calls = match (e.allow_calls, e.private_network) {
                                    (true, true) => "allowed, private network too",
                                    (true, false) => "allowed",
                                    _ => "signed only",
                                };
                                let names = if e.header_names.is_empty() {
                                    view! { <span class="muted">"none"</span> }.into_any()
                                } else {
                                    view! {
                                        <code class="header-names">{e.header_names.join(", ")}</code>
                                        <span class="muted">" with " {e.header_methods.join(", ")}</span>
                                    }
                                        .into_any()
                                };
                                view! {
                                    <tr data-endpoint=e.id>
                                        <td><code>{e.url_prefix.clone()}</code></td>
                                        <td data-calls>
                                            {calls}
                                            {(!e.signal_workflows.is_empty()).then(|| view! {
                                                <br/><span data-signals>"signals " {e.signal_workflows.join(", ")} " (endpoint " {e.id} ")"</span>
                                            })}
                                        </td>
                                        <td data-header-names>{names}</td>
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
                                            <details>
                                                <summary>"Change"</summary>
                                                <ActionForm action=update attr:class="form-card" attr:aria-label=change_label>
                                                    <Csrf/>
                                                    <input type="hidden" name="id" value=e.id/>
                                                    <EndpointFields allow_calls=e.allow_calls private_network=e.private_network changing=true header_methods=e.header_methods.join(", ") signal_workflows=e.signal_workflows.join(", ")/>
                                                    <button type="submit" aria-label=save_label>"Save"</button>
                                                </ActionForm>
                                            </details>
                                        </td>
                                    </tr>
                                }
                            })
                            .collect_view()}
                    </DataTable>
                }
                .into_any()
            }/>
            <ActionForm action=create node_ref=create_form attr:class="form-card" attr:aria-label="New webhook endpoint">
                <Csrf/>
                <div class="row">
                    <label>
                        "URL prefix"
                        <input name="url_prefix" required maxlength="2048" placeholder="https://partner.example/hooks/" autocomplete="off"/>
                    </label>
                </div>
                <EndpointFields allow_calls=false private_network=false changing=false header_methods="POST".to_string() signal_workflows=String::new()/>
                <button type="submit" class="primary">"Make endpoint"</button>
            </ActionForm>
            <ActionError error=failure(create.value())/>
            {made}
        </section>
    }
}
