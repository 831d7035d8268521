//! Host names and destination patterns (docs/reference/policy-files.md, "Names").
//!
//! A [`HostName`] is normalised once (IDNA UTS-46 to ASCII, lower case, one trailing dot
//! removed) and then compared as a plain string. A [`DomainPattern`] matches only on
//! label boundaries, so `*.example.com` never matches `badexample.com` (`pattern`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

mod pattern;

pub use pattern::{DomainEntry, DomainPattern, EntryError};

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
    if let Some(name) = plain_name(input) {
        return Ok(Normalised::Name(name));
    }
    general(input)
}

/// The common case in one pass (a request's host is judged on every request): ASCII
/// letters, digits, `-` and `.` only, every label 1 to 63 bytes without a hyphen at
/// either edge, no `xn--` anywhere, a last label that does not start with a digit. Its
/// lower-cased form, one trailing dot removed; `None` for anything else, which the
/// general path reads (and which gives the same name for what this accepts).
fn plain_name(input: &str) -> Option<String> {
    let body = input.strip_suffix('.').unwrap_or(input);
    let bytes = body.as_bytes();
    if bytes.is_empty() || bytes.len() > 253 {
        return None;
    }
    let mut label_start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match b.to_ascii_lowercase() {
            b'a'..=b'z' | b'0'..=b'9' => {}
            b'-' => {
                if i == label_start || bytes.get(i + 1).is_none_or(|&n| n == b'.') {
                    return None;
                }
                // `xn--`: IDNA must check it.
                if i >= 3 && bytes[i - 3..i].eq_ignore_ascii_case(b"xn-") {
                    return None;
                }
            }
            b'.' => {
                if i == label_start || i - label_start > 63 {
                    return None;
                }
                label_start = i + 1;
            }
            _ => return None,
        }
    }
    let last = &bytes[label_start..];
    if last.is_empty() || last.len() > 63 || last[0].is_ascii_digit() {
        return None;
    }
    // Checked as bytes, lower-cased once: ASCII throughout, so no UTF-8 pass.
    Some(body.to_ascii_lowercase())
}

/// Every host that is not [`plain_name`]'s: IDNA, IPv4 spellings, and every refusal.
fn general(input: &str) -> Result<Normalised, HostError> {
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

#[cfg(test)]
mod tests;
