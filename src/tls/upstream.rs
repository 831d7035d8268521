//! The client side of the proxy's TLS connections to inspected hosts' servers: verified
//! against the system's roots and `serve --upstream-ca FILE`, for the `CONNECT` name.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

use super::TlsError;

/// The roots upstream certificates are verified against.
pub fn roots(upstream_ca: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    // A system without a root store still works with `--upstream-ca`; an unreadable
    // entry in it is skipped, as every TLS client does.
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = upstream_ca {
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| TlsError::file(path, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::file(path, e))?;
        if certs.is_empty() {
            return Err(TlsError::file(path, "holds no PEM certificate"));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| TlsError::file(path, e))?;
        }
    }
    Ok(roots)
}

/// The configuration of every upstream TLS connection: `http/1.1` only.
pub fn client_config(upstream_ca: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut config = ClientConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Other(e.to_string()))?
        .with_root_certificates(roots(upstream_ca)?)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
