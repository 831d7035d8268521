//! Loading policies from files: the organization file, the proxy's `--policy`, and the
//! `--resolve` pins. The one loader `serve`, `check` and reload all use, so the three can
//! never disagree about what a file means. What it builds, the policies in force, is
//! [`Policies`] (`crate::judgement::policies`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use zeroize::Zeroizing;

use crate::dlp::{check_value, Canary, Scanner};
use crate::judgement::Policies;
use crate::net::resolve::parse_resolve_pin;
use crate::policy::{HostName, OrgPolicy, PolicyError, RequestPolicy};

/// Why policies or pins did not load. Each message names the file or flag at fault.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Policy(#[from] PolicyError),
    #[error("{path} widens the organization policy {org}: {offending}")]
    Widening {
        path: String,
        org: String,
        offending: String,
    },
    #[error("{0}")]
    Credential(#[from] crate::secrets::CredentialError),
    #[error("--resolve {value}: {message}")]
    Pin { value: String, message: String },
    /// Never holds a value: the file and the line.
    #[error("[canaries] values_file {path}: {message}")]
    Canaries { path: String, message: String },
}

/// Read a policy file (or the admin token file) as text.
pub(crate) fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Load the organization file and `--policy`. The widening state is kept in
/// [`Policies::widening`]: a reload keeps serving with it (refusing every request), while
/// a start refuses it with [`load_strict`].
pub(crate) fn load(org_path: &Path, policy_path: Option<&Path>) -> Result<Policies, LoadError> {
    load_with(org_path, policy_path, &[])
}

/// [`load`], with canaries besides the organization's (`run --canary`'s).
pub(crate) fn load_with(
    org_path: &Path,
    policy_path: Option<&Path>,
    extra: &[Canary],
) -> Result<Policies, LoadError> {
    let org = OrgPolicy::from_toml(&read(org_path)?, &org_path.display().to_string())?;
    let proxy = match policy_path {
        None => None,
        Some(path) => Some(RequestPolicy::from_json(
            &read(path)?,
            &path.display().to_string(),
        )?),
    };
    let mut policies = Policies::new(org, proxy);
    policies.credentials = crate::secrets::Credentials::read(&policies.org, org_path)?;
    let mut canaries = canaries(&policies.org, org_path)?;
    canaries.extend(extra.iter().cloned());
    policies.canaries = Arc::new(Scanner::new(&canaries));
    let secrets = policies.credentials.secrets();
    policies.detectors = Arc::new(crate::judgement::secrets::organization(
        &policies.org,
        secrets,
    ));
    Ok(policies)
}

/// The organization's canaries (`[canaries] values_file`, docs/reference/dlp.md): one
/// value a line, blank lines skipped, ids `org:1`, `org:2`, ... in the order written;
/// a relative path is taken from the organization file's directory. Read at load and
/// at every reload, as a credential's value is.
fn canaries(org: &OrgPolicy, org_path: &Path) -> Result<Vec<Canary>, LoadError> {
    let Some(file) = &org.canaries().values_file else {
        return Ok(Vec::new());
    };
    let path = org_path.parent().unwrap_or(Path::new(".")).join(file);
    let fail = |message: String| LoadError::Canaries {
        path: path.display().to_string(),
        message,
    };
    let text = Zeroizing::new(std::fs::read(&path).map_err(|e| fail(e.to_string()))?);
    let mut canaries = Vec::new();
    for (n, line) in text.split(|&b| b == b'\n').enumerate() {
        let value = line.trim_ascii();
        if value.is_empty() {
            continue;
        }
        check_value(value).map_err(|why| fail(format!("line {}: {why}", n + 1)))?;
        let id = format!("org:{}", canaries.len() + 1);
        canaries.push(Canary::new(&id, "generic", value.to_vec()));
    }
    if canaries.is_empty() {
        return Err(fail("holds no value".into()));
    }
    Ok(canaries)
}

/// [`load`], refusing a `--policy` that widens the organization policy (a bad start).
pub(crate) fn load_strict(
    org_path: &Path,
    policy_path: Option<&Path>,
) -> Result<Policies, LoadError> {
    load_strict_with(org_path, policy_path, &[])
}

/// [`load_strict`], with canaries besides the organization's.
pub(crate) fn load_strict_with(
    org_path: &Path,
    policy_path: Option<&Path>,
    extra: &[Canary],
) -> Result<Policies, LoadError> {
    let policies = load_with(org_path, policy_path, extra)?;
    match (&policies.widening, policy_path) {
        (Some(w), Some(path)) => Err(LoadError::Widening {
            path: path.display().to_string(),
            org: org_path.display().to_string(),
            offending: w.to_string(),
        }),
        _ => Ok(policies),
    }
}

/// `--resolve HOST=IP` values as a map from the normalised name to its addresses.
pub(crate) fn pins(values: &[String]) -> Result<HashMap<String, Vec<IpAddr>>, LoadError> {
    let mut pins: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for value in values {
        let pin_error = |message: String| LoadError::Pin {
            value: value.clone(),
            message,
        };
        let (host, ip) = parse_resolve_pin(value).map_err(pin_error)?;
        let name = HostName::parse(&host).map_err(|e| pin_error(e.to_string()))?;
        pins.entry(name.as_str().to_string()).or_default().push(ip);
    }
    Ok(pins)
}
