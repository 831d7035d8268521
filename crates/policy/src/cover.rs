//! The narrowing relation (docs/reference/policy-files.md, "Covering"): a request policy
//! may only narrow the levels above it, and one that widens is refused as a whole,
//! naming every offender. [`widened`] is the same law over a file, with where each
//! offending entry was written.

use std::fmt;

use ipnet::IpNet;

use super::budget::{budget_text, budget_widening};
use super::compiled::{DomainSet, OrgPolicy, RequestPolicy, RequestSpans};
use super::dlp::DlpAction;
use super::host::{DomainEntry, DomainPattern};
use super::rules::rules_widen;

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

/// Every request `r` allows (host, port, method, path), `o` allows too.
pub fn entry_covered(r: &DomainEntry, o: &DomainEntry, org_ports: &[u16]) -> bool {
    rules_widen(r.rules.as_deref(), o.rules.as_deref()).is_none()
        && name_covered(&r.pattern, &o.pattern)
        && all_ports(r, org_ports, |p| o.allows_port(p, org_ports))
}

/// Each port of `r` is covered by some entry of `set` (so `a.com:80` and `a.com:443`
/// together cover a port-less `a.com` under the default ports), with its methods and
/// paths: one entry covers all of them on that port (docs/reference/policy-files.md, "Covering").
pub fn set_covers(set: &DomainSet, r: &DomainEntry, org_ports: &[u16]) -> bool {
    uncovered(set, r, org_ports).is_none()
}

/// Why `set` does not cover `r`: `Some(None)` when no entry covers its host and a port,
/// `Some(Some((field, o)))` when `o` covers host and port but allows fewer `field`
/// (`methods` or `paths`); `None` when covered.
fn uncovered<'s>(
    set: &'s DomainSet,
    r: &DomainEntry,
    org_ports: &[u16],
) -> Option<Option<(&'static str, &'s DomainEntry)>> {
    let mut narrower = None;
    let covered = all_ports(r, org_ports, |port| {
        let (exact, subtree) = match &r.pattern {
            DomainPattern::Exact(n) => (Some(set.matching(n)), None),
            DomainPattern::Subtree(b) => (None, Some(set.subtrees_at_or_above(b))),
        };
        let mut on_port = exact
            .into_iter()
            .flatten()
            .chain(subtree.into_iter().flatten())
            .filter(|o| name_covered(&r.pattern, &o.pattern) && o.allows_port(port, org_ports));
        on_port.any(
            |o| match rules_widen(r.rules.as_deref(), o.rules.as_deref()) {
                None => true,
                Some(field) => {
                    // The closest entry: one that allows the methods, not the paths.
                    if narrower.is_none_or(|(f, _)| f == "methods" && field == "paths") {
                        narrower = Some((field, o));
                    }
                    false
                }
            },
        )
    });
    (!covered).then_some(narrower)
}

/// The widening message of an entry `set` does not cover; `missing` says what when no
/// entry there has its host and port.
fn why_uncovered(set: &DomainSet, r: &DomainEntry, ports: &[u16], missing: &str) -> Option<String> {
    Some(match uncovered(set, r, ports)? {
        None => missing.to_string(),
        Some((field, o)) => {
            format!(
                "allows {field} that `{}` does not (its {field} must be among them)",
                o.rule()
            )
        }
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
        let why = why_uncovered(&org.allowed, e, ports, NOT_IN_ORG).or_else(|| {
            uppers.iter().find_map(|u| match u {
                RequestPolicy::Disabled => Some(DISABLED_ABOVE.to_string()),
                RequestPolicy::Allowlist { domains, .. } => {
                    why_uncovered(domains, e, ports, "not in the request policy above")
                }
            })
        });
        if let Some(why) = why {
            out.push((e.rule().to_string(), why));
        }
    }
    for net in cidrs.iter().flatten() {
        if let Some(why) = cidr_widening(org, uppers, net) {
            out.push((net.to_string(), why.to_string()));
        }
    }
    out.extend(budget_widening(org, uppers, req));
    out.extend(dlp_widening(org, uppers, req));
    out
}

/// How a request level's `"dlp"` action is named in widening entries.
const DLP_REPORT: &str = "dlp.action = \"report\"";

/// A request level's `"dlp": {"action": "report"}` under a level that refuses
/// (docs/reference/dlp.md): a level may add detectors, never turn `refuse` into `report`.
fn dlp_widening(
    org: &OrgPolicy,
    uppers: &[&RequestPolicy],
    req: &RequestPolicy,
) -> Option<(String, String)> {
    if dlp_action(req) != Some(DlpAction::Report) {
        return None;
    }
    let why = match org.dlp_action() {
        DlpAction::Refuse => "the organization refuses secrets ([dlp] action = \"refuse\")",
        DlpAction::Report => uppers
            .iter()
            .any(|u| dlp_action(u) == Some(DlpAction::Refuse))
            .then_some("the level above refuses secrets (its dlp.action is \"refuse\")")?,
    };
    Some((DLP_REPORT.to_string(), why.to_string()))
}

/// A request level's `"dlp"` action, when it sets one.
pub fn dlp_action(level: &RequestPolicy) -> Option<DlpAction> {
    match level {
        RequestPolicy::Allowlist { dlp: Some(d), .. } => d.action,
        _ => None,
    }
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

/// An entry of a request policy that widens the organization policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Widened {
    /// `allowed_domains`, `allowed_cidrs`, `max_upload_bytes` or `dlp`.
    pub key: &'static str,
    /// The entry: as written for a domain, the network for a CIDR, `max_upload_bytes = N`
    /// for a budget.
    pub text: String,
    /// Why it widens (`not in the organization allowlist` ...).
    pub why: String,
    /// Where it was written.
    pub at: usize,
}

/// Every entry of `policy` (written where `spans` say) that `org` does not cover, in
/// the order written.
pub fn widened(org: &OrgPolicy, policy: &RequestPolicy, spans: &RequestSpans) -> Vec<Widened> {
    let RequestPolicy::Allowlist {
        domains,
        cidrs,
        max_upload_bytes,
        ..
    } = policy
    else {
        return Vec::new();
    };
    let found = widening(org, &[], policy);
    if found.is_empty() {
        return Vec::new();
    }
    // `found` follows the entries' order (domains, then CIDRs): walk both together.
    let mut found = found.into_iter().peekable();
    let domains = domains
        .entries()
        .iter()
        .zip(&spans.allowed_domains)
        .map(|(e, at)| ("allowed_domains", e.rule().to_string(), *at));
    let cidrs = cidrs
        .iter()
        .flatten()
        .zip(&spans.allowed_cidrs)
        .map(|(net, w)| ("allowed_cidrs", net.to_string(), w.at));
    let budget = max_upload_bytes.map(|n| {
        let at = spans.max_upload_bytes.unwrap_or(0);
        ("max_upload_bytes", budget_text(n), at)
    });
    let dlp = (dlp_action(policy) == Some(DlpAction::Report))
        .then(|| ("dlp", DLP_REPORT.to_string(), spans.dlp.unwrap_or(0)));
    let mut out = Vec::new();
    for (key, text, at) in domains.chain(cidrs).chain(budget).chain(dlp) {
        if let Some((_, why)) = found.next_if(|(entry, _)| *entry == text) {
            out.push(Widened { key, text, why, at });
        }
    }
    out
}

#[cfg(test)]
#[path = "cover_tests.rs"]
mod tests;
