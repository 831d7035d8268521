//! `egress-proxy check`: decide targets offline with the proxy's own decision code
//! ([`decide`], then [`check_address`] for literal IPs and `--resolve` pins), and say
//! why, step by step with `--explain`.
//!
//! A bare `host` or `host:port` target defaults to port 443 (what a sandbox reaches
//! most); URLs default to their scheme's port. Nothing is resolved: a name's addresses
//! are checked only when `--resolve HOST=IP` pins it.

use std::collections::HashMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::cli::{CheckArgs, CheckFormat};
use crate::net::resolve::parse_resolve_pin;
use crate::policy::shared_hosting::classify;
use crate::policy::{
    check_address, decide, Decision, Effective, Host, HostName, OrgPolicy, RequestPolicy,
    SharedHostingAction, Target, Verdict,
};
use crate::serve::{load_policies, StartError};

/// Why `check` could not decide (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{0}")]
    Load(#[from] StartError),
    #[error("target {target:?}: {message}")]
    Target { target: String, message: String },
    #[error("{0}")]
    Pin(String),
}

/// One decided target.
#[derive(Debug, Serialize)]
pub struct Checked {
    pub target: String,
    pub host: String,
    pub port: u16,
    pub verdict: Verdict,
    pub reason: Option<&'static str>,
    pub rule: Option<String>,
    pub level: &'static str,
    pub shared_hosting: bool,
    /// The address checks, for literal IPs and pinned names.
    pub addresses: Vec<AddressCheck>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct AddressCheck {
    pub ip: IpAddr,
    pub verdict: Verdict,
    pub reason: Option<&'static str>,
    pub rule: Option<String>,
}

impl Checked {
    /// What the proxy would do: connect (allow, or would_deny in report mode) or refuse.
    pub fn allowed(&self) -> bool {
        self.verdict != Verdict::Deny
    }
}

/// Decide every target. `Ok` holds the results and the rendered output.
pub fn run(args: &CheckArgs) -> Result<(Vec<Checked>, String), CheckError> {
    let (org, policy) = load_policies(&args.org, args.policy.as_deref())?;
    let pins = pins(&args.resolve)?;
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
        let mut checked = check_one(&org, &policy, &target, &pins, raw);
        if args.explain {
            checked.steps = explain(&org, &policy, &policy_name, &target, &checked);
        }
        results.push(checked);
    }
    let output = match args.format {
        CheckFormat::Text => text(&results),
        CheckFormat::Json => {
            let doc = serde_json::json!({
                "all_allowed": results.iter().all(Checked::allowed),
                "results": results,
            });
            serde_json::to_string_pretty(&doc).expect("serialisable") + "\n"
        }
    };
    Ok((results, output))
}

fn pins(values: &[String]) -> Result<HashMap<String, Vec<IpAddr>>, CheckError> {
    let mut pins: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for value in values {
        let (host, ip) = parse_resolve_pin(value).map_err(CheckError::Pin)?;
        let name = HostName::parse(&host)
            .map_err(|e| CheckError::Pin(format!("--resolve {value:?}: {e}")))?;
        pins.entry(name.to_string()).or_default().push(ip);
    }
    Ok(pins)
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

fn check_one(
    org: &OrgPolicy,
    policy: &RequestPolicy,
    target: &Target,
    pins: &HashMap<String, Vec<IpAddr>>,
    raw: &str,
) -> Checked {
    let levels = [policy];
    let eff = Effective {
        org,
        levels: &levels,
    };
    let decision = decide(&eff, target);
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
                verdict: d.verdict,
                reason: d.reason.map(|r| r.as_str()),
                rule: d.rule.as_deref().map(str::to_owned),
            });
        }
    }
    // Like the proxy: refused when every address is refused.
    let refused = !addresses.is_empty() && addresses.iter().all(|a| a.verdict == Verdict::Deny);
    let mut checked = from_decision(raw, target, &decision);
    if refused {
        let first = &addresses[0];
        checked.verdict = Verdict::Deny;
        checked.reason = first.reason;
        checked.rule = first.rule.clone();
        checked.level = "address";
    }
    checked.addresses = addresses;
    checked
}

fn from_decision(raw: &str, target: &Target, d: &Decision) -> Checked {
    Checked {
        target: raw.to_string(),
        host: target.host.to_string(),
        port: target.port,
        verdict: d.verdict,
        reason: d.reason.map(|r| r.as_str()),
        rule: d.rule.as_deref().map(str::to_owned),
        level: d.level.as_str(),
        shared_hosting: d.shared_hosting,
        addresses: Vec::new(),
        steps: Vec::new(),
    }
}

fn verdict_str(v: Verdict) -> &'static str {
    match v {
        Verdict::Allow => "allow",
        Verdict::Deny => "deny",
        Verdict::WouldDeny => "would_deny",
    }
}

fn text(results: &[Checked]) -> String {
    let mut out = String::new();
    for c in results {
        let mut line = format!(
            "{} -> {}: {}",
            c.target,
            Host::parse(&c.host).map_or(c.host.clone(), |h| h.authority(c.port)),
            verdict_str(c.verdict)
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

/// The steps of the order of judgement (SPEC 10) for this target, up to the one that
/// decided. Descriptive only: the verdict is [`decide`]'s.
fn explain(
    org: &OrgPolicy,
    policy: &RequestPolicy,
    policy_name: &str,
    target: &Target,
    checked: &Checked,
) -> Vec<String> {
    let port = target.port;
    let mut steps = Vec::new();
    match &target.host {
        Host::Ip(ip) => {
            steps.push(format!("target: the IP address {ip}, port {port}"));
            match org.allowed_cidrs().iter().find(|n| n.contains(ip)) {
                Some(n) => steps.push(format!("org allowed_cidrs: `{n}` covers {ip}")),
                None => steps.push(format!(
                    "org allowed_cidrs: nothing covers {ip} (a literal IP needs a CIDR)"
                )),
            }
        }
        Host::Name(name) => {
            steps.push(format!("target: the name {name}, port {port}"));
            explain_name(org, policy, policy_name, name, port, &mut steps);
        }
    }
    if checked.addresses.is_empty() {
        if matches!(target.host, Host::Name(_)) && checked.verdict != Verdict::Deny {
            steps.push(
                "address: not resolved (offline); pass --resolve HOST=IP to check where it lands"
                    .into(),
            );
        }
    } else {
        for a in &checked.addresses {
            let what = match (a.verdict, a.reason) {
                (Verdict::Deny, Some(r)) => format!("refused ({r})"),
                _ => match &a.rule {
                    Some(net) => format!("allowed (opened by allowed_cidrs `{net}`)"),
                    None => "allowed (a public address)".into(),
                },
            };
            steps.push(format!("address {}: {what}", a.ip));
        }
    }
    let mut verdict = format!("verdict: {}", verdict_str(checked.verdict));
    if let Some(r) = checked.reason {
        verdict += &format!(" ({r}, level {})", checked.level);
    }
    if checked.verdict == Verdict::WouldDeny {
        verdict += ": the organization is in report mode, so this is let through and logged";
    }
    steps.push(verdict);
    steps
}

fn explain_name(
    org: &OrgPolicy,
    policy: &RequestPolicy,
    policy_name: &str,
    name: &HostName,
    port: u16,
    steps: &mut Vec<String>,
) {
    let denied = org
        .denied()
        .matching(name)
        .find(|e| e.port.is_none_or(|p| p == port));
    if let Some(d) = denied {
        steps.push(format!("org denied_domains: `{d}` matches: denied"));
        return;
    }
    steps.push("org denied_domains: no entry matches".into());
    let ports = org.allowed_ports();
    let matching: Vec<_> = org.allowed().matching(name).collect();
    match matching.iter().find(|e| e.allows_port(port, ports)) {
        Some(e) => steps.push(format!("org allowed_domains: `{e}` matches on port {port}")),
        None if matching.is_empty() => {
            steps.push("org allowed_domains: no entry matches: denied".into());
            return;
        }
        None => {
            steps.push(format!(
                "org allowed_domains: `{}` matches the name but not port {port} (allowed_ports {ports:?}): denied",
                matching[0]
            ));
            return;
        }
    }
    match policy {
        RequestPolicy::Disabled => {
            steps.push(format!(
                "request policy ({policy_name}): {{\"type\": \"disabled\"}}: denied"
            ));
            return;
        }
        RequestPolicy::Allowlist { domains, .. } => {
            let matching: Vec<_> = domains.matching(name).collect();
            match matching.iter().find(|e| e.allows_port(port, ports)) {
                Some(e) => steps.push(format!(
                    "request policy ({policy_name}): `{e}` matches on port {port}"
                )),
                None if matching.is_empty() => {
                    steps.push(format!(
                        "request policy ({policy_name}): no entry matches: denied"
                    ));
                    return;
                }
                None => {
                    steps.push(format!(
                        "request policy ({policy_name}): `{}` matches the name but not port {port}: denied",
                        matching[0]
                    ));
                    return;
                }
            }
        }
    }
    match classify(name, org.shared_hosting_extra()) {
        None => steps.push("shared hosting: no".into()),
        Some(why) => {
            let action = match org.shared_hosting_action() {
                SharedHostingAction::Deny => "action = \"deny\": denied",
                SharedHostingAction::Flag => "action = \"flag\": allowed, marked in the audit log",
            };
            steps.push(format!("shared hosting: yes (under `{why}`), {action}"));
        }
    }
}
