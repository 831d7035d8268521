//! Inspected hosts in `run`'s jail (docs/reference/confinement.md, "Inspected hosts"):
//! the CA the proxy intercepts with (`--ca DIR`, or a throw-away one made for this run
//! when the policy inspects a host), and the bundle CMD's TLS clients trust: the system
//! roots plus the CA's certificate, one file named by all six variables.
//!
//! The CA's key never reaches CMD: a throw-away key lives only in the proxy's memory,
//! and the whole `--ca DIR` is covered in the jail's mount namespace (an empty read-only
//! directory bound over it, [`super::places`]), so even a CMD running as uid 0 cannot
//! read it. The bundle is written on the
//! jail's own `/run` (a tmpfs that ends with the jail); with `--env-only`, in a
//! temporary directory removed when `run` exits.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use crate::tls::ca::{self, Ca};

/// Where CMD finds the bundle in the jail.
pub(super) const JAIL_BUNDLE: &str = "/run/egress-proxy/ca-bundle.pem";

/// How the CA's certificate reaches the jail's first process, which writes the bundle.
pub(super) const CA_ENV: &str = "EGRESS_PROXY_JAIL_CA";

/// The variables naming the bundle, one for each TLS stack CMD may use
/// (docs/reference/confinement.md, "Inspected hosts").
pub(super) const BUNDLE_VARS: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

/// The CA of this run.
pub(super) struct RunCa {
    pub ca: Arc<Ca>,
}

/// `--ca DIR` loaded; else a throw-away CA when `inspected` is not empty; else none.
pub(super) fn run_ca(dir: Option<&Path>, inspected: &[String]) -> Result<Option<RunCa>, String> {
    if let Some(dir) = dir {
        let loaded = Ca::load(dir).map_err(|e| e.to_string())?;
        return Ok(Some(RunCa {
            ca: Arc::new(loaded),
        }));
    }
    if inspected.is_empty() {
        return Ok(None);
    }
    let (pem, key) = ca::generate("egress-proxy run (throw-away) CA").map_err(|e| e.to_string())?;
    let made = Ca::from_pem(&pem, &key)?;
    Ok(Some(RunCa { ca: Arc::new(made) }))
}

/// The six variables set to `bundle` in CMD's environment.
pub(super) fn bundle_env(env: &mut Vec<(OsString, OsString)>, bundle: &Path) {
    env.retain(|(name, _)| !BUNDLE_VARS.iter().any(|v| name == *v));
    for name in BUNDLE_VARS {
        env.push((name.into(), bundle.into()));
    }
}

/// Write the bundle for `ca_pem` at `path` (its directory made, readable by all: CMD may
/// run as another user).
pub(super) fn write_bundle(path: &Path, ca_pem: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |e: std::io::Error| format!("write {}: {e}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
    }
    std::fs::write(path, crate::tls::bundle_with(ca_pem)).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_ca_without_inspection_and_a_throw_away_one_with_it() {
        assert!(run_ca(None, &[]).unwrap().is_none());
        let a = run_ca(None, &["{ host = \"a.test\", inspect = true }".into()])
            .unwrap()
            .unwrap();
        let b = run_ca(None, &["x".into()]).unwrap().unwrap();
        assert_ne!(a.ca.pem, b.ca.pem, "a throw-away CA is made per run");
    }

    #[test]
    fn the_bundle_holds_the_ca_and_every_variable_names_it() {
        let dir = std::env::temp_dir().join(format!("egress-bundle-{}", std::process::id()));
        let path = dir.join("ca-bundle.pem");
        let ca = run_ca(None, &["x".into()]).unwrap().unwrap();
        write_bundle(&path, &ca.ca.pem).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(ca.ca.pem.trim()));
        let mut env = vec![("SSL_CERT_FILE".into(), "/elsewhere".into())];
        bundle_env(&mut env, &path);
        assert_eq!(env.len(), 6);
        assert!(env.iter().all(|(_, v)| v == path.as_os_str()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
