//! The narrowing relation (SPEC sections 2 and 10): a request policy may only narrow the
//! levels above it, and one that widens is refused as a whole, naming every offender.

use std::fmt;

use ipnet::IpNet;

use super::compile::{DomainSet, OrgPolicy, RequestPolicy};
use super::host::{DomainEntry, DomainPattern};

/// Every host `r` matches is matched by `o` (ports aside).
fn name_covered(r: &DomainPattern, o: &DomainPattern) -> bool {
    match (r, o) {
        (DomainPattern::Exact(a), DomainPattern::Exact(b)) => a == b,
        (DomainPattern::Exact(a), o @ DomainPattern::Subtree(_)) => o.matches(a),
        (DomainPattern::Subtree(a), DomainPattern::Subtree(b)) => a == b || o.matches(a),
        (DomainPattern::Subtree(_), DomainPattern::Exact(_)) => false,
    }
}

/// `f` holds for every port `e` allows (a port-less entry gets `org_ports`).
fn all_ports(e: &DomainEntry, org_ports: &[u16], mut f: impl FnMut(u16) -> bool) -> bool {
    match e.port {
        Some(p) => f(p),
        None => org_ports.iter().all(|&p| f(p)),
    }
}

/// Every host:port `r` matches is also matched by `o`.
pub fn entry_covered(r: &DomainEntry, o: &DomainEntry, org_ports: &[u16]) -> bool {
    name_covered(&r.pattern, &o.pattern) && all_ports(r, org_ports, |p| o.allows_port(p, org_ports))
}

/// Each port of `r` is covered by some entry of `set` (so `a.com:80` and `a.com:443`
/// together cover a port-less `a.com` under the default ports).
pub fn set_covers(set: &DomainSet, r: &DomainEntry, org_ports: &[u16]) -> bool {
    all_ports(r, org_ports, |port| {
        let (exact, subtree) = match &r.pattern {
            DomainPattern::Exact(n) => (Some(set.matching(n)), None),
            DomainPattern::Subtree(b) => (None, Some(set.subtrees_at_or_above(b))),
        };
        exact
            .into_iter()
            .flatten()
            .chain(subtree.into_iter().flatten())
            .any(|o| name_covered(&r.pattern, &o.pattern) && o.allows_port(port, org_ports))
    })
}

/// A request policy that widens a level above it: every offending entry, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Widening {
    /// `"<entry text>: <why>"`, one per offending entry.
    pub offending: Vec<String>,
}

impl fmt::Display for Widening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.offending.join("; "))
    }
}

impl std::error::Error for Widening {}

/// `req` must be covered by the organization allowlist and by every request-level policy
/// in `uppers` (widest first).
pub fn check_narrowing(
    org: &OrgPolicy,
    uppers: &[&RequestPolicy],
    req: &RequestPolicy,
) -> Result<(), Widening> {
    let offending: Vec<String> = widening(org, uppers, req)
        .into_iter()
        .map(|(entry, why)| format!("{entry}: {why}"))
        .collect();
    if offending.is_empty() {
        Ok(())
    } else {
        Err(Widening { offending })
    }
}

const NOT_IN_ORG: &str = "not in the organization allowlist";
const DISABLED_ABOVE: &str = "network is disabled at the level above";

/// The offending entries of `req` as `(entry text, why)`, in the order written.
pub(crate) fn widening(
    org: &OrgPolicy,
    uppers: &[&RequestPolicy],
    req: &RequestPolicy,
) -> Vec<(String, String)> {
    let RequestPolicy::Allowlist { domains, cidrs, .. } = req else {
        return Vec::new(); // Disabled narrows everything.
    };
    let ports = &org.allowed_ports;
    let mut out = Vec::new();
    for e in domains.entries() {
        let why = if !set_covers(&org.allowed, e, ports) {
            Some(NOT_IN_ORG)
        } else {
            uppers.iter().find_map(|u| match u {
                RequestPolicy::Disabled => Some(DISABLED_ABOVE),
                RequestPolicy::Allowlist { domains, .. } => {
                    (!set_covers(domains, e, ports)).then_some("not in the request policy above")
                }
            })
        };
        if let Some(why) = why {
            out.push((e.text.to_string(), why.to_string()));
        }
    }
    for net in cidrs.iter().flatten() {
        if let Some(why) = cidr_widening(org, uppers, net) {
            out.push((net.to_string(), why.to_string()));
        }
    }
    out.extend(super::budget::budget_widening(org, uppers, req));
    out
}

fn within(nets: &[IpNet], net: &IpNet) -> bool {
    nets.iter().any(|n| n.contains(net))
}

fn cidr_widening(org: &OrgPolicy, uppers: &[&RequestPolicy], net: &IpNet) -> Option<&'static str> {
    if !within(&org.allowed_cidrs, net) {
        return Some("not within the organization allowed_cidrs");
    }
    uppers.iter().find_map(|u| match u {
        RequestPolicy::Disabled => Some(DISABLED_ABOVE),
        RequestPolicy::Allowlist { cidrs: None, .. } => {
            Some("the level above allows no IP addresses (it has no allowed_cidrs)")
        }
        RequestPolicy::Allowlist {
            cidrs: Some(above), ..
        } => (!within(above, net)).then_some("not within the allowed_cidrs of the level above"),
    })
}

#[cfg(test)]
#[path = "cover_tests.rs"]
mod tests;
