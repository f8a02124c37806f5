//! The signed-in operator in the page: who it is (top bar, sign-out), what its role allows, and the
//! CSRF token every form carries.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::console::accounts::{current_me, Logout, Me};

/// Provides the signed-in operator (if any) to the app.
pub fn provide_me() -> Option<Me> {
    let me = current_me();
    provide_context(me.clone());
    me
}

pub fn use_me() -> Option<Me> {
    use_context::<Option<Me>>().flatten()
}

/// Whether the signed-in operator may act (not only read).
pub fn may_act() -> bool {
    use_me().is_some_and(|m| m.may_act())
}

/// The hidden CSRF field of a form (the server refuses posts without it).
#[component]
pub fn Csrf() -> impl IntoView {
    let token = use_me().map(|m| m.csrf).unwrap_or_default();
    view! { <input type="hidden" name="csrf" value=token/> }
}

/// Loads the page a sign-in (or the setup link) answered with, once it succeeds: a full load, so
/// that the new session's token reaches the page.
/// The answer is a path inside the dashboard, loaded under its base.
pub fn load_when_signed_in(answer: MappedSignal<Option<Result<String, ServerFnError>>>) {
    let _base = crate::base::base();
    Effect::new(move |_| {
        if let Some(Ok(_target)) = answer.with(|a| a.clone()) {
            #[cfg(feature = "hydrate")]
            if let Some(w) = web_sys::window() {
                let _ = w.location().assign(&crate::base::at(&_base, &_target));
            }
        }
    });
}

/// Who is signed in, and the sign-out button.
#[component]
pub fn UserMenu() -> impl IntoView {
    let logout = ServerAction::<Logout>::new();
    Effect::new(move |_| {
        if logout.value().with(|v| matches!(v, Some(Ok(())))) {
            // A full load: the next page must not keep this session's token.
            #[cfg(feature = "hydrate")]
            if let Some(w) = web_sys::window() {
                let _ = w.location().assign(&crate::base::href("/login"));
            }
        }
    });
    use_me().map(|me| {
        view! {
            <span class="user">
                <a href=crate::base::href("/account") aria-label="Your account">{me.name.clone()}" · "{me.role.clone()}</a>
                // Signed in by the application Kickoff is mounted in: its own sign-out is the way out.
                {(!me.by_application).then(|| view! {
                    <ActionForm action=logout attr:class="inline">
                        <Csrf/>
                        <button type="submit" class="link-button">"Sign out"</button>
                    </ActionForm>
                })}
            </span>
        }
    })
}
