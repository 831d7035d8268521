//! `probe`'s arguments as a [`ProbeConfig`]: the timeout bounded and every URL parsed
//! before any check starts (docs/reference/command-line.md, "probe").

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

use super::{flag, ConfigError};
use crate::cli::{ProbeArgs, ProbeFormat};

/// How `probe` prints its report (`--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Sarif,
}

/// The URL `proxy-enforces` tries when no `--denied` is given.
pub const DEFAULT_DENIED: &str = "http://egress-probe.invalid/";

/// The longest `--timeout-ms`: a probe is a quick look, not a wait.
const MAX_TIMEOUT_MS: u64 = 60_000;

/// An `http` or `https` URL, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUrl {
    pub https: bool,
    /// The host as written (an IPv6 literal without its brackets).
    pub host: String,
    pub port: u16,
    /// The path and query, `/` when empty.
    pub path: String,
}

impl ProbeUrl {
    /// `host:port`, an IPv6 literal in brackets.
    pub fn authority(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }

    pub fn parse(url: &str) -> Option<ProbeUrl> {
        let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else {
            (false, url.strip_prefix("http://")?)
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let default = if https { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']')?;
            match after.strip_prefix(':') {
                Some(p) => (host, p.parse().ok()?),
                None if after.is_empty() => (host, default),
                None => return None,
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, p.parse().ok()?),
                None => (authority, default),
            }
        };
        let bad = |c: char| c.is_whitespace() || c.is_control() || c == '@';
        if host.is_empty() || host.contains(bad) || path.contains(char::is_whitespace) {
            return None;
        }
        Some(ProbeUrl {
            https,
            host: host.to_ascii_lowercase(),
            port,
            path: path.to_string(),
        })
    }
}

/// Everything `probe` tries, validated.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    pub format: Format,
    /// `--expect`: read when the probe starts (a missing file is exit 2).
    pub expect: Option<PathBuf>,
    pub timeout: Duration,
    pub target_v4: Ipv4Addr,
    pub target_v6: Ipv6Addr,
    pub allowed: Vec<ProbeUrl>,
    pub denied: Vec<ProbeUrl>,
}

impl ProbeConfig {
    pub fn from_args(args: ProbeArgs) -> Result<ProbeConfig, ConfigError> {
        if args.timeout_ms == 0 || args.timeout_ms > MAX_TIMEOUT_MS {
            return Err(flag(
                "--timeout-ms",
                format!("must be 1 to {MAX_TIMEOUT_MS} (got {})", args.timeout_ms),
            ));
        }
        let urls = |name: &'static str, urls: &[String]| {
            urls.iter()
                .map(|u| {
                    ProbeUrl::parse(u)
                        .ok_or_else(|| flag(name, format!("{u:?} is not an http(s):// URL")))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let mut denied = urls("--denied", &args.denied)?;
        if denied.is_empty() {
            denied.push(ProbeUrl::parse(DEFAULT_DENIED).expect("a valid URL"));
        }
        Ok(ProbeConfig {
            format: match args.format {
                ProbeFormat::Table => Format::Table,
                ProbeFormat::Json => Format::Json,
                ProbeFormat::Sarif => Format::Sarif,
            },
            expect: args.expect,
            timeout: Duration::from_millis(args.timeout_ms),
            target_v4: args.target_v4,
            target_v6: args.target_v6,
            allowed: urls("--allowed", &args.allowed)?,
            denied,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ProbeUrl;

    #[test]
    fn urls_split_into_scheme_host_port_and_path() {
        let u = ProbeUrl::parse("https://[2001:db8::1]:8443/x?y").unwrap();
        assert_eq!(
            (u.https, u.host.as_str(), u.port),
            (true, "2001:db8::1", 8443)
        );
        assert_eq!(
            (u.path.as_str(), u.authority()),
            ("/x?y", "[2001:db8::1]:8443".into())
        );
        let u = ProbeUrl::parse("http://Allowed.test").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("allowed.test", 80, "/")
        );
        for bad in ["ftp://x/", "http://", "http://u@h/", "http://h:x/", "h/"] {
            assert_eq!(ProbeUrl::parse(bad), None, "{bad}");
        }
    }
}
