//! The comparisons of lists: allowed and denied domains, CIDRs, and a whole request
//! policy (a request file, or the organization's `default_network_policy`). Each entry
//! of one side is looked up in the other through the covering relation
//! ([`super::domains`]).

use ipnet::IpNet;

use super::change::{Change, Effect, Kind};
use super::domains::{is_shared, ports_text, shown, uncovered, uncovered_deny, Side};
use crate::policy::{DomainSet, RequestPolicy, RequestSpans};

/// The allowed domains of both sides: entries NEW adds (widening) and entries OLD had
/// that NEW no longer covers (narrowing). `added` / `removed` are the ports a change of
/// `allowed_ports` adds and removes: a port-less entry changed only by them is that
/// change's, not its own. `at` gives where NEW's entry `i` was written.
pub(super) fn allowed(
    setting: &str,
    (old, new): (Side, Side),
    (added, removed): (&[u16], &[u16]),
    extra: &DomainSet,
    at: &[usize],
) -> Vec<Change> {
    let mut out = Vec::new();
    for u in uncovered(new, old, added) {
        let what = if u.whole {
            format!("added `{}` ({})", shown(u.entry), ports_text(&u.ports))
        } else {
            format!("`{}` now also on {}", shown(u.entry), ports_text(&u.ports))
        };
        let shared = is_shared(u.entry, extra);
        let mark = if shared { " (on shared hosting)" } else { "" };
        let message = format!("{setting}: {what}{mark}");
        let change = Change::new(Effect::Widening, Kind::AllowAdded, setting, message)
            .entry(&u.entry.text)
            .shared(shared)
            .at(at.get(u.index).copied());
        out.push(change);
    }
    for u in uncovered(old, new, removed) {
        let what = if u.whole {
            format!("removed `{}` ({})", shown(u.entry), ports_text(&u.ports))
        } else {
            format!("`{}` no longer on {}", shown(u.entry), ports_text(&u.ports))
        };
        let message = format!("{setting}: {what}");
        let change = Change::new(Effect::Narrowing, Kind::AllowRemoved, setting, message)
            .entry(&u.entry.text);
        out.push(change);
    }
    out
}

/// The denied domains: an OLD entry NEW's do not cover widens; a NEW one OLD's did not
/// cover narrows.
pub(super) fn denied(
    old: &DomainSet,
    new: &DomainSet,
    list_at: Option<usize>,
    at: &[usize],
) -> Vec<Change> {
    let setting = "denied_domains";
    let mut out = Vec::new();
    for d in old.entries().iter().filter(|d| uncovered_deny(d, new)) {
        let message = format!(
            "{setting}: removed `{}`: what it refused may now be allowed",
            d.text
        );
        let change = Change::new(Effect::Widening, Kind::DenyRemoved, setting, message)
            .entry(&d.text)
            .at(list_at);
        out.push(change);
    }
    for (i, d) in new.entries().iter().enumerate() {
        if uncovered_deny(d, old) {
            let message = format!("{setting}: added `{}`", d.text);
            let change = Change::new(Effect::Narrowing, Kind::DenyAdded, setting, message)
                .entry(&d.text)
                .at(at.get(i).copied());
            out.push(change);
        }
    }
    out
}

fn within(nets: &[IpNet], net: &IpNet) -> bool {
    nets.iter().any(|n| n.contains(net))
}

/// CIDR lists: a NEW network not within an OLD one widens, and the reverse narrows.
pub(super) fn cidrs(setting: &str, old: &[IpNet], new: &[IpNet], at: &[usize]) -> Vec<Change> {
    let mut out = Vec::new();
    for (i, net) in new.iter().enumerate() {
        if !within(old, net) {
            let message = format!("{setting}: added `{net}`");
            let change = Change::new(Effect::Widening, Kind::CidrAdded, setting, message)
                .entry(&net.to_string())
                .at(at.get(i).copied());
            out.push(change);
        }
    }
    for net in old.iter().filter(|n| !within(new, n)) {
        let message = format!("{setting}: removed `{net}`");
        let change = Change::new(Effect::Narrowing, Kind::CidrRemoved, setting, message)
            .entry(&net.to_string());
        out.push(change);
    }
    out
}

/// One side of a request policy comparison: the policy and its organization's ports.
#[derive(Clone, Copy)]
pub(super) struct Request<'a> {
    pub policy: &'a RequestPolicy,
    pub ports: &'a [u16],
}

/// Where NEW's request policy was written: the spans of its entries, and of its `type`.
pub(super) struct RequestAt<'a> {
    pub spans: &'a RequestSpans,
    pub type_at: Option<usize>,
    pub cidrs_at: Option<usize>,
}

/// A whole request policy; `table` is where it sits (`default_network_policy.` or "").
pub(super) fn request(
    table: &str,
    (old, new): (Request, Request),
    ports: (&[u16], &[u16]),
    extra: &DomainSet,
    at: &RequestAt,
) -> Vec<Change> {
    use RequestPolicy::{Allowlist, Disabled};
    let setting = format!("{table}type");
    match (old.policy, new.policy) {
        (Disabled, Disabled) => Vec::new(),
        (Disabled, Allowlist { domains, .. }) => {
            let list: Vec<&str> = domains.entries().iter().map(|e| &*e.text).collect();
            let message = format!(
                "{setting}: disabled -> allowlist: the network opens to {}",
                list.join(", ")
            );
            let c = Change::new(Effect::Widening, Kind::PolicyType, &setting, message);
            vec![c.at(at.type_at)]
        }
        (Allowlist { .. }, Disabled) => {
            let message = format!("{setting}: allowlist -> disabled: the network closes");
            let c = Change::new(Effect::Narrowing, Kind::PolicyType, &setting, message);
            vec![c.at(at.type_at)]
        }
        (
            Allowlist {
                domains: od,
                cidrs: oc,
                ..
            },
            Allowlist {
                domains: nd,
                cidrs: nc,
                ..
            },
        ) => {
            let sides = (
                Side {
                    set: od,
                    ports: old.ports,
                },
                Side {
                    set: nd,
                    ports: new.ports,
                },
            );
            let domains = format!("{table}allowed_domains");
            let mut out = allowed(&domains, sides, ports, extra, &at.spans.allowed_domains);
            out.extend(request_cidrs(table, oc.as_deref(), nc.as_deref(), at));
            let setting = format!("{table}max_upload_bytes");
            let budgets = (budget_of(old.policy), budget_of(new.policy));
            let above = "the level above's budget";
            let c = budget(&setting, budgets, above).map(|c| c.at(at.spans.max_upload_bytes));
            out.extend(c);
            out
        }
    }
}

/// A request policy's `allowed_cidrs`: absent, it allows no literal IP but does not
/// narrow where names may land, so adding or removing the key both widen something.
fn request_cidrs(
    table: &str,
    old: Option<&[IpNet]>,
    new: Option<&[IpNet]>,
    at: &RequestAt,
) -> Vec<Change> {
    let setting = format!("{table}allowed_cidrs");
    let spans: Vec<usize> = at.spans.allowed_cidrs.iter().map(|w| w.at).collect();
    match (old, new) {
        (None, None) => Vec::new(),
        (Some(old), Some(new)) => cidrs(&setting, old, new, &spans),
        (None, Some(new)) => {
            let mut out = cidrs(&setting, &[], new, &spans);
            let message = format!(
                "{setting}: set: names may resolve only inside it (and literal IPs in it are allowed)"
            );
            out.push(Change::new(
                Effect::Narrowing,
                Kind::CidrRemoved,
                &setting,
                message,
            ));
            out
        }
        (Some(old), None) => {
            let mut out = cidrs(&setting, old, &[], &spans);
            let message = format!(
                "{setting}: removed: names may resolve anywhere the organization's allowed_cidrs allow"
            );
            let c = Change::new(Effect::Widening, Kind::CidrAdded, &setting, message);
            out.push(c.at(at.cidrs_at));
            out
        }
    }
}

fn budget_of(p: &RequestPolicy) -> Option<u64> {
    match p {
        RequestPolicy::Allowlist {
            max_upload_bytes, ..
        } => *max_upload_bytes,
        RequestPolicy::Disabled => None,
    }
}

/// An upload budget: `None` is `unset` (no budget, or the level above's), never less
/// than a number; a larger budget, or none, lets more out.
pub(super) fn budget(
    setting: &str,
    (old, new): (Option<u64>, Option<u64>),
    unset: &str,
) -> Option<Change> {
    let show = |b: Option<u64>| b.map_or(unset.to_string(), |n| format!("{n} bytes"));
    let effect = match (old, new) {
        (o, n) if o == n => return None,
        (Some(_), None) => Effect::Widening,
        (None, Some(_)) => Effect::Narrowing,
        (Some(o), Some(n)) if n > o => Effect::Widening,
        _ => Effect::Narrowing,
    };
    let message = format!("{setting}: {} -> {}", show(old), show(new));
    Some(Change::new(effect, Kind::Budget, setting, message))
}
