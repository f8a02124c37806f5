//! Kickoff's operator dashboard: a Leptos 0.8 app rendered on the server and hydrated in the
//! browser. It reaches the server only through the `console` port (server functions backed by a
//! `Console` the server provides as context); it never sees the engine or sqlx.

pub mod components;
pub mod console;
pub mod pages;

use leptos::prelude::*;
use leptos_meta::{provide_meta_context, MetaTags, Stylesheet, Title};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::StaticSegment;

/// The HTML document around the app (server side).
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                <HydrationScripts options/>
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
    view! {
        <Stylesheet id="kickoff" href="/pkg/kickoff.css"/>
        <Title text="Kickoff"/>
        <Router>
            <header class="topbar">
                <a class="brand" href="/">"Kickoff"</a>
                <nav aria-label="Main">
                    <a href="/">"Overview"</a>
                    <a href="/jobs">"Jobs"</a>
                    <a href="/questions">"Questions"</a>
                </nav>
            </header>
            <main>
                <Routes fallback=|| view! { <p>"Page not found."</p> }>
                    <Route path=StaticSegment("") view=pages::overview::OverviewPage/>
                    <Route path=StaticSegment("jobs") view=pages::jobs::JobsPage/>
                    <Route path=StaticSegment("questions") view=pages::questions::QuestionsPage/>
                </Routes>
            </main>
        </Router>
    }
}

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
