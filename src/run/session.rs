//! CMD's session and descriptors (docs/guides/confinement.md, "The terminal and
//! descriptors"): the steps the jail's init takes between fork and exec of CMD.
//!
//! The module's unsafe code is those steps; each block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use std::os::fd::RawFd;

use nix::unistd::isatty;

use super::unix::filter::Program;

/// `close_range(2)`'s flag: mark the range close-on-exec rather than close it.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Start `command` (CMD) in a session of its own: default signal dispositions and an
/// empty mask (init blocks signals and ignores SIGPIPE), its standard input as its
/// controlling terminal when it is one (the pseudo-terminal [`super::pty::start`] made: init's 0 is
/// a terminal only then), and every descriptor above 2 closed on exec, whoever opened
/// it and however.
///
/// With `connect_filter`, CMD starts under the connect filter, whose listener goes to
/// `run` over the given socket (docs/reference/confinement.md, "Unix sockets"); a
/// failure there stops CMD from starting.
pub(super) fn own_session(command: &mut Command, connect_filter: Option<(RawFd, Program)>) {
    let terminal = isatty(io::stdin().as_fd()).unwrap_or(false);
    let setup = move || -> io::Result<()> {
        // SAFETY: between fork and exec only async-signal-safe calls are made:
        // sigemptyset, sigprocmask, signal, setsid, ioctl, getrlimit, close_range and
        // fcntl, on memory of this closure's own stack.
        unsafe {
            let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(empty.as_mut_ptr());
            libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut());
            for signal in 1..32 {
                if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                    libc::signal(signal, libc::SIG_DFL);
                }
            }
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            close_on_exec_from_3();
            if let Some((to, program)) = &connect_filter {
                program.install_and_send(*to)?;
            }
        }
        Ok(())
    };
    // SAFETY: `setup` only makes async-signal-safe calls (above) and allocates nothing.
    unsafe {
        command.pre_exec(setup);
    }
}

/// `run`'s first step: every descriptor above 2 it inherited marked close-on-exec, so
/// nothing it starts (the jail's init) holds one of the caller's (docs/reference/
/// confinement.md). Descriptors Rust opens are close-on-exec already.
pub(super) fn close_inherited_on_exec() {
    // SAFETY: called before any thread or child: close_range or fcntl on plain
    // integers, no memory changed.
    unsafe { close_on_exec_from_3() }
}

/// Mark every descriptor above 2 close-on-exec (`close_range`, or one by one up to the
/// open-files limit on kernels before 5.11).
///
/// # Safety
/// Only async-signal-safe calls: callable between fork and exec.
unsafe fn close_on_exec_from_3() {
    // SAFETY: close_range takes plain integers.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    } == 0;
    if done {
        return;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into `limit`.
    let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur.min(1 << 20) as libc::c_int
    } else {
        1024
    };
    for fd in 3..max {
        // SAFETY: fcntl on a descriptor number that may not be open fails harmlessly.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}
