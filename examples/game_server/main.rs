//! A small game server with Kickoff inside (docs/embedding.md, "A Rust application"): its own
//! `games` table and routes, Kickoff's engine in its runtime running its `game.kick_off` kind
//! beside Kickoff's own, and Kickoff's dashboard and REST API under `/kickoff`.
//!
//! ```sh
//! scripts/build    # the dashboard's site, in target/site
//! DATABASE_URL=postgres://... KICKOFF_ADMIN_PASSWORD=... cargo run --example game_server
//! curl -X POST localhost:3100/games -H 'content-type: application/json' \
//!   -d '{"name": "Bears vs Wolves", "starts_at": "2027-01-01T20:00:00Z",
//!        "question": {"prompt": "First goal?", "choices": ["Bears", "Wolves"]}}'
//! open http://localhost:3100/kickoff
//! curl -X DELETE localhost:3100/games/1    # called off: its jobs cancelled, its question gone
//! ```
//!
//! Settings (environment): `DATABASE_URL` (required), `GAME_SERVER_ADDR` (`127.0.0.1:3100`),
//! `KICKOFF_ADMIN_PASSWORD` (the first admin `admin`, made when there is no account),
//! `KICKOFF_API_TOKEN`, `KICKOFF_SECRET_KEY`, `LEPTOS_SITE_ROOT` (`target/site`).
//!
//! Behind an authenticating proxy that names the game's staff in a header (an oauth2-proxy's
//! `X-Forwarded-User`): `GAME_SERVER_USER_HEADER=x-forwarded-user` signs the dashboard's users in
//! by it instead of Kickoff's accounts (`GAME_SERVER_ADMINS=alice,bob`: Kickoff's admins; the
//! others its operators), with `KICKOFF_SECRET_KEY` set.

mod app;

use std::sync::Arc;

use kickoff::embed::{Kickoff, Options};
use kickoff::engine::{Db, PoolMode};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?;
    let addr = std::env::var("GAME_SERVER_ADDR").unwrap_or_else(|_| "127.0.0.1:3100".into());
    // The application's pool: its own queries, its transactions, and Kickoff's engine.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(20)
        .connect(&url)
        .await?;
    sqlx::raw_sql(app::SCHEMA).execute(&pool).await?;

    let mut options = Options::new("/kickoff");
    options.engine.queues = vec![
        ("default".into(), 10),
        ("questions".into(), 10),
        ("webhooks".into(), 10),
    ];
    options.admin_password = std::env::var("KICKOFF_ADMIN_PASSWORD").ok();
    options.api_token = std::env::var("KICKOFF_API_TOKEN").ok();
    if let Ok(key) = std::env::var("KICKOFF_SECRET_KEY") {
        options.secret_key = Some(kickoff::webhooks::SecretKey::from_base64(&key)?);
    }
    if let Ok(root) = std::env::var("LEPTOS_SITE_ROOT") {
        options.site_root = root.into();
    }
    if let Ok(header) = std::env::var("GAME_SERVER_USER_HEADER") {
        let admins = std::env::var("GAME_SERVER_ADMINS").unwrap_or_default();
        options.authenticate = Some(Arc::new(app::ProxySignIn {
            header: header.parse()?,
            admins: admins.split(',').map(|a| a.trim().to_string()).collect(),
        }));
    }
    let mut workers = kickoff::workers::builtin(Vec::new());
    workers.register(app::KickOffWorker);
    let kickoff =
        Arc::new(Kickoff::start(Db::new(pool, PoolMode::Direct), workers, options).await?);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("Game server listening on http://{}", listener.local_addr()?);
    let router = app::router(app::Game {
        kickoff: kickoff.clone(),
    });
    let stopping = kickoff.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            // The dashboard's live streams end, so the graceful stop does not wait on them.
            stopping.end_streams();
        })
        .await?;
    match Arc::try_unwrap(kickoff) {
        Ok(kickoff) => kickoff.stop().await,
        Err(_) => eprintln!("Kickoff is still in use: not stopped gracefully"),
    }
    Ok(())
}
