//! The per-entry comparison of domain lists, decided by the covering relation
//! (crates/policy/src/cover.rs), never by text: an entry of one side that the other side's
//! entries cover is no change, so reordering, rewriting an entry in another spelling, or
//! adding a redundant entry reports nothing, and `*.example.com` replacing
//! `a.example.com` and `b.example.com` is one change (the wildcard).
//!
//! Entries with rules (methods, paths) will plug in here unchanged: covering decides
//! them too, so a dropped rule shows as an entry the old side does not cover.

use crate::policy::cover::set_covers;
use crate::policy::shared_hosting::pattern_is_shared_hosting;
use crate::policy::{DomainEntry, DomainSet};

/// One side's list, with the ports a port-less entry of it gets. The port `0` stands
/// for "the organization's ports, whatever they are", for request policies compared
/// without an organization.
#[derive(Clone, Copy)]
pub(super) struct Side<'a> {
    pub set: &'a DomainSet,
    pub ports: &'a [u16],
}

/// The ports `e` allows on its side.
fn ports_of(e: &DomainEntry, ports: &[u16]) -> Vec<u16> {
    match e.port {
        Some(p) => vec![p],
        None => ports.to_vec(),
    }
}

/// `e` on one port.
fn on_port(e: &DomainEntry, port: u16) -> DomainEntry {
    DomainEntry {
        pattern: e.pattern.clone(),
        port: Some(port),
        text: e.text.clone(),
        rules: e.rules.clone(),
    }
}

/// The ports on which `e` (of a side whose port-less entries get `ports`) matches a
/// host that `other` does not allow there.
pub(super) fn uncovered_allow(e: &DomainEntry, ports: &[u16], other: Side) -> Vec<u16> {
    ports_of(e, ports)
        .into_iter()
        .filter(|&p| !set_covers(other.set, &on_port(e, p), other.ports))
        .collect()
}

/// A denied entry (port-less: every port) that `other`'s denied entries do not cover.
/// Port `0` stands for every port: only a port-less entry covers it.
pub(super) fn uncovered_deny(d: &DomainEntry, other: &DomainSet) -> bool {
    !set_covers(other, d, &[d.port.unwrap_or(0)])
}

/// An entry of one side that the other does not cover on some of its ports.
pub(super) struct Uncovered<'a> {
    pub index: usize,
    pub entry: &'a DomainEntry,
    pub ports: Vec<u16>,
    /// All of its ports are uncovered.
    pub whole: bool,
}

/// Each entry of `side` that `other` does not cover, except a port-less one whose only
/// uncovered ports are in `by_ports` (a change of `allowed_ports`, reported there).
pub(super) fn uncovered<'a>(side: Side<'a>, other: Side, by_ports: &[u16]) -> Vec<Uncovered<'a>> {
    let mut out = Vec::new();
    for (index, entry) in side.set.entries().iter().enumerate() {
        let ports = uncovered_allow(entry, side.ports, other);
        if ports.is_empty() {
            continue;
        }
        if entry.port.is_none() && ports.iter().all(|p| by_ports.contains(p)) {
            continue;
        }
        let whole = ports.len() == ports_of(entry, side.ports).len();
        out.push(Uncovered {
            index,
            entry,
            ports,
            whole,
        });
    }
    out
}

/// How a list of ports reads in a message; `0` is the organization's ports.
pub(super) fn ports_text(ports: &[u16]) -> String {
    let list: Vec<String> = ports
        .iter()
        .map(|&p| match p {
            0 => "the organization's allowed_ports".to_string(),
            p => p.to_string(),
        })
        .collect();
    let word = if ports.len() == 1 && ports[0] != 0 {
        "port "
    } else if ports.contains(&0) {
        ""
    } else {
        "ports "
    };
    format!("{word}{}", list.join(", "))
}

/// The entry is a destination on shared hosting.
pub(super) fn is_shared(e: &DomainEntry, extra: &DomainSet) -> bool {
    pattern_is_shared_hosting(&e.pattern, extra)
}

/// An entry as messages show it: the inline table of an entry with rules, else its text.
pub(super) fn shown(e: &DomainEntry) -> &str {
    e.rules.as_ref().map_or(&e.text, |r| &r.label)
}
