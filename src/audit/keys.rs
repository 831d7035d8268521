//! The audit log's signing keys (docs/reference/audit-log.md, "Checkpoints"): `audit
//! keygen DIR` makes an Ed25519 key pair, the private key as PKCS#8 PEM for `serve
//! --audit-signing-key`, the public key as SubjectPublicKeyInfo PEM for `audit verify
//! --public-key`. rcgen reads and writes the PEM files, ring signs and verifies.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{KeyPair, PublicKeyData, SubjectPublicKeyInfo, PKCS_ED25519};
use ring::signature::{Ed25519KeyPair, UnparsedPublicKey, ED25519};

/// The private key's file name in `audit keygen`'s directory.
pub(crate) const PRIVATE_FILE: &str = "audit-signing-key.pem";
/// The public key's file name in `audit keygen`'s directory.
pub(crate) const PUBLIC_FILE: &str = "audit-signing-key.pub.pem";

/// A key file that cannot be read, written or used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {detail}")]
pub struct KeyError {
    path: String,
    detail: String,
}

impl KeyError {
    fn new(path: &Path, detail: impl std::fmt::Display) -> KeyError {
        KeyError {
            path: path.display().to_string(),
            detail: detail.to_string(),
        }
    }
}

/// What a checkpoint signs: its own `seq` and its `prev` (the hash of the line before
/// it), in a form no other message of ours takes.
pub(crate) fn checkpoint_message(seq: u64, prev: &[u8; 32]) -> Vec<u8> {
    format!(
        "egress-proxy audit.checkpoint v1 seq={seq} prev={}",
        data_encoding::HEXLOWER.encode(prev)
    )
    .into_bytes()
}

/// A key's id, written in each checkpoint: the first 16 hex digits of the SHA-256 of the
/// raw public key, so a reader tells which key signed without trying each.
pub(crate) fn key_id(public_raw: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, public_raw);
    data_encoding::HEXLOWER.encode(&digest.as_ref()[..8])
}

/// The key `serve --audit-signing-key` signs checkpoints with.
pub struct Signer {
    key: Ed25519KeyPair,
    id: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("id", &self.id).finish()
    }
}

impl Signer {
    /// Reads an Ed25519 private key in PKCS#8 PEM (`audit keygen`'s, or OpenSSL's
    /// `genpkey -algorithm ed25519`).
    pub fn load(path: &Path) -> Result<Signer, KeyError> {
        let pem = std::fs::read_to_string(path).map_err(|e| KeyError::new(path, e))?;
        let pair = KeyPair::from_pem(&pem).map_err(|e| KeyError::new(path, e))?;
        if pair.algorithm() != &PKCS_ED25519 {
            return Err(KeyError::new(path, "not an Ed25519 private key"));
        }
        let key = Ed25519KeyPair::from_pkcs8_maybe_unchecked(pair.serialized_der())
            .map_err(|e| KeyError::new(path, e))?;
        let id = key_id(ring::signature::KeyPair::public_key(&key).as_ref());
        Ok(Signer { key, id })
    }

    /// The key's id ([`key_id`]).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The signature of the checkpoint at `seq` whose `prev` is `prev`.
    pub fn sign(&self, seq: u64, prev: &[u8; 32]) -> [u8; 64] {
        let sig = self.key.sign(&checkpoint_message(seq, prev));
        let mut out = [0u8; 64];
        out.copy_from_slice(sig.as_ref());
        out
    }
}

/// The public key `audit verify --public-key` checks checkpoints with.
#[derive(Debug)]
pub(crate) struct Verifier {
    raw: Vec<u8>,
    id: String,
}

impl Verifier {
    /// Reads an Ed25519 public key in SubjectPublicKeyInfo PEM (`audit keygen`'s).
    pub(crate) fn load(path: &Path) -> Result<Verifier, KeyError> {
        let pem = std::fs::read_to_string(path).map_err(|e| KeyError::new(path, e))?;
        let spki = SubjectPublicKeyInfo::from_pem(&pem).map_err(|e| KeyError::new(path, e))?;
        if spki.algorithm() != &PKCS_ED25519 {
            return Err(KeyError::new(path, "not an Ed25519 public key"));
        }
        let raw = spki.der_bytes().to_vec();
        let id = key_id(&raw);
        Ok(Verifier { raw, id })
    }

    /// The key's id ([`key_id`]).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Whether `signature` signs the checkpoint at `seq` whose `prev` is `prev`.
    pub(crate) fn verifies(&self, seq: u64, prev: &[u8; 32], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.raw)
            .verify(&checkpoint_message(seq, prev), signature)
            .is_ok()
    }
}

/// `audit keygen DIR`: writes a new key pair, `DIR/audit-signing-key.pem` (mode 0600)
/// and `DIR/audit-signing-key.pub.pem`; refuses to overwrite either. Returns both paths.
pub(crate) fn keygen(dir: &Path) -> Result<(PathBuf, PathBuf), KeyError> {
    std::fs::create_dir_all(dir).map_err(|e| KeyError::new(dir, e))?;
    let private = dir.join(PRIVATE_FILE);
    let public = dir.join(PUBLIC_FILE);
    for path in [&private, &public] {
        if path.exists() {
            return Err(KeyError::new(
                path,
                "already exists; remove it first to make a new key",
            ));
        }
    }
    let pair = KeyPair::generate_for(&PKCS_ED25519).map_err(|e| KeyError::new(dir, e))?;
    write_new(&private, pair.serialize_pem().as_bytes(), 0o600)?;
    write_new(&public, pair.public_key_pem().as_bytes(), 0o644)?;
    Ok((private, public))
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), KeyError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(|e| KeyError::new(path, e))?;
    file.write_all(bytes).map_err(|e| KeyError::new(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_with_its_key_only() {
        let dir = std::env::temp_dir().join(format!("keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (private, public) = keygen(&dir).unwrap();
        let other = dir.join("other");
        let (_, other_public) = keygen(&other).unwrap();
        let signer = Signer::load(&private).unwrap();
        let verifier = Verifier::load(&public).unwrap();
        assert_eq!(signer.id(), verifier.id());
        let prev = [7u8; 32];
        let sig = signer.sign(42, &prev);
        assert!(verifier.verifies(42, &prev, &sig));
        assert!(!verifier.verifies(43, &prev, &sig), "another seq");
        assert!(!verifier.verifies(42, &[8u8; 32], &sig), "another prev");
        let wrong = Verifier::load(&other_public).unwrap();
        assert_ne!(wrong.id(), signer.id());
        assert!(!wrong.verifies(42, &prev, &sig), "another key");
        assert!(keygen(&dir).is_err(), "keygen never overwrites");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&private).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
