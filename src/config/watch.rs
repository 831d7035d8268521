//! `watch`'s and `approve`'s arguments as a [`WatchConfig`] and an [`ApproveConfig`]:
//! the admin URL read into an address and a path ([`AdminTarget`]), where the token
//! comes from, the filters into the query string, the decision.

use std::path::PathBuf;

use super::{flag, ConfigError};
use crate::cli::{AdminApi, ApproveArgs, Decision, WatchArgs};

/// The environment variable holding the admin token when `--admin-token-file` is not
/// given.
pub const TOKEN_ENV: &str = "EGRESS_PROXY_ADMIN_TOKEN";

/// Where the admin token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `--admin-token-file`: read by the command, before it connects.
    File(PathBuf),
    /// [`TOKEN_ENV`].
    Env(String),
    /// Neither: an admin API without a token (a loopback one).
    None,
}

/// A running proxy's admin API: where it is and its token.
#[derive(Debug, Clone)]
pub struct AdminTarget {
    /// The URL as given, for messages.
    pub url: String,
    /// `HOST:PORT` to connect to, and the `Host` header.
    pub authority: String,
    /// The URL's path, without a trailing `/`: what the API's paths go under.
    pub base: String,
    pub token: TokenSource,
}

impl AdminTarget {
    fn from_args(args: AdminApi) -> Result<AdminTarget, ConfigError> {
        let (authority, base) = split_url(&args.admin)?;
        let token = match args.admin_token_file {
            Some(file) => TokenSource::File(file),
            None => match std::env::var(TOKEN_ENV) {
                Ok(token) if !token.trim().is_empty() => TokenSource::Env(token.trim().into()),
                _ => TokenSource::None,
            },
        };
        Ok(AdminTarget {
            url: args.admin,
            authority,
            base: base.trim_end_matches('/').to_string(),
            token,
        })
    }
}

/// Everything `watch` needs, validated.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    pub api: AdminTarget,
    /// `/v1/events` under the URL's path, with the filters as its query.
    pub path: String,
    pub json: bool,
}

impl WatchConfig {
    pub fn from_args(args: WatchArgs) -> Result<WatchConfig, ConfigError> {
        let api = AdminTarget::from_args(args.api)?;
        let mut query = Vec::new();
        for (key, value) in [("session", &args.session), ("event", &args.event)] {
            if let Some(value) = value {
                query.push(format!("{key}={}", percent_encode(value)));
            }
        }
        let mut path = format!("{}/v1/events", api.base);
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        Ok(WatchConfig {
            api,
            path,
            json: args.json,
        })
    }
}

/// Everything `approve` needs, validated: list the pending approvals, or decide one.
#[derive(Debug, Clone)]
pub struct ApproveConfig {
    pub api: AdminTarget,
    /// The approval and the decision as the API spells it; `None` to list.
    pub decide: Option<(String, &'static str)>,
}

impl ApproveConfig {
    pub fn from_args(args: ApproveArgs) -> Result<ApproveConfig, ConfigError> {
        let api = AdminTarget::from_args(args.api)?;
        let decide = match (args.id, args.decision) {
            (None, None) => None,
            (Some(id), Some(decision)) => {
                // An id is 32 hex digits; anything else never becomes part of a path.
                if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(flag("ID", format!("{id:?} is not an approval id (32 hex digits, as GET /v1/approvals lists them)")));
                }
                let decision = match decision {
                    Decision::AllowOnce => "allow-once",
                    Decision::AllowSession => "allow-session",
                    Decision::Deny => "deny",
                };
                Some((id, decision))
            }
            _ => {
                return Err(flag(
                    "DECISION",
                    "give both the approval ID and the decision, or neither to list",
                ))
            }
        };
        Ok(ApproveConfig { api, decide })
    }
}

/// `http://HOST[:PORT][/PATH]` into `HOST:PORT` (port 80 by default) and the path.
fn split_url(url: &str) -> Result<(String, String), ConfigError> {
    let bad = |why: &str| flag("--admin", format!("{url:?}: {why}"));
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(bad("the admin API's URL is http://HOST:PORT"));
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.is_empty() || authority.contains('@') || path.contains(['?', '#']) {
        return Err(bad("the admin API's URL is http://HOST:PORT"));
    }
    let has_port = match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.contains(':'),
    };
    let authority = match has_port {
        true => {
            let port = &authority[authority.rfind(':').unwrap_or(0) + 1..];
            if port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(bad("the port is a number from 1 to 65535"));
            }
            authority.to_string()
        }
        false => format!("{authority}:80"),
    };
    Ok((authority, path.to_string()))
}

/// Everything but unreserved characters percent-encoded, for a query value.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_urls_split_into_authority_and_path() {
        let ok = |url: &str| split_url(url).unwrap();
        assert_eq!(
            ok("http://127.0.0.1:9090"),
            ("127.0.0.1:9090".into(), "".into())
        );
        assert_eq!(
            ok("http://127.0.0.1:9090/"),
            ("127.0.0.1:9090".into(), "/".into())
        );
        assert_eq!(ok("http://admin.test"), ("admin.test:80".into(), "".into()));
        assert_eq!(
            ok("http://[::1]:9090/x"),
            ("[::1]:9090".into(), "/x".into())
        );
        assert_eq!(ok("http://[::1]"), ("[::1]:80".into(), "".into()));
        for bad in [
            "https://a:1",
            "a:1",
            "http://",
            "http://a:0",
            "http://a:x",
            "http://u@a:1",
            "http://a:1/?q",
        ] {
            assert!(split_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn filter_values_are_percent_encoded() {
        assert_eq!(percent_encode("egress.denied"), "egress.denied");
        assert_eq!(percent_encode("a b&c=d"), "a%20b%26c%3Dd");
    }
}
