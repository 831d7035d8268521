//! The decision (SPEC sections 6 and 10): a pure function of the effective policies and
//! the target, saying allow or deny, why, by which rule and at which level.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use serde::Serialize;

use super::address::refused_class;
use super::compile::{Mode, NameProbe, OrgPolicy, RequestPolicy, SharedHostingAction};
use super::host::{Host, HostName};
use super::shared_hosting;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny,
    /// Report mode relaxed an allowlist denial: allowed, logged as `would_deny`.
    WouldDeny,
}

/// Why a request was refused: the closed set of SPEC section 6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    NotInOrgAllowlist,
    NotInRequestPolicy,
    NetworkDisabled,
    DeniedDomain,
    PortNotAllowed,
    SharedHosting,
    PrivateAddress,
    PolicyWidening,
    InvalidHost,
    InvalidRequest,
    InvalidPolicy,
    HostMismatch,
    SniMismatch,
    AuthRequired,
    LimitExceeded,
}

impl Reason {
    pub const ALL: [Reason; 15] = [
        Reason::NotInOrgAllowlist,
        Reason::NotInRequestPolicy,
        Reason::NetworkDisabled,
        Reason::DeniedDomain,
        Reason::PortNotAllowed,
        Reason::SharedHosting,
        Reason::PrivateAddress,
        Reason::PolicyWidening,
        Reason::InvalidHost,
        Reason::InvalidRequest,
        Reason::InvalidPolicy,
        Reason::HostMismatch,
        Reason::SniMismatch,
        Reason::AuthRequired,
        Reason::LimitExceeded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotInOrgAllowlist => "not_in_org_allowlist",
            Reason::NotInRequestPolicy => "not_in_request_policy",
            Reason::NetworkDisabled => "network_disabled",
            Reason::DeniedDomain => "denied_domain",
            Reason::PortNotAllowed => "port_not_allowed",
            Reason::SharedHosting => "shared_hosting",
            Reason::PrivateAddress => "private_address",
            Reason::PolicyWidening => "policy_widening",
            Reason::InvalidHost => "invalid_host",
            Reason::InvalidRequest => "invalid_request",
            Reason::InvalidPolicy => "invalid_policy",
            Reason::HostMismatch => "host_mismatch",
            Reason::SniMismatch => "sni_mismatch",
            Reason::AuthRequired => "auth_required",
            Reason::LimitExceeded => "limit_exceeded",
        }
    }

    /// The HTTP status of a refusal for this reason.
    pub fn status(self) -> u16 {
        match self {
            Reason::InvalidRequest | Reason::InvalidHost | Reason::InvalidPolicy => 400,
            Reason::AuthRequired => 407,
            Reason::LimitExceeded => 429,
            _ => 403,
        }
    }

    /// Report mode relaxes only allowlist decisions.
    pub fn relaxed_in_report_mode(self) -> bool {
        matches!(
            self,
            Reason::DeniedDomain
                | Reason::NotInOrgAllowlist
                | Reason::NotInRequestPolicy
                | Reason::NetworkDisabled
                | Reason::PortNotAllowed
                | Reason::SharedHosting
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which level decided: the audit record's `policy_level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Org,
    Request,
    Address,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Org => "org",
            Level::Request => "request",
            Level::Address => "address",
        }
    }
}

/// A decision and why: read by the answer, the audit record, `check` and `lint`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: Option<Reason>,
    /// The entry that decided (the org allow entry for an allow), as written. Shared with
    /// the compiled entry, so deciding does not allocate.
    pub rule: Option<Arc<str>>,
    pub level: Level,
    pub shared_hosting: bool,
}

impl Decision {
    /// Allow or WouldDeny.
    pub fn is_allowed(&self) -> bool {
        matches!(self.verdict, Verdict::Allow | Verdict::WouldDeny)
    }

    pub fn deny(reason: Reason, level: Level, rule: Option<Arc<str>>) -> Decision {
        Decision {
            verdict: Verdict::Deny,
            reason: Some(reason),
            rule,
            level,
            shared_hosting: false,
        }
    }

    fn allow(level: Level, rule: Option<Arc<str>>) -> Decision {
        Decision {
            verdict: Verdict::Allow,
            reason: None,
            rule,
            level,
            shared_hosting: false,
        }
    }
}

/// Where a request wants to go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

/// The policies in force for one request: the organization, then the request levels
/// widest first, each already checked to be covered by those above.
#[derive(Clone, Copy, Debug)]
pub struct Effective<'a> {
    pub org: &'a OrgPolicy,
    pub levels: &'a [&'a RequestPolicy],
}

/// Decide a target by name or literal IP (SPEC 10 "Order of judgement", steps 4 to 6).
pub fn decide(eff: &Effective, target: &Target) -> Decision {
    let (decision, shared) = match &target.host {
        Host::Name(name) => decide_name(eff, name, target.port),
        Host::Ip(ip) => (decide_ip(eff, *ip, target.port), false),
    };
    let mut decision = relax(eff.org, decision);
    decision.shared_hosting = shared;
    decision
}

/// Report mode turns a relaxable denial into WouldDeny, keeping its reason and rule.
fn relax(org: &OrgPolicy, mut d: Decision) -> Decision {
    if org.mode == Mode::Report
        && d.verdict == Verdict::Deny
        && d.reason.is_some_and(Reason::relaxed_in_report_mode)
    {
        d.verdict = Verdict::WouldDeny;
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

fn decide_name(eff: &Effective, host: &HostName, port: u16) -> (Decision, bool) {
    let org = eff.org;
    // One pass over the host serves every set below.
    let probe = NameProbe::new(host);
    let shared = shared_hosting::classify_probe(&probe, &org.shared_hosting_extra);
    let decision = (|| {
        // A denied entry with a port denies that port only; without one, every port.
        let denied = org
            .denied
            .matching_probe(&probe)
            .find(|e| e.port.is_none_or(|p| p == port));
        if let Some(e) = denied {
            return Decision::deny(Reason::DeniedDomain, Level::Org, Some(e.text.clone()));
        }
        let ports = &org.allowed_ports;
        let mut matching = org.allowed.matching_probe(&probe).peekable();
        let Some(first) = matching.peek().copied() else {
            return Decision::deny(Reason::NotInOrgAllowlist, Level::Org, None);
        };
        let Some(rule) = matching.find(|e| e.allows_port(port, ports)) else {
            let rule = Some(first.text.clone());
            return Decision::deny(Reason::PortNotAllowed, Level::Org, rule);
        };
        for level in eff.levels {
            let RequestPolicy::Allowlist { domains, .. } = level else {
                return Decision::deny(Reason::NetworkDisabled, Level::Request, None);
            };
            let mut matching = domains.matching_probe(&probe).peekable();
            let Some(first) = matching.peek().copied() else {
                return Decision::deny(Reason::NotInRequestPolicy, Level::Request, None);
            };
            if !matching.any(|e| e.allows_port(port, ports)) {
                let rule = Some(first.text.clone());
                return Decision::deny(Reason::PortNotAllowed, Level::Request, rule);
            }
        }
        if let Some(why) = shared {
            if org.shared_hosting_action == SharedHostingAction::Deny {
                return Decision::deny(Reason::SharedHosting, Level::Org, Some(Arc::from(why)));
            }
        }
        Decision::allow(allow_level(eff), Some(rule.text.clone()))
    })();
    (decision, shared.is_some())
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

fn decide_ip(eff: &Effective, ip: IpAddr, port: u16) -> Decision {
    let org = eff.org;
    let Some(rule) = org_cidr_rule(org, ip) else {
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
