//! CMD's terminal and descriptors (docs/guides/confinement.md, "The terminal and
//! descriptors"): CMD runs in a session of its own, never holds the caller's terminal
//! (so `TIOCSTI` cannot push input into the caller's shell), gets a pseudo-terminal of
//! its own when `run`'s standard input is a terminal, and starts with 0, 1 and 2 only.
//!
//! Each test owns a pseudo-terminal and runs `run` with its slave as standard input and
//! as controlling terminal, the way a shell in a terminal emulator would.

mod pty;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

use nix::sys::termios::tcgetattr;

use super::{descendants, python, require_jail, Jailed, RUN_TIMEOUT};
use pty::Terminal;

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
    // The system call filter refuses TIOCSTI on any terminal, CMD's own included
    // (docs/reference/confinement.md, "System calls").
    assert!(stdout.contains("tiocsti=errno-1"), "{stdout}");
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
