//! The values of `[[credentials]]` (docs/reference/inspection.md, "Credentials"): read
//! from their files at load and at reload, and set on requests forwarded over TLS to
//! their host.
//!
//! A value never appears in a log, answer, metric, error or `Debug` output: errors name
//! the file, never its content; `Debug` prints the header names only; the header is
//! marked sensitive; and the bytes are wiped when the last policy holding them is
//! dropped (the copies hyper writes into its send buffer are the one thing not wiped).

use std::path::{Path, PathBuf};

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use zeroize::Zeroizing;

use crate::policy::{Host, HostName, OrgPolicy};

/// Why a credential's value did not load. Never holds the value.
#[derive(Debug, thiserror::Error)]
#[error("[[credentials]] {host}: value_file {path}: {message}")]
pub struct CredentialError {
    host: String,
    path: String,
    message: String,
}

/// One header to set on requests to one host.
struct Credential {
    host: HostName,
    header: HeaderName,
    value: HeaderValue,
}

/// Every credential of the organization policy in force.
#[derive(Default)]
pub(crate) struct Credentials {
    list: Vec<Credential>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self
            .list
            .iter()
            .map(|c| format!("{} on {}", c.header, c.host))
            .collect();
        f.debug_struct("Credentials")
            .field("headers", &names)
            .finish()
    }
}

impl Credentials {
    /// Read the value file of each of `org`'s credentials; a relative path is taken from
    /// the directory of the organization file (`org_path`).
    pub(crate) fn read(org: &OrgPolicy, org_path: &Path) -> Result<Credentials, CredentialError> {
        let base = org_path.parent().unwrap_or(Path::new("."));
        let mut list = Vec::with_capacity(org.credentials().len());
        for rule in org.credentials() {
            let path: PathBuf = base.join(&rule.value_file);
            let fail = |message: String| CredentialError {
                host: rule.host.to_string(),
                path: path.display().to_string(),
                message,
            };
            let value = read_value(&path).map_err(fail)?;
            let header = HeaderName::from_bytes(rule.header.as_bytes())
                .map_err(|_| fail("not a header name".into()))?;
            list.push(Credential {
                host: rule.host.clone(),
                header,
                value,
            });
        }
        Ok(Credentials { list })
    }

    /// Set every credential of `host` in `headers`, replacing what the client sent, on
    /// a request forwarded over TLS (`tls`). A request forwarded in plain HTTP would
    /// carry the value in cleartext, so it gets none: only the client's own header of
    /// each credential's name is removed, as it is over TLS (docs/reference/inspection.md,
    /// "Credentials").
    pub(crate) fn apply(&self, host: &Host, headers: &mut HeaderMap, tls: bool) {
        let Host::Name(name) = host else {
            return;
        };
        for c in self.list.iter().filter(|c| &c.host == name) {
            if tls {
                headers.insert(c.header.clone(), c.value.clone());
            } else {
                headers.remove(&c.header);
            }
        }
    }
}

impl Credentials {
    /// What a client must never send (docs/reference/dlp.md, "Secret detectors"): for
    /// each credential its host and the secret of its value, which is the value after
    /// an authentication scheme (`Bearer `, `token `, `Basic `) when it has one. A
    /// secret under 8 bytes is left out: too short to tell from ordinary text.
    pub(crate) fn secrets(&self) -> Vec<(String, Zeroizing<Vec<u8>>)> {
        self.list
            .iter()
            .filter_map(|c| {
                let value = c.value.as_bytes();
                let secret = match value.iter().position(|&b| b == b' ') {
                    Some(i) if value[..i].iter().all(u8::is_ascii_alphabetic) => &value[i + 1..],
                    _ => value,
                };
                let secret = secret.trim_ascii();
                (secret.len() >= 8).then(|| (c.host.to_string(), Zeroizing::new(secret.to_vec())))
            })
            .collect()
    }
}

/// The file's content, surrounding whitespace trimmed, as a sensitive header value over
/// bytes that are wiped when dropped.
fn read_value(path: &Path) -> Result<HeaderValue, String> {
    let raw = Zeroizing::new(std::fs::read(path).map_err(|e| e.to_string())?);
    let start = raw
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    if start == end {
        return Err("is empty".into());
    }
    let mut trimmed = Zeroizing::new(Vec::with_capacity(end - start));
    trimmed.extend_from_slice(&raw[start..end]);
    let mut value = HeaderValue::from_maybe_shared(Bytes::from_owner(trimmed)).map_err(|_| {
        "holds a byte a header value may not (a line break, NUL or control character)".to_string()
    })?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_headers_never_values() {
        let dir = std::env::temp_dir().join(format!("egress-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "Bearer s3cr3t-value\n").unwrap();
        let org = OrgPolicy::from_toml(
            "version = 1\nallowed_domains = [{ host = \"api.test\", inspect = true }]\n\
             [[credentials]]\nhost = \"api.test\"\nheader = \"Authorization\"\nvalue_file = \"token\"\n",
            "org.toml",
        )
        .unwrap();
        let creds = Credentials::read(&org, &dir.join("org.toml")).unwrap();
        let shown = format!("{creds:?}");
        assert!(shown.contains("authorization on api.test"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("client's own"));
        let api = Host::parse("api.test").unwrap();
        creds.apply(&api, &mut headers, true);
        assert_eq!(headers["authorization"], "Bearer s3cr3t-value");
        assert!(!format!("{headers:?}").contains("s3cr3t"));
        let mut other = HeaderMap::new();
        creds.apply(&Host::parse("other.test").unwrap(), &mut other, true);
        assert!(other.is_empty());
        // In plain HTTP: never the value, and not the client's own either.
        let mut plain = HeaderMap::new();
        plain.insert("authorization", HeaderValue::from_static("client's own"));
        plain.insert("x-kept", HeaderValue::from_static("kept"));
        creds.apply(&api, &mut plain, false);
        assert!(plain.get("authorization").is_none(), "{plain:?}");
        assert_eq!(plain["x-kept"], "kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_value_with_a_line_break_inside_is_refused_without_showing_it() {
        let dir = std::env::temp_dir().join(format!("egress-secrets-nl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "Bearer abc\r\nX-Injected: 1").unwrap();
        let err = read_value(&path).unwrap_err();
        assert!(!err.contains("abc"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
