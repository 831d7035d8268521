//! `credential-plain-http`: a `[[credentials]]` host allowed on a port whose requests
//! the proxy would forward in plain HTTP.
//!
//! The proxy sets a credential only on requests it forwards over TLS (an intercepted
//! tunnel), so the value never crosses the network in cleartext
//! (docs/reference/inspection.md, "Credentials"). Which transport a request takes is
//! the client's choice, not the port's: an absolute `http://` URL, or HTTP bytes to the
//! transparent listener, are forwarded as plain HTTP on any port they are allowed on.
//! Port 443 is taken as the TLS port (as the load check of credentials takes it), so the
//! finding is for every other port the organization allows the host on: there its
//! requests may go in plain HTTP, and then go without the credential.

use super::entries::normal_form;
use super::{RuleId, Sink};
use crate::policy::OrgPolicy;

/// The TLS port: requests to it are taken to be HTTPS.
const TLS_PORT: u16 = 443;

/// One finding per allowed entry that opens a credential's host on a port other than
/// 443, at that entry (`at`: where each allowed entry was written).
pub(crate) fn plain_http(sink: &mut Sink, org: &OrgPolicy, at: &[usize]) {
    let default_ports = org.allowed_ports();
    for rule in org.credentials() {
        let entries = org.allowed().entries().iter().zip(at.iter().copied());
        for (entry, offset) in entries.filter(|(e, _)| e.matches_host(&rule.host)) {
            let plain: Vec<String> = match entry.port {
                Some(p) => vec![p],
                None => default_ports.to_vec(),
            }
            .into_iter()
            .filter(|p| *p != TLS_PORT)
            .map(|p| p.to_string())
            .collect();
            if plain.is_empty() {
                continue;
            }
            let (s, ports) = match plain.len() {
                1 => ("", plain[0].clone()),
                _ => ("s", plain.join(", ")),
            };
            let msg = format!(
                "allowed_domains: `{}` opens the [[credentials]] host {host} on port{s} {ports}, where requests may go in plain HTTP: the proxy sends those without its `{header}` header, which it sets over TLS only; allow {host} on port 443 only (`{host}:443`) if it is meant to be reached with the credential",
                normal_form(entry),
                host = rule.host,
                header = rule.header,
            );
            sink.at(RuleId::CredentialPlainHttp, offset, msg, None);
        }
    }
}
