//! The audit log (`/audit`): who did what, to what, from where, with what result; newest first,
//! filtered by person, action and result, refreshed live.

use crate::components::get_form::GetForm;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::components::live::use_live;
use crate::components::loaded::Loaded;
use crate::components::table::{Column, DataTable};
use crate::components::time::{use_clock, When};
use crate::console::audit::{list_audit, AuditPage, AuditQuery};
use crate::console::{nonempty, query_string};

const AUDIT_COLUMNS: &[Column] = &[
    ("When", false),
    ("Who", false),
    ("Action", false),
    ("Target", false),
    ("From", true),
    ("Result", false),
];

#[component]
pub fn AuditLogPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let params = use_query_map();
    let query = Memo::new(move |_| {
        let p = params.read();
        AuditQuery {
            actor: nonempty(p.get("actor")),
            action: nonempty(p.get("action")),
            result: nonempty(p.get("result")),
            before: p.get("before").and_then(|b| b.parse().ok()),
        }
    });
    // The version is part of the key: an unchanged key would not refetch.
    let page = Resource::new(
        move || (query.get(), live.version.get()),
        |(q, _)| list_audit(q),
    );
    clock.follow(page, |p: &AuditPage| p.now_ms);
    let q = move || query.get();
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Audit log"</h1>
            </div>
            <GetForm action="/audit" attr:class="filters" attr:role="search" attr:aria-label="Filter the audit log">
                <label>"Who" <input name="actor" size="12" prop:value=move || q().actor.unwrap_or_default()/></label>
                <label>
                    "Action starts with"
                    <input name="action" size="14" placeholder="jobs.bulk" prop:value=move || q().action.unwrap_or_default()/>
                </label>
                <label>
                    "Result"
                    <select name="result">
                        <option value="" selected=move || q().result.is_none()>"any"</option>
                        <option value="ok" selected=move || q().result.as_deref() == Some("ok")>"ok"</option>
                        <option value="refused" selected=move || q().result.as_deref() == Some("refused")>"refused"</option>
                    </select>
                </label>
                <button type="submit">"Filter"</button>
            </GetForm>
            <Loaded resource=page render=move |p: AuditPage| {
                if p.rows.is_empty() {
                    return view! { <p class="empty">"No recorded action matches."</p> }.into_any();
                }
                let now = p.now_ms;
                let next = p.next_before.map(|b| {
                    let q = query.get_untracked();
                    let mut pairs = Vec::new();
                    for (k, v) in [("actor", q.actor), ("action", q.action), ("result", q.result)] {
                        if let Some(v) = v {
                            pairs.push((k, v));
                        }
                    }
                    pairs.push(("before", b.to_string()));
                    format!("/audit?{}", query_string(&pairs))
                });
                view! {
                    <DataTable label="Audit log" columns=AUDIT_COLUMNS>
                        {p.rows
                            .into_iter()
                            .map(|r| {
                                let target = match (&r.target, r.count, &r.filter) {
                                    (t, Some(n), Some(f)) => format!("{}{n} jobs matching {f}", t.as_deref().map(|t| format!("{t}: ")).unwrap_or_default()),
                                    (t, Some(n), None) => format!("{}{n} jobs", t.as_deref().map(|t| format!("{t}: ")).unwrap_or_default()),
                                    (Some(t), None, _) => t.clone(),
                                    (None, None, _) => String::new(),
                                };
                                view! {
                                    <tr data-audit=r.id>
                                        <td><When at_ms=r.at_ms base_ms=now/></td>
                                        <td>{r.actor.clone()}" "<span class="muted">{r.role.clone()}</span></td>
                                        <td><code>{r.action.clone()}</code></td>
                                        <td>{target}</td>
                                        <td class="wide">{r.address.clone().unwrap_or_default()}</td>
                                        <td class:error-text=!r.ok>{r.result.clone()}</td>
                                    </tr>
                                }
                            })
                            .collect_view()}
                    </DataTable>
                    <nav class="pager" aria-label="Pages">
                        {next.map(|href| view! { <a href=crate::base::href(&href)>"Older →"</a> })}
                    </nav>
                }
                .into_any()
            }/>
        </section>
    }
}
