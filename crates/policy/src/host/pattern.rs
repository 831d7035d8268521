//! Destination patterns: the entries of a domain list (`example.com`, `*.example.com`,
//! with an optional `:port` and, written as a table, rules), parsed from their text and
//! matched on label boundaries only.

use std::fmt;
use std::sync::Arc;

use super::{Host, HostError, HostName};
use crate::rules::Rules;

/// The name part of a destination pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DomainPattern {
    /// `example.com`: exactly that name.
    Exact(HostName),
    /// `*.example.com`: any name strictly below `example.com`, at any depth.
    Subtree(HostName),
}

impl DomainPattern {
    /// Whether `host` is the name (`Exact`) or strictly below the base (`Subtree`), on
    /// label boundaries.
    pub fn matches(&self, host: &HostName) -> bool {
        match self {
            DomainPattern::Exact(name) => name == host,
            DomainPattern::Subtree(base) => is_strictly_below(host.as_str(), base.as_str()),
        }
    }

    /// The name the pattern is written over (`example.com` for both forms).
    pub fn base(&self) -> &HostName {
        match self {
            DomainPattern::Exact(n) | DomainPattern::Subtree(n) => n,
        }
    }
}

/// `name` ends with `.base` (a label-boundary suffix match, never the apex).
pub(crate) fn is_strictly_below(name: &str, base: &str) -> bool {
    name.len() > base.len()
        && name.ends_with(base)
        && name.as_bytes()[name.len() - base.len() - 1] == b'.'
}

/// Why a domain list entry is refused when loading.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// An empty string.
    #[error("empty entry")]
    Empty,
    /// `*` alone.
    #[error("a bare `*` would match everything; write a domain such as `*.example.com`")]
    BareWildcard,
    /// A `*` anywhere but as the whole first label.
    #[error("a wildcard is allowed only as the whole first label, as in `*.example.com`")]
    MisplacedWildcard,
    /// A URL's scheme (`https://`).
    #[error("entries are host names, not URLs: remove the scheme (`https://`)")]
    Scheme,
    /// A URL's path.
    #[error("entries are host names, not URLs: remove the path")]
    Path,
    /// A URL's user part (`user@`).
    #[error("entries are host names: remove the user part (`...@`)")]
    Userinfo,
    /// A URL's query or fragment.
    #[error("entries are host names, not URLs: remove the query or fragment")]
    QueryOrFragment,
    /// An IP address (IPs go in `allowed_cidrs`).
    #[error("an IP address is not a domain: IPs go in allowed_cidrs")]
    IpAddress,
    /// A port that is not 1-65535, as written.
    #[error("invalid port {0:?}: a port is a number from 1 to 65535")]
    InvalidPort(String),
    /// `*.` over a public suffix (`*.com`): the suffix.
    #[error("`*.{0}` would match everything under the public suffix `{0}`; name a registrable domain below it")]
    PublicSuffixWildcard(String),
    /// The name part is not a host name.
    #[error("invalid host name: {0}")]
    Host(HostError),
}

/// One entry of a domain list: a pattern, an optional port, and the text as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainEntry {
    /// The name part.
    pub pattern: DomainPattern,
    /// `:port` when written; `None`: the organization's `allowed_ports`.
    pub port: Option<u16>,
    /// Shared, so a [`Decision`](crate::Decision) names its rule without
    /// allocating. For an entry written as a table, the `host` value.
    pub text: Arc<str>,
    /// The request rules of an entry written as a table (`None`: every method and path).
    pub rules: Option<Arc<Rules>>,
}

impl DomainEntry {
    /// Parse `example.com`, `*.example.com`, either with `:PORT`.
    pub fn parse(s: &str) -> Result<DomainEntry, EntryError> {
        if s.is_empty() {
            return Err(EntryError::Empty);
        }
        if s.contains("://") {
            return Err(EntryError::Scheme);
        }
        if s.contains('@') {
            return Err(EntryError::Userinfo);
        }
        if s.contains('?') || s.contains('#') {
            return Err(EntryError::QueryOrFragment);
        }
        if s.contains('/') {
            return Err(EntryError::Path);
        }
        if s.starts_with('[') || s.matches(':').count() > 1 {
            return match Host::parse(s) {
                Err(HostError::InvalidIpv6) if !s.starts_with('[') => {
                    Err(EntryError::Host(HostError::InvalidCharacter(':')))
                }
                _ => Err(EntryError::IpAddress),
            };
        }
        let (name, port) = match s.rsplit_once(':') {
            Some((name, port)) => (name, Some(parse_port(port)?)),
            None => (s, None),
        };
        if name == "*" {
            return Err(EntryError::BareWildcard);
        }
        let (base, wildcard) = match name.strip_prefix("*.") {
            Some(base) => (base, true),
            None => (name, false),
        };
        if base.contains('*') {
            return Err(EntryError::MisplacedWildcard);
        }
        let host = HostName::parse(base).map_err(|e| match e {
            HostError::IsIpAddress | HostError::InvalidIpv4 => EntryError::IpAddress,
            e => EntryError::Host(e),
        })?;
        let pattern = if wildcard {
            if is_public_suffix(&host) {
                return Err(EntryError::PublicSuffixWildcard(host.0));
            }
            DomainPattern::Subtree(host)
        } else {
            DomainPattern::Exact(host)
        };
        Ok(DomainEntry {
            pattern,
            port,
            text: Arc::from(s),
            rules: None,
        })
    }

    /// What a decision names as its `rule`: the pattern as written, or for an entry with
    /// rules the whole entry (so two entries for one host are told apart).
    pub fn rule(&self) -> &Arc<str> {
        match &self.rules {
            Some(r) => &r.label,
            None => &self.text,
        }
    }

    /// Whether a `CONNECT` it allows must be intercepted (docs/reference/inspection.md): it
    /// has `methods`, `paths`, `access` or `inspect`.
    pub fn inspected(&self) -> bool {
        self.rules.is_some()
    }

    /// Whether its pattern matches `host`, on any port.
    pub fn matches_host(&self, host: &HostName) -> bool {
        self.pattern.matches(host)
    }

    /// Matches `host` on `port`; a port-less entry allows `default_ports`.
    pub fn matches(&self, host: &HostName, port: u16, default_ports: &[u16]) -> bool {
        self.matches_host(host) && self.allows_port(port, default_ports)
    }

    /// Whether it allows `port`: its own, or one of `default_ports` when it has none.
    pub fn allows_port(&self, port: u16, default_ports: &[u16]) -> bool {
        match self.port {
            Some(p) => p == port,
            None => default_ports.contains(&port),
        }
    }
}

impl fmt::Display for DomainEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn parse_port(s: &str) -> Result<u16, EntryError> {
    let bad = || EntryError::InvalidPort(s.to_string());
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match s.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(bad()),
    }
}

/// `name` is itself a public suffix that a wildcard may not sit on: an ICANN entry, or
/// an unknown name that the PSL default rule makes a suffix. Private-section suffixes
/// (`github.io`) are not refused: they load, and are shared hosting.
fn is_public_suffix(name: &HostName) -> bool {
    match psl::suffix(name.as_str().as_bytes()) {
        Some(suffix) if suffix.as_bytes() == name.as_str().as_bytes() => {
            suffix.typ() != Some(psl::Type::Private)
        }
        Some(_) => false,
        None => true,
    }
}
