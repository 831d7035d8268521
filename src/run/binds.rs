//! The three mount calls the jail's view is made of (docs/reference/confinement.md,
//! "Files"): a tmpfs, a bind, a bind with every mount below it. Their own module so that
//! the view (`mounts`) and `/dev` (`devices`) both use them and not each other.

use std::path::Path;

use nix::mount::{mount, MsFlags};

type Result<T> = std::result::Result<T, String>;

/// A fresh tmpfs on `path`, never a device or set-uid file on it.
pub(super) fn tmpfs(path: &Path, options: &str) -> Result<()> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount(Some("tmpfs"), path, Some("tmpfs"), flags, Some(options))
        .map_err(|e| format!("mount tmpfs on {}: {e}", path.display()))
}

pub(super) fn bind(from: &Path, to: &Path) -> Result<()> {
    mount(Some(from), to, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|e| format!("bind {} on {}: {e}", from.display(), to.display()))
}

/// Bind `from` with every mount below it.
pub(super) fn rbind(from: &Path, to: &Path) -> Result<()> {
    let flags = MsFlags::MS_BIND | MsFlags::MS_REC;
    mount(Some(from), to, None::<&str>, flags, None::<&str>)
        .map_err(|e| format!("bind {} on {}: {e}", from.display(), to.display()))
}
