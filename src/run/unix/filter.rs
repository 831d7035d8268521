//! The seccomp filter that sends every `connect` of CMD to `run`'s supervisor, and the
//! step between fork and exec that installs it and hands its listener to `run`.
//!
//! The filter is compiled with `seccompiler` (as the jail's table of refused calls is);
//! seccompiler has no action for a user notification, so the rule's action is a
//! `SECCOMP_RET_TRACE` with a value of this module's own, rewritten to
//! `SECCOMP_RET_USER_NOTIF` in the compiled program (no tracer is ever involved).
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::io;
use std::os::fd::RawFd;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// The placeholder action's data, rewritten to a user notification.
const PLACEHOLDER: u32 = 0x5ec;

/// `SECCOMP_RET_TRACE`, the placeholder's action.
const RET_TRACE: u32 = 0x7ff0_0000;

/// x32 system calls on x86_64 carry this bit; the same `connect` through that ABI is sent
/// to the supervisor too.
#[cfg(target_arch = "x86_64")]
const X32_BIT: i64 = 0x4000_0000;

/// The compiled filter, made before the fork (the child only installs it).
pub(crate) struct Program {
    filter: Vec<libc::sock_filter>,
}

#[cfg(target_arch = "x86_64")]
fn arch() -> (TargetArch, Vec<i64>) {
    (
        TargetArch::x86_64,
        vec![libc::SYS_connect, libc::SYS_connect | X32_BIT],
    )
}

#[cfg(target_arch = "aarch64")]
fn arch() -> (TargetArch, Vec<i64>) {
    (TargetArch::aarch64, vec![libc::SYS_connect])
}

impl Program {
    /// `connect` (every family) to the supervisor, everything else allowed; a call of
    /// another architecture kills the process (seccompiler's check).
    pub(crate) fn compile() -> Result<Program, String> {
        let (target, calls) = arch();
        let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> =
            calls.into_iter().map(|nr| (nr, Vec::new())).collect();
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Trace(PLACEHOLDER),
            target,
        )
        .map_err(|e| format!("the connect filter: {e}"))?;
        let program: BpfProgram = filter
            .try_into()
            .map_err(|e| format!("the connect filter: {e}"))?;
        let placeholder = RET_TRACE | PLACEHOLDER;
        let mut rewritten = 0;
        let filter = program
            .into_iter()
            .map(|ins| {
                let ret = ins.code == (libc::BPF_RET | libc::BPF_K) as u16;
                let k = if ret && ins.k == placeholder {
                    rewritten += 1;
                    libc::SECCOMP_RET_USER_NOTIF
                } else {
                    ins.k
                };
                libc::sock_filter {
                    code: ins.code,
                    jt: ins.jt,
                    jf: ins.jf,
                    k,
                }
            })
            .collect();
        if rewritten == 0 {
            return Err("the connect filter has no rule to notify".into());
        }
        Ok(Program { filter })
    }

    /// Install the filter on this process and send its listener over `to` (a Unix
    /// socket whose other end `run` reads), then close the listener here.
    ///
    /// # Safety
    /// Only async-signal-safe calls (seccomp, sendmsg, close) on memory this program
    /// and the stack own: callable between fork and exec. `no_new_privs` must be set.
    pub(crate) unsafe fn install_and_send(&self, to: RawFd) -> io::Result<()> {
        let prog = libc::sock_fprog {
            len: self.filter.len() as u16,
            filter: self.filter.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points at the filter, which outlives the call.
        let listener = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &prog as *const libc::sock_fprog,
            )
        };
        if listener < 0 {
            return Err(io::Error::last_os_error());
        }
        let listener = listener as RawFd;
        // SAFETY: as above; `send_fd` only uses its stack.
        let sent = unsafe { send_fd(to, listener) };
        // SAFETY: closing the descriptor just made.
        unsafe { libc::close(listener) };
        sent
    }
}

/// A message of one byte (`iov`) with `space` for one descriptor's control header.
/// Allocation-free: it is built between fork and exec too.
fn message(iov: &mut libc::iovec, space: &mut [u64; 4]) -> libc::msghdr {
    // SAFETY: msghdr is plain data; zero is a valid value for every field.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(space) as _;
    msg
}

/// Send `fd` over the Unix socket `to` (SCM_RIGHTS), with one byte of data.
///
/// # Safety
/// Async-signal-safe: only `sendmsg` on a buffer of this frame.
unsafe fn send_fd(to: RawFd, fd: RawFd) -> io::Result<()> {
    // Room for one cmsghdr and one int, aligned as cmsghdr wants.
    let mut space = [0u64; 4];
    let mut byte = [b'F'];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut msg = message(&mut iov, &mut space);
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as _;
    // SAFETY: the control buffer holds CMSG_SPACE(int) bytes (32 >= 24), so the first
    // header and its data are inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    // SAFETY: `msg` and what it points at live across the call.
    if unsafe { libc::sendmsg(to, &msg, libc::MSG_NOSIGNAL) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receive the descriptor [`Program::install_and_send`] sent over `from` (blocking).
pub(crate) fn receive_fd(from: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut space = [0u64; 4];
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut msg = message(&mut iov, &mut space);
    loop {
        // SAFETY: `msg` and its buffers live across the call.
        let n = unsafe { libc::recvmsg(from, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the command started without its connect filter",
            ));
        }
        break;
    }
    // SAFETY: the kernel filled the control buffer; CMSG_FIRSTHDR checks its length.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other("no descriptor came with the message"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(std::os::fd::OwnedFd::from_raw_fd(fd))
    }
}
