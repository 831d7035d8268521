//! The jail's mount namespace: `/etc/resolv.conf` naming the proxy's DNS, fresh empty
//! `/run` and `/var/run` (host daemons' sockets out of reach), this PID namespace's
//! `/proc` with `/proc/sys` and `/proc/sysrq-trigger` read-only (uid 0 writes those
//! without any capability: a core pattern, a reboot).

use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};

/// The jail's `/etc/resolv.conf`: queries to port 53 of any address reach the proxy's
/// DNS listener, so the loopback address names it.
pub const RESOLV_CONF: &str =
    "# egress-proxy run: the proxy answers every DNS query\nnameserver 127.0.0.1\n";

type Result<T> = std::result::Result<T, String>;

/// A private mount namespace for this process and CMD, set up as above.
pub fn set_up() -> Result<()> {
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| format!("mount namespace: {e}"))?;
    // Nothing mounted below reaches the host's mount namespace.
    let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
    mount(None::<&str>, "/", None::<&str>, private, None::<&str>)
        .map_err(|e| format!("mount --make-rprivate /: {e}"))?;
    mount_run_and_resolv_conf()?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        hardened(),
        None::<&str>,
    )
    .map_err(|e| format!("mount proc on /proc: {e}"))?;
    for path in ["/proc/sys", "/proc/sysrq-trigger"] {
        if Path::new(path).exists() {
            read_only(Path::new(path))?;
        }
    }
    Ok(())
}

/// Hide the file at `path` from CMD: an empty, read-only file is bound over it.
pub fn hide(path: &Path) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let empty = Path::new("/run/egress-proxy-hidden");
    std::fs::write(empty, b"").map_err(|e| format!("write {}: {e}", empty.display()))?;
    bind(empty, path)?;
    remount_read_only(path)
}

fn hardened() -> MsFlags {
    MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC
}

fn tmpfs(path: &str) -> Result<()> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        flags,
        Some("mode=0755,size=1m"),
    )
    .map_err(|e| format!("mount tmpfs on {path}: {e}"))
}

fn bind(from: &Path, to: &Path) -> Result<()> {
    mount(Some(from), to, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|e| format!("bind {} on {}: {e}", from.display(), to.display()))
}

/// Bind `path` on itself, then make that mount
/// read-only.
fn read_only(path: &Path) -> Result<()> {
    bind(path, path)?;
    remount_read_only(path)
}

fn remount_read_only(path: &Path) -> Result<()> {
    let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | hardened();
    mount(None::<&str>, path, None::<&str>, flags, None::<&str>)
        .map_err(|e| format!("remount {} read-only: {e}", path.display()))
}

/// `/etc/resolv.conf` naming the proxy, and fresh empty `/run` and `/var/run`.
///
/// The file is written on a first tmpfs on `/run`, bound over the real resolv.conf (or
/// over the file the symbolic link `/etc/resolv.conf` names), and that tmpfs detached
/// before a fresh one takes `/run`. When the link points into `/run` itself (systemd's
/// stub resolver), the file is written at that place in the fresh `/run`, the one
/// entry it then holds.
fn mount_run_and_resolv_conf() -> Result<()> {
    let target = resolv_conf_target();
    let in_run = target.starts_with("/run") || target.starts_with("/var/run");
    if !in_run && target.is_file() {
        tmpfs("/run")?;
        let staged = Path::new("/run/resolv.conf");
        std::fs::write(staged, RESOLV_CONF)
            .map_err(|e| format!("write {}: {e}", staged.display()))?;
        bind(staged, &target)?;
        remount_read_only(&target)?;
        umount2("/run", MntFlags::MNT_DETACH).map_err(|e| format!("umount /run: {e}"))?;
    }
    // Without any resolv.conf the C library asks 127.0.0.1 already: nothing to bind.
    tmpfs("/run")?;
    if in_run {
        let target = Path::new("/run").join(
            target
                .strip_prefix("/var/run")
                .or(target.strip_prefix("/run"))
                .unwrap_or(&target),
        );
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        }
        std::fs::write(&target, RESOLV_CONF)
            .map_err(|e| format!("write {}: {e}", target.display()))?;
    }
    // `/var/run` is usually a link to `/run`; a directory of its own gets a tmpfs too.
    let var_run = std::fs::symlink_metadata("/var/run");
    if var_run.is_ok_and(|m| m.is_dir()) {
        tmpfs("/var/run")?;
    }
    Ok(())
}

/// The file `/etc/resolv.conf` is, after its symbolic links (even a dangling one).
fn resolv_conf_target() -> PathBuf {
    let etc = Path::new("/etc/resolv.conf");
    if let Ok(real) = std::fs::canonicalize(etc) {
        return real;
    }
    let Ok(link) = std::fs::read_link(etc) else {
        return etc.to_path_buf();
    };
    // `../run/...` made absolute without resolving anything.
    let mut path = PathBuf::from("/");
    for part in Path::new("/etc").join(link).components() {
        match part {
            std::path::Component::ParentDir => {
                path.pop();
            }
            std::path::Component::Normal(name) => path.push(name),
            _ => {}
        }
    }
    path
}
