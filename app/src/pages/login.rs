//! Sign in (`/login`). Works without JavaScript, and before the page's script has run (the server
//! answers a plain post with a redirect to where the operator was going, or back here with the
//! reason and, in a cookie for this page, the name typed). On a fresh install it points to the
//! setup link the server printed.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;
use leptos_router::hooks::use_query_map;

use crate::components::loaded::{error_text, Loaded};
use crate::components::session::load_when_signed_in;
use crate::console::accounts::{get_login_info, safe_next, Login, LoginInfo};

#[component]
pub fn LoginPage() -> impl IntoView {
    let query = use_query_map();
    let next = move || safe_next(query.read().get("next").as_deref());
    let login = ServerAction::<Login>::new();
    let info = Resource::new(|| (), |_| get_login_info());
    load_when_signed_in(login.value());
    view! {
        <section class="page login">
            <h1>"Sign in"</h1>
            {move || {
                login
                    .value()
                    .with(|v| match v {
                        Some(Err(e)) => Some(view! { <p class="error" role="alert">{error_text(e)}</p> }),
                        _ => None,
                    })
            }}
            // The form comes with the page's info: a refused plain post's name (see
            // `console::accounts::login`) is in it, so the server renders it into the field.
            <Loaded resource=info render=move |i: LoginInfo| {
                let typed = i.typed_name.clone();
                let name_focus = typed.is_empty();
                view! {
                    {(!i.has_users).then(|| view! {
                        <div class="confirm" role="note">
                            <p class="question">"No operator account exists yet."</p>
                            <p>
                                "Open the setup link the server printed when it started ("
                                <code>"http://…/setup?code=…"</code>
                                "): it creates the first admin here, in the browser, once. Or create one on the server with "
                                <code>"kickoff user add NAME --role admin"</code>
                                " (with the embedded database, while the server is stopped), or start the server with "
                                <code>"KICKOFF_ADMIN_PASSWORD"</code>
                                " set: it then creates the user "<code>"admin"</code>"."
                            </p>
                        </div>
                    })}
                    <ActionForm action=login attr:class="form-card" attr:aria-label="Sign in">
                        // An attribute, not a property: the server renders it, so a plain form
                        // post (no JavaScript) carries it too.
                        <input type="hidden" name="next" value=next/>
                        // Attributes too: the server renders them for the page that comes back.
                        <label>
                            "Name"
                            <input name="name" required autocomplete="username" value=typed autofocus=name_focus/>
                        </label>
                        <label>
                            "Password"
                            <input type="password" name="password" required autocomplete="current-password" autofocus=!name_focus/>
                        </label>
                        <button type="submit" class="primary">"Sign in"</button>
                    </ActionForm>
                }
            }/>
        </section>
    }
}
