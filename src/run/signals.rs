//! The signals `run` and the jail's init pass on (SIGINT, SIGTERM, SIGHUP), read from a
//! signalfd rather than handlers: blocked in every thread, queued, read in order.

use std::io;

use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::signalfd::{siginfo, SignalFd};
use nix::unistd::Pid;

/// The signals passed to CMD.
const PASSED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Blocked signals and the descriptor that reads them.
pub struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Block the passed signals (and SIGCHLD with `children`) in the calling thread;
    /// threads it starts afterwards inherit the mask, and children start with an empty
    /// one (the standard library resets it), so block before any thread is started.
    pub fn block(children: bool) -> nix::Result<Signals> {
        let mut mask = SigSet::empty();
        for signal in PASSED {
            mask.add(signal);
        }
        if children {
            mask.add(Signal::SIGCHLD);
        }
        mask.thread_block()?;
        Ok(Signals {
            fd: SignalFd::new(&mask)?,
        })
    }

    /// The next signal (waits for it).
    pub fn next(&self) -> nix::Result<siginfo> {
        loop {
            match self.fd.read_signal() {
                Ok(Some(info)) => return Ok(info),
                Ok(None) | Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// On a thread of its own, pass every signal a process sends to `run` on to `pid`
    /// (the jail's init, or CMD itself with `--env-only`).
    pub fn forward_to(self, pid: u32) -> io::Result<()> {
        let pid = Pid::from_raw(i32::try_from(pid).map_err(io::Error::other)?);
        std::thread::Builder::new()
            .name("egress-signals".into())
            .spawn(move || {
                while let Ok(info) = self.next() {
                    if !sent_by_a_process(&info) {
                        continue;
                    }
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

/// Whether a process sent this signal (`kill`, `sigqueue`: a code of 0 or below) rather
/// than the kernel. A terminal's Ctrl-C or hang-up comes from the kernel to the whole
/// foreground process group, CMD included: passing it on would deliver it twice.
pub fn sent_by_a_process(info: &siginfo) -> bool {
    info.ssi_code <= 0
}
