//! Which `Host` a request may name. A web page on another site can make a browser send requests
//! to a server on loopback by pointing its own name at 127.0.0.1 (DNS rebinding); such requests
//! carry that other name as their `Host`, so a server that answers only for its own names is out of
//! reach.
//!
//! Invariants:
//! - With `KICKOFF_ALLOWED_HOSTS` set, only those names (and the listen address itself) are
//!   answered; an entry without a port matches any port.
//! - Unset, a server listening on loopback answers only `localhost`, `127.0.0.1` and `[::1]`, on
//!   any port (a forwarded port, `ssh -L 8080:localhost:3000`, names another one; a page of
//!   another site cannot name these); one listening on another address answers any name (the
//!   start-up log says which).
//! - Others get 421 Misdirected Request. The probes (`/healthz`, `/readyz`) answer every name.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The names a server answers for.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    /// `None`: any name.
    names: Option<Vec<(String, Option<u16>)>>,
}

impl Default for AllowedHosts {
    /// Any name (tests, and a server bound to every address without `KICKOFF_ALLOWED_HOSTS`).
    fn default() -> Self {
        AllowedHosts { names: None }
    }
}

impl AllowedHosts {
    /// The names for a server listening on `listen`, with `configured` (`host` or `host:port`).
    pub fn new(listen: SocketAddr, configured: &[String]) -> Result<Self, String> {
        let mut names: Vec<(String, Option<u16>)> = Vec::new();
        for entry in configured
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
        {
            names.push(split_host(&entry.to_ascii_lowercase()).ok_or_else(|| {
                format!("KICKOFF_ALLOWED_HOSTS: `{entry}` is not a host or host:port")
            })?);
        }
        let port = Some(listen.port());
        if names.is_empty() {
            if !listen.ip().is_loopback() {
                return Ok(AllowedHosts::default());
            }
            for name in ["localhost", "127.0.0.1", "[::1]"] {
                names.push((name.to_string(), None));
            }
        }
        let own = match listen.ip() {
            std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        names.push((own, port));
        Ok(AllowedHosts { names: Some(names) })
    }

    /// Whether a request whose `Host` header is `host` is answered.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let Some(names) = &self.names else {
            return true;
        };
        let Some((name, port)) = host.and_then(|h| split_host(&h.to_ascii_lowercase())) else {
            return false;
        };
        names.iter().any(|(n, p)| {
            *n == name
                && match (p, port) {
                    (None, _) => true,
                    (Some(p), Some(q)) => *p == q,
                    // A `Host` without a port names the scheme's default one.
                    (Some(p), None) => *p == 80 || *p == 443,
                }
        })
    }

    /// A line for the start-up log.
    pub fn describe(&self) -> String {
        match &self.names {
            None => "any Host (set KICKOFF_ALLOWED_HOSTS to the names clients use)".to_string(),
            Some(names) => names
                .iter()
                .map(|(n, p)| p.map_or(n.clone(), |p| format!("{n}:{p}")))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// `name` and port of `host` or `host:port` (`[v6]` or `[v6]:port` for IPv6).
fn split_host(host: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let end = rest.find(']')?;
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        (format!("[{}]", &rest[..end]), port)
    } else {
        match host.rsplit_once(':') {
            Some((n, p)) => (n.to_string(), Some(p.parse().ok()?)),
            None => (host.to_string(), None),
        }
    };
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']'));
    plain.then_some((name, port))
}

/// Answers 421 to a request naming a host this server does not answer for.
pub async fn check(State(allowed): State<Arc<AllowedHosts>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == "/healthz" || path == "/readyz" {
        return next.run(req).await;
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    if allowed.allows(host) {
        return next.run(req).await;
    }
    (
        StatusCode::MISDIRECTED_REQUEST,
        axum::Json(serde_json::json!({ "error": {
            "code": "unknown_host",
            "message": "this server does not answer for that Host: add it to KICKOFF_ALLOWED_HOSTS",
        }})),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_server_answers_only_its_own_names() {
        let hosts = AllowedHosts::new("127.0.0.1:3000".parse().unwrap(), &[]).unwrap();
        for ok in [
            "localhost:3000",
            "127.0.0.1:3000",
            "[::1]:3000",
            "LOCALHOST:3000",
            // A forwarded port, or no port at all: still a loopback name.
            "localhost:8080",
            "localhost",
        ] {
            assert!(hosts.allows(Some(ok)), "{ok}");
        }
        for refused in [
            "evil.example:3000",
            "evil.example",
            "127.0.0.2:3000",
            "",
            "a b:3000",
        ] {
            assert!(!hosts.allows(Some(refused)), "{refused}");
        }
        assert!(!hosts.allows(None));
    }

    #[test]
    fn configured_names_replace_the_loopback_ones_and_may_omit_the_port() {
        let hosts = AllowedHosts::new(
            "0.0.0.0:3000".parse().unwrap(),
            &["kickoff.example.com".into(), "ops.example.com:8443".into()],
        )
        .unwrap();
        assert!(hosts.allows(Some("kickoff.example.com")));
        assert!(hosts.allows(Some("kickoff.example.com:3000")));
        assert!(hosts.allows(Some("ops.example.com:8443")));
        assert!(!hosts.allows(Some("ops.example.com:9000")));
        assert!(!hosts.allows(Some("localhost:3000")));
        assert!(hosts.allows(Some("0.0.0.0:3000")));
        // Bound to every address with none configured: any name.
        let any = AllowedHosts::new("0.0.0.0:3000".parse().unwrap(), &[]).unwrap();
        assert!(any.allows(Some("whatever.example")));
        assert!(AllowedHosts::new("127.0.0.1:3000".parse().unwrap(), &["a/b".into()]).is_err());
    }
}
