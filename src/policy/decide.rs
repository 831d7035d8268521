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

/// What was decided, carrying the reason of every verdict but an allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Allow,
    Deny(Reason),
    /// Report mode relaxed an allowlist denial: allowed, logged as `would_deny`.
    WouldDeny(Reason),
}

/// A verdict without its reason: how outputs (`check`'s `"verdict"`) spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    Allow,
    Deny,
    WouldDeny,
}

impl VerdictKind {
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::Allow => "allow",
            VerdictKind::Deny => "deny",
            VerdictKind::WouldDeny => "would_deny",
        }
    }
}

impl Verdict {
    pub fn kind(self) -> VerdictKind {
        match self {
            Verdict::Allow => VerdictKind::Allow,
            Verdict::Deny(_) => VerdictKind::Deny,
            Verdict::WouldDeny(_) => VerdictKind::WouldDeny,
        }
    }

    /// The reason of a denial or a would-be denial; `None` for an allow.
    pub fn reason(self) -> Option<Reason> {
        match self {
            Verdict::Allow => None,
            Verdict::Deny(r) | Verdict::WouldDeny(r) => Some(r),
        }
    }
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
    /// The entry that decided (the org allow entry for an allow), as written. Shared with
    /// the compiled entry, so deciding does not allocate.
    pub rule: Option<Arc<str>>,
    pub level: Level,
    pub shared_hosting: bool,
}

impl Decision {
    /// Allow or WouldDeny.
    pub fn is_allowed(&self) -> bool {
        matches!(self.verdict, Verdict::Allow | Verdict::WouldDeny(_))
    }

    /// The reason of a denial or a would-be denial; `None` for an allow.
    pub fn reason(&self) -> Option<Reason> {
        self.verdict.reason()
    }

    pub fn deny(reason: Reason, level: Level, rule: Option<Arc<str>>) -> Decision {
        Decision {
            verdict: Verdict::Deny(reason),
            rule,
            level,
            shared_hosting: false,
        }
    }

    fn allow(level: Level, rule: Option<Arc<str>>) -> Decision {
        Decision {
            verdict: Verdict::Allow,
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

/// One step of the order of judgement, as [`explain`] records it for `check --explain`.
/// The steps are the decision's own: the verdict and its steps come from one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The target is a literal IP address.
    Ip { ip: IpAddr, port: u16 },
    /// The organization `allowed_cidrs` entry covering a literal IP, if any.
    OrgCidr { ip: IpAddr, rule: Option<Arc<str>> },
    /// The target is a name.
    Name { name: HostName, port: u16 },
    /// The organization `denied_domains` entry that matched, if any.
    OrgDenied { rule: Option<Arc<str>> },
    /// The organization `allowed_domains` verdict on the name and port.
    OrgAllowed(Match),
    /// A request level (0 = widest) is `{"type": "disabled"}`.
    RequestDisabled { level: usize },
    /// A request level's `allowed_domains` verdict on the name and port.
    RequestAllowed { level: usize, found: Match },
    /// Whether the name is on shared hosting (`under` names the suffix or list entry).
    SharedHosting {
        under: Option<String>,
        action: SharedHostingAction,
    },
}

/// How a list of domain entries judged a name on a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// `rule` matches the name on the port.
    Port { rule: Arc<str>, port: u16 },
    /// No entry matches the name.
    None,
    /// `rule` matches the name but not the port (`ports`: the org's `allowed_ports`).
    OtherPort {
        rule: Arc<str>,
        port: u16,
        ports: Vec<u16>,
    },
}

/// Where [`decide`] reports its steps: nowhere on the request path, a list for `check`.
trait Trace {
    fn step(&mut self, step: impl FnOnce() -> Step);
}

/// The request path's trace: records nothing and costs nothing.
struct NoTrace;

impl Trace for NoTrace {
    #[inline(always)]
    fn step(&mut self, _: impl FnOnce() -> Step) {}
}

impl Trace for Vec<Step> {
    fn step(&mut self, step: impl FnOnce() -> Step) {
        self.push(step());
    }
}

/// Decide a target by name or literal IP (the order of judgement in
/// docs/reference/answers.md, steps 4 to 6).
pub fn decide(eff: &Effective, target: &Target) -> Decision {
    decide_traced(eff, target, &mut NoTrace)
}

/// [`decide`], with the steps it took up to the one that decided.
pub fn explain(eff: &Effective, target: &Target) -> (Decision, Vec<Step>) {
    let mut steps = Vec::new();
    let decision = decide_traced(eff, target, &mut steps);
    (decision, steps)
}

fn decide_traced(eff: &Effective, target: &Target, trace: &mut impl Trace) -> Decision {
    let (decision, shared) = match &target.host {
        Host::Name(name) => decide_name(eff, name, target.port, trace),
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

fn decide_name(
    eff: &Effective,
    host: &HostName,
    port: u16,
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
    let decision = judge_name(eff, &probe, shared, port, trace);
    (decision, shared.is_some())
}

fn judge_name(
    eff: &Effective,
    probe: &NameProbe,
    shared: Option<&str>,
    port: u16,
    trace: &mut impl Trace,
) -> Decision {
    let org = eff.org;
    // A denied entry with a port denies that port only; without one, every port.
    let denied = org
        .denied
        .matching_probe(probe)
        .find(|e| e.port.is_none_or(|p| p == port));
    trace.step(|| Step::OrgDenied {
        rule: denied.map(|e| e.text.clone()),
    });
    if let Some(e) = denied {
        return Decision::deny(Reason::DeniedDomain, Level::Org, Some(e.text.clone()));
    }
    let ports = &org.allowed_ports;
    let mut matching = org.allowed.matching_probe(probe).peekable();
    let Some(first) = matching.peek().copied() else {
        trace.step(|| Step::OrgAllowed(Match::None));
        return Decision::deny(Reason::NotInOrgAllowlist, Level::Org, None);
    };
    let Some(rule) = matching.find(|e| e.allows_port(port, ports)) else {
        let rule = first.text.clone();
        trace.step(|| Step::OrgAllowed(other_port(&rule, port, ports)));
        return Decision::deny(Reason::PortNotAllowed, Level::Org, Some(rule));
    };
    trace.step(|| {
        Step::OrgAllowed(Match::Port {
            rule: rule.text.clone(),
            port,
        })
    });
    for (i, level) in eff.levels.iter().enumerate() {
        let RequestPolicy::Allowlist { domains, .. } = level else {
            trace.step(|| Step::RequestDisabled { level: i });
            return Decision::deny(Reason::NetworkDisabled, Level::Request, None);
        };
        let mut matching = domains.matching_probe(probe).peekable();
        let Some(first) = matching.peek().copied() else {
            trace.step(|| Step::RequestAllowed {
                level: i,
                found: Match::None,
            });
            return Decision::deny(Reason::NotInRequestPolicy, Level::Request, None);
        };
        match matching.find(|e| e.allows_port(port, ports)) {
            Some(e) => trace.step(|| Step::RequestAllowed {
                level: i,
                found: Match::Port {
                    rule: e.text.clone(),
                    port,
                },
            }),
            None => {
                let rule = first.text.clone();
                trace.step(|| Step::RequestAllowed {
                    level: i,
                    found: other_port(&rule, port, ports),
                });
                return Decision::deny(Reason::PortNotAllowed, Level::Request, Some(rule));
            }
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
    Decision::allow(allow_level(eff), Some(rule.text.clone()))
}

fn other_port(rule: &Arc<str>, port: u16, ports: &[u16]) -> Match {
    Match::OtherPort {
        rule: rule.clone(),
        port,
        ports: ports.to_vec(),
    }
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
