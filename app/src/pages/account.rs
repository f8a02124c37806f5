//! The signed-in user's account (`/account`): change one's password (the other sessions end), and
//! one's API tokens: make one (its text is shown once), see when each was last used, revoke.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::session::{use_me, Csrf};
use crate::components::time::use_clock;
use crate::components::tokens::{NewTokenBox, TokenTable};
use crate::console::accounts::{
    get_account, AccountPage, ChangePassword, CreateToken, RevokeToken,
};

#[component]
pub fn AccountPage() -> impl IntoView {
    let clock = use_clock();
    let create = ServerAction::<CreateToken>::new();
    let revoke = ServerAction::<RevokeToken>::new();
    let password = ServerAction::<ChangePassword>::new();
    // The versions are the key: an unchanged key would not refetch.
    let page = Resource::new(
        move || (create.version().get(), revoke.version().get()),
        |_| get_account(),
    );
    clock.follow(page, |p: &AccountPage| p.now_ms);
    let may_write = use_me().is_some_and(|m| m.may_act());
    // Signed in by the application Kickoff is mounted in: no password here, so no token either.
    let by_application = use_me().is_some_and(|m| m.by_application);
    let new_token = move || {
        create.value().with(|v| match v {
            Some(Ok(t)) => Some(view! { <NewTokenBox token=t.clone()/> }),
            _ => None,
        })
    };
    let password_changed = move || {
        password.value().with(|v| matches!(v, Some(Ok(())))).then(|| {
            view! { <p class="field-note" role="status">"Password changed: your other sessions are signed out."</p> }
        })
    };
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"Your account"</h1>
            </div>
            <Loaded resource=page render=move |p: AccountPage| {
                let now = p.now_ms;
                view! {
                    <p class="lead">"Signed in as " <strong>{p.name.clone()}</strong> ", " {p.role.clone()} "."</p>
                    <h2>"API tokens"</h2>
                    <p class="muted">
                        "A token lets a script call the REST API as you: " <em>"read"</em> " tokens only read; "
                        <em>"write"</em> " tokens may also change what your role allows. Revoking one stops it at once."
                    </p>
                    <TokenTable rows=p.tokens now_ms=now revoke empty="You have no API tokens."/>
                }
            }/>
            <ActionError error=failure(revoke.value())/>
            {by_application.then(|| view! {
                <p class="field-note" role="note">
                    "You are signed in by the application Kickoff runs in: your account here has no password, "
                    "so it makes no API token and has no password to change."
                </p>
            })}
            <Show when=move || !by_application>
            <ActionForm action=create attr:class="form-card" attr:aria-label="New API token">
                <Csrf/>
                <div class="row">
                    <label>
                        "Token name"
                        <input name="name" required maxlength="100" placeholder="deploy script" autocomplete="off"/>
                    </label>
                    <label>
                        "Scope"
                        <select name="scope">
                            <option value="read" selected=true>"read"</option>
                            <option value="write" disabled=!may_write>"write"</option>
                        </select>
                    </label>
                    <label>
                        "Your password (to confirm)"
                        <input type="password" name="password" required autocomplete="current-password"/>
                    </label>
                </div>
                <button type="submit" class="primary">"Make token"</button>
            </ActionForm>
            <ActionError error=failure(create.value())/>
            {new_token}
            <h2>"Password"</h2>
            <ActionForm action=password attr:class="form-card" attr:aria-label="Change your password">
                <Csrf/>
                <div class="row">
                    <label>
                        "Current password"
                        <input type="password" name="current" required autocomplete="current-password"/>
                    </label>
                    <label>
                        "New password (12 characters or more)"
                        <input type="password" name="new" required minlength="12" maxlength="1024" autocomplete="new-password"/>
                    </label>
                </div>
                <button type="submit">"Change password"</button>
            </ActionForm>
            <ActionError error=failure(password.value())/>
            {password_changed}
            </Show>
        </section>
    }
}
