//! The seccomp user-notification calls the supervisor makes, and the ways it reaches into
//! the calling process: its memory (`process_vm_readv`) and its descriptors
//! (`pidfd_getfd`). Each wrapper returns an `io::Error` with the call's errno.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One notification: a thread of CMD is waiting in `connect`.
pub(super) struct Request {
    /// The notification's id, for the answer and the validity checks.
    pub id: u64,
    /// The calling thread's id, in `run`'s PID namespace.
    pub tid: u32,
    /// The system call's arguments (`connect(fd, addr, len)`).
    pub args: [u64; 6],
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Wait for the next notification on `listener` (blocking).
pub(super) fn receive(listener: &OwnedFd) -> io::Result<Request> {
    // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl writes one seccomp_notif into `notif`.
    check(unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &mut notif as *mut libc::seccomp_notif,
        )
    })?;
    Ok(Request {
        id: notif.id,
        tid: notif.pid,
        args: notif.data.args,
    })
}

/// Whether notification `id` still waits (its caller has not gone or been interrupted):
/// checked after each look into the caller, so that what was read was the caller's.
pub(super) fn still_valid(listener: &OwnedFd, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the ioctl reads one u64.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &mut id as *mut u64,
        ) == 0
    }
}

/// Answer notification `id`: the call returns `result` (a value, or an errno).
pub(super) fn answer(listener: &OwnedFd, id: u64, result: Result<i64, i32>) {
    let (val, error) = match result {
        Ok(val) => (val, 0),
        Err(errno) => (0, -errno),
    };
    let mut resp = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags: 0,
    };
    // SAFETY: the ioctl reads one seccomp_notif_resp. An error (ENOENT: the caller was
    // interrupted or has gone) leaves nothing to do.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &mut resp as *mut libc::seccomp_notif_resp,
        );
    }
}

/// A pidfd for thread `tid` (`PIDFD_THREAD`, Linux 6.9), or for its thread group's
/// leader on older kernels (descriptor tables are shared by a process's threads).
pub(super) fn pidfd(tid: u32) -> io::Result<OwnedFd> {
    const PIDFD_THREAD: libc::c_long = libc::O_EXCL as libc::c_long;
    // SAFETY: pidfd_open takes plain integers.
    let mut fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid as libc::c_long, PIDFD_THREAD) };
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        let tgid = thread_group(tid)?;
        // SAFETY: as above.
        fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid as libc::c_long, 0) };
    }
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned from here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The thread group (process) of thread `tid`, from `/proc/TID/status`.
fn thread_group(tid: u32) -> io::Result<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
}

/// A descriptor of this process for the caller's descriptor `fd` (the same open file:
/// for a socket, the same socket).
pub(super) fn take_fd(pidfd: &OwnedFd, fd: u64) -> io::Result<OwnedFd> {
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: pidfd_getfd takes plain integers.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned from here.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

/// `len` bytes at `addr` in the memory of thread `tid`'s process.
pub(super) fn read_memory(tid: u32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` is `buf`, `len` bytes long; `remote` is only read by the kernel,
    // in the other process.
    let n = unsafe { libc::process_vm_readv(tid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != len {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(buf)
}

/// `SO_DOMAIN` of a socket: its address family.
pub(super) fn family(socket: &OwnedFd) -> io::Result<i32> {
    const SO_DOMAIN: libc::c_int = 39;
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one int into `value`.
    check(unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_DOMAIN,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

/// `connect(2)` of `socket` to the address bytes `addr`; the call's result as the
/// caller's `connect` would return it.
pub(super) fn connect(socket: &OwnedFd, addr: &[u8]) -> Result<i64, i32> {
    // SAFETY: `addr` is `addr.len()` readable bytes; the kernel copies them.
    let rc = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            addr.as_ptr().cast(),
            addr.len() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    } else {
        Ok(0)
    }
}

/// The errno of an `io::Error`, `EIO` when it has none.
pub(super) fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}
