//! Alerts (`/alerts`): what fires now (with who acknowledged it), what resolved lately, and the
//! rules, refreshed live. Operators acknowledge; admins make, switch off and delete rules.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::live::use_live;
use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::session::Csrf;
use crate::components::table::{Column, DataTable};
use crate::components::time::{use_clock, When};
use crate::console::alerts::{
    get_alerts, AcknowledgeAlert, AlertsPage, CreateAlertRule, DeleteAlertRule, IncidentInfo,
    SetAlertRule, CONDITIONS,
};

const FIRING_COLUMNS: &[Column] = &[
    ("Rule", false),
    ("What", false),
    ("Fired", false),
    ("Acknowledged", false),
];
const RESOLVED_COLUMNS: &[Column] = &[
    ("Rule", false),
    ("What", false),
    ("Fired", true),
    ("Resolved", false),
];
const RULE_COLUMNS: &[Column] = &[
    ("Name", false),
    ("Fires when", false),
    ("Notifies", true),
    ("", false),
];

#[component]
pub fn AlertsPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let acknowledge = ServerAction::<AcknowledgeAlert>::new();
    let create = ServerAction::<CreateAlertRule>::new();
    let set = ServerAction::<SetAlertRule>::new();
    let delete = ServerAction::<DeleteAlertRule>::new();
    // The versions are part of the key: an unchanged key would not refetch.
    let page = Resource::new(
        move || {
            (
                live.version.get(),
                acknowledge.version().get(),
                create.version().get(),
                set.version().get(),
                delete.version().get(),
            )
        },
        |_| get_alerts(),
    );
    clock.follow(page, |p: &AlertsPage| p.now_ms);
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Alerts"</h1>
            </div>
            <ActionError error=failure(acknowledge.value())/>
            <ActionError error=failure(set.value())/>
            <ActionError error=failure(delete.value())/>
            <Loaded resource=page render=move |p: AlertsPage| {
                let now = p.now_ms;
                let may_ack = p.may_acknowledge;
                let may_manage = p.may_manage;
                view! {
                    <h2>"Firing"</h2>
                    {if p.firing.is_empty() {
                        view! { <p class="empty" data-firing="0">"Nothing fires."</p> }.into_any()
                    } else {
                        view! {
                            <DataTable label="Firing alerts" columns=FIRING_COLUMNS>
                                {p.firing
                                    .into_iter()
                                    .map(|i| view! { <FiringRow i now may_ack acknowledge/> })
                                    .collect_view()}
                            </DataTable>
                        }
                        .into_any()
                    }}
                    <h2>"Resolved lately"</h2>
                    {if p.resolved.is_empty() {
                        view! { <p class="empty">"Nothing resolved yet."</p> }.into_any()
                    } else {
                        view! {
                            <DataTable label="Resolved alerts" columns=RESOLVED_COLUMNS>
                                {p.resolved
                                    .into_iter()
                                    .map(|i| view! {
                                        <tr data-incident=i.id>
                                            <td>{i.rule.clone()}</td>
                                            <td>{i.summary.clone()}</td>
                                            <td class="wide"><When at_ms=i.fired_ms base_ms=now/></td>
                                            <td>{i.resolved_ms.map(|r| view! { <When at_ms=r base_ms=now/> })}</td>
                                        </tr>
                                    })
                                    .collect_view()}
                            </DataTable>
                        }
                        .into_any()
                    }}
                    <h2>"Rules"</h2>
                    {if p.rules.is_empty() {
                        view! { <p class="empty">"No alert rules yet."</p> }.into_any()
                    } else {
                        view! {
                            <DataTable label="Alert rules" columns=RULE_COLUMNS>
                                {p.rules
                                    .into_iter()
                                    .map(|r| {
                                        let toggle_label = format!("{} rule {}", if r.enabled { "Switch off" } else { "Switch on" }, r.name);
                                        let delete_label = format!("Delete rule {}", r.name);
                                        view! {
                                            <tr data-rule=r.id class:muted=!r.enabled>
                                                <td>{r.name.clone()}{(!r.enabled).then(|| view! { <span class="muted">" (off)"</span> })}</td>
                                                <td>{r.words.clone()}</td>
                                                <td class="wide">
                                                    {r.notifies.clone().map(|h| format!("{h} ({})", r.payload)).unwrap_or_else(|| "the dashboard only".into())}
                                                </td>
                                                <td>
                                                    {may_manage.then(|| view! {
                                                        <ActionForm action=set attr:class="inline-form">
                                                            <Csrf/>
                                                            <input type="hidden" name="id" value=r.id/>
                                                            <input type="hidden" name="enabled" value=(!r.enabled).to_string()/>
                                                            <button type="submit" aria-label=toggle_label>{if r.enabled { "Switch off" } else { "Switch on" }}</button>
                                                        </ActionForm>
                                                        <ActionForm action=delete attr:class="inline-form">
                                                            <Csrf/>
                                                            <input type="hidden" name="id" value=r.id/>
                                                            <button type="submit" class="danger" aria-label=delete_label>"Delete"</button>
                                                        </ActionForm>
                                                    })}
                                                </td>
                                            </tr>
                                        }
                                    })
                                    .collect_view()}
                            </DataTable>
                        }
                        .into_any()
                    }}
                    {may_manage.then(|| view! { <NewRuleForm create/> })}
                }
                .into_any()
            }/>
        </section>
    }
}

#[component]
fn FiringRow(
    i: IncidentInfo,
    now: i64,
    may_ack: bool,
    acknowledge: ServerAction<AcknowledgeAlert>,
) -> impl IntoView {
    let label = format!("Acknowledge incident {}", i.id);
    view! {
        <tr data-incident=i.id class="firing">
            <td><strong>{i.rule.clone()}</strong></td>
            <td>{i.summary.clone()}</td>
            <td><When at_ms=i.fired_ms base_ms=now/></td>
            <td>
                {match (i.acknowledged_ms, i.acknowledged_by.clone()) {
                    (Some(at), by) => view! {
                        <span>{by.unwrap_or_default()} " " <When at_ms=at base_ms=now/></span>
                    }.into_any(),
                    (None, _) if may_ack => view! {
                        <ActionForm action=acknowledge attr:class="inline-form">
                            <Csrf/>
                            <input type="hidden" name="id" value=i.id/>
                            <button type="submit" aria-label=label>"Acknowledge"</button>
                        </ActionForm>
                    }.into_any(),
                    _ => view! { <span class="muted">"not yet"</span> }.into_any(),
                }}
            </td>
        </tr>
    }
}

#[component]
fn NewRuleForm(create: ServerAction<CreateAlertRule>) -> impl IntoView {
    view! {
        <ActionForm action=create attr:class="form-card" attr:aria-label="New alert rule">
            <Csrf/>
            <h2>"New rule"</h2>
            <div class="row">
                <label>"Name" <input name="rule[name]" required maxlength="100" autocomplete="off"/></label>
                <label>
                    "Fires when"
                    <select name="rule[condition]" required>
                        {CONDITIONS
                            .iter()
                            .map(|(value, words)| view! { <option value=*value>{*words}</option> })
                            .collect_view()}
                    </select>
                </label>
            </div>
            <div class="row">
                <label>"Queue" <input name="rule[queue]" size="10" placeholder="any"/></label>
                <label>"Kind" <input name="rule[kind]" size="12" placeholder="any"/></label>
                <label>"Game" <input name="rule[game]" size="16" placeholder="any"/></label>
                <label>"Workflow" <input name="rule[workflow]" size="12" placeholder="any"/></label>
            </div>
            <div class="row">
                <label>"Milliseconds" <input name="rule[threshold_ms]" size="8" inputmode="numeric" placeholder="default"/></label>
                <label>"Count" <input name="rule[threshold_n]" size="8" inputmode="numeric"/></label>
                <label>"Percent" <input name="rule[percent]" size="5" inputmode="decimal"/></label>
                <label>"For seconds" <input name="rule[for_secs]" size="5" inputmode="numeric" placeholder="0"/></label>
            </div>
            <p class="muted">
                "Late lock and open question: milliseconds after game time (default 1000). Lost node: "
                "since the last heartbeat (30000). Overdue: past the due time (60000). Backlog: the count "
                "of available jobs allowed. Failure rate: the percent, and the count of attempts in 5 "
                "minutes before it counts (10)."
            </p>
            <div class="row">
                <label>
                    "Notify (a webhook URL; signed under an endpoint)"
                    <input name="rule[notify_url]" size="40" maxlength="2048" placeholder="https://hooks.slack.com/services/…" autocomplete="off"/>
                </label>
                <label>
                    "Payload"
                    <select name="rule[payload]">
                        <option value="standard">"Kickoff (type, timestamp, data)"</option>
                        <option value="slack">"Slack ({\"text\": …})"</option>
                    </select>
                </label>
            </div>
            <button type="submit" class="primary">"Make rule"</button>
            <ActionError error=failure(create.value())/>
        </ActionForm>
    }
}
