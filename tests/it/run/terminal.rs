//! CMD's terminal and descriptors (docs/guides/confinement.md, "The terminal and
//! descriptors"): CMD runs in a session of its own, never holds the caller's terminal
//! (so `TIOCSTI` cannot push input into the caller's shell), gets a pseudo-terminal of
//! its own when `run`'s standard input is a terminal, and starts with 0, 1 and 2 only.
//!
//! Each test owns a pseudo-terminal and runs `run` with its slave as standard input and
//! as controlling terminal, the way a shell in a terminal emulator would.

#![allow(unsafe_code)]

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::pty::{openpty, Winsize};
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, SpecialCharacterIndices};

use super::{descendants, python, require_jail, Jailed, RUN_TIMEOUT};

/// A pseudo-terminal the test holds both ends of: `run` gets the slave.
struct Terminal {
    master: OwnedFd,
    slave: OwnedFd,
    /// Everything read from the master so far (what the caller's screen shows).
    screen: Vec<u8>,
}

impl Terminal {
    fn open(rows: u16, cols: u16) -> Terminal {
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
    fn spawn(&self, mut command: Command, stdout: bool) -> Child {
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

    fn resize(&self, rows: u16, cols: u16) {
        let size = winsize(rows, cols);
        // SAFETY: TIOCSWINSZ reads one winsize.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        assert_eq!(rc, 0, "TIOCSWINSZ");
    }

    /// Type `keys` (the terminal emulator writes them to the master).
    fn type_keys(&self, keys: &str) {
        let written = nix::unistd::write(&self.master, keys.as_bytes()).expect("type");
        assert_eq!(written, keys.len());
    }

    /// Read what is on the master now, waiting up to `ms`.
    fn read_screen(&mut self, ms: u16) {
        let mut fds = [PollFd::new(self.master.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::from(ms)).unwrap_or(0) == 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        if let Ok(n) = nix::unistd::read(&self.master, &mut buf) {
            self.screen.extend_from_slice(&buf[..n]);
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen).into_owned()
    }

    /// Wait until the screen shows `text` (`child` must not have exited first).
    fn wait_for(&mut self, text: &str, child: &mut Child) {
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
    fn finish(&mut self, child: &mut Child) -> ExitStatus {
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
    fn pending_input(&self) -> String {
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
    fn device(&self) -> u64 {
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

/// Push `MARKER` into the controlling terminal with TIOCSTI, a byte at a time, then say
/// how it went, whether this process leads a session of its own, and its `tty_nr`.
const INJECT: &str = r#"
import fcntl, os, termios
result = "ok"
try:
    for b in b"echo INJECTED-MARKER\n":
        fcntl.ioctl(0, termios.TIOCSTI, bytes([b]))
except OSError as e:
    result = "errno-%d" % e.errno
stat = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
print("tiocsti=%s leader=%s tty_nr=%s" % (result, os.getsid(0) == os.getpid(), stat[4]))
"#;

/// The open descriptors, the listing's own left out, and which of 0 and 1 are terminals;
/// whether this process leads a session of its own.
const DESCRIPTORS: &str = r#"
import os
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
fds = sorted(int(f) for f in os.listdir("/proc/self/fd") if is_open(int(f)))
print("fds=%s tty0=%s tty1=%s leader=%s" % (fds, os.isatty(0), os.isatty(1), os.getsid(0) == os.getpid()))
"#;

/// Whether the kernel lets TIOCSTI push input at all (`dev.tty.legacy_tiocsti`).
fn tiocsti_allowed() -> bool {
    std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").map_or(true, |v| v.trim() == "1")
}

#[test]
fn cmd_cannot_push_input_into_the_callers_terminal() {
    require_jail!();
    // The probe itself, without run: the input reaches the caller's terminal.
    let mut control = Terminal::open(24, 80);
    let mut probe = Command::new(python());
    probe.args(["-c", INJECT]);
    let mut child = control.spawn(probe, true);
    assert!(control.finish(&mut child).success(), "{}", control.screen());
    let pending = control.pending_input();
    if tiocsti_allowed() {
        assert!(
            control.screen().contains("tiocsti=ok"),
            "{}",
            control.screen()
        );
        assert!(
            pending.contains("echo INJECTED-MARKER"),
            "the probe injects without run: {pending:?}"
        );
    } else {
        eprintln!("TIOCSTI is disabled here (legacy_tiocsti=0): the control cannot inject");
        assert!(
            control.screen().contains("tiocsti=errno-5"),
            "{}",
            control.screen()
        );
    }

    let mut caller = Terminal::open(24, 80);
    let jailed = Jailed::standard(80);
    let mut command = jailed.command(&[python(), "-c", INJECT]);
    command.stdout(Stdio::piped());
    let mut child = caller.spawn(command, false);
    let status = caller.finish(&mut child);
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert!(status.success(), "{stdout}\n{}", caller.screen());
    let pending = caller.pending_input();
    assert!(
        !pending.contains("INJECTED"),
        "CMD pushed input into the caller's terminal: {pending:?}"
    );
    // CMD leads its own session, on a terminal that is not the caller's (its own: the
    // injection went there, and nowhere else).
    assert!(stdout.contains("leader=True"), "{stdout}");
    let tty_nr: u64 = stdout
        .rsplit("tty_nr=")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_ne!(tty_nr, 0, "CMD has a terminal: {stdout}");
    assert_ne!(tty_nr, caller.device(), "CMD's terminal is the caller's");
    if tiocsti_allowed() {
        assert!(stdout.contains("tiocsti=ok"), "{stdout}");
    }
}

#[test]
fn a_shell_in_the_jail_reads_typed_lines_and_ctrl_c_reaches_its_job() {
    require_jail!();
    let mut term = Terminal::open(24, 80);
    let jailed = Jailed::standard(80).env("PS1", "jail$ ");
    let mut child = term.spawn(jailed.command(&["sh", "-i"]), true);
    let run = child.id();
    term.wait_for("jail$ ", &mut child);
    term.type_keys("echo sum=$((6*7))\r");
    term.wait_for("sum=42", &mut child);
    // CMD's terminal has a name in the jail, and the jail's terminals are its own.
    term.type_keys("echo tty=$(tty) pts=$(ls /dev/pts | tr '\\n' ,)\r");
    term.wait_for("tty=/dev/console pts=ptmx,", &mut child);
    term.type_keys("sleep 30\r");
    let started = Instant::now();
    while !descendants(run).into_iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    }) {
        assert!(
            started.elapsed() < RUN_TIMEOUT,
            "no sleep: {}",
            term.screen()
        );
        term.read_screen(20);
    }
    term.type_keys("\x03");
    term.type_keys("echo status=$?\r");
    term.wait_for("status=130", &mut child);
    term.type_keys("exit 3\r");
    let status = term.finish(&mut child);
    assert_eq!(status.code(), Some(3), "{}", term.screen());
}

#[test]
fn cmd_sees_the_callers_window_size_and_its_changes_and_the_terminal_is_restored() {
    require_jail!();
    // SIGWINCH is blocked and waited for, so that one arriving at any moment counts.
    let script = r#"
import os, signal
def size():
    size = os.get_terminal_size(0)
    return "%dx%d" % (size.lines, size.columns)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGWINCH])
print("size=" + size(), flush=True)
print("resize me", flush=True)
winch = signal.sigtimedwait([signal.SIGWINCH], 30)
print("winch=%s size=%s" % (winch is not None, size()), flush=True)
line = input("ready> ")
print("got=" + line.upper(), flush=True)
"#;
    let mut term = Terminal::open(33, 101);
    let before = tcgetattr(&term.slave).expect("tcgetattr");
    let jailed = Jailed::standard(80);
    let mut child = term.spawn(jailed.command(&[python(), "-c", script]), true);
    term.wait_for("size=33x101", &mut child);
    term.wait_for("resize me", &mut child);
    term.resize(40, 120);
    term.wait_for("winch=True size=40x120", &mut child);
    term.wait_for("ready> ", &mut child);
    term.type_keys("hello\r");
    term.wait_for("got=HELLO", &mut child);
    let status = term.finish(&mut child);
    assert!(status.success(), "{}", term.screen());
    let after = tcgetattr(&term.slave).expect("tcgetattr");
    assert_eq!(
        (
            after.input_flags,
            after.output_flags,
            after.local_flags,
            after.control_flags
        ),
        (
            before.input_flags,
            before.output_flags,
            before.local_flags,
            before.control_flags
        ),
        "run restores the caller's terminal"
    );
}

/// `run --env-only` in a network namespace of the test's own (its proxy listens on the
/// host's 127.0.0.1:3128, which tests running at once would share).
fn env_only(jailed: Jailed, cmd: &[&str]) -> Command {
    let inner = jailed.arg("--env-only").command(cmd);
    let mut line = inner.get_program().to_string_lossy().into_owned();
    for arg in inner.get_args() {
        line += &format!(" '{}'", arg.to_string_lossy().replace('\'', r"'\''"));
    }
    let mut outer = Command::new("unshare");
    outer.args([
        "--net",
        "--",
        "sh",
        "-c",
        &format!("ip link set lo up && exec {line}"),
    ]);
    for (name, value) in inner.get_envs() {
        match value {
            Some(value) => outer.env(name, value),
            None => outer.env_remove(name),
        };
    }
    outer
}

/// Run `command` with standard input from `/dev/null` and return its standard output.
fn output(mut command: Command) -> String {
    let out = command.stdin(Stdio::null()).output().expect("run");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout.into_owned()
}

#[test]
fn cmd_starts_with_descriptors_0_1_2_only_in_a_session_of_its_own() {
    require_jail!();
    let cmd = [python(), "-c", DESCRIPTORS];
    let jailed = output(Jailed::standard(80).command(&cmd));
    let unconfined = output(env_only(Jailed::standard(80), &cmd));
    for (what, out) in [("in the jail", &jailed), ("with --env-only", &unconfined)] {
        assert!(out.contains("fds=[0, 1, 2] "), "{what}: {out}");
        assert!(out.contains("leader=True"), "{what}: {out}");
        assert!(out.contains("tty0=False"), "no terminal, {what}: {out}");
    }
    // With a terminal: standard output to a pipe stays that pipe, not CMD's terminal.
    for with_env_only in [false, true] {
        let mut term = Terminal::open(24, 80);
        let mut command = if with_env_only {
            env_only(Jailed::standard(80), &cmd)
        } else {
            Jailed::standard(80).command(&cmd)
        };
        command.stdout(Stdio::piped());
        let mut child = term.spawn(command, false);
        let status = term.finish(&mut child);
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert!(status.success(), "{out}\n{}", term.screen());
        let what = if with_env_only { "--env-only" } else { "jail" };
        assert!(
            out.contains("fds=[0, 1, 2] tty0=True tty1=False leader=True"),
            "{what} with a terminal: {out}\n{}",
            term.screen()
        );
    }
}
