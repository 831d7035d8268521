//! CMD's terminal and session (docs/guides/confinement.md, "The terminal and
//! descriptors"). CMD never holds the caller's terminal: a command that did could push
//! input into it (`TIOCSTI`) that the caller's shell runs after `run` exits, outside the
//! jail.
//!
//! When `run`'s standard input is a terminal, [`start`] opens a pseudo-terminal on the
//! host (its slave, on the host's `/dev/pts`, is handed to the jail's init as each of
//! 0, 1 and 2 that is a terminal, so init does not hold the caller's terminal either),
//! puts the caller's terminal in raw mode and relays between the two on a thread of its
//! own, passing window size changes on, until [`Relay`] is dropped, which restores the
//! caller's terminal. Keys such as Ctrl-C reach CMD as bytes, which CMD's own terminal
//! turns into signals. [`super::session`] makes that pseudo-terminal CMD's controlling
//! terminal.
//!
//! The module's unsafe code is the window-size ioctls and borrowing 0, 1 and 2; each
//! block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::{Command, Stdio};

use nix::errno::Errno;
use nix::fcntl::{fcntl, open, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::stat::Mode;
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, Termios};
use nix::unistd::{fchown, getpgrp, isatty, tcgetpgrp, Uid};

/// Reads of CMD's terminal, at most, once CMD has exited (4 KiB each).
const DRAIN_READS: usize = 64;

/// How long after a SIGWINCH the caller's window size is read again.
const RESIZE_RECHECK_MS: u16 = 50;

/// What the jail's init gets as 0, 1 and 2: the pseudo-terminal's slave for each of
/// `run`'s that is a terminal, `run`'s own (inherited) otherwise.
pub(super) struct ChildStdio {
    fds: [Option<OwnedFd>; 3],
}

impl ChildStdio {
    /// `run`'s 0, 1 and 2, as they are.
    pub(super) fn inherit() -> ChildStdio {
        ChildStdio {
            fds: [None, None, None],
        }
    }

    /// Set `command`'s standard descriptors.
    pub(super) fn apply(self, command: &mut Command) {
        let [stdin, stdout, stderr] = self.fds;
        if let Some(fd) = stdin {
            command.stdin(Stdio::from(fd));
        }
        if let Some(fd) = stdout {
            command.stdout(Stdio::from(fd));
        }
        if let Some(fd) = stderr {
            command.stderr(Stdio::from(fd));
        }
    }
}

/// The relay between the caller's terminal and CMD's; dropping it stops the relay
/// (after passing on what CMD wrote last) and restores the caller's terminal.
pub(super) struct Relay {
    stop: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The caller's settings, when `run` made its terminal raw.
    saved: Option<Termios>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // TCSADRAIN, not TCSAFLUSH: what the caller typed meanwhile stays theirs.
        if let Some(saved) = &self.saved {
            let _ = tcsetattr(io::stdin().as_fd(), SetArg::TCSADRAIN, saved);
        }
    }
}

/// CMD's standard descriptors, and the relay when `run`'s standard input is a
/// terminal. Call it on the thread that blocked the passed signals, before any other
/// thread starts: SIGWINCH is blocked here too, and every thread must block both.
pub(super) fn start(owner: Uid) -> io::Result<(ChildStdio, Option<Relay>)> {
    if !isatty(io::stdin().as_fd()).unwrap_or(false) {
        return Ok((ChildStdio::inherit(), None));
    }
    let caller = io::stdin();
    let caller = caller.as_fd();
    let saved = tcgetattr(caller)?;
    let (master, slave) = open_pty(owner)?;
    tcsetattr(&slave, SetArg::TCSANOW, &saved)?;
    copy_window_size(caller, slave.as_fd());
    let mut fds = [None, None, None];
    for (fd, child) in std_fds().into_iter().zip(fds.iter_mut()) {
        if isatty(fd).unwrap_or(false) {
            *child = Some(slave.try_clone()?);
        }
    }
    let mut winch = SigSet::empty();
    winch.add(Signal::SIGWINCH);
    winch.thread_block()?;
    let winch = SignalFd::with_flags(&winch, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
    let (stop_rx, stop) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let out = output();
    // Raw, so that every key reaches CMD's terminal; not when `run` was started in the
    // background, where changing the terminal would stop it (SIGTTOU).
    let foreground = tcgetpgrp(caller).is_ok_and(|group| group == getpgrp());
    if foreground {
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(caller, SetArg::TCSADRAIN, &raw)?;
    }
    // From here on, dropping the relay restores the caller's terminal.
    let mut relay = Relay {
        stop: Some(stop),
        thread: None,
        saved: foreground.then_some(saved),
    };
    // Sizes are set through the slave: the kernel signals a resize before it stores the
    // size, and only a resize through the slave stores it before CMD can read it.
    let resize = slave;
    let thread = std::thread::Builder::new()
        .name("egress-terminal".into())
        .spawn(move || relay_loop(&master, &resize, out, &winch, &stop_rx))?;
    relay.thread = Some(thread);
    Ok((ChildStdio { fds }, Some(relay)))
}

/// A new pseudo-terminal: its master (non-blocking) and its slave, owned by `owner`
/// (CMD's user, as a login's terminal is), both close-on-exec and neither becoming
/// `run`'s controlling terminal.
fn open_pty(owner: Uid) -> io::Result<(OwnedFd, OwnedFd)> {
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname_r(&master)?;
    let flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let slave = open(name.as_str(), flags, Mode::empty())?;
    let _ = fchown(&slave, Some(owner), None);
    let master = OwnedFd::from(master);
    fcntl(&master, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok((master, slave))
}

fn std_fds() -> [BorrowedFd<'static>; 3] {
    // SAFETY: 0, 1 and 2 stay open for the life of the process (nothing in `run`
    // closes them), which is what a 'static borrow needs.
    [0, 1, 2].map(|fd| unsafe { BorrowedFd::borrow_raw(fd) })
}

/// Where CMD's terminal output goes: the first of `run`'s 1, 2 and 0 that is a terminal
/// (a standard output sent to a file gets CMD's own, never the relayed echo).
fn output() -> BorrowedFd<'static> {
    let [stdin, stdout, stderr] = std_fds();
    [stdout, stderr]
        .into_iter()
        .find(|fd| isatty(fd).unwrap_or(false))
        .unwrap_or(stdin)
}

/// The caller's window size onto CMD's terminal (which signals CMD's foreground group).
fn copy_window_size(from: BorrowedFd, to: BorrowedFd) {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: TIOCGWINSZ writes one `winsize` into `size`, which lives across the call.
    if unsafe { libc::ioctl(from.as_raw_fd(), libc::TIOCGWINSZ, &mut size) } == 0 {
        // SAFETY: TIOCSWINSZ reads one `winsize` from `size`.
        unsafe { libc::ioctl(to.as_raw_fd(), libc::TIOCSWINSZ, &size) };
    }
}

/// What one read of CMD's terminal did.
#[derive(PartialEq)]
enum Read {
    /// Bytes passed on to the caller.
    Passed,
    /// Nothing there now.
    Empty,
    /// Every holder of CMD's terminal has closed it.
    Closed,
}

/// Relay until `stop` is closed, then pass on what CMD's terminal still holds.
fn relay_loop(
    master: &OwnedFd,
    resize: &OwnedFd,
    out: BorrowedFd,
    winch: &SignalFd,
    stop: &OwnedFd,
) {
    let stdin = io::stdin();
    let caller = stdin.as_fd();
    let mut buf = [0u8; 4096];
    // The caller's bytes not yet taken by CMD's terminal; while any wait, the caller is
    // not read (CMD reads at its own pace).
    let mut pending: Vec<u8> = Vec::new();
    let (mut caller_open, mut master_open) = (true, true);
    // The kernel signals a resize before it stores the new size, so the size read on
    // SIGWINCH may be the old one: it is read again a little later.
    let mut recheck = false;
    loop {
        let mut fds = vec![
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            PollFd::new(winch.as_fd(), PollFlags::POLLIN),
        ];
        let mut watch = |fd, events, on: bool| {
            on.then(|| {
                fds.push(PollFd::new(fd, events));
                fds.len() - 1
            })
        };
        let writing = if pending.is_empty() {
            PollFlags::empty()
        } else {
            PollFlags::POLLOUT
        };
        let at_master = watch(master.as_fd(), PollFlags::POLLIN | writing, master_open);
        // Once CMD's terminal fails, what the caller types is left to the caller.
        let reading = caller_open && master_open && pending.is_empty();
        let at_caller = watch(caller, PollFlags::POLLIN, reading);
        let timeout = if recheck {
            PollTimeout::from(RESIZE_RECHECK_MS)
        } else {
            PollTimeout::NONE
        };
        match poll(&mut fds, timeout) {
            Ok(0) => {
                copy_window_size(caller, resize.as_fd());
                recheck = false;
            }
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => break,
        }
        let ready = |at: Option<usize>| {
            at.and_then(|i| fds[i].revents())
                .is_some_and(|events| !events.is_empty())
        };
        if ready(Some(0)) {
            break;
        }
        if ready(Some(1)) {
            while let Ok(Some(_)) = winch.read_signal() {}
            copy_window_size(caller, resize.as_fd());
            recheck = true;
        }
        if ready(at_master) {
            master_open = pass_on(master, out, &mut buf) != Read::Closed
                && (pending.is_empty() || feed(master, &mut pending));
        }
        if ready(at_caller) {
            match nix::unistd::read(caller, &mut buf) {
                Ok(0) | Err(_) => caller_open = false,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
            master_open = master_open && feed(master, &mut pending);
        }
    }
    // CMD has exited: what it wrote last is already in its terminal's buffer (at most
    // the kernel's 64 KiB for a pseudo-terminal, and a few more; the bound keeps a
    // process `--env-only` left behind, still writing, from holding `run` up).
    for _ in 0..DRAIN_READS {
        if !master_open || pass_on(master, out, &mut buf) != Read::Passed {
            break;
        }
    }
}

/// Read what CMD wrote, if anything, and write it to `out`. (The relay holds the slave
/// for resizes, so CMD's exit shows as nothing more to read, not as a close.)
fn pass_on(master: &OwnedFd, out: BorrowedFd, buf: &mut [u8]) -> Read {
    match nix::unistd::read(master, buf) {
        Ok(0) | Err(Errno::EIO) => Read::Closed,
        Ok(n) => {
            // A caller's terminal gone (hung up) leaves CMD's output nowhere to go; it
            // is still read, so that CMD is not blocked on it.
            let _ = write_all(out, &buf[..n]);
            Read::Passed
        }
        Err(Errno::EAGAIN) | Err(Errno::EINTR) => Read::Empty,
        Err(_) => Read::Closed,
    }
}

/// Give CMD's terminal what it takes of `pending`; false once it is closed.
fn feed(master: &OwnedFd, pending: &mut Vec<u8>) -> bool {
    match nix::unistd::write(master, pending) {
        Ok(n) => {
            pending.drain(..n);
            true
        }
        Err(Errno::EAGAIN) | Err(Errno::EINTR) => true,
        Err(_) => {
            pending.clear();
            false
        }
    }
}

fn write_all(fd: BorrowedFd, mut bytes: &[u8]) -> nix::Result<()> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
