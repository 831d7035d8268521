//! `[[credentials]]` (docs/reference/inspection.md, "Credentials"): a header the proxy
//! sets on every request it forwards to one exact host. Compiled here, and checked
//! against the allowlist: the host must be allowed, and inspected wherever it is allowed
//! on a TLS port (443), or the header could never be set there. The value itself is
//! read by the proxy's loader (its `load` module), not here: the policy core does no I/O.

use std::path::PathBuf;

use super::node::{self, missing, Node};
use super::problems::Problems;
use crate::compiled::{CredentialRule, OrgPolicy};
use crate::file::CREDENTIAL_KEYS;
use crate::host::HostName;

/// Headers a credential may not set: those that frame or route the request, and ours.
const RESERVED: [&str; 10] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "x-network-policy",
];

/// The tables of `[[credentials]]`, checked against `org`'s allowlist.
pub(super) fn compile<'a, N: Node<'a>>(
    p: &mut Problems,
    node: Option<N>,
    org: &OrgPolicy,
) -> Vec<CredentialRule> {
    let Some(list) = node.and_then(|n| node::elements(p, n)) else {
        return Vec::new();
    };
    let mut rules = Vec::with_capacity(list.len());
    for item in list {
        let Some(t) = node::table(p, item, "a table ([[credentials]])") else {
            continue;
        };
        t.unknown(p, "credentials.", &CREDENTIAL_KEYS);
        let [host, header, file] = t.take(&CREDENTIAL_KEYS);
        let mut read = |n: Option<N>, key: &'static str| match n {
            None => {
                p.invalid(t.at, format!("[[credentials]]: {}", missing(key)));
                None
            }
            Some(n) => node::string(p, n).map(|s| (s, n.at())),
        };
        let (Some(host), Some(header), Some(file)) = (
            read(host, "host"),
            read(header, "header"),
            read(file, "value_file"),
        ) else {
            continue;
        };
        let Some(name) = exact_host(p, host) else {
            continue;
        };
        let Some(header_name) = header_name(p, header) else {
            continue;
        };
        if file.0.is_empty() {
            p.invalid(file.1, "[[credentials]]: value_file is empty".into());
            continue;
        }
        if let Err(why) = reachable(org, &name) {
            p.invalid(host.1, format!("[[credentials]] host {name}: {why}"));
            continue;
        }
        if rules
            .iter()
            .any(|r: &CredentialRule| r.host == name && r.header == header_name)
        {
            let msg = format!("[[credentials]] sets {header_name} on {name} twice");
            p.invalid(host.1, msg);
            continue;
        }
        rules.push(CredentialRule {
            host: name,
            header: header_name,
            value_file: PathBuf::from(file.0),
        });
    }
    rules
}

fn exact_host(p: &mut Problems, (text, at): (&str, Option<usize>)) -> Option<HostName> {
    if text.contains('*') || text.contains(':') || text.contains('/') {
        let msg = format!(
            "[[credentials]] host `{text}` must be one exact name (no wildcard, port or path)"
        );
        p.invalid(at, msg);
        return None;
    }
    match HostName::parse(text) {
        Ok(name) => Some(name),
        Err(e) => {
            p.invalid(at, format!("[[credentials]] host `{text}`: {e}"));
            None
        }
    }
}

/// A header name (RFC 9110 token), lower-cased; reserved names are refused.
fn header_name(p: &mut Problems, (text, at): (&str, Option<usize>)) -> Option<String> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if text.is_empty() || !text.bytes().all(tchar) {
        p.invalid(
            at,
            format!("[[credentials]] header `{text}` is not a header name"),
        );
        return None;
    }
    let lower = text.to_ascii_lowercase();
    if RESERVED.contains(&lower.as_str()) {
        p.invalid(
            at,
            format!("[[credentials]] header `{text}` is one the proxy sets itself"),
        );
        return None;
    }
    Some(lower)
}

/// The host must be allowed (and not denied) by the organization, and every entry that
/// allows it on port 443 must inspect it.
fn reachable(org: &OrgPolicy, host: &HostName) -> Result<(), String> {
    if org.denied.matching(host).next().is_some() {
        return Err("it is in denied_domains".into());
    }
    let ports = &org.allowed_ports;
    let allowing: Vec<_> = org.allowed.matching(host).collect();
    if allowing.is_empty() {
        return Err("no allowed_domains entry allows it".into());
    }
    let plain_tls = allowing
        .iter()
        .any(|e| e.allows_port(443, ports) && !e.inspected());
    if plain_tls {
        return Err("it is allowed on port 443 without inspection, where the header cannot be set: give its entry `inspect = true` (or rules)".into());
    }
    Ok(())
}
