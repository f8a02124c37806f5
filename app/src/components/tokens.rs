//! API token lists (the account page: one's own; the users page: everyone's) and the box that
//! shows a new token's text, once.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::session::Csrf;
use crate::components::table::{Column, DataTable};
use crate::components::time::When;
use crate::console::accounts::{NewToken, RevokeToken, TokenRow};

const TOKEN_COLUMNS: &[Column] = &[
    ("Token", false),
    ("Owner", false),
    ("Scope", false),
    ("Created", true),
    ("Last used", true),
    ("Status", false),
    ("", false),
];

#[component]
pub fn TokenTable(
    rows: Vec<TokenRow>,
    now_ms: i64,
    revoke: ServerAction<RevokeToken>,
    /// Shown when there is no token.
    empty: &'static str,
) -> impl IntoView {
    if rows.is_empty() {
        return view! { <p class="empty">{empty}</p> }.into_any();
    }
    view! {
        <DataTable label="API tokens" columns=TOKEN_COLUMNS>
            {rows
                .into_iter()
                .map(|t| {
                    let label = format!("Revoke token {}", t.name);
                    view! {
                        <tr data-token=t.id>
                            <td>{t.name.clone()}" "<code class="muted">{t.prefix.clone()}"…"</code></td>
                            <td>{t.owner.clone()}</td>
                            <td>{t.scope.clone()}</td>
                            <td class="wide"><When at_ms=t.created_ms base_ms=now_ms/></td>
                            <td class="wide">
                                {match t.last_used_ms {
                                    Some(at) => view! { <When at_ms=at base_ms=now_ms/> }.into_any(),
                                    None => view! { <span class="muted">"never"</span> }.into_any(),
                                }}
                            </td>
                            <td>
                                {match t.revoked_ms {
                                    Some(_) => view! { <span class="badge state-cancelled">"revoked"</span> }.into_any(),
                                    None => view! { <span class="badge state-completed">"active"</span> }.into_any(),
                                }}
                            </td>
                            <td>
                                {t.revoked_ms.is_none().then(|| view! {
                                    <ActionForm action=revoke>
                                        <Csrf/>
                                        <input type="hidden" name="id" value=t.id/>
                                        <button type="submit" class="danger" aria-label=label>"Revoke"</button>
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
}

/// A token just made, with the warning that it is shown only now.
#[component]
pub fn NewTokenBox(token: NewToken) -> impl IntoView {
    view! {
        <div class="notice" role="status">
            <p>"Your new token. Copy it now: it is not shown again."</p>
            <pre class="token"><code data-new-token=token.id>{token.token}</code></pre>
            <p class="muted">"Send it as " <code>"Authorization: Bearer <token>"</code> " to " <code>{crate::base::href("/api/v1")}</code> "."</p>
        </div>
    }
}
