//! Raw policy files -> validated, compiled policies: the only thing the proxy sees.
//!
//! Every validation failure becomes a [`Problem`] naming the line, column and entry, and
//! all problems of a file are collected in one pass into one [`PolicyError`].

use std::fmt;
use std::ops::Range;

use std::sync::Arc;

use ipnet::IpNet;
use serde::Deserialize;
use toml::Spanned;

use super::file::{OrgFile, RawMode, RawRequestPolicy, RawSharedHostingAction};
use super::host::DomainEntry;

#[path = "domain_set.rs"]
mod domain_set;
pub use domain_set::{DomainSet, Matching, NameProbe};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Enforce,
    /// Allowlist denials are allowed and logged as `would_deny`.
    Report,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedHostingAction {
    Flag,
    Deny,
}

/// The `[tunnels]` table, carried through as written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tunnels {
    pub require_tls: Option<bool>,
    pub require_sni: Option<bool>,
}

/// The validated organization policy.
#[derive(Clone, Debug)]
pub struct OrgPolicy {
    pub source: String,
    pub name: String,
    pub mode: Mode,
    pub allowed: DomainSet,
    pub denied: DomainSet,
    pub allowed_ports: Vec<u16>,
    pub allowed_cidrs: Vec<IpNet>,
    /// The text of each `allowed_cidrs` entry, in the same order: the rule of the
    /// decisions it makes, written once here rather than on every request.
    pub cidr_rules: Vec<Arc<str>>,
    pub default_policy: RequestPolicy,
    pub shared_hosting_action: SharedHostingAction,
    pub shared_hosting_extra: DomainSet,
    pub tunnels: Tunnels,
}

/// A validated request-level policy (`network_policy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestPolicy {
    Disabled,
    Allowlist {
        domains: DomainSet,
        /// `None`: this level allows no literal IPs (and does not narrow where names land).
        cidrs: Option<Vec<IpNet>>,
    },
}

/// One thing wrong with a policy file. Line and column are 1-based.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub entry: Option<String>,
    pub message: String,
}

/// Every problem found in one policy file. (Not derived with thiserror: its `source`
/// field name would be taken for the error's cause.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub source: String,
    pub problems: Vec<Problem>,
}

impl std::error::Error for PolicyError {}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            f.write_str(&self.source)?;
            if let Some(line) = p.line {
                write!(f, ":{line}")?;
                if let Some(column) = p.column {
                    write!(f, ":{column}")?;
                }
            }
            f.write_str(": ")?;
            if let Some(entry) = &p.entry {
                write!(f, "entry \"{entry}\": ")?;
            }
            f.write_str(&p.message)?;
        }
        Ok(())
    }
}

/// Collects problems with positions in one text.
struct Problems<'t> {
    text: &'t str,
    list: Vec<Problem>,
}

impl<'t> Problems<'t> {
    fn at(&mut self, offset: Option<usize>, entry: Option<&str>, message: String) {
        let (line, column) = offset.map(|o| line_col(self.text, o)).unzip();
        self.list.push(Problem {
            line,
            column,
            entry: entry.map(str::to_string),
            message,
        });
    }

    /// The offset of `entry` quoted inside `range` of the text (first occurrence).
    fn find(&self, range: &Range<usize>, entry: &str) -> Option<usize> {
        let hay = self.text.get(range.clone())?;
        [format!("\"{entry}\""), format!("'{entry}'")]
            .iter()
            .find_map(|q| hay.find(q.as_str()))
            .map(|o| o + range.start)
    }

    fn into_result<T>(self, source: &str, value: T) -> Result<T, PolicyError> {
        if self.list.is_empty() {
            Ok(value)
        } else {
            Err(PolicyError {
                source: source.to_string(),
                problems: self.list,
            })
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn compile_domains(list: Option<Vec<Spanned<String>>>, p: &mut Problems) -> DomainSet {
    let mut entries = Vec::new();
    for item in list.unwrap_or_default() {
        match DomainEntry::parse(item.get_ref()) {
            Ok(e) => entries.push(e),
            Err(e) => p.at(Some(item.span().start), Some(item.get_ref()), e.to_string()),
        }
    }
    DomainSet::from_entries(entries)
}

/// `allowed_ports`, default `[80, 443]`; each must be 1-65535.
fn compile_ports(list: Option<Vec<Spanned<i64>>>, p: &mut Problems) -> Vec<u16> {
    let Some(list) = list else {
        return vec![80, 443];
    };
    let mut ports = Vec::new();
    for port in list {
        match u16::try_from(*port.get_ref()) {
            Ok(n) if n != 0 => ports.push(n),
            _ => {
                let msg = format!("port {} is not in 1-65535", port.get_ref());
                p.at(Some(port.span().start), None, msg);
            }
        }
    }
    ports
}

fn compile_cidrs(list: Option<Vec<Spanned<String>>>, p: &mut Problems) -> Vec<IpNet> {
    let mut nets = Vec::new();
    for item in list.unwrap_or_default() {
        match parse_cidr(item.get_ref()) {
            Ok(net) => nets.push(net),
            Err(msg) => p.at(Some(item.span().start), Some(item.get_ref()), msg),
        }
    }
    nets
}

/// The rule text of each of `cidrs`, for [`OrgPolicy::cidr_rules`].
pub fn cidr_rules(cidrs: &[IpNet]) -> Vec<Arc<str>> {
    cidrs.iter().map(|net| Arc::from(net.to_string())).collect()
}

/// A CIDR as `allowed_cidrs` takes it (host bits dropped); also used by `lint`.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    if !s.contains('/') {
        return Err("write a CIDR such as 10.20.0.0/16 (one address is 10.20.0.1/32)".into());
    }
    s.parse::<IpNet>()
        .map(|n| n.trunc())
        .map_err(|_| "not a CIDR: write an address and a prefix length, e.g. 10.20.0.0/16".into())
}

impl OrgPolicy {
    /// Load an organization policy; `source` names the file in messages.
    pub fn from_toml(text: &str, source: &str) -> Result<OrgPolicy, PolicyError> {
        let raw: OrgFile = toml::from_str(text).map_err(|e| {
            let mut p = Problems { text, list: vec![] };
            p.at(
                e.span().map(|s| s.start),
                None,
                e.message().trim().to_string(),
            );
            PolicyError {
                source: source.to_string(),
                problems: p.list,
            }
        })?;
        let mut p = Problems { text, list: vec![] };
        if *raw.version.get_ref() != 1 {
            let msg = format!(
                "unsupported version {}: write version = 1",
                raw.version.get_ref()
            );
            p.at(Some(raw.version.span().start), None, msg);
        }
        let allowed = compile_domains(raw.allowed_domains, &mut p);
        let denied = compile_domains(raw.denied_domains, &mut p);
        let allowed_ports = compile_ports(raw.allowed_ports, &mut p);
        let allowed_cidrs = compile_cidrs(raw.allowed_cidrs, &mut p);
        let (action, extra) = match raw.shared_hosting {
            Some(s) => (s.action, s.extra_domains),
            None => (None, None),
        };
        let shared_hosting_extra = compile_domains(extra, &mut p);
        let default_span = raw.default_network_policy.as_ref().map(|d| d.span());
        let default_policy = match raw.default_network_policy {
            None => RequestPolicy::Disabled,
            Some(d) => {
                let span = d.span();
                RequestPolicy::compile(d.into_inner(), &mut p, &span)
            }
        };
        let tunnels = raw.tunnels.unwrap_or_default();
        let org = OrgPolicy {
            source: source.to_string(),
            name: raw.name.unwrap_or_default(),
            mode: match raw.mode {
                Some(RawMode::Report) => Mode::Report,
                _ => Mode::Enforce,
            },
            allowed,
            denied,
            allowed_ports,
            cidr_rules: cidr_rules(&allowed_cidrs),
            allowed_cidrs,
            default_policy,
            shared_hosting_action: match action {
                Some(RawSharedHostingAction::Deny) => SharedHostingAction::Deny,
                _ => SharedHostingAction::Flag,
            },
            shared_hosting_extra,
            tunnels: Tunnels {
                require_tls: tunnels.require_tls,
                require_sni: tunnels.require_sni,
            },
        };
        if p.list.is_empty() {
            let span = default_span.unwrap_or(0..0);
            for (entry, why) in super::cover::widening(&org, &[], &org.default_policy) {
                let offset = p.find(&span, &entry).or(Some(span.start));
                let msg = format!("default_network_policy widens the organization policy: {why}");
                p.at(offset, Some(&entry), msg);
            }
        }
        p.into_result(source, org)
    }
}

impl RequestPolicy {
    /// Load a request policy from JSON text; `source` names it in messages.
    pub fn from_json(text: &str, source: &str) -> Result<RequestPolicy, PolicyError> {
        let raw: RawRequestPolicy =
            serde_json::from_str(text).map_err(|e| json_error(&e, text, source))?;
        let mut p = Problems { text, list: vec![] };
        let policy = RequestPolicy::compile(raw, &mut p, &(0..text.len()));
        p.into_result(source, policy)
    }

    /// Load a request policy from a JSON value (no positions in messages).
    pub fn from_value(v: &serde_json::Value, source: &str) -> Result<RequestPolicy, PolicyError> {
        let raw = RawRequestPolicy::deserialize(v).map_err(|e| json_error(&e, "", source))?;
        let mut p = Problems {
            text: "",
            list: vec![],
        };
        let policy = RequestPolicy::compile(raw, &mut p, &(0..0));
        p.into_result(source, policy)
    }

    /// Compile a raw policy whose text lies in `range` of the problems' text.
    fn compile(raw: RawRequestPolicy, p: &mut Problems, range: &Range<usize>) -> RequestPolicy {
        let (domains, cidrs) = match raw {
            RawRequestPolicy::Disabled {} => return RequestPolicy::Disabled,
            RawRequestPolicy::Allowlist {
                allowed_domains,
                allowed_cidrs,
            } => (allowed_domains, allowed_cidrs),
        };
        let start = (!p.text.is_empty()).then_some(range.start);
        if domains.is_empty() {
            let msg =
                "allowed_domains must not be empty; use {\"type\": \"disabled\"} to allow nothing";
            p.at(start, None, msg.to_string());
        }
        let mut entries = Vec::new();
        for d in &domains {
            match DomainEntry::parse(d) {
                Ok(e) => entries.push(e),
                Err(e) => p.at(p.find(range, d).or(start), Some(d), e.to_string()),
            }
        }
        let cidrs = cidrs.map(|list| {
            let mut nets = Vec::new();
            for c in &list {
                match parse_cidr(c) {
                    Ok(n) => nets.push(n),
                    Err(msg) => p.at(p.find(range, c).or(start), Some(c), msg),
                }
            }
            nets
        });
        RequestPolicy::Allowlist {
            domains: DomainSet::from_entries(entries),
            cidrs,
        }
    }
}

/// A serde_json error as a problem. Errors raised inside the tagged enum carry no
/// position; then the key they name (`unknown field `x``) is looked up in the text, or
/// the document start is given.
fn json_error(e: &serde_json::Error, text: &str, source: &str) -> PolicyError {
    let mut message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    if let Some(stripped) = message.strip_suffix(&suffix) {
        message = stripped.to_string();
    }
    let mut p = Problems { text, list: vec![] };
    if e.line() > 0 {
        p.list.push(Problem {
            line: Some(e.line()),
            column: Some(e.column().max(1)),
            entry: None,
            message,
        });
    } else {
        let named = message
            .split('`')
            .nth(1)
            .filter(|_| message.contains("unknown"));
        let offset = named
            .and_then(|key| p.find(&(0..text.len()), key))
            .or((!text.is_empty()).then_some(0));
        p.at(offset, None, message);
    }
    PolicyError {
        source: source.to_string(),
        problems: p.list,
    }
}

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;
