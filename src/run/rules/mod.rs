//! The nftables rulesets that make the proxy the only way out: the jail's, applied inside
//! `run`'s network namespace, and the sidecar's, printed (or applied, `rules --apply`) by
//! `egress-proxy rules` for a pod.
//!
//! Each ruleset is described once, as data ([`Ruleset`]), and rendered twice: as the
//! text `nft -f` reads ([`Ruleset::text`], checked against the golden files in
//! `golden/`), and as the netlink batch that `rules --apply` sends the kernel
//! (`netlink`), so the printed ruleset and the applied one cannot drift apart.
//!
//! Both have the same shape (docs/guides/confinement.md walks through it):
//!
//! - a `nat` chain on `output` sends DNS (UDP and TCP to port 53 of any address, loopback
//!   included) to the DNS port, leaves loopback alone, and sends every other IPv4 TCP
//!   connection to the transparent port;
//! - a `filter` chain on `output` with policy `drop` accepts only what is, after that
//!   rewriting, destined to loopback (`127.0.0.0/8`, `::1`): UDP other than DNS, ICMP and
//!   IPv6 to anything but `::1` have no rule and are dropped.
//!
//! The filter chain matches the destination address after NAT, not the output
//! interface: a redirected packet still carries the interface its first route chose.

#[cfg(target_os = "linux")]
mod apply;
mod netlink;
mod nla;

use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

pub use crate::config::{Ports, DNS_PORT, PROXY_PORT, SOCKS_PORT, TRANSPARENT_PORT};
#[cfg(target_os = "linux")]
pub use apply::{apply, ApplyError};

/// The table both rulesets create (and the sidecar's replaces).
pub const TABLE: &str = "egress_proxy";

/// One ruleset: a `table inet` of base chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset {
    /// The comment line the text starts with.
    pub comment: String,
    /// Replace the table if it exists (in the same transaction), rather than add to it.
    pub replace: bool,
    pub chains: Vec<Chain>,
}

/// A base chain of the table, on the `output` hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: &'static str,
    pub kind: ChainKind,
    pub priority: i32,
    /// What happens to a packet no rule decided: `true` accept, `false` drop.
    pub accept_by_default: bool,
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainKind {
    Nat,
    Filter,
}

/// Matches, all of which must hold, then what is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub matches: Vec<Match>,
    pub action: Action,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// `meta skuid UID`: the sending socket's owner.
    SkUid(u32),
    /// `meta nfproto ipv4`.
    Ipv4,
    /// `meta l4proto P`, or `meta l4proto { P, Q }` for more than one (an anonymous set).
    L4Proto(&'static [L4]),
    /// `th dport PORT`: the transport header's destination port.
    DestPort(u16),
    /// `ip daddr NET/BITS`, `BITS` a multiple of 8.
    DestV4(Ipv4Addr, u8),
    /// `ip6 daddr ADDR`.
    DestV6(Ipv6Addr),
    /// `ct direction reply`: a packet answering a connection the peer opened.
    Reply,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Tcp,
    Udp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Accept,
    Return,
    /// `redirect to :PORT`: to this port on the namespace's own address.
    Redirect(u16),
}

/// The ruleset applied in `run`'s namespace, where only CMD and the proxy's listening
/// sockets live: nothing is exempt.
pub fn jail(ports: Ports) -> String {
    jail_ruleset(ports).text()
}

/// [`jail`]'s ruleset as data, which `run` applies over netlink ([`apply`]).
pub fn jail_ruleset(ports: Ports) -> Ruleset {
    describe(ports, None)
}

/// The ruleset for a pod's shared namespace: the same, except that the proxy's own
/// traffic (`meta skuid`) is exempt, and replies on connections that came into the pod
/// (a server's answers, health probes) pass: they open no way out that the peer did not.
/// Idempotent: applying it again replaces the table in one transaction.
pub fn sidecar(proxy_uid: u32, ports: Ports) -> String {
    sidecar_ruleset(proxy_uid, ports).text()
}

/// [`sidecar`]'s ruleset as data, for `rules --apply`.
pub fn sidecar_ruleset(proxy_uid: u32, ports: Ports) -> Ruleset {
    describe(ports, Some(proxy_uid))
}

fn describe(ports: Ports, proxy_uid: Option<u32>) -> Ruleset {
    let Ports { transparent, dns } = ports;
    let rule = |matches: &[Match], action| Rule {
        matches: matches.to_vec(),
        action,
    };
    let loopback = Match::DestV4(Ipv4Addr::new(127, 0, 0, 0), 8);
    let mut nat = Vec::new();
    let mut filter = Vec::new();
    if let Some(uid) = proxy_uid {
        nat.push(rule(&[Match::SkUid(uid)], Action::Return));
        filter.push(rule(&[Match::SkUid(uid)], Action::Accept));
        filter.push(rule(&[Match::Reply], Action::Accept));
    }
    let dns_query = [
        Match::Ipv4,
        Match::L4Proto(&[L4::Tcp, L4::Udp]),
        Match::DestPort(53),
    ];
    nat.push(rule(&dns_query, Action::Redirect(dns)));
    nat.push(rule(&[loopback], Action::Return));
    let tcp = [Match::Ipv4, Match::L4Proto(&[L4::Tcp])];
    nat.push(rule(&tcp, Action::Redirect(transparent)));
    filter.push(rule(&[loopback], Action::Accept));
    filter.push(rule(&[Match::DestV6(Ipv6Addr::LOCALHOST)], Action::Accept));
    let comment = match proxy_uid {
        Some(uid) => format!(
            "egress-proxy rules --proxy-uid {uid} --transparent-port {transparent} --dns-port {dns}"
        ),
        None => "egress-proxy run: the jail's network namespace".to_string(),
    };
    Ruleset {
        comment,
        replace: proxy_uid.is_some(),
        chains: vec![
            Chain {
                name: "nat_output",
                kind: ChainKind::Nat,
                priority: -100,
                accept_by_default: true,
                rules: nat,
            },
            Chain {
                name: "filter_output",
                kind: ChainKind::Filter,
                priority: 0,
                accept_by_default: false,
                rules: filter,
            },
        ],
    }
}

impl Ruleset {
    /// The text `nft -f` reads.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# {}", self.comment);
        if self.replace {
            // `table` then `delete table`: the delete never fails, so the file applies to
            // a namespace with or without an older copy, all of it or nothing.
            let _ = writeln!(out, "table inet {TABLE}");
            let _ = writeln!(out, "delete table inet {TABLE}");
        }
        let _ = writeln!(out, "table inet {TABLE} {{");
        for (i, chain) in self.chains.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let kind = match chain.kind {
                ChainKind::Nat => "nat",
                ChainKind::Filter => "filter",
            };
            let policy = if chain.accept_by_default {
                "accept"
            } else {
                "drop"
            };
            let _ = writeln!(out, "\tchain {} {{", chain.name);
            let _ = writeln!(
                out,
                "\t\ttype {kind} hook output priority {}; policy {policy};",
                chain.priority
            );
            for rule in &chain.rules {
                out.push_str("\t\t");
                for m in &rule.matches {
                    write_match(&mut out, *m);
                    out.push(' ');
                }
                let _ = match rule.action {
                    Action::Accept => writeln!(out, "accept"),
                    Action::Return => writeln!(out, "return"),
                    Action::Redirect(port) => writeln!(out, "redirect to :{port}"),
                };
            }
            out.push_str("\t}\n");
        }
        out.push_str("}\n");
        out
    }
}

fn write_match(out: &mut String, m: Match) {
    let name = |p: &L4| match p {
        L4::Tcp => "tcp",
        L4::Udp => "udp",
    };
    let _ = match m {
        Match::SkUid(uid) => write!(out, "meta skuid {uid}"),
        Match::Ipv4 => write!(out, "meta nfproto ipv4"),
        Match::L4Proto([one]) => write!(out, "meta l4proto {}", name(one)),
        Match::L4Proto(many) => {
            let names: Vec<&str> = many.iter().map(name).collect();
            write!(out, "meta l4proto {{ {} }}", names.join(", "))
        }
        Match::DestPort(port) => write!(out, "th dport {port}"),
        Match::DestV4(net, bits) => write!(out, "ip daddr {net}/{bits}"),
        Match::DestV6(addr) => write!(out, "ip6 daddr {addr}"),
        Match::Reply => write!(out, "ct direction reply"),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jail_ruleset_matches_its_golden_file() {
        assert_eq!(jail(Ports::default()), include_str!("../golden/jail.nft"));
    }

    #[test]
    fn sidecar_ruleset_matches_its_golden_file() {
        let ports = Ports {
            transparent: 15001,
            dns: 15053,
        };
        assert_eq!(sidecar(1337, ports), include_str!("../golden/sidecar.nft"));
    }

    #[test]
    fn the_ports_and_uid_are_the_ones_asked_for() {
        let text = sidecar(
            7,
            Ports {
                transparent: 1,
                dns: 2,
            },
        );
        assert!(text.contains("meta skuid 7 return"));
        assert!(text.contains("meta skuid 7 accept"));
        assert!(text.contains("redirect to :1\n"));
        assert!(text.contains("th dport 53 redirect to :2\n"));
        assert!(!jail(Ports::default()).contains("skuid"));
        assert!(!jail(Ports::default()).contains("ct direction"));
    }
}
