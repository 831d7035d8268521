//! `__jail-init`: the jail's first process (PID 1 of its PID namespace, inside the
//! network namespace), started by `run` from the jail's thread. It finishes CMD's
//! confinement, starts CMD, passes signals on, reaps, and exits with CMD's status; when it
//! exits, the kernel kills whatever is left in the jail. With `--env-only` it only
//! switches to CMD's user and supervises (no namespace, nothing dropped).
//!
//! Confinement, in order: the mount namespace ([`super::mounts`]); the capability
//! bounding set cleared; CMD's groups, gid and uid; every other capability set cleared;
//! `no_new_privs`; the system call filter ([`super::seccomp`]); not dumpable; SIGKILL as
//! the parent-death signal.
//!
//! Init leaves `run`'s session first, so it never has the caller's terminal as its
//! controlling terminal (CMD, as the same user, could act through init), and starts CMD
//! in a session of its own ([`super::session::own_session`]).

use std::ffi::OsString;

use caps::{CapSet, Capability};
use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{setgroups, setresgid, setresuid, setsid, Gid, Pid, Uid};

use std::os::fd::RawFd;

use super::jail::PROXY_PORT;
use super::unix::filter::Program;
use super::{mounts, seccomp, session, signals};
use crate::config::InitConfig;

/// Exit status for init's own failures (`run`'s own errors).
const OWN_ERROR: u8 = 125;

type Result<T> = std::result::Result<T, String>;

/// Confine, start CMD, supervise it; the process's exit code.
pub(super) fn main(args: InitConfig) -> u8 {
    // `run` started this process with the passed signals blocked already (a PID 1 drops
    // a signal it has no handler for); SIGCHLD joins them.
    let signals = match signals::Signals::block(true) {
        Ok(s) => s,
        Err(e) => return fail(format!("cannot block signals: {e}")),
    };
    if let Err(e) = setsid() {
        return fail(format!("cannot leave run's session: {e}"));
    }
    if let Err(e) = prctl::set_pdeathsig(Signal::SIGKILL) {
        return fail(format!("cannot set the parent-death signal: {e}"));
    }
    let confined = if args.env_only {
        switch_user(&args)
    } else {
        confine(&args)
    };
    if let Err(e) = confined {
        return fail(format!("cannot confine the command: {e}"));
    }
    // Had `run` died before the parent-death signal was set, nothing would kill this
    // process; the proxy's listening socket is gone with it.
    if !listening(PROXY_PORT) {
        return fail("the proxy is gone".to_string());
    }
    let connect_filter = match connect_filter(&args) {
        Ok(filter) => filter,
        Err(e) => return fail(e),
    };
    let cmd = match spawn(&args.command, connect_filter) {
        Ok(pid) => pid,
        Err(code) => return code,
    };
    supervise(cmd, &signals)
}

/// With `--supervised`: the compiled connect filter CMD starts with, and descriptor 3,
/// `run`'s supervisor's socket (CMD's exec closes it: [`session::own_session`] marks
/// every descriptor above 2 close-on-exec).
fn connect_filter(args: &InitConfig) -> Result<Option<(RawFd, Program)>> {
    if !args.supervised {
        return Ok(None);
    }
    Ok(Some((3, Program::compile()?)))
}

fn fail(message: String) -> u8 {
    eprintln!("egress-proxy: run: error: {message}");
    OWN_ERROR
}

/// Everything but starting CMD; the first failure stops it (CMD never runs unconfined).
fn confine(args: &InitConfig) -> Result<()> {
    mounts::set_up(&mounts::View::from(args))?;
    // The bundle CMD's TLS clients trust, on the jail's own /run; the CA's certificate
    // came in the environment, which CMD does not inherit it from.
    if let Some(pem) = std::env::var_os(super::trust::CA_ENV) {
        super::trust::write_bundle(
            std::path::Path::new(super::trust::JAIL_BUNDLE),
            &pem.to_string_lossy(),
        )?;
        std::env::remove_var(super::trust::CA_ENV);
    }
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false) {
        caps::clear(None, CapSet::Bounding).map_err(|e| format!("bounding set: {e}"))?;
    } else if args.uid == 0 {
        return Err("cannot clear the bounding set: missing CAP_SETPCAP".into());
    }
    switch_user(args)?;
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|e| format!("capabilities ({set:?}): {e}"))?;
    }
    prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
    // Init and everything it starts: init itself makes none of the filtered calls.
    seccomp::install(args.seccomp_log)?;
    // Last (a change of user resets it): CMD, whatever its uid, can neither open init's
    // /proc/1/fd or /proc/1/mem nor trace it (docs/reference/confinement.md, "System
    // calls").
    prctl::set_dumpable(false).map_err(|e| format!("not dumpable: {e}"))?;
    Ok(())
}

/// CMD's gid as its only group, then its uid. A change of either clears the
/// parent-death signal: it is set again.
fn switch_user(args: &InitConfig) -> Result<()> {
    let (uid, gid) = (Uid::from_raw(args.uid), Gid::from_raw(args.gid));
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETGID).unwrap_or(false) {
        setgroups(&[gid]).map_err(|e| format!("setgroups: {e}"))?;
    }
    if gid != Gid::current() || gid != Gid::effective() {
        setresgid(gid, gid, gid).map_err(|e| format!("setgid {gid}: {e} (needs CAP_SETGID)"))?;
    }
    if uid != Uid::current() || uid != Uid::effective() {
        setresuid(uid, uid, uid).map_err(|e| format!("setuid {uid}: {e} (needs CAP_SETUID)"))?;
    }
    prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("parent-death signal: {e}"))
}

/// Start CMD with this process's environment, in a session of its own, with 0, 1 and 2
/// only ([`session::own_session`]). Not started: 127 when it is not found, 126 when it
/// cannot be executed.
fn spawn(
    command: &[OsString],
    connect_filter: Option<(RawFd, Program)>,
) -> std::result::Result<Pid, u8> {
    let Some((program, args)) = command.split_first() else {
        return Err(fail("no command".to_string()));
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    let supervisor = connect_filter.as_ref().map(|(fd, _)| *fd);
    session::own_session(&mut cmd, connect_filter);
    let spawned = cmd.spawn();
    if let Some(fd) = supervisor {
        // CMD sent the listener (or never started): init needs the socket no more.
        let _ = nix::unistd::close(fd);
    }
    match spawned {
        // The child is reaped by `supervise`'s waitpid, not through `Child`.
        Ok(child) => Ok(Pid::from_raw(child.id() as i32)),
        Err(e) => {
            let Some(errno) = e.raw_os_error().map(Errno::from_raw) else {
                return Err(fail(format!("cannot start the command: {e}")));
            };
            eprintln!(
                "egress-proxy: run: {}: {}",
                program.to_string_lossy(),
                errno.desc()
            );
            Err(if errno == Errno::ENOENT { 127 } else { 126 })
        }
    }
}

/// Pass SIGINT, SIGTERM and SIGHUP to CMD (they come from `run`: this process has no
/// terminal to get them from), reap every child (orphans are reparented to
/// this process), and return CMD's status once it exits: its code, or 128+N for signal N.
fn supervise(cmd: Pid, signals: &signals::Signals) -> u8 {
    loop {
        // CMD may have exited before its SIGCHLD could be read: reap first.
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == cmd => return code as u8,
                Ok(WaitStatus::Signaled(pid, signal, _)) if pid == cmd => {
                    return 128u8.wrapping_add(signal as u8)
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        let info = match signals.next() {
            Ok(info) => info,
            Err(e) => {
                let _ = kill(cmd, Signal::SIGKILL);
                return fail(format!("cannot read signals: {e}"));
            }
        };
        if info.ssi_signo != Signal::SIGCHLD as u32 {
            if let Ok(signal) = Signal::try_from(info.ssi_signo as i32) {
                let _ = kill(cmd, signal);
            }
        }
    }
}

/// Whether a socket listens on 127.0.0.1:`port` in this network namespace
/// (`/proc/self/net/tcp`: local address in hex, state `0A` for listening).
fn listening(port: u16) -> bool {
    let wanted = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/self/net/tcp").is_ok_and(|table| {
        table.lines().skip(1).any(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let local = fields.next();
            let state = fields.nth(1);
            local == Some(wanted.as_str()) && state == Some("0A")
        })
    })
}
