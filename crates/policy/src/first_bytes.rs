//! The judgement of a tunnel's first bytes (docs/reference/policy-files.md, "Tunnels"): the TLS
//! server name must be the `CONNECT` host after normalisation; a tunnel without a server
//! name, or whose bytes are not TLS, follows `[tunnels] require_tls` and `require_sni`,
//! which default to the safe choice on port 443 (required) and are off elsewhere.

use super::compiled::Tunnels;
use super::decide::{Decision, Level, Reason, Target};
use super::host::{Host, HostName};

/// What the first bytes of a tunnel turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirstBytes {
    /// A TLS ClientHello, with its server name if it carries one.
    Tls {
        /// The `server_name` extension's host name, as sent.
        server_name: Option<String>,
    },
    /// Bytes that are not a TLS ClientHello.
    NotTls,
    /// The server spoke first (the client sent nothing yet).
    ServerFirst,
    /// A TLS handshake record from which no ClientHello could be read: unfinished within
    /// the bytes or the time allowed, or malformed. What the server would read from it
    /// (a server name?) cannot be known, so it is refused, never relayed.
    Unreadable,
}

impl Tunnels {
    /// Whether a tunnel to `port` must carry TLS.
    pub fn tls_required(&self, port: u16) -> bool {
        self.require_tls.unwrap_or(port == 443)
    }

    /// Whether a TLS tunnel to `port` must name its server.
    pub fn sni_required(&self, port: u16) -> bool {
        self.require_sni.unwrap_or(port == 443)
    }
}

/// `None` when the tunnel may go on; else the refusal (`sni_mismatch`, address of the
/// tunnel's level) with a rule that says what was seen.
pub fn judge_first_bytes(
    first: &FirstBytes,
    target: &Target,
    tunnels: &Tunnels,
) -> Option<Decision> {
    let deny = |why: String| {
        Some(Decision::deny(
            Reason::SniMismatch,
            Level::Org,
            Some(why.into()),
        ))
    };
    match first {
        FirstBytes::Tls {
            server_name: Some(name),
        } => match (&target.host, HostName::parse(name)) {
            (Host::Name(host), Ok(sni)) if *host == sni => None,
            (Host::Ip(_), _) => deny(format!("server name {name} for an IP-literal target")),
            _ => deny(format!("server name {name} is not {}", target.host)),
        },
        FirstBytes::Tls { server_name: None } if tunnels.sni_required(target.port) => {
            deny("TLS without a server name".into())
        }
        FirstBytes::Tls { server_name: None } => None,
        FirstBytes::Unreadable => {
            deny("a TLS handshake record with no readable ClientHello".into())
        }
        FirstBytes::NotTls | FirstBytes::ServerFirst if tunnels.tls_required(target.port) => {
            deny("the tunnel does not start with a TLS ClientHello".into())
        }
        FirstBytes::NotTls | FirstBytes::ServerFirst => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16) -> Target {
        Target {
            host: Host::parse(host).unwrap(),
            port,
        }
    }

    fn tls(name: Option<&str>) -> FirstBytes {
        FirstBytes::Tls {
            server_name: name.map(String::from),
        }
    }

    #[test]
    fn first_bytes_table() {
        let default = Tunnels::default();
        let lax = Tunnels {
            require_tls: Some(false),
            require_sni: Some(false),
        };
        let strict = Tunnels {
            require_tls: Some(true),
            require_sni: Some(true),
        };
        #[rustfmt::skip]
        let cases: &[(&str, FirstBytes, &str, u16, &Tunnels, bool)] = &[
            ("matching_name_passes",            tls(Some("a.test")),   "a.test",    443,  &default, true),
            ("name_compared_after_normalising", tls(Some("A.Test.")),  "a.test",    443,  &default, true),
            ("other_name_is_mismatch",          tls(Some("evil.test")),"a.test",    443,  &default, false),
            ("other_name_mismatch_even_if_lax", tls(Some("evil.test")),"a.test",    8443, &lax,     false),
            ("name_for_ip_target_is_mismatch",  tls(Some("a.test")),   "127.0.0.1", 443,  &default, false),
            ("no_sni_refused_on_443",           tls(None),             "a.test",    443,  &default, false),
            ("no_sni_allowed_elsewhere",        tls(None),             "a.test",    8443, &default, true),
            ("no_sni_refused_when_required",    tls(None),             "a.test",    8443, &strict,  false),
            ("not_tls_refused_on_443",          FirstBytes::NotTls,    "a.test",    443,  &default, false),
            ("not_tls_allowed_elsewhere",       FirstBytes::NotTls,    "a.test",    22,   &default, true),
            ("not_tls_allowed_when_lax",        FirstBytes::NotTls,    "a.test",    443,  &lax,     true),
            ("server_first_refused_on_443",     FirstBytes::ServerFirst,"a.test",   443,  &default, false),
            ("server_first_allowed_on_22",      FirstBytes::ServerFirst,"a.test",   22,   &default, true),
            ("unreadable_hello_refused_if_lax", FirstBytes::Unreadable, "a.test",    22,   &lax,     false),
        ];
        for (rule, first, host, port, tunnels, passes) in cases {
            let got = judge_first_bytes(first, &target(host, *port), tunnels);
            assert_eq!(got.is_none(), *passes, "{rule}: {got:?}");
            if let Some(d) = got {
                assert_eq!(d.reason(), Some(Reason::SniMismatch), "{rule}");
            }
        }
    }
}
