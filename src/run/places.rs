//! What CMD may write and what it may not see (docs/reference/confinement.md, "Files"),
//! worked out by `run` from its flags and passed to the jail's init, which builds that
//! view ([`super::mounts`]).
//!
//! Writable: the starting directory and each `--writable PATH`, as absolute canonical
//! paths (a symbolic link names the place it points to). The jail's own: `/tmp`,
//! `/var/tmp` and `/dev/shm`, fresh and empty, unless `--writable` names one of them,
//! which then is the host's. What is covered is worked out in [`super::covers`].

use std::path::{Component, Path, PathBuf};

use crate::config::RunConfig;
use crate::policy::OrgPolicy;

/// The places the jail makes its own (fresh `/proc`, `/dev` and `/run`, a read-only
/// `/sys`): a path there cannot be made writable (but for `/dev/shm`, below).
const JAIL_OWNED: [&str; 4] = ["/proc", "/sys", "/dev", "/run"];

/// The temporary places: the jail's own (fresh tmpfs) unless `--writable` names one.
pub(super) const TEMPORARY: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// What CMD may write.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Writable {
    /// Absolute and canonical, `/` when everything is.
    pub places: Vec<PathBuf>,
    /// `run` was started in `/`, which is not made writable for it (only `--writable /`
    /// does that).
    pub started_in_root: bool,
    /// The temporary places that are the jail's own (canonical): those of [`TEMPORARY`]
    /// that `--writable` does not name.
    pub own: Vec<PathBuf>,
    /// The places `--writable` named, canonical (the starting directory aside).
    pub flagged: Vec<PathBuf>,
}

impl Writable {
    /// `--writable /` was given: the jail is network-only.
    pub(super) fn everything(&self) -> bool {
        self.places.iter().any(|p| p == Path::new("/"))
    }
}

/// The writable places for a `run` started in `start` with these `--writable` flags; an
/// error names the flag that cannot be honoured.
pub(super) fn writable(start: &Path, flags: &[PathBuf]) -> Result<Writable, String> {
    let mut places = Vec::new();
    let start = canonical(start).map_err(|e| format!("the starting directory: {e}"))?;
    let started_in_root = start == Path::new("/");
    if !started_in_root {
        places.push(start);
    }
    let mut flagged = Vec::new();
    for flag in flags {
        let path = canonical(flag).map_err(|e| format!("--writable {}: {e}", flag.display()))?;
        if path == Path::new("/dev/shm") {
            // The host's `/dev/shm`, bound by the jail's `/dev` (super::devices).
            flagged.push(path);
            continue;
        }
        if let Some(owned) = jail_owned(&path) {
            return Err(format!(
                "--writable {}: the jail makes its own {owned}; a place there cannot be \
                 made writable",
                flag.display()
            ));
        }
        places.push(path.clone());
        flagged.push(path);
    }
    places.sort();
    places.dedup();
    let own = TEMPORARY
        .iter()
        .filter_map(|tmp| canonical(Path::new(tmp)).ok())
        .filter(|tmp| !flagged.contains(tmp))
        .collect();
    Ok(Writable {
        places,
        started_in_root,
        own,
        flagged,
    })
}

/// The jail-owned place `path` lies in, if any.
fn jail_owned(path: &Path) -> Option<&'static str> {
    JAIL_OWNED.into_iter().find(|owned| path.starts_with(owned))
}

/// The proxy's own files for these flags: the organization file, `--policy`, the `--ca`
/// directory, the audit log (unless `-`), its signing key and each of `org`'s credential value files
/// (relative to the organization file's directory, as `crate::secrets` reads them).
pub(super) fn proxy_files(args: &RunConfig, org: &OrgPolicy) -> Vec<PathBuf> {
    let serve = &args.serve;
    let mut files = vec![serve.org.clone()];
    files.extend(serve.policy.clone());
    files.extend(args.ca.clone());
    if serve.audit_log != "-" {
        files.push(PathBuf::from(&serve.audit_log));
    }
    files.extend(serve.audit_signing_key_file.clone());
    let base = serve.org.parent().unwrap_or(Path::new("."));
    files.extend(org.credentials().iter().map(|c| base.join(&c.value_file)));
    let mut files: Vec<PathBuf> = files.iter().map(|f| absolute(f)).collect();
    files.sort();
    files.dedup();
    files
}

/// `path` absolute and canonical, after every symbolic link; it must exist.
pub(super) fn canonical(path: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `path` canonical, or (a file not made yet, such as the audit log before the proxy
/// opens it) its directory canonical and its name joined; failing that, made absolute
/// as written.
pub(super) fn absolute(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let joined = std::env::current_dir().unwrap_or_default().join(path);
    let (Some(dir), Some(name)) = (joined.parent(), joined.file_name()) else {
        return joined;
    };
    match std::fs::canonicalize(dir) {
        Ok(dir) => dir.join(name),
        Err(_) => lexical(&joined),
    }
}

/// `..` and `.` taken out of an absolute path without reading the filesystem.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jail_owned_places_are_refused_and_others_are_not() {
        for (path, owned) in [
            ("/proc/sys", Some("/proc")),
            ("/sys", Some("/sys")),
            ("/dev/shm", Some("/dev")),
            ("/run/user/1000", Some("/run")),
            ("/procfs", None),
            ("/devices", None),
            ("/home/me", None),
        ] {
            assert_eq!(jail_owned(Path::new(path)), owned, "{path}");
        }
    }

    #[test]
    fn the_starting_directory_is_writable_and_the_temporary_places_the_jails_own() {
        let start = std::env::current_dir().unwrap();
        let w = writable(&start, &[]).unwrap();
        assert_eq!(w.places, [std::fs::canonicalize(&start).unwrap()]);
        assert!(w.own.contains(&PathBuf::from("/tmp")));
        assert!(!w.everything());
    }

    #[test]
    fn writable_names_a_temporary_place_to_bind_the_hosts() {
        let flags = [PathBuf::from("/tmp"), PathBuf::from("/dev/shm")];
        let w = writable(Path::new("/"), &flags).unwrap();
        assert!(w.places.contains(&PathBuf::from("/tmp")));
        assert!(
            !w.places.contains(&PathBuf::from("/dev/shm")),
            "bound by /dev"
        );
        assert!(!w.own.contains(&PathBuf::from("/tmp")));
        assert!(!w.own.contains(&PathBuf::from("/dev/shm")));
    }

    #[test]
    fn starting_in_root_does_not_make_everything_writable() {
        let w = writable(Path::new("/"), &[]).unwrap();
        assert!(w.started_in_root);
        assert!(!w.everything());
        let w = writable(Path::new("/"), &[PathBuf::from("/")]).unwrap();
        assert!(w.everything());
    }

    #[test]
    fn a_missing_or_jail_owned_flag_is_an_error_naming_it() {
        let missing = writable(Path::new("/"), &[PathBuf::from("/no/such/place")]);
        assert!(missing
            .unwrap_err()
            .starts_with("--writable /no/such/place: "));
        let owned = writable(Path::new("/"), &[PathBuf::from("/proc/self")]);
        assert!(owned.unwrap_err().contains("the jail makes its own /proc"));
    }

    #[test]
    fn a_file_not_made_yet_is_named_by_its_canonical_directory() {
        let dir = std::env::temp_dir().join(format!("places-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = dir.join("sub/../audit.jsonl");
        let real = std::fs::canonicalize(&dir).unwrap().join("audit.jsonl");
        assert_eq!(absolute(&name), real);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
