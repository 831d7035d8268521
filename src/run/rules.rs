//! The nftables rulesets that make the proxy the only way out: the jail's, applied inside
//! `run`'s network namespace, and the sidecar's, printed by `egress-proxy rules` for a
//! pod. Pure text generation, checked against golden files (`golden/`).
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

use std::fmt::Write;

pub use crate::config::{Ports, DNS_PORT, PROXY_PORT, SOCKS_PORT, TRANSPARENT_PORT};

/// The table both rulesets create (and the sidecar's replaces).
pub const TABLE: &str = "egress_proxy";

/// The ruleset applied in `run`'s namespace, where only CMD and the proxy's listening
/// sockets live: nothing is exempt.
pub fn jail(ports: Ports) -> String {
    ruleset(ports, None)
}

/// The ruleset for a pod's shared namespace: the same, except that the proxy's own
/// traffic (`meta skuid`) is exempt, and replies on connections that came into the pod
/// (a server's answers, health probes) pass: they open no way out that the peer did not.
/// Idempotent: applying it again replaces the table in one transaction.
pub fn sidecar(proxy_uid: u32, ports: Ports) -> String {
    ruleset(ports, Some(proxy_uid))
}

fn ruleset(ports: Ports, proxy_uid: Option<u32>) -> String {
    let Ports { transparent, dns } = ports;
    let mut out = String::new();
    if let Some(uid) = proxy_uid {
        // `table` then `delete table`: the delete never fails, so the file applies to a
        // namespace with or without an older copy, all of it or nothing.
        let _ = writeln!(out, "# egress-proxy rules --proxy-uid {uid} --transparent-port {transparent} --dns-port {dns}");
        let _ = writeln!(out, "table inet {TABLE}");
        let _ = writeln!(out, "delete table inet {TABLE}");
    } else {
        let _ = writeln!(out, "# egress-proxy run: the jail's network namespace");
    }
    let _ = writeln!(out, "table inet {TABLE} {{");
    out.push_str("\tchain nat_output {\n");
    out.push_str("\t\ttype nat hook output priority -100; policy accept;\n");
    if let Some(uid) = proxy_uid {
        let _ = writeln!(out, "\t\tmeta skuid {uid} return");
    }
    let _ = writeln!(
        out,
        "\t\tmeta nfproto ipv4 meta l4proto {{ tcp, udp }} th dport 53 redirect to :{dns}"
    );
    out.push_str("\t\tip daddr 127.0.0.0/8 return\n");
    let _ = writeln!(
        out,
        "\t\tmeta nfproto ipv4 meta l4proto tcp redirect to :{transparent}"
    );
    out.push_str("\t}\n\n");
    out.push_str("\tchain filter_output {\n");
    out.push_str("\t\ttype filter hook output priority 0; policy drop;\n");
    if let Some(uid) = proxy_uid {
        let _ = writeln!(out, "\t\tmeta skuid {uid} accept");
        out.push_str("\t\tct direction reply accept\n");
    }
    out.push_str("\t\tip daddr 127.0.0.0/8 accept\n");
    out.push_str("\t\tip6 daddr ::1 accept\n");
    out.push_str("\t}\n");
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jail_ruleset_matches_its_golden_file() {
        assert_eq!(jail(Ports::default()), include_str!("golden/jail.nft"));
    }

    #[test]
    fn sidecar_ruleset_matches_its_golden_file() {
        let ports = Ports {
            transparent: 15001,
            dns: 15053,
        };
        assert_eq!(sidecar(1337, ports), include_str!("golden/sidecar.nft"));
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
