//! The pseudo-terminal of the terminal tests: the test holds the master (the caller's
//! screen and keyboard), `run` gets the slave as its controlling terminal.

#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::pty::{openpty, Winsize};
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, SpecialCharacterIndices};

use crate::run::RUN_TIMEOUT;

/// A pseudo-terminal the test holds both ends of: `run` gets the slave.
pub(super) struct Terminal {
    master: OwnedFd,
    pub(super) slave: OwnedFd,
    /// Everything read from the master so far (what the caller's screen shows).
    screen: Vec<u8>,
}

impl Terminal {
    pub(super) fn open(rows: u16, cols: u16) -> Terminal {
        let size = winsize(rows, cols);
        let pty = openpty(Some(&size), None).expect("openpty");
        Terminal {
            master: pty.master,
            slave: pty.slave,
            screen: Vec::new(),
        }
    }

    /// Start `command` in a session of its own whose controlling terminal is the slave,
    /// as its standard input and error (and output, with `stdout`).
    pub(super) fn spawn(&self, mut command: Command, stdout: bool) -> Child {
        let slave = |_| Stdio::from(self.slave.try_clone().expect("dup"));
        command.stdin(slave(0)).stderr(slave(2));
        if stdout {
            command.stdout(slave(1));
        }
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        command.spawn().expect("spawn under the terminal")
    }

    pub(super) fn resize(&self, rows: u16, cols: u16) {
        let size = winsize(rows, cols);
        // SAFETY: TIOCSWINSZ reads one winsize.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        assert_eq!(rc, 0, "TIOCSWINSZ");
    }

    /// Type `keys` (the terminal emulator writes them to the master).
    pub(super) fn type_keys(&self, keys: &str) {
        let written = nix::unistd::write(&self.master, keys.as_bytes()).expect("type");
        assert_eq!(written, keys.len());
    }

    /// Read what is on the master now, waiting up to `ms`.
    pub(super) fn read_screen(&mut self, ms: u16) {
        let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::from(ms)).unwrap_or(0) == 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        if let Ok(n) = nix::unistd::read(&self.master, &mut buf) {
            self.screen.extend_from_slice(&buf[..n]);
        }
    }

    pub(super) fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen).into_owned()
    }

    /// Wait until the screen shows `text` (`child` must not have exited first).
    pub(super) fn wait_for(&mut self, text: &str, child: &mut Child) {
        let started = Instant::now();
        while !self.screen().contains(text) {
            if let Ok(Some(status)) = child.try_wait() {
                self.read_screen(200);
                assert!(
                    self.screen().contains(text),
                    "exited {status} before {text:?}: {}",
                    self.screen()
                );
            }
            assert!(
                started.elapsed() < RUN_TIMEOUT,
                "no {text:?}: {}",
                self.screen()
            );
            self.read_screen(50);
        }
    }

    /// Wait for `child` to exit, reading the screen meanwhile.
    pub(super) fn finish(&mut self, child: &mut Child) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.read_screen(100);
                return status;
            }
            if started.elapsed() > RUN_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("did not end within {RUN_TIMEOUT:?}: {}", self.screen());
            }
            self.read_screen(50);
        }
    }

    /// What is waiting as input on the slave: what the caller's shell would read next.
    /// (The slave is made raw and non-blocking to read it all, complete lines or not.)
    pub(super) fn pending_input(&self) -> String {
        let mut raw = tcgetattr(&self.slave).expect("tcgetattr");
        cfmakeraw(&mut raw);
        raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 0;
        raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        tcsetattr(&self.slave, SetArg::TCSANOW, &raw).expect("tcsetattr");
        let mut input = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = nix::unistd::read(&self.slave, &mut buf) {
            input.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&input).into_owned()
    }

    /// The slave's device number (what `/proc/PID/stat` gives as `tty_nr`).
    pub(super) fn device(&self) -> u64 {
        nix::sys::stat::fstat(&self.slave).expect("fstat").st_rdev
    }
}

fn winsize(rows: u16, cols: u16) -> Winsize {
    Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}
