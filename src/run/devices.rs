//! The jail's `/dev` (docs/reference/confinement.md, "Files"): a small read-only tmpfs
//! holding the devices programs expect (`null`, `zero`, `full`, `random`, `urandom`,
//! `tty`, `ptmx`), each a node like the host's (see [`node`]), the usual links (`fd`,
//! `stdin`, `stdout`, `stderr`), the host's `/dev/pts` (a terminal keeps its name) and
//! the host's `/dev/shm`, writable. Not the host's whole `/dev`: uid 0 opens a disk's block device
//! without any capability, and its raw blocks would bypass every read-only mount and
//! every cover of the proxy's files.

use std::path::Path;

use super::mount_attr;
use super::mounts::{bind, rbind, tmpfs};

/// Bound from the host's `/dev` when it has them.
const DEVICES: [&str; 7] = ["null", "zero", "full", "random", "urandom", "tty", "ptmx"];

/// Symbolic links every `/dev` has.
const LINKS: [(&str, &str); 4] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

type Result<T> = std::result::Result<T, String>;

/// Mount the jail's `/dev` on `dev` (the view's), from the host's `/dev`.
pub fn mount_dev(dev: &Path) -> Result<()> {
    use nix::mount::{mount, MsFlags};
    // Devices work on it (no `nodev`); nothing on it runs.
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    mount(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        flags,
        Some("mode=0755,size=64k"),
    )
    .map_err(|e| format!("mount tmpfs on {}: {e}", dev.display()))?;
    let host = Path::new("/dev");
    for name in DEVICES {
        let (from, to) = (host.join(name), dev.join(name));
        match std::fs::symlink_metadata(&from) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&from).map_err(|e| io(&from, e))?;
                symlink(&target, &to)?;
            }
            Ok(meta) => node(&meta, &from, &to)?,
            // A pseudo-terminal still opens through `/dev/pts/ptmx`.
            Err(_) if name == "ptmx" => symlink(Path::new("pts/ptmx"), &to)?,
            Err(_) => {}
        }
    }
    for (name, target) in LINKS {
        symlink(Path::new(target), &dev.join(name))?;
    }
    for name in ["pts", "shm"] {
        let (from, to) = (host.join(name), dev.join(name));
        std::fs::create_dir(&to).map_err(|e| io(&to, e))?;
        if from.is_dir() {
            rbind(&from, &to)?;
        } else if name == "shm" {
            tmpfs(&to, "mode=1777")?;
        }
    }
    mount_attr::read_only(dev, false)
}

/// A device node at `path` like the host's `host` (`meta`: type, number, mode). Made,
/// not bound: opening `ptmx` finds its `pts` beside the node it opened, which for a bind
/// would be the host's `/dev`. Without `CAP_MKNOD` (`run` with file capabilities) the
/// host's node is bound, and `ptmx` is a link to `pts/ptmx` instead.
fn node(meta: &std::fs::Metadata, host: &Path, path: &Path) -> Result<()> {
    use nix::sys::stat::{mknod, Mode, SFlag};
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    // Character devices only: never a disk.
    if !meta.file_type().is_char_device() {
        return Ok(());
    }
    let mode = Mode::from_bits_truncate(meta.mode() & 0o777);
    match mknod(path, SFlag::S_IFCHR, mode, meta.rdev()) {
        Ok(()) => {}
        Err(nix::errno::Errno::EPERM) if path.ends_with("ptmx") => {
            return symlink(Path::new("pts/ptmx"), path);
        }
        Err(nix::errno::Errno::EPERM) => {
            std::fs::write(path, b"").map_err(|e| io(path, e))?;
            return bind(host, path);
        }
        Err(e) => return Err(format!("mknod {}: {e}", path.display())),
    }
    // The mode as the host has it, whatever the umask.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(meta.mode() & 0o777))
        .map_err(|e| io(path, e))
}

fn symlink(target: &Path, link: &Path) -> Result<()> {
    std::os::unix::fs::symlink(target, link).map_err(|e| io(link, e))
}

fn io(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}
