//! The jail's mount namespace: CMD's view of the filesystem (docs/reference/confinement.md,
//! "Files").
//!
//! The view starts as a copy of the host's mount tree (a recursive bind of `/`), made
//! read-only as a whole; the temporary places that are the jail's own get a fresh tmpfs
//! (`/tmp`, `/var/tmp`; `/dev/shm` with `/dev`); each writable place is bound over it
//! from the host's own tree, so with the host's flags (a place the host mounted
//! read-only stays so). Then the jail's own, always, `--writable /` included: this PID
//! namespace's `/proc`, with
//! `/proc/sys`, `/proc/sysrq-trigger` and the like read-only (uid 0 writes those without
//! any capability: a core pattern, a reboot); a small `/dev` ([`super::devices`]); fresh
//! empty `/run` and `/var/run` (host daemons' sockets out of reach); `/etc/resolv.conf`
//! naming the proxy's DNS; `/sys` read-only; each `--read-only` path bound read-only on
//! itself and an empty read-only file or directory over each `--cover` path (what `run`
//! worked out in [`super::covers`]). The copy then becomes the root (`pivot_root`) and
//! the host's tree is detached from it. Any step that fails stops the jail: CMD never
//! starts with a wider view.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{chdir, pivot_root};

use super::binds::{bind, rbind, tmpfs};
use super::{devices, mount_attr};

/// The jail's `/etc/resolv.conf`: queries to port 53 of any address reach the proxy's
/// DNS listener, so the loopback address names it.
pub(super) const RESOLV_CONF: &str =
    "# egress-proxy run: the proxy answers every DNS query\nnameserver 127.0.0.1\n";

/// A tmpfs of this namespace's own over the host's `/run`, where the view is built and
/// the files bound into it are written; once the view is the root, out of CMD's reach.
const STAGE: &str = "/run";

/// Where the view is built, on [`STAGE`].
const VIEW: &str = "/run/root";

/// Under this PID namespace's `/proc`: read-only in the view (what `/proc` lets uid 0
/// change outside the jail without a capability).
const PROC_READ_ONLY: [&str; 6] = ["sys", "sysrq-trigger", "irq", "bus", "fs", "asound"];

type Result<T> = std::result::Result<T, String>;

/// What CMD may write and what it may not see, from `run` ([`super::places`],
/// [`super::covers`]).
pub(super) struct View<'a> {
    /// Absolute and canonical; `/` for everywhere.
    pub writable: &'a [PathBuf],
    /// Covered by an empty read-only file or directory, absolute.
    pub cover: &'a [PathBuf],
    /// Bound read-only on itself, absolute.
    pub read_only: &'a [PathBuf],
    /// The temporary places that are the jail's own.
    pub fresh: &'a [PathBuf],
}

impl<'a> From<&'a crate::config::InitConfig> for View<'a> {
    fn from(args: &'a crate::config::InitConfig) -> View<'a> {
        View {
            writable: &args.writable,
            cover: &args.cover,
            read_only: &args.read_only,
            fresh: &args.fresh,
        }
    }
}

/// A private mount namespace for this process and CMD, its root the view above, the
/// working directory the same as before.
pub(super) fn set_up(view: &View) -> Result<()> {
    let start = std::env::current_dir().map_err(|e| format!("the starting directory: {e}"))?;
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| format!("mount namespace: {e}"))?;
    // Nothing mounted below reaches the host's mount namespace.
    let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
    mount(None::<&str>, "/", None::<&str>, private, None::<&str>)
        .map_err(|e| format!("mount --make-rprivate /: {e}"))?;
    tmpfs(Path::new(STAGE), "mode=0700,size=1m")?;
    let root = Path::new(VIEW);
    mkdir(root)?;
    rbind(Path::new("/"), root)?;
    let everything = view.writable.iter().any(|p| p == Path::new("/"));
    if !everything {
        mount_attr::read_only(root, true)?;
    }
    let shm = Path::new("/dev/shm");
    for place in view.fresh.iter().filter(|p| *p != shm) {
        let seen = inside(root, place);
        if seen.is_dir() {
            tmpfs(&seen, "mode=1777")?;
        }
    }
    // Each writable place bound over the read-only view; under `--writable /` only those
    // a fresh temporary place hides (a starting directory in the host's `/tmp`).
    let mut places: Vec<&PathBuf> = view.writable.iter().collect();
    places.sort_by_key(|p| p.components().count());
    for place in places {
        // A place inside a fresh temporary place has no directory there yet.
        let hidden = view.fresh.iter().any(|f| place.starts_with(f));
        if everything && !hidden {
            continue;
        }
        let seen = inside(root, place);
        if hidden {
            mkdir(&seen)?;
        }
        rbind(place, &seen)?;
    }
    mount_proc(root)?;
    let own_shm = view.fresh.iter().any(|p| p == shm);
    devices::mount_dev(&inside(root, Path::new("/dev")), own_shm)?;
    mount_run_and_resolv_conf(root)?;
    let sys = inside(root, Path::new("/sys"));
    if sys.is_dir() {
        mount_attr::read_only(&sys, true)?;
    }
    cover(root, view)?;
    enter(root, &start)
}

/// `path` of the host's tree, in the view at `root`.
fn inside(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

fn hardened() -> MsFlags {
    MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC
}

fn mkdir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| format!("mkdir {}: {e}", path.display()))
}

/// Bind `path` on itself, then make that mount read-only.
fn read_only(path: &Path) -> Result<()> {
    bind(path, path)?;
    remount_read_only(path)
}

fn remount_read_only(path: &Path) -> Result<()> {
    let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | hardened();
    mount(None::<&str>, path, None::<&str>, flags, None::<&str>)
        .map_err(|e| format!("remount {} read-only: {e}", path.display()))
}

/// This PID namespace's `/proc`, its parts in [`PROC_READ_ONLY`] read-only. With
/// `hidepid=invisible`, a process CMD may not inspect (the jail's init, not dumpable)
/// has no `/proc/PID` in its view, even for uid 0 (docs/reference/confinement.md,
/// "System calls"). `gid` names the group exempt from it, root's by default: the
/// overflow group instead (`nogroup`), which CMD is not in unless told to be.
fn mount_proc(root: &Path) -> Result<()> {
    let proc = inside(root, Path::new("/proc"));
    let options = "hidepid=invisible,gid=65534";
    mount(Some("proc"), &proc, Some("proc"), hardened(), Some(options))
        .map_err(|e| format!("mount proc on {}: {e}", proc.display()))?;
    for part in PROC_READ_ONLY {
        let path = proc.join(part);
        if path.exists() {
            read_only(&path)?;
        }
    }
    Ok(())
}

/// `/etc/resolv.conf` naming the proxy, and fresh empty `/run` and `/var/run`.
///
/// The file is written on the stage and bound over the real resolv.conf (or over the
/// file the symbolic link `/etc/resolv.conf` names). When the link points into `/run`
/// itself (systemd's stub resolver), the file is written at that place in the fresh
/// `/run`, the one entry it then holds.
fn mount_run_and_resolv_conf(root: &Path) -> Result<()> {
    let target = resolv_conf_target();
    let in_run = target.starts_with("/run") || target.starts_with("/var/run");
    let run = inside(root, Path::new("/run"));
    tmpfs(&run, "mode=0755,size=1m")?;
    if in_run {
        let rel = target
            .strip_prefix("/var/run")
            .or(target.strip_prefix("/run"))
            .unwrap_or(&target);
        write(&run.join(rel), RESOLV_CONF)?;
    } else if target.is_file() {
        // Without any resolv.conf the C library asks 127.0.0.1 already: nothing to bind.
        let staged = Path::new(STAGE).join("resolv.conf");
        write(&staged, RESOLV_CONF)?;
        let covered = inside(root, &target);
        bind(&staged, &covered)?;
        remount_read_only(&covered)?;
    }
    // `/var/run` is usually a link to `/run`; a directory of its own gets a tmpfs too.
    let var_run = std::fs::symlink_metadata("/var/run");
    if var_run.is_ok_and(|m| m.is_dir()) {
        tmpfs(&inside(root, Path::new("/var/run")), "mode=0755,size=1m")?;
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        mkdir(dir)?;
    }
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
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

/// Each `--read-only` path bound read-only on itself (with what is mounted below it),
/// then an empty read-only file or directory over each `--cover` path.
///
/// CMD cannot unmount either (it holds no capability), nor unlink or rename it (a
/// mount point is busy). It could still rename a writable directory above one and
/// put a file of its own at the old name, which a later `run` would load: so each
/// directory above one, up to the writable place it lies in, is made a mount point
/// too ([`pin_above`]).
fn cover(root: &Path, view: &View) -> Result<()> {
    // Each as the host's tree names it, and whether it is a directory; what the view
    // does not show (under the jail's fresh `/run` or `/tmp`, say) needs nothing.
    let shown = |paths: &[PathBuf]| -> Vec<(PathBuf, bool)> {
        paths
            .iter()
            .filter_map(|path| {
                let real = std::fs::canonicalize(path).ok()?;
                let meta = std::fs::metadata(&real).ok()?;
                let kind = meta.is_file() || meta.is_dir();
                (kind && inside(root, &real).exists()).then_some((real, meta.is_dir()))
            })
            .collect()
    };
    let mut covers = shown(view.cover);
    covers.sort();
    // One below another is out of sight already (and its place gone from the view).
    let all = covers.clone();
    covers.retain(|(path, _)| !all.iter().any(|(c, _)| path != c && path.starts_with(c)));
    let mut read_only = shown(view.read_only);
    read_only.retain(|(path, _)| !covers.iter().any(|(c, _)| path.starts_with(c)));
    read_only.sort_by_key(|(path, _)| path.components().count());
    let every = covers
        .iter()
        .chain(&read_only)
        .map(|(path, _)| path.as_path());
    pin_above(root, every, view)?;
    for (path, _) in &read_only {
        let seen = inside(root, path);
        rbind(&seen, &seen)?;
        mount_attr::read_only(&seen, true)?;
    }
    let (file, dir) = empty_covers()?;
    for (path, is_dir) in &covers {
        let seen = inside(root, path);
        bind(if *is_dir { &dir } else { &file }, &seen)?;
        remount_read_only(&seen)?;
    }
    Ok(())
}

/// Bind each directory above `covered` that lies in a writable place on itself (with
/// the mounts below it, covers included): a mount point cannot be renamed.
fn pin_above<'a>(root: &Path, covered: impl Iterator<Item = &'a Path>, view: &View) -> Result<()> {
    let everything = view.writable.iter().any(|p| p == Path::new("/"));
    let shm = Path::new("/dev/shm");
    let writable = |dir: &Path| {
        let below = |w: &Path| dir.starts_with(w) && dir != w;
        dir != Path::new("/")
            && (everything || below(shm) || view.writable.iter().any(|w| below(w)))
    };
    let above: BTreeSet<&Path> = covered
        .flat_map(|path| path.ancestors().skip(1))
        .filter(|dir| writable(dir))
        .collect();
    let mut above: Vec<&Path> = above.into_iter().collect();
    above.sort_by_key(|dir| dir.components().count());
    for dir in above {
        let seen = inside(root, dir);
        rbind(&seen, &seen)?;
    }
    Ok(())
}

/// An empty file and an empty directory on the stage, read-only to all.
fn empty_covers() -> Result<(PathBuf, PathBuf)> {
    let file = Path::new(STAGE).join("hidden-file");
    let dir = Path::new(STAGE).join("hidden-dir");
    write(&file, "")?;
    mkdir(&dir)?;
    for (path, mode) in [(&file, 0o444), (&dir, 0o555)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    }
    Ok((file, dir))
}

/// Make the view this namespace's root (the host's tree detached from it), and go back
/// to the starting directory in it.
fn enter(root: &Path, start: &Path) -> Result<()> {
    chdir(root).map_err(|e| format!("chdir {}: {e}", root.display()))?;
    // The old root is stacked on the new one, then detached (pivot_root(2), its notes).
    pivot_root(".", ".").map_err(|e| format!("pivot_root {}: {e}", root.display()))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| format!("detach the host's tree: {e}"))?;
    chdir("/").map_err(|e| format!("chdir /: {e}"))?;
    chdir(start).map_err(|e| format!("the starting directory {}: {e}", start.display()))
}
