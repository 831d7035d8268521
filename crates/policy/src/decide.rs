//! The decision (the order of judgement in docs/reference/answers.md): a pure function
//! of the effective policies and the target, saying allow or deny, why, by which rule and
//! at which level.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

use super::address::refused_class;
use super::compiled::{Mode, NameProbe, OrgPolicy, RequestPolicy, SharedHostingAction};
use super::host::{Host, HostName};
pub use super::request_rules::Http;
use super::request_rules::{allowed, any_inspected, find_entry, refuse, Found};
use super::shared_hosting;
use super::steps::{NoTrace, Step, Trace};
pub use super::verdict::{Decision, Level, Reason, Verdict, VerdictKind};

/// Where a request wants to go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The name (normalised) or literal IP asked for.
    pub host: Host,
    /// The port asked for.
    pub port: u16,
}

/// The policies in force for one request: the organization, then the request levels
/// widest first, each already checked to be covered by those above.
#[derive(Clone, Copy, Debug)]
pub struct Effective<'a> {
    /// The organization policy.
    pub org: &'a OrgPolicy,
    /// The request levels (`default_network_policy`, a session's policy, an
    /// `X-Network-Policy` header), widest first.
    pub levels: &'a [&'a RequestPolicy],
}

/// Decide a target by name or literal IP (the order of judgement in
/// docs/reference/answers.md, steps 4 to 6).
///
/// This is the decision of a `CONNECT`: it checks no method or path, so an entry with
/// rules allows it like any entry; [`Effective::must_intercept`] says whether its tunnel
/// must then be intercepted to judge each request inside.
pub fn decide(eff: &Effective, target: &Target) -> Decision {
    decide_traced(eff, target, None, &mut NoTrace)
}

/// [`decide`] for a request whose method and normalised path are known (plain HTTP, or a
/// request inside an intercepted tunnel): the entries' `methods` and `paths` apply, and a
/// request they do not allow is `method_not_allowed` or `path_not_allowed`
/// (docs/reference/policy-files.md, "Entries with rules").
pub fn decide_request(eff: &Effective, target: &Target, http: &Http) -> Decision {
    decide_traced(eff, target, Some(http), &mut NoTrace)
}

/// [`decide`], with the steps it took up to the one that decided.
pub fn explain(eff: &Effective, target: &Target) -> (Decision, Vec<Step>) {
    explain_request(eff, target, None)
}

/// [`decide_request`] (or [`decide`] when `http` is `None`), with its steps.
pub fn explain_request(
    eff: &Effective,
    target: &Target,
    http: Option<&Http>,
) -> (Decision, Vec<Step>) {
    let mut steps = Vec::new();
    let decision = decide_traced(eff, target, http, &mut steps);
    (decision, steps)
}

impl Effective<'_> {
    /// Whether a `CONNECT` (or transparent TLS connection) to `target` must be
    /// intercepted (docs/reference/inspection.md, "Which connections are intercepted"):
    /// some entry matching its host and port, at the organization or any request level,
    /// has `methods`, `paths`, `access` or `inspect`. Always `false` for a literal IP (entries with
    /// rules name hosts). For plain HTTP it says whether the rules need the path.
    pub fn must_intercept(&self, target: &Target) -> bool {
        let Host::Name(name) = &target.host else {
            return false;
        };
        let sets = || {
            let levels = self.levels.iter().filter_map(|level| match level {
                RequestPolicy::Allowlist { domains, .. } => Some(domains),
                RequestPolicy::Disabled => None,
            });
            std::iter::once(&self.org.allowed).chain(levels)
        };
        // Most policies have no rules at all: then nothing is looked up.
        if !sets().any(|set| set.has_rules()) {
            return false;
        }
        let probe = NameProbe::new(name);
        let (port, ports) = (target.port, &self.org.allowed_ports);
        sets()
            .filter(|set| set.has_rules())
            .any(|set| any_inspected(set.matching_probe(&probe), port, ports))
    }
}

fn decide_traced(
    eff: &Effective,
    target: &Target,
    http: Option<&Http>,
    trace: &mut impl Trace,
) -> Decision {
    let (decision, shared) = match &target.host {
        Host::Name(name) => decide_name(eff, name, target.port, http, trace),
        Host::Ip(ip) => (decide_ip(eff, *ip, target.port, trace), false),
    };
    let mut decision = relax(eff.org, decision);
    decision.shared_hosting = shared;
    decision
}

/// Report mode turns a relaxable denial into WouldDeny, keeping its reason and rule.
fn relax(org: &OrgPolicy, mut d: Decision) -> Decision {
    if let Verdict::Deny(reason) = d.verdict {
        if org.mode == Mode::Report && reason.relaxed_in_report_mode() {
            d.verdict = Verdict::WouldDeny(reason);
        }
    }
    d
}

fn allow_level(eff: &Effective) -> Level {
    if eff.levels.is_empty() {
        Level::Org
    } else {
        Level::Request
    }
}

#[inline]
fn decide_name(
    eff: &Effective,
    host: &HostName,
    port: u16,
    http: Option<&Http>,
    trace: &mut impl Trace,
) -> (Decision, bool) {
    let org = eff.org;
    // One pass over the host serves every set below.
    let probe = NameProbe::new(host);
    let shared = shared_hosting::classify_probe(&probe, &org.shared_hosting_extra);
    trace.step(|| Step::Name {
        name: host.clone(),
        port,
    });
    let decision = judge_name(eff, &probe, shared, (port, http), trace);
    (decision, shared.is_some())
}

#[inline]
fn judge_name(
    eff: &Effective,
    probe: &NameProbe,
    shared: Option<&str>,
    (port, http): (u16, Option<&Http>),
    trace: &mut impl Trace,
) -> Decision {
    let org = eff.org;
    // A denied entry with a port denies that port only; without one, every port.
    let denied = org
        .denied
        .matching_probe(probe)
        .find(|e| e.port.is_none_or(|p| p == port));
    trace.step(|| Step::OrgDenied {
        rule: denied.map(|e| e.rule().clone()),
    });
    if let Some(e) = denied {
        return Decision::deny(Reason::DeniedDomain, Level::Org, Some(e.rule().clone()));
    }
    let ports = &org.allowed_ports;
    let rule = match find_entry(org.allowed.matching_probe(probe), port, ports, http) {
        Found::Allowed(e) => e,
        found => return refuse(found, Level::Org, None, port, ports, http, trace),
    };
    trace.step(|| Step::OrgAllowed(allowed(rule, port, http)));
    for (i, level) in eff.levels.iter().enumerate() {
        let RequestPolicy::Allowlist { domains, .. } = level else {
            trace.step(|| Step::RequestDisabled { level: i });
            return Decision::deny(Reason::NetworkDisabled, Level::Request, None);
        };
        match find_entry(domains.matching_probe(probe), port, ports, http) {
            Found::Allowed(e) => trace.step(|| Step::RequestAllowed {
                level: i,
                found: allowed(e, port, http),
            }),
            found => return refuse(found, Level::Request, Some(i), port, ports, http, trace),
        }
    }
    trace.step(|| Step::SharedHosting {
        under: shared.map(str::to_owned),
        action: org.shared_hosting_action,
    });
    if let Some(why) = shared {
        if org.shared_hosting_action == SharedHostingAction::Deny {
            return Decision::deny(Reason::SharedHosting, Level::Org, Some(Arc::from(why)));
        }
    }
    Decision::allow(allow_level(eff), Some(rule.rule().clone()))
}

/// `net` contains `ip`, judging an IPv4-mapped IPv6 address by its IPv4 address too.
fn net_contains(net: &IpNet, ip: IpAddr) -> bool {
    net.contains(&ip) || net.contains(&ip.to_canonical())
}

fn find_net(nets: &[IpNet], ip: IpAddr) -> Option<&IpNet> {
    nets.iter().find(|n| net_contains(n, ip))
}

/// The organization `allowed_cidrs` entry holding `ip`, as its rule text.
fn org_cidr_rule(org: &OrgPolicy, ip: IpAddr) -> Option<Arc<str>> {
    let i = org.allowed_cidrs.iter().position(|n| net_contains(n, ip))?;
    Some(match org.cidr_rules.get(i) {
        Some(rule) => rule.clone(),
        None => Arc::from(org.allowed_cidrs[i].to_string()),
    })
}

fn decide_ip(eff: &Effective, ip: IpAddr, port: u16, trace: &mut impl Trace) -> Decision {
    let org = eff.org;
    trace.step(|| Step::Ip { ip, port });
    let rule = org_cidr_rule(org, ip);
    trace.step(|| Step::OrgCidr {
        ip,
        rule: rule.clone(),
    });
    let Some(rule) = rule else {
        return match refused_class(ip) {
            Some(_) => Decision::deny(Reason::PrivateAddress, Level::Address, None),
            None => Decision::deny(Reason::NotInOrgAllowlist, Level::Org, None),
        };
    };
    let rule = Some(rule);
    if !org.allowed_ports.contains(&port) {
        return Decision::deny(Reason::PortNotAllowed, Level::Org, rule);
    }
    for level in eff.levels {
        match level {
            RequestPolicy::Disabled => {
                return Decision::deny(Reason::NetworkDisabled, Level::Request, None)
            }
            RequestPolicy::Allowlist { cidrs, .. } => {
                if find_net(cidrs.as_deref().unwrap_or(&[]), ip).is_none() {
                    return Decision::deny(Reason::NotInRequestPolicy, Level::Request, None);
                }
            }
        }
    }
    Decision::allow(allow_level(eff), rule)
}

/// The address level (step 7), for an address a name resolved to and for a literal IP
/// after [`decide`]. Never relaxed by report mode.
pub fn check_address(eff: &Effective, ip: IpAddr, own: &[SocketAddr], port: u16) -> Decision {
    let ip = ip.to_canonical();
    let class = refused_class(ip);
    // 0.0.0.0/8 and `::` name "this host": the kernel delivers a connection to them to a
    // local listener, the proxy's own included, so no CIDR can open them.
    let this_host = match ip {
        IpAddr::V4(v4) => v4.octets()[0] == 0,
        IpAddr::V6(v6) => v6.is_unspecified(),
    };
    if this_host {
        let rule = Some(Arc::from("unspecified address (this host)"));
        return Decision::deny(Reason::PrivateAddress, Level::Address, rule);
    }
    let own_listener = own.iter().any(|sa| {
        sa.port() == port
            && (sa.ip().to_canonical() == ip
                || (sa.ip().is_unspecified() && (class.is_some() || ip.is_unspecified())))
    });
    if own_listener {
        let rule = Some(Arc::from("own listener"));
        return Decision::deny(Reason::PrivateAddress, Level::Address, rule);
    }
    if class.is_none() {
        return Decision::allow(Level::Address, None);
    }
    let Some(rule) = org_cidr_rule(eff.org, ip) else {
        return Decision::deny(Reason::PrivateAddress, Level::Address, None);
    };
    let narrowed_out = eff.levels.iter().any(|level| match level {
        RequestPolicy::Allowlist {
            cidrs: Some(nets), ..
        } => find_net(nets, ip).is_none(),
        _ => false,
    });
    if narrowed_out {
        return Decision::deny(Reason::PrivateAddress, Level::Address, None);
    }
    Decision::allow(Level::Address, Some(rule))
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
