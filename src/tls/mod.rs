//! TLS for inspected hosts (docs/reference/inspection.md): the CA `ca init` makes and
//! `serve --ca` loads ([`ca`]), the leaf certificates minted from it for the names the
//! proxy intercepts ([`leaves`]), and the client side of the proxy's own connections to
//! those hosts' upstream servers ([`upstream`]).

pub mod ca;
pub mod leaves;
pub mod upstream;

use std::sync::Arc;

/// The one crypto provider every TLS configuration of the proxy is built with.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why TLS for interception cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("{0}")]
    Other(String),
}

impl TlsError {
    pub(crate) fn file(path: &std::path::Path, message: impl std::fmt::Display) -> TlsError {
        TlsError::File {
            path: path.display().to_string(),
            message: message.to_string(),
        }
    }
}

/// What `serve --ca` sets up: the leaves to show clients of inspected hosts, and the
/// verified client side of the connections to their servers.
pub struct Interception {
    pub leaves: leaves::Leaves,
    pub upstream: Arc<rustls::ClientConfig>,
}

impl Interception {
    /// Interception with `ca`, verifying upstream against the system's roots plus
    /// `upstream_ca`.
    pub fn new(
        ca: Arc<ca::Ca>,
        upstream_ca: Option<&std::path::Path>,
    ) -> Result<Interception, TlsError> {
        Ok(Interception {
            leaves: leaves::Leaves::new(ca),
            upstream: upstream::client_config(upstream_ca)?,
        })
    }
}

/// The system's root certificates plus `extra_pem`, as one PEM bundle: what `run` points
/// CMD's TLS clients at, so inspected hosts (signed by the CA) and every other host
/// (signed by a public root) both verify.
pub fn bundle_with(extra_pem: &str) -> String {
    use base64::Engine;
    let mut out = String::new();
    for cert in rustls_native_certs::load_native_certs().certs {
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out.push_str(extra_pem);
    if !extra_pem.ends_with('\n') {
        out.push('\n');
    }
    out
}
