//! `egress-proxy audit suggest`: the narrowest request policy that covers the traffic in
//! audit logs (docs/reference/command-line.md). An administrator runs a workload in
//! report mode (or with `--audit-allowed`), then turns what it used into its policy.
//!
//! Every destination of an `egress.allowed` or `egress.would_deny` record is judged
//! under the organization policy alone, with the proxy's decision code: what the
//! organization denies or does not allow is left out (and listed apart). The rest become
//! exact entries, collapsed to `*.PARENT` only when at least [`SIBLINGS`] names directly
//! under one parent were seen, the wildcard loads (not over a public suffix), is not on
//! shared hosting, and the organization covers it. Names on the organization's
//! `allowed_ports` get a port-less entry; other ports are written out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};

use super::read::{self, LogError, ALLOWED, DENIED, WOULD_DENY};
use super::SummaryError;
use crate::load::LoadError;
use crate::policy::shared_hosting::classify;
use crate::policy::{decide, Effective, Host, HostName, OrgPolicy};
use crate::policy::{Reason, Target, Verdict};

/// The fewest names under one parent that a wildcard is made from.
pub const SIBLINGS: usize = 3;

/// One entry of the suggested policy, with what it stands for.
#[derive(Debug, Serialize)]
pub struct Suggested {
    /// As written in text output (an entry with rules as its inline table).
    pub entry: String,
    /// An entry with rules, as the policy's JSON writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<Value>,
    /// The names seen that it covers.
    pub names: Vec<String>,
    pub records: u64,
}

/// A destination left out, with the organization's reason.
#[derive(Debug, Serialize)]
pub struct LeftOut {
    pub host: String,
    pub port: u16,
    pub records: u64,
    pub reason: &'static str,
    pub rule: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Suggestion {
    pub files: Vec<String>,
    /// Records of allowed or would-be-denied attempts read.
    pub records: u64,
    pub malformed: u64,
    pub allowed_domains: Vec<Suggested>,
    pub allowed_cidrs: Vec<Suggested>,
    /// What the organization denies or does not allow: not in the policy.
    pub left_out: Vec<LeftOut>,
    /// Destinations refused when logged (`egress.denied`) that the organization allows:
    /// not in the policy, since nothing used them; add them if they are needed.
    pub refused: Vec<LeftOut>,
    /// Names in the policy that are on shared hosting (lint warns about them).
    pub shared_hosting: Vec<String>,
    pub warnings: Vec<String>,
}

impl Suggestion {
    /// The request policy, as `serve --policy` loads it. Without any name to allow it is
    /// `{"type": "disabled"}`: an allowlist needs at least one `allowed_domains` entry.
    pub fn policy(&self) -> Value {
        if self.allowed_domains.is_empty() {
            return json!({"type": "disabled"});
        }
        let domains: Vec<Value> = self
            .allowed_domains
            .iter()
            .map(|s| s.table.clone().unwrap_or_else(|| json!(s.entry)))
            .collect();
        let mut policy = json!({"type": "allowlist", "allowed_domains": domains});
        if !self.allowed_cidrs.is_empty() {
            let cidrs: Vec<&str> = self.allowed_cidrs.iter().map(|s| &*s.entry).collect();
            policy["allowed_cidrs"] = json!(cidrs);
        }
        policy
    }
}

mod collapse;

/// Load the organization file at `org` as `serve` does, and suggest from `files`.
pub fn run(org: &Path, files: &[PathBuf]) -> Result<Suggestion, LogError> {
    let text = crate::load::read(org)?;
    let org = OrgPolicy::from_toml(&text, &org.display().to_string()).map_err(LoadError::from)?;
    Ok(suggest(&org, files)?)
}

/// Read `files` and suggest the policy for `org`.
pub fn suggest(org: &OrgPolicy, files: &[PathBuf]) -> Result<Suggestion, SummaryError> {
    let mut seen = Seen::default();
    for file in files {
        let warnings = read::for_each_line(file, |line| seen.line(line))?;
        seen.warnings.extend(warnings);
    }
    let mut out = Suggestion {
        files: files.iter().map(|f| f.display().to_string()).collect(),
        records: seen.records,
        malformed: seen.malformed,
        allowed_domains: Vec::new(),
        allowed_cidrs: Vec::new(),
        left_out: Vec::new(),
        refused: Vec::new(),
        shared_hosting: Vec::new(),
        warnings: seen.warnings,
    };
    refused(org, seen.refused, &mut out);
    let mut names: BTreeMap<HostName, Used> = BTreeMap::new();
    let mut ips: BTreeMap<IpAddr, u64> = BTreeMap::new();
    for (host, ports) in seen.hosts {
        judge(org, &host, ports, &mut names, &mut ips, &mut out.left_out);
    }
    for (host, methods) in seen.methods {
        if let Some(used) = HostName::parse(&host).ok().and_then(|n| names.get_mut(&n)) {
            used.methods.extend(methods);
        }
    }
    out.left_out
        .sort_by(|a, b| b.records.cmp(&a.records).then(a.host.cmp(&b.host)));
    out.allowed_domains = collapse::entries(org, &names);
    for name in names.keys() {
        if classify(name, org.shared_hosting_extra()).is_some() {
            out.shared_hosting.push(name.to_string());
        }
    }
    out.allowed_cidrs = ips
        .into_iter()
        .map(|(ip, records)| Suggested {
            entry: ipnet::IpNet::from(ip).to_string(),
            table: None,
            names: vec![ip.to_string()],
            records,
        })
        .collect();
    // What the suggestion allows anyway is not worth listing as refused.
    if let Ok(policy) = crate::policy::RequestPolicy::from_value(&out.policy(), "suggested") {
        let levels = [&policy];
        let eff = Effective {
            org,
            levels: &levels,
        };
        out.refused.retain(|r| {
            let host = Host::parse(&r.host);
            !host.is_ok_and(|host| decide(&eff, &Target { host, port: r.port }).is_allowed())
        });
    }
    Ok(out)
}

/// The ports a destination was used on, and how many records it has.
#[derive(Default)]
pub(crate) struct Used {
    pub ports: BTreeSet<u16>,
    pub records: u64,
    /// The HTTP methods of its inspected or plain requests (not `CONNECT`).
    pub methods: BTreeSet<String>,
}

#[derive(Default)]
struct Seen {
    /// Host as logged -> port -> records, of what was used.
    hosts: HashMap<String, BTreeMap<u16, u64>>,
    /// The same, of what was refused (`egress.denied`).
    refused: HashMap<String, BTreeMap<u16, u64>>,
    /// Host as logged -> the methods of its requests that were used.
    methods: HashMap<String, BTreeSet<String>>,
    records: u64,
    malformed: u64,
    warnings: Vec<String>,
}

impl Seen {
    fn line(&mut self, line: &[u8]) {
        let Some(a) = read::attempt(line, &mut self.malformed) else {
            return;
        };
        let (Some(host), Some(port)) = (a.host.as_deref(), a.port) else {
            return;
        };
        let map = match &*a.event {
            ALLOWED | WOULD_DENY => {
                self.records += 1;
                let method = a
                    .method
                    .as_deref()
                    .filter(|m| !matches!(*m, "CONNECT" | "DNS"));
                if let Some(m) = method {
                    let set = self.methods.entry(host.to_string()).or_default();
                    if !set.contains(m) {
                        set.insert(m.to_string());
                    }
                }
                &mut self.hosts
            }
            DENIED if read::destination_reason(a.reason.as_deref()).is_some() => &mut self.refused,
            _ => return,
        };
        let ports = match map.get_mut(host) {
            Some(p) => p,
            None => map.entry(host.to_string()).or_default(),
        };
        *ports.entry(port).or_default() += 1;
    }
}

/// Refused destinations (not used, so not in the policy): those the organization
/// refuses join `left_out`; those it allows are listed in `refused`.
fn refused(org: &OrgPolicy, hosts: HashMap<String, BTreeMap<u16, u64>>, out: &mut Suggestion) {
    let (mut names, mut ips) = (BTreeMap::new(), BTreeMap::new());
    for (host, ports) in hosts {
        let mut allowed = Vec::new();
        for (port, records) in ports {
            let (before, mut one) = (out.left_out.len(), BTreeMap::new());
            one.insert(port, records);
            judge(org, &host, one, &mut names, &mut ips, &mut out.left_out);
            if out.left_out.len() == before {
                allowed.push((port, records));
            }
        }
        for (port, records) in allowed {
            out.refused.push(LeftOut {
                host: host.clone(),
                port,
                records,
                reason: "refused_when_logged",
                rule: None,
            });
        }
    }
    out.refused
        .sort_by(|a, b| b.records.cmp(&a.records).then(a.host.cmp(&b.host)));
}

/// Judge each port of one logged host under the organization alone.
fn judge(
    org: &OrgPolicy,
    host: &str,
    ports: BTreeMap<u16, u64>,
    names: &mut BTreeMap<HostName, Used>,
    ips: &mut BTreeMap<IpAddr, u64>,
    left_out: &mut Vec<LeftOut>,
) {
    let Ok(parsed) = Host::parse(host) else {
        let records = ports.values().sum();
        let port = ports.keys().next().copied().unwrap_or(0);
        left_out.push(LeftOut {
            host: host.to_string(),
            port,
            records,
            reason: Reason::InvalidHost.as_str(),
            rule: None,
        });
        return;
    };
    let eff = Effective { org, levels: &[] };
    for (port, records) in ports {
        let target = Target {
            host: parsed.clone(),
            port,
        };
        let d = decide(&eff, &target);
        if let Verdict::Deny(reason) | Verdict::WouldDeny(reason) = d.verdict {
            left_out.push(LeftOut {
                host: parsed.to_string(),
                port,
                records,
                reason: reason.as_str(),
                rule: d.rule.as_deref().map(str::to_string),
            });
            continue;
        }
        match &parsed {
            Host::Name(n) => {
                let used = names.entry(n.clone()).or_default();
                used.ports.insert(port);
                used.records += records;
            }
            Host::Ip(ip) => *ips.entry(*ip).or_default() += records,
        }
    }
}

/// The suggestion for people: each entry with what it covers, then what was left out.
pub fn text(s: &Suggestion) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let n = s.allowed_domains.len() + s.allowed_cidrs.len();
    let _ = writeln!(
        out,
        "# {n} entries covering {} records from {} file(s)",
        s.records,
        s.files.len()
    );
    for (key, list) in [
        ("allowed_domains", &s.allowed_domains),
        ("allowed_cidrs", &s.allowed_cidrs),
    ] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{key}:");
        for e in list {
            let names = if e.names.len() > 1 {
                format!("{} names, ", e.names.len())
            } else {
                String::new()
            };
            let _ = writeln!(out, "  {:<40} {names}{} records", e.entry, e.records);
        }
    }
    out
}

/// What goes to standard error: the destinations left out, and shared hosting kept.
pub fn left_out(s: &Suggestion) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if !s.left_out.is_empty() {
        let _ = writeln!(
            out,
            "left out: {} destinations the organization denies or does not allow",
            s.left_out.len()
        );
        for l in &s.left_out {
            let rule = l
                .rule
                .as_deref()
                .map(|r| format!(", rule `{r}`"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {}:{}: {} records: {}{rule}",
                l.host, l.port, l.records, l.reason
            );
        }
    }
    if !s.refused.is_empty() {
        let _ = writeln!(
            out,
            "not suggested: {} destinations refused when logged that the organization allows (add them if they are needed)",
            s.refused.len()
        );
        for l in &s.refused {
            let _ = writeln!(out, "  {}:{}: {} records", l.host, l.port, l.records);
        }
    }
    for c in &s.allowed_cidrs {
        let private = c.names[0]
            .parse()
            .ok()
            .and_then(crate::policy::address::refused_class);
        if private.is_some() {
            let _ = writeln!(
                out,
                "note: `{}` is a private address the organization's allowed_cidrs open (kept: it was used; lint warns about it)",
                c.entry
            );
        }
    }
    for name in &s.shared_hosting {
        let _ = writeln!(
            out,
            "note: `{name}` is on shared hosting (kept: it was used; lint warns about it)"
        );
    }
    for w in &s.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    if s.malformed > 0 {
        let _ = writeln!(out, "note: {} malformed lines skipped", s.malformed);
    }
    out
}

#[cfg(test)]
#[path = "suggest_tests.rs"]
mod tests;
