//! The jail's `/dev` (docs/reference/confinement.md, "Files"): a small read-only tmpfs
//! holding the devices programs expect (`null`, `zero`, `full`, `random`, `urandom`,
//! `tty`), each a node like the host's (see [`node`]), the usual links (`fd`, `stdin`,
//! `stdout`, `stderr`, `ptmx`), a `/dev/pts` of its own and a `/dev/shm` of its own
//! (a fresh tmpfs; the host's with `run --writable /dev/shm`), writable. Not the host's whole `/dev`: uid 0 opens a disk's block device without any
//! capability, and its raw blocks would bypass every read-only mount and every cover of
//! the proxy's files. Not the host's `/dev/pts` either: uid 0 opens every root-owned
//! terminal there without any capability, the caller's included, and could write to it
//! (a terminal that answers an escape sequence turns it into the shell's input). CMD's
//! own terminal, opened by `run` on the host, keeps a name: `/dev/console`, as in a
//! container.

use std::path::Path;

use super::binds::{bind, rbind, tmpfs};
use super::mount_attr;

/// Made like the host's `/dev` ones when it has them.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Symbolic links every `/dev` has (`ptmx`: new terminals come from the jail's own
/// `/dev/pts`).
const LINKS: [(&str, &str); 5] = [
    ("ptmx", "pts/ptmx"),
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
];

type Result<T> = std::result::Result<T, String>;

/// Mount the jail's `/dev` on `dev` (the view's), from the host's `/dev`; `own_shm`: a
/// fresh `/dev/shm` rather than the host's.
pub(super) fn mount_dev(dev: &Path, own_shm: bool) -> Result<()> {
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
            Err(_) => {}
        }
    }
    for (name, target) in LINKS {
        symlink(Path::new(target), &dev.join(name))?;
    }
    mount_pts(&dev.join("pts"))?;
    let (from, to) = (host.join("shm"), dev.join("shm"));
    std::fs::create_dir(&to).map_err(|e| io(&to, e))?;
    if from.is_dir() && !own_shm {
        rbind(&from, &to)?;
    } else {
        tmpfs(&to, "mode=1777")?;
    }
    console(dev)?;
    mount_attr::read_only(dev, false)
}

/// A `devpts` instance of the jail's own on `pts`: the terminals CMD opens are there,
/// and none of the host's.
fn mount_pts(pts: &Path) -> Result<()> {
    use nix::mount::{mount, MsFlags};
    std::fs::create_dir(pts).map_err(|e| io(pts, e))?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    let options = "newinstance,ptmxmode=0666,mode=0620";
    mount(Some("devpts"), pts, Some("devpts"), flags, Some(options))
        .map_err(|e| format!("mount devpts on {}: {e}", pts.display()))
}

/// CMD's own terminal (this process's standard input, when `run` gave it one) bound on
/// `console`, so that it has a name in the jail (`tty`, `ttyname`). Bound by its name
/// in this mount namespace's copy of the host's tree (`/proc/self/fd/0` would name the
/// host namespace's mount, which cannot be bound here).
fn console(dev: &Path) -> Result<()> {
    let Ok(name) = nix::unistd::ttyname(std::io::stdin()) else {
        return Ok(());
    };
    let console = dev.join("console");
    std::fs::write(&console, b"").map_err(|e| io(&console, e))?;
    bind(&name, &console)
}

/// A device node at `path` like the host's `host` (`meta`: type, number, mode). Without
/// `CAP_MKNOD` (`run` with file capabilities) the host's node is bound instead.
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
