//! What CMD may not see or change (docs/reference/confinement.md, "Files"), worked out
//! by `run` before the jail starts and passed to its init as `__jail-init --cover` (an
//! empty read-only file or directory stands over the path) and `--read-only` (the path
//! bound read-only on itself), which [`super::mounts`] builds.
//!
//! A cover on a file's name falls off when the host renames a file over it or removes
//! it (the kernel detaches a mount whose dentry goes away, in every namespace), and an
//! editor or a rotation writes each new version under another name in the same
//! directory first. So each of the proxy's files is covered by covering the directory
//! that holds it: every version, under every name, is out of reach for the whole run.
//! Where CMD needs that directory (see [`needed`]), `run` refuses to start, unless the
//! file is out of CMD's view anyway. The proxy's executable is made read-only the same
//! way: its directory, or the file alone where CMD needs the directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::places::Writable;

/// Directories every command needs: never hidden.
const SYSTEM: [&str; 8] = [
    "/", "/etc", "/usr", "/bin", "/sbin", "/home", "/root", "/var",
];

/// Places whose contents the jail replaces with its own (nothing of the host's is
/// shown there).
const JAIL_OWNED: [&str; 3] = ["/proc", "/dev", "/run"];

/// What the jail's init covers and makes read-only.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    /// Hidden: an empty read-only file or directory stands over each.
    pub cover: Vec<PathBuf>,
    /// Bound read-only on itself, pinned.
    pub read_only: Vec<PathBuf>,
}

impl Plan {
    /// `__jail-init`'s arguments for this plan.
    pub(super) fn init_args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        for path in &self.cover {
            args.extend(["--cover".into(), path.into()]);
        }
        for path in &self.read_only {
            args.extend(["--read-only".into(), path.into()]);
        }
        args
    }
}

/// What `run` knows about the view it asks for.
pub(super) struct Inputs<'a> {
    /// The starting directory, canonical.
    pub start: &'a Path,
    pub writable: &'a Writable,
    /// The homes whose secrets are hidden (canonical).
    pub homes: &'a [PathBuf],
    /// Hidden by name: the secrets in those homes and each `run --hide` (canonical).
    pub hidden: &'a [PathBuf],
    /// The proxy's own files (absolute): organization file, `--policy`, `--ca`, each
    /// credential's value file, the audit log and its signing key.
    pub proxy_files: &'a [PathBuf],
    /// The proxy's executable, canonical.
    pub exe: &'a Path,
    /// Files that run later that exist in the writable places.
    pub later: &'a [PathBuf],
}

/// The plan for `inputs`; an error names a proxy file whose directory CMD needs.
pub(super) fn plan(inputs: &Inputs) -> Result<Plan, String> {
    let mut cover: Vec<PathBuf> = inputs.hidden.to_vec();
    let mut refused = Vec::new();
    for file in inputs.proxy_files {
        let dir = if file.is_dir() {
            file.as_path()
        } else {
            file.parent().unwrap_or(Path::new("/"))
        };
        match needed(dir, inputs) {
            None => cover.push(dir.to_path_buf()),
            Some(why) => refused.push((file, dir, why)),
        }
    }
    cover.retain(|path| shown(path, inputs, &[]));
    cover.sort();
    cover.dedup();
    for (file, dir, why) in refused {
        if shown(file, inputs, &cover) {
            return Err(format!(
                "{}: the command needs the directory it lies in, {} ({why}), and a cover of \
                 the file alone falls off when the file is replaced (an editor's save, a \
                 rotation): keep it in a directory of its own (e.g. policies/)",
                file.display(),
                dir.display()
            ));
        }
    }
    let mut read_only = Vec::new();
    if shown(inputs.exe, inputs, &cover) {
        let dir = inputs.exe.parent().unwrap_or(Path::new("/"));
        let whole = needed(dir, inputs).is_none();
        read_only.push(if whole { dir } else { inputs.exe }.to_path_buf());
    }
    read_only.extend(
        inputs
            .later
            .iter()
            .filter(|path| shown(path, inputs, &cover))
            .cloned(),
    );
    read_only.sort();
    read_only.dedup();
    Ok(Plan { cover, read_only })
}

/// Why CMD needs `dir` (so it cannot be hidden or made read-only as a whole), if it
/// does: `/`, the starting directory or one above it, a writable place or one above it,
/// one above a temporary place of the jail's own, a system directory, a home.
fn needed(dir: &Path, inputs: &Inputs) -> Option<&'static str> {
    let w = inputs.writable;
    if inputs.start == dir {
        return Some("the starting directory");
    }
    if inputs.start.starts_with(dir) {
        return Some("it holds the starting directory");
    }
    if w.places.iter().chain(&w.own).any(|p| p.starts_with(dir)) {
        return Some("a writable place, or one that holds one");
    }
    let lib = dir.parent() == Some(Path::new("/"))
        && dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("lib"));
    if lib || SYSTEM.iter().any(|s| Path::new(s) == dir) {
        return Some("a system directory");
    }
    if inputs.homes.iter().any(|h| h == dir) {
        return Some("a home directory");
    }
    None
}

/// Whether `path` is in CMD's view at all: not under the jail's own places (fresh
/// `/proc`, `/dev`, `/run`, and the temporary places outside any writable place), not
/// under one of `covered`.
fn shown(path: &Path, inputs: &Inputs, covered: &[PathBuf]) -> bool {
    let w = inputs.writable;
    let in_writable = w
        .places
        .iter()
        .any(|p| path.starts_with(p) && p != Path::new("/"));
    let own_tmp = w.own.iter().any(|t| path.starts_with(t)) && !in_writable;
    let host_shm = w.flagged.iter().any(|f| path.starts_with(f));
    let owned = JAIL_OWNED.iter().any(|o| path.starts_with(o)) && !host_shm;
    let under_cover = covered.iter().any(|c| path.starts_with(c) && c != path);
    let is_cover = covered.iter().any(|c| c == path);
    !(own_tmp || owned || under_cover || is_cover)
}

#[cfg(test)]
mod tests;
