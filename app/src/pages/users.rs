//! Users (`/users`, admins): every account with its role; add one, change a role, disable or
//! enable, reset a password; and every API token, to revoke any.
//!
//! An admin's own row offers none of the changes that could lock them out: the server refuses
//! them too, and refuses anything that would leave no enabled admin.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::session::Csrf;
use crate::components::table::{Column, DataTable};
use crate::components::time::{use_clock, When};
use crate::components::tokens::TokenTable;
use crate::console::accounts::{
    get_users, CreateUser, RevokeToken, UpdateUser, UserRow, UsersPage,
};

const ROLES: [&str; 3] = ["viewer", "operator", "admin"];

const USER_COLUMNS: &[Column] = &[
    ("User", false),
    ("Role", false),
    ("Status", false),
    ("Created", true),
    ("Password", false),
];

#[component]
pub fn UsersPage() -> impl IntoView {
    let clock = use_clock();
    let create = ServerAction::<CreateUser>::new();
    let update = ServerAction::<UpdateUser>::new();
    let revoke = ServerAction::<RevokeToken>::new();
    // The versions are the key: an unchanged key would not refetch.
    let page = Resource::new(
        move || {
            (
                create.version().get(),
                update.version().get(),
                revoke.version().get(),
            )
        },
        |_| get_users(),
    );
    clock.follow(page, |p: &UsersPage| p.now_ms);
    let created = move || {
        create
            .value()
            .with(|v| matches!(v, Some(Ok(_))))
            .then(|| view! { <p class="field-note" role="status">"User created: they can sign in now."</p> })
    };
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Users"</h1>
            </div>
            <ActionError error=failure(update.value())/>
            <ActionError error=failure(revoke.value())/>
            <Loaded resource=page render=move |p: UsersPage| {
                let now = p.now_ms;
                view! {
                    <DataTable label="Users" columns=USER_COLUMNS>
                        {p.users.into_iter().map(|u| view! { <UserLine u now update/> }).collect_view()}
                    </DataTable>
                    <h2>"API tokens"</h2>
                    <TokenTable rows=p.tokens now_ms=now revoke empty="No API tokens yet: each user makes theirs on their account page."/>
                }
            }/>
            <h2>"Add a user"</h2>
            <ActionForm action=create attr:class="form-card" attr:aria-label="Add a user">
                <Csrf/>
                <div class="row">
                    <label>
                        "Name"
                        <input name="name" required maxlength="64" pattern="[A-Za-z0-9_.\\-]{1,64}" autocomplete="off"/>
                    </label>
                    <label>
                        "Role"
                        <select name="role">
                            {ROLES.iter().map(|r| view! { <option value=*r selected=*r == "viewer">{*r}</option> }).collect_view()}
                        </select>
                    </label>
                    <label>
                        "Password (12 characters or more)"
                        <input type="password" name="password" required minlength="12" maxlength="1024" autocomplete="new-password"/>
                    </label>
                </div>
                <button type="submit" class="primary">"Add user"</button>
            </ActionForm>
            <ActionError error=failure(create.value())/>
            {created}
        </section>
    }
}

/// One user's row with its controls.
#[component]
fn UserLine(u: UserRow, now: i64, update: ServerAction<UpdateUser>) -> impl IntoView {
    let id = u.id;
    let name = u.name.clone();
    let current_role = u.role.clone();
    let role_label = format!("Role of {name}");
    let password_label = format!("New password for {name}");
    view! {
        <tr data-user=u.name.clone()>
            <th scope="row">{u.name.clone()}{u.is_me.then_some(" (you)")}</th>
            <td>
                {if u.is_me {
                    view! { <span>{u.role.clone()}</span> }.into_any()
                } else {
                    view! {
                        <ActionForm action=update attr:class="inline-form">
                            <Csrf/>
                            <input type="hidden" name="id" value=id/>
                            <select name="role" aria-label=role_label>
                                {ROLES
                                    .iter()
                                    .map(|r| view! { <option value=*r selected=*r == current_role>{*r}</option> })
                                    .collect_view()}
                            </select>
                            <button type="submit" name="action" value="role">"Change role"</button>
                        </ActionForm>
                    }
                    .into_any()
                }}
            </td>
            <td>
                <div class="actions">
                    {if u.disabled {
                        view! { <span class="badge state-cancelled">"disabled"</span> }.into_any()
                    } else {
                        view! { <span class="badge state-completed">"active"</span> }.into_any()
                    }}
                    {(!u.is_me).then(|| {
                        let (verb, op) = if u.disabled { ("Enable", "enable") } else { ("Disable", "disable") };
                        let label = format!("{verb} {}", name);
                        view! {
                            <ActionForm action=update>
                                <Csrf/>
                                <input type="hidden" name="id" value=id/>
                                <button type="submit" name="action" value=op aria-label=label>{verb}</button>
                            </ActionForm>
                        }
                    })}
                </div>
            </td>
            <td class="wide"><When at_ms=u.created_ms base_ms=now/></td>
            <td>
                {if u.is_me {
                    view! { <a href=crate::base::href("/account")>"Change yours"</a> }.into_any()
                } else {
                    view! {
                        <ActionForm action=update attr:class="inline-form">
                            <Csrf/>
                            <input type="hidden" name="id" value=id/>
                            <input
                                type="password"
                                name="password"
                                required
                                minlength="12"
                                maxlength="1024"
                                autocomplete="new-password"
                                aria-label=password_label
                            />
                            <button type="submit" name="action" value="password">"Reset"</button>
                        </ActionForm>
                    }
                    .into_any()
                }}
            </td>
        </tr>
    }
}
