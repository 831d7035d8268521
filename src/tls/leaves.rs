//! Leaf certificates for intercepted names, minted once per name from the CA and kept in
//! a bounded cache: the first tunnel to a name pays for a key and a signature, later ones
//! reuse its server configuration.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::ServerConfig;

use super::ca::Ca;
use super::TlsError;

/// The most names kept; the oldest is minted again if it comes back.
pub const MAX_LEAVES: usize = 4096;

/// The CA and the leaves minted from it.
pub struct Leaves {
    ca: Arc<Ca>,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    by_name: HashMap<String, Arc<ServerConfig>>,
    order: VecDeque<String>,
}

impl Leaves {
    pub fn new(ca: Arc<Ca>) -> Leaves {
        Leaves {
            ca,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The CA certificate (PEM), for bundles handed to clients.
    pub fn ca_pem(&self) -> &str {
        &self.ca.pem
    }

    /// The server configuration presenting a certificate for `name` (a normalised host
    /// name or an IP literal), offering `http/1.1` only.
    pub fn config_for(&self, name: &str) -> Result<Arc<ServerConfig>, TlsError> {
        if let Some(found) = self.lock().by_name.get(name) {
            return Ok(found.clone());
        }
        // Minted outside the lock: two first tunnels to one name may both mint; one wins.
        let config = Arc::new(self.mint(name)?);
        let mut cache = self.lock();
        if !cache.by_name.contains_key(name) {
            if cache.order.len() >= MAX_LEAVES {
                if let Some(oldest) = cache.order.pop_front() {
                    cache.by_name.remove(&oldest);
                }
            }
            cache.order.push_back(name.to_string());
            cache.by_name.insert(name.to_string(), config.clone());
        }
        Ok(config)
    }

    /// How many leaves are kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_name.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mint(&self, name: &str) -> Result<ServerConfig, TlsError> {
        let fail = |e: rcgen::Error| TlsError::Other(format!("leaf certificate for {name}: {e}"));
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![match name.parse::<std::net::IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(name.try_into().map_err(fail)?),
        }];
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(30);
        let key = KeyPair::generate().map_err(fail)?;
        let cert = params
            .signed_by(&key, &self.ca.cert, &self.ca.key)
            .map_err(fail)?;
        let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(super::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Other(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Other(format!("leaf certificate for {name}: {e}")))?;
        // h2 first, as clients list it; a client offering neither reads HTTP/1.1
        // (docs/reference/inspection.md, "HTTP/2").
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves() -> Leaves {
        let (pem, key) = super::super::ca::generate("test CA").unwrap();
        Leaves::new(Arc::new(Ca::from_pem(&pem, &key).unwrap()))
    }

    #[test]
    fn a_name_is_minted_once_and_kept() {
        let leaves = leaves();
        let a = leaves.config_for("api.test").unwrap();
        let b = leaves.config_for("api.test").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(leaves.len(), 1);
        leaves.config_for("127.0.0.1").unwrap();
        assert_eq!(leaves.len(), 2);
    }
}
