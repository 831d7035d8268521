//! Reading the parts of a destination and a path every listener shares: `host:port`
//! split, and a path normalised for the rules. Reading an HTTP head is the explicit
//! proxy's (`crate::proxy::request`).

use crate::policy::{normalize_path, NormalPath, Reason, Target};

use super::refusal::Refusal;

/// The request's path, normalised for the rules (docs/reference/policy-files.md,
/// "Paths"); one that does not normalise is `invalid_request`.
pub(crate) fn normal_path(path_and_query: &str, target: &Target) -> Result<NormalPath, Refusal> {
    normalize_path(path_and_query).map_err(|e| {
        Refusal::new(Reason::InvalidRequest, target.host.to_string(), target.port)
            .with_detail(e.to_string())
    })
}

/// Split `host:port`, `[v6]:port`, `host` or `[v6]`. `None` when the port is not a number.
pub(crate) fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &authority[..end + 2];
        return match &rest[end + 1..] {
            "" => Some((host, None)),
            tail => Some((host, Some(parse_port(tail.strip_prefix(':')?)?))),
        };
    }
    // Bytes, not chars: every request's authority passes here.
    let bytes = authority.as_bytes();
    match bytes.iter().rposition(|&b| b == b':') {
        None => Some((authority, None)),
        // A bare IPv6 address: its colons are not a port's.
        Some(at) if bytes[..at].contains(&b':') => Some((authority, None)),
        Some(at) => Some((&authority[..at], Some(parse_port(&authority[at + 1..])?))),
    }
}

/// A port: 1 to 5 ASCII digits, at most 65535 (leading zeros allowed, as `u16`'s
/// parser allows them).
fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() {
        return None;
    }
    let mut port: u32 = 0;
    for &b in s.as_bytes() {
        if !b.is_ascii_digit() {
            return None;
        }
        port = port * 10 + u32::from(b - b'0');
        if port > u32::from(u16::MAX) {
            return None;
        }
    }
    Some(port as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Split<'a> = Option<(&'a str, Option<u16>)>;

    #[test]
    fn split_host_port_cases() {
        let cases: &[(&str, Split)] = &[
            ("a.test", Some(("a.test", None))),
            ("a.test:8080", Some(("a.test", Some(8080)))),
            ("[::1]:443", Some(("[::1]", Some(443)))),
            ("[::1]", Some(("[::1]", None))),
            ("::1", Some(("::1", None))),
            ("a.test:", None),
            ("a.test:+80", None),
            ("a.test:70000", None),
            ("[::1]x", None),
            ("a.test:65535", Some(("a.test", Some(65535)))),
            ("a.test:065535", Some(("a.test", Some(65535)))),
            ("a.test:65536", None),
            ("a.test:99999999999999999999", None),
        ];
        for (input, want) in cases {
            assert_eq!(split_host_port(input), *want, "{input}");
        }
    }
}
