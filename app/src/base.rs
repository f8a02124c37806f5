//! Where the dashboard is served: at the site's root (`""`, the server as it is) or under a path
//! (`"/kickoff"`: mounted in an application's router, or behind a proxy that forwards a path).
//!
//! Every URL the dashboard writes out (links, its stylesheet and scripts, its live stream, its
//! server functions, the redirects of a sign-in) is the base and a path inside the dashboard,
//! written with [`href`] — the router's `A` too (it leaves an absolute path as it is). Only
//! `navigate` is given the path inside the dashboard: the router adds the base (given `href`'s
//! answer it would add it twice). Filters use `GetForm`, not the router's `Form`, for that reason. The server provides the base as context; the browser reads it back from the
//! page (`<meta name="kickoff-base">`) before it hydrates.

use leptos::prelude::*;

/// The path the dashboard is served under: empty, or `/` and segments without a trailing `/`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BasePath(pub String);

/// The base of this render (empty outside a mounted dashboard).
pub fn base() -> String {
    use_context::<BasePath>().map(|b| b.0).unwrap_or_default()
}

/// `path` (absolute inside the dashboard: `/jobs/7`) as the browser must ask for it.
pub fn href(path: &str) -> String {
    at(&base(), path)
}

/// `path` under `base`; the dashboard's root under a base is the base itself (`/kickoff`).
pub fn at(base: &str, path: &str) -> String {
    match path.strip_prefix('/') {
        Some(rest) if !base.is_empty() && (rest.is_empty() || rest.starts_with(['?', '#'])) => {
            format!("{base}{rest}")
        }
        _ => format!("{base}{path}"),
    }
}

/// Whether `base` may be a dashboard's base: empty, or `/` and path segments of letters, digits,
/// `-`, `_` and `.`, without a trailing `/` (nothing to escape in HTML or a URL).
pub fn is_valid(base: &str) -> bool {
    base.is_empty()
        || (base.starts_with('/')
            && base[1..].split('/').all(|segment| {
                !segment.is_empty()
                    && segment != "."
                    && segment != ".."
                    && segment
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_goes_under_the_base_and_the_root_is_the_base_itself() {
        assert_eq!(at("", "/"), "/");
        assert_eq!(at("", "/jobs?x=1"), "/jobs?x=1");
        assert_eq!(at("/kickoff", "/"), "/kickoff");
        assert_eq!(at("/kickoff", "/jobs/7"), "/kickoff/jobs/7");
        assert_eq!(at("/kickoff", "/?x=1"), "/kickoff?x=1");
    }

    #[test]
    fn a_base_is_empty_or_plain_segments_without_a_trailing_slash() {
        for good in ["", "/kickoff", "/ops/kickoff", "/k-1_2.x"] {
            assert!(is_valid(good), "{good}");
        }
        for bad in [
            "/",
            "kickoff",
            "/kickoff/",
            "//x",
            "/a//b",
            "/a b",
            "/a?b",
            "/a#b",
            "/..",
            "/a/.",
            "/é",
            "/a\"b",
            "/a<b",
        ] {
            assert!(!is_valid(bad), "{bad}");
        }
    }
}
