//! Secrets in the caller's home and CMD's (docs/reference/confinement.md, "Hidden"):
//! the stores of keys and tokens an injected command would read first, hidden by
//! default; `run --hide PATH` hides more, `run --show PATH` shows one of the defaults.

use std::path::PathBuf;

use super::places::{absolute, canonical};

/// Below each home: hidden when they exist (an empty read-only file or directory stands
/// over each).
pub(super) const SECRETS: [&str; 13] = [
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".gnupg",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials.toml",
    ".config/gh",
];

/// The homes whose secrets are hidden: `run`'s `$HOME`, the home of `SUDO_USER` (from
/// the password database) when `run` was started through sudo, and the home of CMD's
/// uid; canonical, those that exist.
pub(super) fn homes(cmd_uid: u32) -> Vec<PathBuf> {
    use nix::unistd::{Uid, User};
    let mut homes: Vec<PathBuf> = Vec::new();
    homes.extend(std::env::var_os("HOME").map(PathBuf::from));
    if nix::unistd::geteuid().is_root() {
        if let Some(name) = std::env::var_os("SUDO_USER") {
            let user = User::from_name(&name.to_string_lossy());
            homes.extend(user.ok().flatten().map(|u| u.dir));
        }
    }
    let cmd = User::from_uid(Uid::from_raw(cmd_uid));
    homes.extend(cmd.ok().flatten().map(|u| u.dir));
    let mut homes: Vec<PathBuf> = homes
        .iter()
        .filter(|h| h.is_absolute())
        .filter_map(|h| canonical(h).ok())
        .collect();
    homes.sort();
    homes.dedup();
    homes
}

/// What to hide: each default secret that exists in `homes` but those `show` names, and
/// each `hide` (which must exist); canonical. An error names a `--show` that is not one
/// of the defaults, or a `--hide` that cannot be found.
pub(super) fn hidden(
    homes: &[PathBuf],
    hide: &[PathBuf],
    show: &[PathBuf],
) -> Result<Vec<PathBuf>, String> {
    let defaults: Vec<PathBuf> = homes
        .iter()
        .flat_map(|home| SECRETS.iter().map(move |s| home.join(s)))
        .collect();
    let mut shown = Vec::new();
    for path in show {
        let named = absolute(path);
        let found = defaults
            .iter()
            .find(|d| **d == named || canonical(d).is_ok_and(|real| real == named));
        let Some(found) = found else {
            return Err(format!(
                "--show {}: not one of the places hidden by default (~/.ssh, ~/.aws, ...: \
                 docs/reference/confinement.md, \"Hidden\")",
                path.display()
            ));
        };
        shown.push(found.clone());
    }
    let mut out: Vec<PathBuf> = defaults
        .iter()
        .filter(|d| !shown.contains(d))
        .filter(|d| std::fs::symlink_metadata(d).is_ok())
        .filter_map(|d| canonical(d).ok())
        .collect();
    for path in hide {
        out.push(canonical(path).map_err(|e| format!("--hide {e}"))?);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("home-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(".ssh")).unwrap();
        std::fs::write(dir.join(".netrc"), "machine x").unwrap();
        std::fs::canonicalize(dir).unwrap()
    }

    #[test]
    fn the_defaults_that_exist_are_hidden_and_show_lifts_one() {
        let h = home("defaults");
        let all = hidden(std::slice::from_ref(&h), &[], &[]).unwrap();
        assert_eq!(all, vec![h.join(".netrc"), h.join(".ssh")]);
        let some = hidden(std::slice::from_ref(&h), &[], &[h.join(".ssh")]).unwrap();
        assert_eq!(some, vec![h.join(".netrc")]);
        std::fs::remove_dir_all(h).unwrap();
    }

    #[test]
    fn show_of_anything_else_and_hide_of_nothing_are_errors_naming_them() {
        let h = home("errors");
        let e = hidden(std::slice::from_ref(&h), &[], &[h.join("notes")]).unwrap_err();
        assert!(
            e.starts_with(&format!("--show {}: ", h.join("notes").display())),
            "{e}"
        );
        let e = hidden(std::slice::from_ref(&h), &[h.join("none")], &[]).unwrap_err();
        assert!(e.starts_with("--hide ") && e.contains("none"), "{e}");
        std::fs::remove_dir_all(h).unwrap();
    }
}
