//! Address classes the proxy refuses unless an `allowed_cidrs` entry opens them
//! (docs/reference/policy-files.md, "Addresses"). Pure: a function of the address alone.
//!
//! IPv6 wrappers that carry an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo)
//! are judged by the IPv4 address they carry, so `[::ffff:127.0.0.1]` is loopback.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused: which special-purpose class it falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// `0.0.0.0/8`, `::`: "this host" or no address.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 (`10/8`, `172.16/12`, `192.168/16`) and unique local `fc00::/7`.
    Private,
    /// `169.254.0.0/16`, `fe80::/10` (and the deprecated site-local `fec0::/10`).
    LinkLocal,
    /// Shared address space of carrier-grade NAT, `100.64.0.0/10`.
    SharedCgnat,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// The documentation ranges (`192.0.2.0/24` and its siblings, `2001:db8::/32`,
    /// `3fff::/20`).
    Documentation,
    /// Future use `240.0.0.0/4`, protocol assignments `192.0.0.0/24`, benchmarking
    /// `198.18.0.0/15`, discard-only `100::/64`.
    Reserved,
}

impl AddressClass {
    /// The class as the audit log and `check` name it (`loopback`, `cgnat`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Unspecified => "unspecified",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link-local",
            AddressClass::SharedCgnat => "cgnat",
            AddressClass::Multicast => "multicast",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Documentation => "documentation",
            AddressClass::Reserved => "reserved",
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The refused class of `ip`, or `None` for an ordinary public address.
pub fn refused_class(ip: IpAddr) -> Option<AddressClass> {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => v6_class(v6),
    }
}

/// The IPv4 address an IPv6 address carries, for the wrappers the address rules name:
/// IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96` and
/// `64:ff9b:1::/48`, 6to4 `2002::/16`, and Teredo `2001::/32` (client and server).
pub(crate) fn embedded_v4(v6: Ipv6Addr) -> Vec<Ipv4Addr> {
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let mut out = Vec::new();
    if s[0..5] == [0, 0, 0, 0, 0] && (s[5] == 0xffff || (s[5] == 0 && (s[6] != 0 || s[7] > 1))) {
        out.push(low); // mapped, or compatible (excluding :: and ::1)
    }
    if s[0..6] == [0x64, 0xff9b, 0, 0, 0, 0] || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) {
        out.push(low); // NAT64, well-known and local-use prefixes
    }
    if s[0] == 0x2002 {
        out.push(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    if s[0] == 0x2001 && s[1] == 0 {
        // Teredo: server in bits 32-63, client (obfuscated by XOR) in the last 32 bits.
        out.push(Ipv4Addr::new(
            (s[2] >> 8) as u8,
            s[2] as u8,
            (s[3] >> 8) as u8,
            s[3] as u8,
        ));
        out.push(Ipv4Addr::from(!u32::from(low)));
    }
    out
}

fn v4_class(ip: Ipv4Addr) -> Option<AddressClass> {
    let o = ip.octets();
    let class = if ip.is_unspecified() || o[0] == 0 {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_private() {
        AddressClass::Private
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        AddressClass::SharedCgnat
    } else if ip.is_multicast() {
        AddressClass::Multicast
    } else if ip.is_broadcast() {
        AddressClass::Broadcast
    } else if ip.is_documentation() {
        AddressClass::Documentation
    } else if o[0] >= 240
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
    {
        // 240/4 future use, 192.0.0.0/24 protocol assignments, 198.18.0.0/15 benchmarking.
        AddressClass::Reserved
    } else {
        return None;
    };
    Some(class)
}

fn v6_class(ip: Ipv6Addr) -> Option<AddressClass> {
    let s = ip.segments();
    let own = if ip.is_unspecified() {
        Some(AddressClass::Unspecified)
    } else if ip.is_loopback() {
        Some(AddressClass::Loopback)
    } else if (s[0] & 0xfe00) == 0xfc00 {
        Some(AddressClass::Private) // unique local fc00::/7
    } else if (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xffc0) == 0xfec0 {
        Some(AddressClass::LinkLocal) // fe80::/10, and deprecated site-local fec0::/10
    } else if ip.is_multicast() {
        Some(AddressClass::Multicast)
    } else if (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] & 0xfff0) == 0x3ff0 {
        Some(AddressClass::Documentation) // 2001:db8::/32, 3fff::/20
    } else if s[0] == 0x0100 && s[1..4] == [0, 0, 0] {
        Some(AddressClass::Reserved) // discard-only 100::/64
    } else {
        None
    };
    own.or_else(|| embedded_v4(ip).into_iter().find_map(v4_class))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<AddressClass> {
        refused_class(s.parse().unwrap())
    }

    #[test]
    fn classes_one_line_per_case() {
        use AddressClass::*;
        let cases: &[(&str, Option<AddressClass>)] = &[
            ("127.0.0.1", Some(Loopback)),
            ("127.255.0.9", Some(Loopback)),
            ("10.1.2.3", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.32.0.1", None),
            ("192.168.1.1", Some(Private)),
            ("169.254.169.254", Some(LinkLocal)),
            ("100.64.0.1", Some(SharedCgnat)),
            ("100.128.0.1", None),
            ("224.0.0.1", Some(Multicast)),
            ("255.255.255.255", Some(Broadcast)),
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Unspecified)),
            ("192.0.2.1", Some(Documentation)),
            ("198.18.0.1", Some(Reserved)),
            ("240.0.0.1", Some(Reserved)),
            ("8.8.8.8", None),
            ("93.184.216.34", None),
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("fd00::1", Some(Private)),
            ("fe80::1", Some(LinkLocal)),
            ("ff02::1", Some(Multicast)),
            ("2001:db8::1", Some(Documentation)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:8.8.8.8", None),
            ("::10.0.0.1", Some(Private)),
            ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
            ("64:ff9b::808:808", None),
            ("2002:7f00:1::", Some(Loopback)),
            ("2002:808:808::", None),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some(Documentation)), // client 192.0.2.45
            ("2001:0:7f00:1::", Some(Loopback)),
            ("2001:0:4136:e378:0:0:f5ff:fffe", Some(Private)), // client 10.0.0.1 xor'd
            ("2606:4700::1111", None),
        ];
        for (addr, want) in cases {
            assert_eq!(class(addr), *want, "{addr}");
        }
    }
}
