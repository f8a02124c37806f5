//! The first admin (`/setup?code=…`): a server started on a database with no user prints this
//! link. The page asks for a name and a password (twice), creates the admin, signs them in and goes
//! on to the overview; without the server's live code it is a 404. Works without JavaScript (the
//! server answers a plain post with a redirect).

use leptos::prelude::*;

use crate::components::action_form::ActionForm;
use leptos_router::hooks::use_query_map;

use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::session::load_when_signed_in;
use crate::console::accounts::{check_setup_code, SetUp};

#[component]
pub fn SetupPage() -> impl IntoView {
    let query = use_query_map();
    let code = move || query.read().get("code").unwrap_or_default();
    let set_up = ServerAction::<SetUp>::new();
    let check = Resource::new(code, check_setup_code);
    load_when_signed_in(set_up.value());
    view! {
        <section class="page login">
            <Loaded resource=check render=move |()| view! {
                <h1>"Create the first admin"</h1>
                <p class="lead">
                    "No operator account exists yet. This link from the server's output works once: "
                    "the account made here is an admin, and you are signed in with it."
                </p>
                <ActionForm action=set_up attr:class="form-card" attr:aria-label="Create the first admin">
                    // An attribute, so that a plain form post (no JavaScript) carries it too.
                    <input type="hidden" name="code" value=code/>
                    <label>
                        "Name"
                        <input name="name" required maxlength="64" autocomplete="username" autofocus/>
                    </label>
                    <label>
                        "Password"
                        <input type="password" name="password" required minlength="12" maxlength="1024" autocomplete="new-password"/>
                    </label>
                    <label>
                        "Password again"
                        <input type="password" name="confirm" required minlength="12" maxlength="1024" autocomplete="new-password"/>
                    </label>
                    <p class="muted">"A name of a-z, 0-9, '_', '.', '-'; a password of 12 characters or more."</p>
                    <button type="submit" class="primary">"Create admin"</button>
                </ActionForm>
                <ActionError error=failure(set_up.value())/>
            }/>
        </section>
    }
}
