//! A socket path, resolved and connected as CMD would, on a thread of the supervisor's
//! own: the thread takes CMD's root (a `chroot` into `/proc/TID/root`), working directory
//! and file-system ids, and drops its capabilities, so the path is found with CMD's view
//! and CMD's permissions. The file found is connected through its descriptor
//! (`/proc/self/fd/N`), never looked up by name a second time.
#![allow(unsafe_code)]

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::allow::AllowUnix;
use super::diag::{Diag, FileId};
use super::notify;

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn open(dir: libc::c_int, path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let name = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `name` is NUL-terminated and lives across the call.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned from here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is one stat.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// CMD's view and ids, opened from the host's `/proc` before the thread changes.
struct Caller {
    root: OwnedFd,
    cwd: OwnedFd,
    fsuid: u32,
    fsgid: u32,
}

impl Caller {
    fn of(proc: &OwnedFd, tid: u32) -> io::Result<Caller> {
        let dir = libc::O_PATH | libc::O_DIRECTORY;
        let root = open(proc.as_raw_fd(), Path::new(&format!("{tid}/root")), dir)?;
        let cwd = open(proc.as_raw_fd(), Path::new(&format!("{tid}/cwd")), dir)?;
        let status = std::fs::read_to_string(format!("/proc/{tid}/status"))?;
        // "Uid:\treal\teffective\tsaved\tfs": the fourth is what opens files.
        let fs_id = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|ids| ids.split_whitespace().nth(3))
                .and_then(|id| id.parse().ok())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
        };
        Ok(Caller {
            root,
            cwd,
            fsuid: fs_id("Uid:")?,
            fsgid: fs_id("Gid:")?,
        })
    }

    /// This thread, from now on: CMD's root and working directory, its ids for files,
    /// no capabilities. Only for a thread of its own (`CLONE_FS` unshared first).
    fn become_caller(&self) -> io::Result<()> {
        // SAFETY: each call takes plain integers or a NUL-terminated literal; unshare
        // of CLONE_FS and the credential calls (raw, not glibc's all-threads wrappers)
        // change this thread only.
        unsafe {
            check(libc::unshare(libc::CLONE_FS))?;
            check(libc::fchdir(self.root.as_raw_fd()))?;
            check(libc::chroot(c".".as_ptr()))?;
            check(libc::fchdir(self.cwd.as_raw_fd()))?;
            let groups = [self.fsgid];
            check(libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr()) as libc::c_int)?;
            libc::syscall(libc::SYS_setfsgid, self.fsgid);
            libc::syscall(libc::SYS_setfsuid, self.fsuid);
        }
        // A root CMD keeps uid 0 for files, but none of the capabilities: its own
        // permission checks, not `run`'s.
        caps::clear(None, caps::CapSet::Effective).map_err(|e| io::Error::other(e.to_string()))
    }
}

/// Connect `socket` (CMD's) to the socket file at `path` as CMD sees it: only when a
/// socket of the jail is bound to it, or `allow` names it or its directory. The result
/// is what CMD's `connect` returns: `EACCES` for a socket of the host's.
pub(super) fn connect(
    tid: u32,
    socket: &OwnedFd,
    path: &[u8],
    diag: &Diag,
    allow: &AllowUnix,
) -> Result<i64, i32> {
    let e = |e: io::Error| notify::errno(&e);
    let proc = open(
        libc::AT_FDCWD,
        Path::new("/proc"),
        libc::O_PATH | libc::O_DIRECTORY,
    )
    .map_err(e)?;
    let caller = Caller::of(&proc, tid).map_err(e)?;
    caller.become_caller().map_err(e)?;
    let path = Path::new(OsStr::from_bytes(path));
    // As connect(2) does: symbolic links followed, the file must be a socket.
    let file = open(libc::AT_FDCWD, path, libc::O_PATH).map_err(e)?;
    let stat = fstat(&file).map_err(e)?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(libc::ECONNREFUSED);
    }
    let link = Path::new(&format!("self/fd/{}", file.as_raw_fd())).to_path_buf();
    if !ours(&stat, &proc, &link, diag, allow).map_err(e)? {
        tracing::info!(path = %path.display(), "a host socket refused to the command");
        return Err(libc::EACCES);
    }
    // The file found above, through its descriptor in the host's /proc (this thread's
    // working directory from here on).
    // SAFETY: fchdir takes a descriptor.
    check(unsafe { libc::fchdir(proc.as_raw_fd()) }).map_err(e)?;
    notify::connect(socket, &sockaddr_un(link.as_os_str().as_bytes()))
}

/// Whether the socket file `stat` is the jail's own (a socket of the jail's network
/// namespace is bound to it) or one `--allow-unix` opens.
fn ours(
    stat: &libc::stat,
    proc: &OwnedFd,
    link: &Path,
    diag: &Diag,
    allow: &AllowUnix,
) -> io::Result<bool> {
    if allow.socket(stat) {
        return Ok(true);
    }
    if !allow.is_empty() {
        // The directory the file is in, by the path its descriptor has in CMD's view.
        // Read through the host's /proc: this thread is not in the jail's PID namespace.
        let target = read_link_at(proc, link)?;
        if let Some(dir) = target.parent() {
            if let Ok(dir) = open(libc::AT_FDCWD, dir, libc::O_PATH | libc::O_DIRECTORY) {
                if allow.directory(&fstat(&dir)?) {
                    return Ok(true);
                }
            }
        }
    }
    Ok(diag.bound_files()?.contains(&FileId::of(stat)))
}

fn read_link_at(dir: &OwnedFd, link: &Path) -> io::Result<std::path::PathBuf> {
    let name = CString::new(link.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is writable for its length; `name` is NUL-terminated.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(std::path::PathBuf::from(OsStr::from_bytes(&buf)))
}

/// A `sockaddr_un` for `path` (short: `self/fd/N`).
fn sockaddr_un(path: &[u8]) -> Vec<u8> {
    let mut addr = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    addr.extend_from_slice(path);
    addr.push(0);
    addr
}
