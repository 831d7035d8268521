//! Host names and destination patterns (SPEC sections 2 and 10 "Names").
//!
//! A [`HostName`] is normalised once (IDNA UTS-46 to ASCII, lower case, one trailing dot
//! removed) and then compared as a plain string. A [`DomainPattern`] matches only on
//! label boundaries, so `*.example.com` never matches `badexample.com`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use super::rules::Rules;

/// Why a string is not a valid host name or host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// Nothing, or only a trailing dot.
    #[error("empty host name")]
    Empty,
    /// An IP address in some spelling, where a name was wanted.
    #[error("this is an IP address, not a host name")]
    IsIpAddress,
    /// Its last label is a number (decimal or `0x` hex: the WHATWG "ends in a number"),
    /// yet it is no IPv4 address in any spelling.
    #[error("ends in a number but is not a valid IPv4 address")]
    InvalidIpv4,
    /// A character no host name has.
    #[error("invalid character {0:?} in host name")]
    InvalidCharacter(char),
    /// A label that starts or ends with `-`.
    #[error("a label may not start or end with a hyphen")]
    HyphenAtLabelEdge,
    /// A label of more than 63 bytes.
    #[error("a label is longer than 63 characters")]
    LabelTooLong,
    /// More than 253 bytes.
    #[error("the name is longer than 253 characters")]
    NameTooLong,
    /// Two dots in a row, or a leading dot.
    #[error("empty label (two dots in a row, or a leading dot)")]
    EmptyLabel,
    /// Refused by IDNA (UTS-46) normalisation.
    #[error("the name does not survive IDNA (UTS-46) normalisation")]
    Idna,
    /// A bracketed IPv6 literal that does not parse.
    #[error("invalid IPv6 address")]
    InvalidIpv6,
    /// An IPv6 literal with a zone id.
    #[error("an IPv6 zone id (`%...`) is not allowed")]
    ZoneId,
}

/// A normalised DNS name: ASCII, lower case, no trailing dot, never an IP address.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostName(String);

/// What a host string turns out to be after normalisation.
enum Normalised {
    Name(String),
    Ipv4(Ipv4Addr),
}

impl HostName {
    /// Normalise and validate `input`; a lenient IPv4 spelling is
    /// [`HostError::IsIpAddress`].
    pub fn parse(input: &str) -> Result<HostName, HostError> {
        match normalise(input)? {
            Normalised::Name(s) => Ok(HostName(s)),
            Normalised::Ipv4(_) => Err(HostError::IsIpAddress),
        }
    }

    /// The normalised name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn normalise(input: &str) -> Result<Normalised, HostError> {
    if input.is_empty() {
        return Err(HostError::Empty);
    }
    if let Some(c) = input
        .chars()
        .find(|c| c.is_control() || c.is_whitespace() || *c == '%')
    {
        return Err(HostError::InvalidCharacter(c));
    }
    let plain = input
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    let mut ascii = if plain {
        // The common case: plain ASCII needs only lower-casing, unless it holds
        // punycode labels, which IDNA must check.
        let lower = input.to_ascii_lowercase();
        if lower.contains("xn--") {
            idna::domain_to_ascii(&lower).map_err(|_| HostError::Idna)?
        } else {
            lower
        }
    } else {
        idna::domain_to_ascii(input).map_err(|_| HostError::Idna)?
    };
    if ascii.ends_with('.') {
        ascii.pop();
    }
    if ascii.is_empty() {
        return Err(HostError::Empty);
    }
    // WHATWG "ends in a number": such a host is an IPv4 address or invalid.
    let last = ascii.rsplit('.').next().unwrap_or("");
    if ends_in_number(last) {
        return parse_ipv4_lenient(&ascii)
            .map(Normalised::Ipv4)
            .ok_or(HostError::InvalidIpv4);
    }
    validate(&ascii)?;
    Ok(Normalised::Name(ascii))
}

fn ends_in_number(last: &str) -> bool {
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    let hex = last.strip_prefix("0x").or_else(|| last.strip_prefix("0X"));
    matches!(hex, Some(h) if h.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn validate(name: &str) -> Result<(), HostError> {
    if name.len() > 253 {
        return Err(HostError::NameTooLong);
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel);
        }
        if label.len() > 63 {
            return Err(HostError::LabelTooLong);
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
        {
            return Err(HostError::InvalidCharacter(c));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(HostError::HyphenAtLabelEdge);
        }
    }
    Ok(())
}

/// The WHATWG URL IPv4 parser: 1 to 4 parts, each decimal, octal (leading `0`) or hex
/// (`0x`); the last part fills the remaining bytes; one trailing dot allowed.
pub(crate) fn parse_ipv4_lenient(s: &str) -> Option<Ipv4Addr> {
    let s = s.strip_suffix('.').unwrap_or(s);
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(4);
    for part in &parts {
        numbers.push(parse_ipv4_number(part)?);
    }
    let (last, init) = numbers.split_last()?;
    if init.iter().any(|&n| n > 255) {
        return None;
    }
    let last_bits = 8 * (5 - numbers.len() as u32);
    if last_bits < 64 && *last >= 1u64 << last_bits {
        return None;
    }
    let mut value: u64 = *last;
    for (i, n) in init.iter().enumerate() {
        value += n << (8 * (3 - i));
    }
    Some(Ipv4Addr::from(u32::try_from(value).ok()?))
}

fn parse_ipv4_number(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) =
        if let Some(h) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (h, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    let mut value: u64 = 0;
    for c in digits.chars() {
        let d = c.to_digit(radix)? as u64;
        value = value.checked_mul(radix as u64)?.checked_add(d)?;
        if value > u32::MAX as u64 {
            return None;
        }
    }
    Some(value)
}

/// A target host as it appears in a URL authority or `CONNECT` target, without the port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A DNS name, normalised.
    Name(HostName),
    /// A literal IP address (IPv6 written in brackets).
    Ip(IpAddr),
}

impl Host {
    /// `[v6]`, bare IPv6, lenient IPv4 spellings, else a [`HostName`].
    pub fn parse(input: &str) -> Result<Host, HostError> {
        if let Some(inner) = input.strip_prefix('[') {
            let inner = inner.strip_suffix(']').ok_or(HostError::InvalidIpv6)?;
            return parse_ipv6(inner);
        }
        if input.contains(':') {
            return parse_ipv6(input);
        }
        match normalise(input)? {
            Normalised::Name(s) => Ok(Host::Name(HostName(s))),
            Normalised::Ipv4(v4) => Ok(Host::Ip(IpAddr::V4(v4))),
        }
    }

    /// `name:port`, `1.2.3.4:port` or `[v6]:port`.
    pub fn authority(&self, port: u16) -> String {
        match self {
            Host::Ip(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
            other => format!("{other}:{port}"),
        }
    }
}

fn parse_ipv6(s: &str) -> Result<Host, HostError> {
    if s.contains('%') {
        return Err(HostError::ZoneId);
    }
    s.parse::<Ipv6Addr>()
        .map(|v6| Host::Ip(IpAddr::V6(v6)))
        .map_err(|_| HostError::InvalidIpv6)
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => n.fmt(f),
            Host::Ip(ip) => ip.fmt(f),
        }
    }
}

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

#[cfg(test)]
mod tests;
