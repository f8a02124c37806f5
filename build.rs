//! Rebuilds the engine when a migration changes: `sqlx::migrate!` embeds the `migrations/`
//! files, and the compiler does not see a change to one of them by itself (an edited migration
//! left the build as it was, running the old SQL).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
