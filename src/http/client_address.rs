//! The client's address, as the audit log and the sign-in throttle see it: the connection's peer,
//! or, when that peer is one of `KICKOFF_TRUSTED_PROXIES`, the address that proxy says it serves
//! (`X-Forwarded-For`).
//!
//! Invariants:
//! - `X-Forwarded-For` is read only from a trusted proxy: anyone else could write any address in it.
//! - The header is read from its right end (the hop nearest to us), skipping trusted proxies; the
//!   first address that is not one is the client. An entry that is not an address stops the walk at
//!   the hop that wrote it (a proxy), so a client cannot choose its address by sending the header.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use ipnet::IpNet;

/// The client address of a request, set by [`resolve`] for everything inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress(pub IpAddr);

/// The proxies whose `X-Forwarded-For` is believed (`KICKOFF_TRUSTED_PROXIES`).
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses addresses and CIDR blocks (`10.0.0.0/8`, `127.0.0.1`, `fd00::/8`).
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        entries
            .iter()
            .map(|e| e.trim())
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.parse::<IpNet>()
                    .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!("KICKOFF_TRUSTED_PROXIES: `{e}` is not an address or a CIDR block")
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    fn trusts(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        self.0.iter().any(|net| net.contains(&addr))
    }

    /// The client behind `peer`, given the request's headers.
    pub fn client_of(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        let hops: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop.parse::<IpAddr>() {
                Ok(addr) => {
                    client = canonical(addr);
                    if !self.trusts(client) {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        client
    }
}

/// An IPv4 address written as IPv4-mapped IPv6, as the IPv4 address it is.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// Sets [`ClientAddress`] on every request.
pub async fn resolve(
    State(proxies): State<Arc<TrustedProxies>>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    let client = proxies.client_of(canonical(peer), req.headers());
    req.extensions_mut().insert(ClientAddress(client));
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_a_trusted_proxy_names_the_client() {
        let proxies = TrustedProxies::parse(&["10.0.0.0/8".into(), "192.0.2.1".into()]).unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // From the proxy: the address it serves.
        assert_eq!(
            proxies.client_of(ip("10.1.2.3"), &headers(&["203.0.113.7"])),
            ip("203.0.113.7")
        );
        // A chain of trusted proxies: the first untrusted hop from the right.
        assert_eq!(
            proxies.client_of(
                ip("192.0.2.1"),
                &headers(&["198.51.100.9, 203.0.113.7", "10.0.0.2"])
            ),
            ip("203.0.113.7")
        );
        // Not from a proxy: the header is anyone's to write, so ignored.
        assert_eq!(
            proxies.client_of(ip("203.0.113.50"), &headers(&["10.9.9.9"])),
            ip("203.0.113.50")
        );
        // No header, or garbage in it: the proxy itself, never the client's choice.
        assert_eq!(
            proxies.client_of(ip("10.1.2.3"), &headers(&[])),
            ip("10.1.2.3")
        );
        assert_eq!(
            proxies.client_of(ip("10.1.2.3"), &headers(&["203.0.113.7, unknown"])),
            ip("10.1.2.3")
        );
        // None configured: never.
        assert_eq!(
            TrustedProxies::default().client_of(ip("10.1.2.3"), &headers(&["203.0.113.7"])),
            ip("10.1.2.3")
        );
        assert!(TrustedProxies::parse(&["10.0.0.0/33".into()]).is_err());
        assert!(TrustedProxies::parse(&["proxy.example".into()]).is_err());
    }
}
