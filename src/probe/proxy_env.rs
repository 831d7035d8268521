//! The proxy variables a client in the sandbox would use (`HTTP_PROXY`, `HTTPS_PROXY`,
//! upper case first), with the credentials a gateway's sessions put in them
//! (`http://ID:TOKEN@proxy:3128`, docs/reference/control-plane.md): sent as
//! `Proxy-Authorization: Basic`, never shown in the evidence.

use base64::Engine;

use crate::config::probe::ProbeUrl;

/// One proxy variable, read.
#[derive(Clone)]
pub(super) struct ProxyVar {
    pub url: ProbeUrl,
    /// The `Proxy-Authorization` value, when the variable carries credentials.
    pub authorization: Option<String>,
}

impl std::fmt::Debug for ProxyVar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyVar")
            .field("url", &self.url)
            .field("authorization", &self.authorization.as_ref().map(|_| "…"))
            .finish()
    }
}

/// `HTTP_PROXY` and `HTTPS_PROXY`; a variable that cannot be read is an error that
/// names it (and not its value, which may hold a token).
#[derive(Debug, Clone, Default)]
pub(super) struct ProxyEnv {
    pub http: Option<Result<ProxyVar, String>>,
    pub https: Option<Result<ProxyVar, String>>,
}

impl ProxyEnv {
    pub(super) fn from_env() -> ProxyEnv {
        let read = |names: [&str; 2]| {
            names.iter().find_map(|n| {
                let v = std::env::var(n).ok().filter(|v| !v.is_empty())?;
                Some(parse(&v).ok_or(format!("{n} is not an http://[USER:PASS@]HOST:PORT URL")))
            })
        };
        ProxyEnv {
            http: read(["HTTP_PROXY", "http_proxy"]),
            https: read(["HTTPS_PROXY", "https_proxy"]),
        }
    }

    /// The proxy a request for an `https` (or `http`) URL goes through.
    pub(super) fn for_url(&self, https: bool) -> Option<&Result<ProxyVar, String>> {
        match https {
            true => self.https.as_ref(),
            false => self.http.as_ref(),
        }
    }
}

/// `http://[USER[:PASS]@]HOST[:PORT][/]`, the user and password percent-decoded.
pub(super) fn parse(value: &str) -> Option<ProxyVar> {
    let rest = value.strip_prefix("http://")?;
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (userinfo, host) = match rest[..authority_end].rsplit_once('@') {
        Some((userinfo, host)) => (Some(userinfo), host),
        None => (None, &rest[..authority_end]),
    };
    let url = ProbeUrl::parse(&format!("http://{host}{}", &rest[authority_end..]))?;
    let authorization = match userinfo {
        None => None,
        Some(userinfo) => {
            let decoded = crate::net::percent_decode(userinfo)?;
            let b64 = base64::engine::general_purpose::STANDARD.encode(decoded);
            Some(format!("Basic {b64}"))
        }
    };
    Some(ProxyVar { url, authorization })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn credentials_in_a_proxy_variable_become_basic_authorization() {
        let v = parse("http://sess-1:t%40ken@10.0.0.2:3128/").unwrap();
        assert_eq!(v.url.authority(), "10.0.0.2:3128");
        // base64("sess-1:t@ken")
        assert_eq!(v.authorization.as_deref(), Some("Basic c2Vzcy0xOnRAa2Vu"));
        assert!(!format!("{v:?}").contains("c2Vzcy0x"), "never shown");
        let v = parse("http://127.0.0.1:3128").unwrap();
        assert_eq!((v.url.port, v.authorization), (3128, None));
        for bad in ["https://p:1", "socks5://p:1", "http://u:%zz@p:1", "http://"] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
