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
    /// Load the CA in `ca_dir` and the roots (system roots plus `upstream_ca`).
    pub fn load(
        ca_dir: &std::path::Path,
        upstream_ca: Option<&std::path::Path>,
    ) -> Result<Interception, TlsError> {
        Ok(Interception {
            leaves: leaves::Leaves::new(ca::Ca::load(ca_dir)?),
            upstream: upstream::client_config(upstream_ca)?,
        })
    }
}
