//! The class of an address a webhook host resolved to: only [`AddressClass::Public`] addresses may
//! be called through a host name, so that a name the allowlist admits cannot be pointed (or
//! re-pointed, by DNS rebinding) at the operator's own network: loopback, private ranges, the cloud
//! metadata service at 169.254.169.254, and the like.
//!
//! The rule errs on the side of refusing: a range that is merely reserved or deprecated counts as
//! not public, and IPv6 outside the global unicast block `2000::/3` is never public. Addresses
//! that carry an IPv4 address inside an IPv6 one (IPv4-mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96`,
//! 6to4 `2002::/16`) take the class of the IPv4 address they lead to.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Where an address leads, as far as a webhook call is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// Routable on the public internet: the only class a host name may resolve to unless the
    /// operator marked it.
    Public,
    /// `0.0.0.0/8` and `::`. Connecting to `0.0.0.0` reaches this machine on Linux.
    Unspecified,
    /// `127.0.0.0/8` and `::1`.
    Loopback,
    /// RFC 1918: `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`.
    Private,
    /// Carrier-grade NAT, `100.64.0.0/10` (RFC 6598).
    SharedCgnat,
    /// `169.254.0.0/16` (the cloud metadata service lives here) and `fe80::/10`.
    LinkLocal,
    /// Unique-local IPv6, `fc00::/7` (AWS's IPv6 metadata service is `fd00:ec2::254`).
    UniqueLocal,
    /// Deprecated site-local IPv6, `fec0::/10`.
    SiteLocal,
    /// `224.0.0.0/4` and `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18.0.0/15` and `2001:2::/48`.
    Benchmarking,
    /// Everything else that is not publicly routable: `240.0.0.0/4`, `192.0.0.0/24`,
    /// `192.88.99.0/24`, IPv4-compatible `::/96`, `100::/64`, `2001::/23` (Teredo included),
    /// local-use NAT64 `64:ff9b:1::/48`, and IPv6 outside `2000::/3`.
    Reserved,
}

impl AddressClass {
    pub fn is_public(self) -> bool {
        self == AddressClass::Public
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressClass::Public => "a public address",
            AddressClass::Unspecified => "an unspecified address",
            AddressClass::Loopback => "a loopback address",
            AddressClass::Private => "a private address",
            AddressClass::SharedCgnat => "a shared (CGNAT) address",
            AddressClass::LinkLocal => "a link-local address",
            AddressClass::UniqueLocal => "a unique-local address",
            AddressClass::SiteLocal => "a site-local address",
            AddressClass::Multicast => "a multicast address",
            AddressClass::Broadcast => "a broadcast address",
            AddressClass::Documentation => "a documentation address",
            AddressClass::Benchmarking => "a benchmarking address",
            AddressClass::Reserved => "a reserved address",
        })
    }
}

/// The class of `ip`.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    use AddressClass::*;
    // Each range once, most specific first where ranges nest (broadcast inside 240/4).
    const RANGES: &[([u8; 4], u32, AddressClass)] = &[
        ([0, 0, 0, 0], 8, Unspecified),
        ([127, 0, 0, 0], 8, Loopback),
        ([10, 0, 0, 0], 8, Private),
        ([172, 16, 0, 0], 12, Private),
        ([192, 168, 0, 0], 16, Private),
        ([100, 64, 0, 0], 10, SharedCgnat),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([224, 0, 0, 0], 4, Multicast),
        ([255, 255, 255, 255], 32, Broadcast),
        ([240, 0, 0, 0], 4, Reserved),
        ([192, 0, 2, 0], 24, Documentation),
        ([198, 51, 100, 0], 24, Documentation),
        ([203, 0, 113, 0], 24, Documentation),
        ([198, 18, 0, 0], 15, Benchmarking),
        // IETF protocol assignments (a couple of its addresses are anycast, none is a webhook).
        ([192, 0, 0, 0], 24, Reserved),
        // The deprecated 6to4 relay anycast block.
        ([192, 88, 99, 0], 24, Reserved),
    ];
    RANGES
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map_or(Public, |(_, _, class)| *class)
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], prefix: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
    u128::from(ip) & mask == u128::from(Ipv6Addr::from(net)) & mask
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    use AddressClass::*;
    let bits = u128::from(ip);
    // The IPv4 address in the low 32 bits, for the forms that lead to it.
    let low_v4 = Ipv4Addr::from(bits as u32);
    if ip.is_unspecified() {
        return Unspecified;
    }
    if ip.is_loopback() {
        return Loopback;
    }
    // IPv4-mapped `::ffff:a.b.c.d`: the socket connects to the IPv4 address itself.
    if in_v6(ip, [0, 0, 0, 0, 0, 0xffff, 0, 0], 96) {
        return classify_v4(low_v4);
    }
    // The well-known NAT64 prefix: a translator forwards to the embedded IPv4 address.
    if in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        return classify_v4(low_v4);
    }
    // 6to4 `2002:AABB:CCDD::/48` leads to the IPv4 address AA.BB.CC.DD.
    if in_v6(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        return classify_v4(Ipv4Addr::from((bits >> 80) as u32));
    }
    const RANGES: &[([u16; 8], u32, AddressClass)] = &[
        // IPv4-compatible (deprecated); `::` and `::1` were handled above.
        ([0, 0, 0, 0, 0, 0, 0, 0], 96, Reserved),
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, Reserved),
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, Reserved),
        ([0x2001, 0x2, 0, 0, 0, 0, 0, 0], 48, Benchmarking),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, Reserved),
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, Documentation),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Documentation),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, UniqueLocal),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, LinkLocal),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, SiteLocal),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Multicast),
    ];
    if let Some((_, _, class)) = RANGES
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, *net, *prefix))
    {
        return *class;
    }
    // Only global unicast is routed on the internet; the rest of the space is unassigned.
    if in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        Public
    } else {
        Reserved
    }
}

#[cfg(test)]
mod tests {
    use super::classify;
    use super::AddressClass::{self, *};

    fn class(s: &str) -> AddressClass {
        classify(s.parse().expect(s))
    }

    #[test]
    fn public_addresses_are_public() {
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:800::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert_eq!(class(a), Public, "{a}");
        }
    }

    #[test]
    fn ipv4_special_ranges_are_refused() {
        for (a, want) in [
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.0.0.5", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("100.64.0.1", SharedCgnat),
            ("100.127.255.255", SharedCgnat),
            ("169.254.169.254", LinkLocal),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("255.255.255.255", Broadcast),
            ("240.0.0.1", Reserved),
            ("192.0.2.10", Documentation),
            ("198.51.100.7", Documentation),
            ("203.0.113.99", Documentation),
            ("198.18.0.1", Benchmarking),
            ("198.19.255.255", Benchmarking),
            ("192.0.0.8", Reserved),
            ("192.88.99.1", Reserved),
        ] {
            assert_eq!(class(a), want, "{a}");
        }
    }

    #[test]
    fn ipv6_special_ranges_are_refused() {
        for (a, want) in [
            ("::", Unspecified),
            ("::1", Loopback),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fc00::1", UniqueLocal),
            ("fd00:ec2::254", UniqueLocal),
            ("fec0::1", SiteLocal),
            ("ff02::1", Multicast),
            ("2001:db8::1", Documentation),
            ("3fff::1", Documentation),
            ("2001:2::1", Benchmarking),
            ("2001::1", Reserved),
            ("100::1", Reserved),
            ("64:ff9b:1::a00:5", Reserved),
            ("::a00:5", Reserved),
            ("4000::1", Reserved),
            ("1000::1", Reserved),
        ] {
            assert_eq!(class(a), want, "{a}");
        }
    }

    #[test]
    fn ipv6_forms_of_ipv4_addresses_take_the_ipv4_class() {
        for (a, want) in [
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:10.0.0.5", Private),
            ("::ffff:169.254.169.254", LinkLocal),
            ("::ffff:0.0.0.0", Unspecified),
            ("::ffff:100.64.0.1", SharedCgnat),
            ("64:ff9b::10.0.0.5", Private),
            ("64:ff9b::127.0.0.1", Loopback),
            ("2002:a00:5::1", Private),
            ("2002:a9fe:a9fe::", LinkLocal),
            ("2002:7f00:1::", Loopback),
        ] {
            assert_eq!(class(a), want, "{a}");
        }
    }

    #[test]
    fn classes_read_well_in_a_message() {
        assert_eq!(Private.to_string(), "a private address");
        assert_eq!(Unspecified.to_string(), "an unspecified address");
        assert!(Public.is_public() && !LinkLocal.is_public());
    }
}
