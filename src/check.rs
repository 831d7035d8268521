//! `egress-proxy check`: decide targets offline with the proxy's own decision code
//! ([`explain`](crate::policy::explain), the decision with its steps, then [`check_address`] for literal IPs and
//! `--resolve` pins), and say why, step by step with `--explain`: the steps printed are
//! the ones the decision took, not a second account of it.
//!
//! A bare `host` or `host:port` target defaults to port 443 (what a sandbox reaches
//! most); URLs default to their scheme's port. Where an entry with rules matches, a URL
//! is judged as a `GET` of its path (`--method` names another method). Nothing is resolved: a name's addresses
//! are checked only when `--resolve HOST=IP` pins it.

use std::collections::HashMap;
use std::net::IpAddr;

use serde::Serialize;

pub use crate::config::check::Format;
use crate::config::CheckConfig;
use crate::load::{self, LoadError};
use crate::policy::{
    check_address, explain_request, normalize_path, Decision, Effective, Host, Http, Match,
    OrgPolicy, RequestPolicy, SharedHostingAction, Step, Target, VerdictKind,
};

/// Why `check` could not decide (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{0}")]
    Load(#[from] LoadError),
    #[error("target {target:?}: {message}")]
    Target { target: String, message: String },
}

/// One decided target.
#[derive(Debug, Serialize)]
pub struct Checked {
    pub target: String,
    pub host: String,
    pub port: u16,
    pub verdict: VerdictKind,
    pub reason: Option<&'static str>,
    pub rule: Option<String>,
    pub level: &'static str,
    pub shared_hosting: bool,
    /// The method and normalised path judged, when entries with rules needed them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A `CONNECT` to it would be intercepted (an entry matching it has rules).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub intercepted: bool,
    /// The address checks, for literal IPs and pinned names.
    pub addresses: Vec<AddressCheck>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct AddressCheck {
    pub ip: IpAddr,
    pub verdict: VerdictKind,
    pub reason: Option<&'static str>,
    pub rule: Option<String>,
}

impl Checked {
    /// What the proxy would do: connect (allow, or would_deny in report mode) or refuse.
    pub fn allowed(&self) -> bool {
        self.verdict != VerdictKind::Deny
    }
}

/// Decide every target. `Ok` holds the results and the rendered output.
pub fn run(args: &CheckConfig) -> Result<(Vec<Checked>, String), CheckError> {
    let policies = load::load_strict(&args.org, args.policy.as_deref())?;
    let (org, policy) = (&policies.org, &policies.without_session);
    let pins = &args.pins;
    let policy_name = match &args.policy {
        Some(p) => format!("--policy {}", p.display()),
        None => format!("default_network_policy of {}", args.org.display()),
    };
    let mut results = Vec::new();
    for raw in &args.targets {
        let target = parse_target(raw).map_err(|message| CheckError::Target {
            target: raw.clone(),
            message,
        })?;
        let request = request_of(raw, args.method.as_deref());
        let (mut checked, steps) =
            check_one(org, policy, (&target, request), pins, raw).map_err(|message| {
                CheckError::Target {
                    target: raw.clone(),
                    message,
                }
            })?;
        if args.explain {
            checked.steps = explain_steps(&steps, &policy_name, &checked);
        }
        results.push(checked);
    }
    let output = match args.format {
        Format::Text => text(&results),
        Format::Json => {
            let doc = serde_json::json!({
                "all_allowed": results.iter().all(Checked::allowed),
                "results": results,
            });
            serde_json::to_string_pretty(&doc).expect("serialisable") + "\n"
        }
    };
    Ok((results, output))
}

/// `http://h:p/path`, `https://h/` (port 443), `host`, `host:port` (default 443),
/// `[v6]:port`.
pub fn parse_target(s: &str) -> Result<Target, String> {
    let (authority, default_port) = match s.split_once("://") {
        Some((scheme, rest)) => {
            let port = match scheme.to_ascii_lowercase().as_str() {
                "http" => 80,
                "https" => 443,
                other => return Err(format!("scheme {other:?}: only http and https URLs")),
            };
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            (&rest[..end], port)
        }
        None if s.contains(['/', '?', '#']) => {
            return Err("a path needs a URL with a scheme (https://host/path)".into())
        }
        None => (s, 443),
    };
    if authority.contains('@') {
        return Err("remove the user part (`user@`): the proxy refuses it".into());
    }
    let (host, port) = split_port(authority)?;
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n != 0 => n,
            _ => return Err(format!("invalid port {p:?}: 1-65535")),
        },
    };
    let host = Host::parse(host).map_err(|e| e.to_string())?;
    Ok(Target { host, port })
}

fn split_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if authority.is_empty() {
        return Err("empty host".into());
    }
    if authority.starts_with('[') {
        let close = authority.find(']').ok_or("unclosed `[`")?;
        let rest = &authority[close + 1..];
        return match rest.strip_prefix(':') {
            Some(port) => Ok((&authority[..=close], Some(port))),
            None if rest.is_empty() => Ok((authority, None)),
            None => Err("unexpected text after `]`".into()),
        };
    }
    match authority.matches(':').count() {
        0 => Ok((authority, None)),
        1 => {
            let (h, p) = authority.split_once(':').expect("one colon");
            Ok((h, Some(p)))
        }
        _ => Ok((authority, None)), // a bare IPv6 address
    }
}

/// What a target asks beyond host and port: a URL is a `GET` of its path, unless
/// `--method` names another method; `host[:port]` is a `CONNECT`, unless `--method` is
/// given (then of `/`).
fn request_of<'a>(raw: &'a str, method: Option<&'a str>) -> Option<(&'a str, &'a str)> {
    let path = raw.split_once("://").map(|(_, rest)| {
        let rest = rest.split('#').next().unwrap_or(rest);
        rest.find(['/', '?']).map_or("/", |i| &rest[i..])
    });
    match (method, path) {
        (None, None) => None,
        (m, path) => Some((m.unwrap_or("GET"), path.unwrap_or("/"))),
    }
}

/// Decide one target as the proxy would: with its method and path when an entry with
/// rules matches it (as `judge` does), else by host and port.
fn check_one(
    org: &OrgPolicy,
    policy: &RequestPolicy,
    (target, request): (&Target, Option<(&str, &str)>),
    pins: &HashMap<String, Vec<IpAddr>>,
    raw: &str,
) -> Result<(Checked, Vec<Step>), String> {
    let levels = [policy];
    let eff = Effective {
        org,
        levels: &levels,
    };
    let request = match request {
        Some((method, path)) if eff.must_intercept(target) => {
            let path = normalize_path(path).map_err(|e| format!("invalid_request: {e}"))?;
            Some((method, path))
        }
        _ => None,
    };
    let http = request.as_ref().map(|(method, path)| Http { method, path });
    let (decision, steps) = explain_request(&eff, target, http.as_ref());
    let ips = match &target.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(n) => pins.get(n.as_str()).cloned().unwrap_or_default(),
    };
    let mut addresses = Vec::new();
    if decision.is_allowed() {
        for ip in ips {
            let d = check_address(&eff, ip, &[], target.port);
            addresses.push(AddressCheck {
                ip,
                verdict: d.verdict.kind(),
                reason: d.reason().map(|r| r.as_str()),
                rule: d.rule.as_deref().map(str::to_owned),
            });
        }
    }
    // Like the proxy: refused when every address is refused.
    let refused = !addresses.is_empty() && addresses.iter().all(|a| a.verdict == VerdictKind::Deny);
    let mut checked = from_decision(raw, target, &decision);
    checked.intercepted = eff.must_intercept(target);
    if let Some((method, path)) = request {
        checked.method = Some(method.to_string());
        checked.path = Some(path.to_string());
    }
    if refused {
        let first = &addresses[0];
        checked.verdict = VerdictKind::Deny;
        checked.reason = first.reason;
        checked.rule = first.rule.clone();
        checked.level = "address";
    }
    checked.addresses = addresses;
    Ok((checked, steps))
}

fn from_decision(raw: &str, target: &Target, d: &Decision) -> Checked {
    Checked {
        target: raw.to_string(),
        host: target.host.to_string(),
        port: target.port,
        verdict: d.verdict.kind(),
        reason: d.reason().map(|r| r.as_str()),
        rule: d.rule.as_deref().map(str::to_owned),
        level: d.level.as_str(),
        shared_hosting: d.shared_hosting,
        method: None,
        path: None,
        intercepted: false,
        addresses: Vec::new(),
        steps: Vec::new(),
    }
}

fn text(results: &[Checked]) -> String {
    let mut out = String::new();
    for c in results {
        let mut line = format!(
            "{} -> {}: {}",
            c.target,
            Host::parse(&c.host).map_or(c.host.clone(), |h| h.authority(c.port)),
            c.verdict.as_str()
        );
        if let Some(reason) = c.reason {
            line += &format!(" {reason}");
        }
        line += &format!(" (level {}", c.level);
        if let Some(rule) = &c.rule {
            line += &format!(", rule `{rule}`");
        }
        if c.shared_hosting {
            line += ", shared hosting";
        }
        line += ")";
        out += &line;
        out.push('\n');
        for (i, step) in c.steps.iter().enumerate() {
            out += &format!("  {}. {step}\n", i + 1);
        }
    }
    out
}

/// The steps the decision took, as text, then the address checks and the verdict.
fn explain_steps(steps: &[Step], policy_name: &str, checked: &Checked) -> Vec<String> {
    let mut out: Vec<String> = steps.iter().map(|s| step_text(s, policy_name)).collect();
    if checked.addresses.is_empty() {
        if steps.iter().any(|s| matches!(s, Step::Name { .. }))
            && checked.verdict != VerdictKind::Deny
        {
            out.push(
                "address: not resolved (offline); pass --resolve HOST=IP to check where it lands"
                    .into(),
            );
        }
    } else {
        for a in &checked.addresses {
            let what = match (a.verdict, a.reason) {
                (VerdictKind::Deny, Some(r)) => format!("refused ({r})"),
                _ => match &a.rule {
                    Some(net) => format!("allowed (opened by allowed_cidrs `{net}`)"),
                    None => "allowed (a public address)".into(),
                },
            };
            out.push(format!("address {}: {what}", a.ip));
        }
    }
    if checked.intercepted && checked.verdict != VerdictKind::Deny {
        out.push(
            "inspection: an entry for this host has rules, so a CONNECT to it is intercepted and each request inside is judged by method and path"
                .into(),
        );
    }
    let mut verdict = format!("verdict: {}", checked.verdict.as_str());
    if let Some(r) = checked.reason {
        verdict += &format!(" ({r}, level {})", checked.level);
    }
    if checked.verdict == VerdictKind::WouldDeny {
        verdict += ": the organization is in report mode, so this is let through and logged";
    }
    out.push(verdict);
    out
}

/// One step, in words. `policy_name` names the request level (`check` has one).
fn step_text(step: &Step, policy_name: &str) -> String {
    match step {
        Step::Ip { ip, port } => format!("target: the IP address {ip}, port {port}"),
        Step::OrgCidr { ip, rule: Some(n) } => format!("org allowed_cidrs: `{n}` covers {ip}"),
        Step::OrgCidr { ip, rule: None } => {
            format!("org allowed_cidrs: nothing covers {ip} (a literal IP needs a CIDR)")
        }
        Step::Name { name, port } => format!("target: the name {name}, port {port}"),
        Step::OrgDenied { rule: Some(d) } => format!("org denied_domains: `{d}` matches: denied"),
        Step::OrgDenied { rule: None } => "org denied_domains: no entry matches".into(),
        Step::OrgAllowed(found) => match found {
            Match::Port { rule, port } => {
                format!("org allowed_domains: `{rule}` matches on port {port}")
            }
            Match::None => "org allowed_domains: no entry matches: denied".into(),
            Match::OtherPort { rule, port, ports } => format!(
                "org allowed_domains: `{rule}` matches the name but not port {port} (allowed_ports {ports:?}): denied"
            ),
            other => format!("org allowed_domains: {}", rule_step(other)),
        },
        Step::RequestDisabled { .. } => {
            format!("request policy ({policy_name}): {{\"type\": \"disabled\"}}: denied")
        }
        Step::RequestAllowed { found, .. } => match found {
            Match::Port { rule, port } => {
                format!("request policy ({policy_name}): `{rule}` matches on port {port}")
            }
            Match::None => format!("request policy ({policy_name}): no entry matches: denied"),
            Match::OtherPort { rule, port, .. } => format!(
                "request policy ({policy_name}): `{rule}` matches the name but not port {port}: denied"
            ),
            other => format!("request policy ({policy_name}): {}", rule_step(other)),
        },
        Step::SharedHosting { under: None, .. } => "shared hosting: no".into(),
        Step::SharedHosting {
            under: Some(why),
            action,
        } => {
            let action = match action {
                SharedHostingAction::Deny => "action = \"deny\": denied",
                SharedHostingAction::Flag => "action = \"flag\": allowed, marked in the audit log",
            };
            format!("shared hosting: yes (under `{why}`), {action}")
        }
    }
}

/// The step of an entry with rules judging the request's method and path.
fn rule_step(found: &Match) -> String {
    match found {
        Match::Request { rule, method, path } => {
            format!("`{rule}` allows {method} {path}")
        }
        Match::OtherMethod { rule, method } => format!(
            "no entry for the name and port allows the method {method} (first: `{rule}`): denied, method_not_allowed"
        ),
        Match::OtherPath { rule, method, path } => format!(
            "no entry allowing {method} allows the path {path} (first: `{rule}`): denied, path_not_allowed"
        ),
        Match::Port { rule, port } => format!("`{rule}` matches on port {port}"),
        Match::None => "no entry matches: denied".into(),
        Match::OtherPort { rule, port, .. } => {
            format!("`{rule}` matches the name but not port {port}: denied")
        }
    }
}
