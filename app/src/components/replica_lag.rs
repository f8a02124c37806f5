//! Says that a page's counts or list come from a read replica that is behind
//! (`KICKOFF_READ_DATABASE_URL`), and by how much, once that passes the bound set for it.

use leptos::prelude::*;

#[component]
pub fn ReplicaLag(lag_ms: Option<i64>) -> impl IntoView {
    lag_ms.map(|ms| {
        view! {
            <div class="notice replica-lag" role="status">
                <p>{format!(
                    "Read from a replica {} behind the database: the latest changes may not show here yet.",
                    behind(ms)
                )}</p>
            </div>
        }
    })
}

/// `ms` in words: tenths of a second under a minute, then minutes and seconds.
fn behind(ms: i64) -> String {
    if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::behind;

    #[test]
    fn the_lag_reads_in_seconds_then_minutes() {
        assert_eq!(behind(2_345), "2.3 s");
        assert_eq!(behind(61_500), "1 min 1 s");
    }
}
