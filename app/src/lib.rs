//! Kickoff's operator dashboard: a Leptos 0.8 app rendered on the server and hydrated in the
//! browser. It reaches the server only through the `console` port (server functions backed by a
//! `Console` the server provides as context); it never sees the engine or sqlx.

pub mod base;
pub mod components;
pub mod console;
pub mod local_time;
pub mod pages;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes, A};
use leptos_router::{path, SsrMode};

use crate::components::live::LiveBadge;
use crate::components::session::UserMenu;
use crate::components::time::ZoneNote;

/// The Content-Security-Policy of every response; `{nonce}` is a page's script nonce.
///
/// Scripts: this site's files and a page's own inline scripts (Leptos's hydration bootstrap and
/// its resource data), which carry the page's nonce; no other inline script runs. WebAssembly may
/// be compiled. Styles: this site's stylesheet and `style` attributes (one bar width), never a
/// `<style>` element. Nothing else is loaded from elsewhere, and no one may frame the dashboard.
pub fn content_security_policy(nonce: Option<&str>) -> String {
    let scripts = match nonce {
        Some(n) => format!("'self' 'nonce-{n}' 'wasm-unsafe-eval'"),
        None => "'self' 'wasm-unsafe-eval'".to_string(),
    };
    format!(
        "default-src 'self'; script-src {scripts}; style-src 'self'; \
         style-src-attr 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
         frame-ancestors 'none'; form-action 'self'; base-uri 'self'; object-src 'none'"
    )
}

/// The HTML document around the app (server side).
pub fn shell(options: LeptosOptions) -> impl IntoView {
    // The page's scripts carry the nonce leptos_axum made for this request; the policy names it.
    #[cfg(feature = "ssr")]
    if let Some(res) = use_context::<leptos_axum::ResponseOptions>() {
        let nonce = leptos::nonce::use_nonce();
        if let Ok(value) = http::HeaderValue::from_str(&content_security_policy(nonce.as_deref())) {
            res.insert_header(http::header::CONTENT_SECURITY_POLICY, value);
        }
    }
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                <link rel="icon" href="data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Ccircle cx='8' cy='8' r='7' fill='%232156d9'/%3E%3C/svg%3E"/>
                // The base before the scripts: the browser reads it back before it hydrates.
                <meta name="kickoff-base" content=base::base()/>
                <HydrationScripts options root=base::base()/>
                {console::accounts::current_me().map(|m| view! {
                    <meta name="kickoff-user" content=m.name/>
                    <meta name="kickoff-role" content=m.role/>
                    <meta name="csrf-token" content=m.csrf/>
                    {m.by_application.then(|| view! { <meta name="kickoff-signed-in-by" content="application"/> })}
                })}
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let me = components::session::provide_me();
    let signed_in = me.is_some();
    let is_admin = me.is_some_and(|m| m.role == "admin");
    components::live::provide_live();
    components::time::provide_clock();
    view! {
        <Stylesheet id="kickoff" href=base::href("/pkg/kickoff.css")/>
        <Title text="Kickoff"/>
        <Router base=base::base()>
            <a class="skip" href="#main">"Skip to content"</a>
            <header class="topbar">
                <a class="brand" href=base::href("/")>"Kickoff"</a>
                <nav aria-label="Main" hidden=!signed_in>
                    <A href=base::href("/") exact=true>"Overview"</A>
                    <A href=base::href("/jobs") exact=true>"Jobs"</A>
                    <A href=base::href("/timers")>"Timers"</A>
                    <A href=base::href("/failures")>"Failures"</A>
                    <A href=base::href("/history")>"History"</A>
                    <A href=base::href("/calls")>"Calls"</A>
                    <A href=base::href("/alerts")>"Alerts"</A>
                    <A href=base::href("/queues")>"Queues"</A>
                    <A href=base::href("/schedules")>"Schedules"</A>
                    <A href=base::href("/questions")>"Questions"</A>
                    <A href=base::href("/workflows")>"Workflows"</A>
                    <A href=base::href("/audit")>"Audit"</A>
                    {is_admin.then(|| view! { <A href=base::href("/users")>"Users"</A> })}
                    {is_admin.then(|| view! { <A href=base::href("/webhooks")>"Webhooks"</A> })}
                    <A href=base::href("/jobs/new")>"New job"</A>
                </nav>
                {signed_in.then(|| view! { <ZoneNote/> <LiveBadge/> <UserMenu/> })}
            </header>
            <main id="main">
                <Routes fallback=|| view! { <p>"Page not found."</p> }>
                    <Route path=path!("/login") view=pages::login::LoginPage ssr=SsrMode::Async/>
                    <Route path=path!("/setup") view=pages::setup::SetupPage ssr=SsrMode::Async/>
                    <Route path=path!("/") view=pages::overview::OverviewPage ssr=SsrMode::Async/>
                    <Route path=path!("/jobs") view=pages::jobs::JobsPage ssr=SsrMode::Async/>
                    <Route path=path!("/jobs/new") view=pages::new_job::NewJobPage ssr=SsrMode::Async/>
                    <Route path=path!("/jobs/:id") view=pages::job_detail::JobDetailPage ssr=SsrMode::Async/>
                    <Route path=path!("/failures") view=pages::jobs::FailuresPage ssr=SsrMode::Async/>
                    <Route path=path!("/timers") view=pages::timers::TimersPage ssr=SsrMode::Async/>
                    <Route path=path!("/history") view=pages::history::HistoryPageView ssr=SsrMode::Async/>
                    <Route path=path!("/queues") view=pages::queues::QueuesPage ssr=SsrMode::Async/>
                    <Route path=path!("/schedules") view=pages::schedules::SchedulesPage ssr=SsrMode::Async/>
                    <Route path=path!("/schedules/new") view=pages::schedules::NewSchedulePage ssr=SsrMode::Async/>
                    <Route path=path!("/schedules/:name") view=pages::schedules::ScheduleDetailPage ssr=SsrMode::Async/>
                    <Route path=path!("/questions") view=pages::questions::QuestionsPage ssr=SsrMode::Async/>
                    <Route path=path!("/questions/new") view=pages::question_new::NewQuestionPage ssr=SsrMode::Async/>
                    <Route path=path!("/questions/:id") view=pages::question_detail::QuestionDetailPage ssr=SsrMode::Async/>
                    <Route path=path!("/workflows") view=pages::workflows::WorkflowsPage ssr=SsrMode::Async/>
                    <Route path=path!("/workflows/:id") view=pages::workflows::WorkflowDetailPage ssr=SsrMode::Async/>
                    <Route path=path!("/audit") view=pages::audit::AuditLogPage ssr=SsrMode::Async/>
                    <Route path=path!("/users") view=pages::users::UsersPage ssr=SsrMode::Async/>
                    <Route path=path!("/webhooks") view=pages::webhooks::WebhooksPage ssr=SsrMode::Async/>
                    <Route path=path!("/calls") view=pages::calls::CallsPage ssr=SsrMode::Async/>
                    <Route path=path!("/alerts") view=pages::alerts::AlertsPage ssr=SsrMode::Async/>
                    <Route path=path!("/account") view=pages::account::AccountPage ssr=SsrMode::Async/>
                </Routes>
            </main>
        </Router>
    }
}

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    // The base the server rendered the page under (see `base`): the router's, and the server
    // functions' (their paths are the dashboard's, the browser asks for them under the base).
    let base = leptos::prelude::document()
        .query_selector("meta[name=kickoff-base]")
        .ok()
        .flatten()
        .and_then(|m| m.get_attribute("content"))
        .filter(|b| base::is_valid(b))
        .unwrap_or_default();
    if !base.is_empty() {
        leptos::server_fn::client::set_server_url(base.clone().leak());
    }
    leptos::mount::hydrate_body(move || {
        provide_context(base::BasePath(base));
        view! { <App/> }
    });
}
