//! The interception CA: `ca init DIR` writes `DIR/ca.pem` and `DIR/ca-key.pem` (the key
//! readable by its owner only); `serve --ca DIR` loads them to sign leaf certificates.
//! The key never leaves the proxy: it is not logged, answered or written anywhere else.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

use super::TlsError;

/// The certificate's file in a CA directory.
pub const CERT_FILE: &str = "ca.pem";
/// The private key's file in a CA directory.
pub const KEY_FILE: &str = "ca-key.pem";

/// A loaded CA: what signs leaf certificates.
pub struct Ca {
    pub(crate) cert: rcgen::Certificate,
    pub(crate) key: KeyPair,
    /// The CA certificate as written in `ca.pem`, for bundles handed to clients.
    pub pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// Make a new CA in `dir` (created if missing). Refuses to overwrite an existing one.
pub fn init(dir: &Path) -> Result<PathBuf, TlsError> {
    std::fs::create_dir_all(dir).map_err(|e| TlsError::file(dir, e))?;
    let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
    for path in [&cert_path, &key_path] {
        if path.exists() {
            return Err(TlsError::file(
                path,
                "already exists; remove it first to make a new CA",
            ));
        }
    }
    let (cert_pem, key_pem) = generate("egress-proxy interception CA")?;
    write_new(&key_path, key_pem.as_bytes(), 0o600)?;
    write_new(&cert_path, cert_pem.as_bytes(), 0o644)?;
    Ok(cert_path)
}

/// A new CA certificate and key, as PEM: for `ca init`, and for the throw-away CA of a
/// `run` whose policy inspects a host.
pub fn generate(common_name: &str) -> Result<(String, String), TlsError> {
    let key = KeyPair::generate().map_err(|e| TlsError::Other(format!("CA key: {e}")))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "egress-proxy");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(3650);
    let cert = params
        .self_signed(&key)
        .map_err(|e| TlsError::Other(format!("CA certificate: {e}")))?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(|e| TlsError::file(path, e))?;
    file.write_all(bytes).map_err(|e| TlsError::file(path, e))
}

impl Ca {
    /// Load `DIR/ca.pem` and `DIR/ca-key.pem`.
    pub fn load(dir: &Path) -> Result<Ca, TlsError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|e| TlsError::file(&path, e))
        };
        let (pem, key_pem) = (read(CERT_FILE)?, read(KEY_FILE)?);
        Ca::from_pem(&pem, &key_pem).map_err(|e| TlsError::file(dir, e))
    }

    /// A CA from its certificate and key in PEM.
    pub fn from_pem(pem: &str, key_pem: &str) -> Result<Ca, String> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| format!("{KEY_FILE}: {e}"))?;
        let params = CertificateParams::from_ca_cert_pem(pem)
            .map_err(|e| format!("{CERT_FILE}: not a CA certificate: {e}"))?;
        // Re-signing the parameters with the key gives the issuer that leaf certificates
        // name: the same subject and key identifier as the file's certificate.
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("{KEY_FILE} does not match {CERT_FILE}: {e}"))?;
        keys_match(pem, &key)?;
        Ok(Ca {
            cert,
            key,
            pem: pem.to_string(),
        })
    }
}

/// Refuse a key that is not the certificate's: leaves signed by it would never verify.
fn keys_match(pem: &str, key: &KeyPair) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let der =
        CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| format!("{CERT_FILE}: {e}"))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    rustls::sign::CertifiedKey::from_der(vec![der], key, &super::provider())
        .map(drop)
        .map_err(|e| format!("{KEY_FILE} is not the key of {CERT_FILE}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_writes_a_ca_that_loads_and_refuses_to_overwrite_it() {
        let dir = std::env::temp_dir().join(format!("egress-ca-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        init(&dir).unwrap();
        Ca::load(&dir).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the key is readable by its owner only");
        }
        let again = init(&dir).unwrap_err().to_string();
        assert!(again.contains("already exists"), "{again}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let (pem, _) = generate("one").unwrap();
        let (_, other_key) = generate("two").unwrap();
        let err = Ca::from_pem(&pem, &other_key).unwrap_err();
        assert!(err.contains("is not the key of"), "{err}");
    }
}
