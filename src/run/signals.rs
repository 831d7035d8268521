//! The signals `run` and the jail's init pass on (SIGINT, SIGTERM, SIGHUP), read from a
//! signalfd rather than handlers: blocked in every thread, queued, read in order.
//!
//! Every one is passed on, whoever sent it: CMD runs in a session of its own
//! ([`super::pty`]), so a terminal's Ctrl-C or hang-up reaches `run`, never CMD
//! directly, and passing it on delivers it once.

use std::io;

use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{siginfo, SfdFlags, SignalFd};
use nix::unistd::Pid;

/// The signals passed to CMD.
const PASSED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Blocked signals and the descriptor that reads them.
pub(super) struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Block the passed signals (and SIGCHLD with `children`) in the calling thread;
    /// threads it starts afterwards inherit the mask, and children start with an empty
    /// one (the standard library resets it), so block before any thread is started.
    pub(super) fn block(children: bool) -> nix::Result<Signals> {
        let mut mask = SigSet::empty();
        for signal in PASSED {
            mask.add(signal);
        }
        if children {
            mask.add(Signal::SIGCHLD);
        }
        mask.thread_block()?;
        // Close-on-exec: CMD starts with 0, 1 and 2 only.
        Ok(Signals {
            fd: SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC)?,
        })
    }

    /// The next signal (waits for it).
    pub(super) fn next(&self) -> nix::Result<siginfo> {
        loop {
            match self.fd.read_signal() {
                Ok(Some(info)) => return Ok(info),
                Ok(None) | Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// On a thread of its own, pass every signal `run` gets on to `pid` (the jail's
    /// init, also with `--env-only`).
    pub(super) fn forward_to(self, pid: u32) -> io::Result<()> {
        let pid = Pid::from_raw(i32::try_from(pid).map_err(io::Error::other)?);
        std::thread::Builder::new()
            .name("egress-signals".into())
            .spawn(move || {
                while let Ok(info) = self.next() {
                    if let Ok(signal) = Signal::try_from(info.ssi_signo as i32) {
                        if kill(pid, signal).is_err() {
                            return;
                        }
                    }
                }
            })?;
        Ok(())
    }
}
