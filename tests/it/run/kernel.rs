//! The jail shares no kernel state with the host (docs/reference/confinement.md,
//! "System calls"): the system call filter, IPC and UTS namespaces of its own, none of
//! the caller's descriptors, a first process CMD cannot reach. Every probe that fails
//! inside is run outside too (by this test process, as root), with arguments that fail
//! only after the permission check, so it is shown to answer something else there.

mod descriptors;

use std::collections::BTreeMap;
use std::process::Command;

use super::{python, require_jail, Jailed};

/// One probe: a name, a system call number, its arguments (pointers NULL, descriptors
/// -1, flags invalid: nothing is loaded, mounted, unshared or signalled), and the errno
/// expected inside the jail.
struct Probe {
    name: String,
    nr: libc::c_long,
    args: Vec<i64>,
    inside: i32,
}

fn probe(name: &str, nr: libc::c_long, args: &[i64]) -> Probe {
    Probe {
        name: name.into(),
        nr,
        args: args.to_vec(),
        inside: libc::EPERM,
    }
}

/// A Python script that makes each call and prints `NAME ERRNO` (0: it succeeded).
fn script(probes: &[Probe]) -> String {
    let calls: Vec<String> = probes
        .iter()
        .map(|p| format!("({:?}, {}, {:?})", p.name, p.nr, p.args))
        .collect();
    format!(
        r#"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in [{}]:
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    print(name, 0 if r >= 0 else ctypes.get_errno())
"#,
        calls.join(", ")
    )
}

fn errnos(stdout: &str) -> BTreeMap<String, i32> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(name, e)| (name.to_string(), e.trim().parse().expect("an errno")))
        .collect()
}

/// The probes' errnos when this test process runs them, outside any jail.
fn outside(script: &str) -> BTreeMap<String, i32> {
    let out = Command::new(python())
        .args(["-c", script])
        .output()
        .expect("run python3");
    assert!(out.status.success(), "{out:?}");
    errnos(&String::from_utf8_lossy(&out.stdout))
}

/// Run `probes` inside and outside; each answers its errno inside, another outside.
async fn assert_refused_inside_only(probes: &[Probe], jailed: Jailed) {
    let script = script(probes);
    let host = outside(&script);
    let out = jailed.python(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    let jail = errnos(&out.stdout);
    for p in probes {
        let (inside, outside) = (jail.get(&p.name), host.get(&p.name));
        assert_eq!(inside, Some(&p.inside), "{} inside: {out}", p.name);
        assert!(
            outside.is_some_and(|e| *e != p.inside),
            "{} outside answered {outside:?}: the probe shows nothing",
            p.name
        );
    }
}

#[tokio::test]
async fn run_refuses_the_listed_system_calls_with_eperm_while_outside_they_answer() {
    require_jail!();
    use libc::*;
    let mut probes = vec![
        probe("io_uring_setup", SYS_io_uring_setup, &[0, 0]),
        probe("io_uring_enter", SYS_io_uring_enter, &[-1, 0, 0, 0, 0, 0]),
        probe("io_uring_register", SYS_io_uring_register, &[-1, 0, 0, 0]),
        probe("bpf", SYS_bpf, &[9999, 0, 0]),
        probe("perf_event_open", SYS_perf_event_open, &[0, 0, -1, -1, 0]),
        probe("userfaultfd", SYS_userfaultfd, &[-1]),
        probe("kexec_load", SYS_kexec_load, &[0, 0, 0, 0x100]),
        probe(
            "kexec_file_load",
            SYS_kexec_file_load,
            &[-1, -1, 0, 0, 0xff00],
        ),
        probe("init_module", SYS_init_module, &[0, 0, 0]),
        probe("finit_module", SYS_finit_module, &[-1, 0, 0]),
        probe("open_by_handle_at", SYS_open_by_handle_at, &[-1, 0, 0]),
        probe(
            "name_to_handle_at",
            SYS_name_to_handle_at,
            &[-1, 0, 0, 0, 0],
        ),
        probe("fanotify_init", SYS_fanotify_init, &[-1, 0]),
        probe("pivot_root", SYS_pivot_root, &[0, 0]),
        probe("mount", SYS_mount, &[0, 0, 0, 0, 0]),
        probe("umount2", SYS_umount2, &[0, 0xff00]),
        probe("move_mount", SYS_move_mount, &[-1, 0, -1, 0, 0xffff]),
        probe("fsopen", SYS_fsopen, &[0, 0]),
        probe("fsmount", SYS_fsmount, &[-1, 0, 0]),
        probe("fsconfig", SYS_fsconfig, &[-1, 0, 0, 0, 0]),
        probe("fspick", SYS_fspick, &[-1, 0, 0xffff]),
        probe("open_tree", SYS_open_tree, &[-1, 0, -1]),
        probe("mount_setattr", SYS_mount_setattr, &[-1, 0, -1, 0, 0]),
        probe("setns", SYS_setns, &[-1, 0]),
        probe("unshare", SYS_unshare, &[-1]),
        probe("add_key", SYS_add_key, &[0, 0, 0, 0, 0]),
        probe("keyctl", SYS_keyctl, &[9999, 0, 0, 0, 0]),
        probe("request_key", SYS_request_key, &[0, 0, 0, 0]),
        // The request as an unsigned int: high bits set do not hide it.
        probe("ioctl_tiocsti", SYS_ioctl, &[-1, TIOCSTI as i64, 0]),
        probe(
            "ioctl_tiocsti_high",
            SYS_ioctl,
            &[-1, (1 << 32) | TIOCSTI as i64, 0],
        ),
        probe("ioctl_tioclinux", SYS_ioctl, &[-1, TIOCLINUX as i64, 0]),
        // PID 1: the jail's init inside; the host's outside, asked harmlessly (an unknown
        // request, signal 0, invalid flags or a NULL siginfo).
        probe("ptrace", SYS_ptrace, &[0x7fff, 1, 0, 0]),
        probe("kill", SYS_kill, &[1, 0]),
        probe("tkill", SYS_tkill, &[1, 0]),
        probe("tgkill", SYS_tgkill, &[1, 1, 0]),
        probe("pidfd_open", SYS_pidfd_open, &[1, -1]),
        probe(
            "process_vm_readv",
            SYS_process_vm_readv,
            &[1, 0, 0, 0, 0, 1],
        ),
        probe(
            "process_vm_writev",
            SYS_process_vm_writev,
            &[1, 0, 0, 0, 0, 1],
        ),
        probe("rt_sigqueueinfo", SYS_rt_sigqueueinfo, &[1, 0, 0]),
        probe("rt_tgsigqueueinfo", SYS_rt_tgsigqueueinfo, &[1, 1, 0, 0]),
    ];
    probes.push(probe("delete_module", SYS_delete_module, &[0, 0]));
    // clone with each namespace flag, and CLONE_SIGHAND without CLONE_VM (EINVAL
    // outside: nothing is made).
    for (name, flag) in [
        ("newns", CLONE_NEWNS),
        ("newcgroup", CLONE_NEWCGROUP),
        ("newuts", CLONE_NEWUTS),
        ("newipc", CLONE_NEWIPC),
        ("newuser", CLONE_NEWUSER),
        ("newpid", CLONE_NEWPID),
        ("newnet", CLONE_NEWNET),
        ("newtime", 0x80),
    ] {
        let flags = (flag | CLONE_SIGHAND) as u32 as i64;
        probes.push(probe(
            &format!("clone_{name}"),
            SYS_clone,
            &[flags, 0, 0, 0, 0],
        ));
    }
    // clone3's flags are out of the filter's sight: ENOSYS, so the C library uses clone.
    let mut clone3 = probe("clone3", SYS_clone3, &[0, 0]);
    clone3.inside = ENOSYS;
    probes.push(clone3);
    assert_refused_inside_only(&probes, Jailed::new("version = 1\n")).await;
}

#[tokio::test]
async fn run_keeps_threads_fork_and_a_debugger_on_cmds_own_children() {
    require_jail!();
    let script = r#"
import os, subprocess, threading
done = []
t = threading.Thread(target=lambda: done.append(1)); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(7)
print("thread", len(done), "fork", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(subprocess.run(["sh", "-c", "(exit 3) & wait $!; echo sub $? $(echo nested)"],
                     capture_output=True, text=True).stdout.strip())
"#;
    let out = Jailed::new("version = 1\n").python(script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("thread 1 fork 7"), "{out}");
    assert!(out.stdout.contains("sub 3 nested"), "{out}");
    if super::which("strace").is_none() {
        eprintln!("skipped the debugger: `strace` is not installed");
        return;
    }
    let out = Jailed::new("version = 1\n")
        .sh("strace -f -e trace=execve sh -c 'true' 2>&1 && echo traced")
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("traced"), "{out}");
    assert!(out.stdout.contains("execve("), "{out}");
}

#[tokio::test]
async fn run_creates_only_unix_inet_and_netlink_sockets_and_no_unix_datagram_one() {
    require_jail!();
    let script = r#"
import socket
def make(name, f):
    try:
        f().close(); print(name, 0)
    except OSError as e:
        print(name, e.errno)
make("vsock", lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM, 0))
make("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
make("unix_dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC))
make("pair_dgram", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0])
make("unix_stream", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
make("pair_stream", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)[0])
make("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
make("inet6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
make("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
"#;
    // Created only: no socket is connected or bound anywhere.
    let host = outside(script);
    let out = Jailed::new("version = 1\n").python(script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    let jail = errnos(&out.stdout);
    let expect = [
        ("vsock", libc::EAFNOSUPPORT),
        ("packet", libc::EAFNOSUPPORT),
        ("unix_dgram", libc::EPERM),
        ("pair_dgram", libc::EPERM),
    ];
    for (name, errno) in expect {
        assert_eq!(jail.get(name), Some(&errno), "{name} inside: {out}");
        assert_eq!(host.get(name), Some(&0), "{name} outside: {host:?}");
    }
    for name in ["unix_stream", "pair_stream", "inet", "inet6", "netlink"] {
        assert_eq!(jail.get(name), Some(&0), "{name} inside: {out}");
    }
}

#[tokio::test]
async fn run_has_ipc_and_uts_namespaces_of_its_own() {
    require_jail!();
    // A System V segment of the host's, under a key of this test's.
    let key = 0x4567_0000 | (std::process::id() as i64 & 0xffff);
    let make = format!(
        "import ctypes; libc = ctypes.CDLL(None, use_errno=True); \
         print(libc.shmget({key}, 4096, 0o1600))"
    );
    let made = Command::new(python()).args(["-c", &make]).output().unwrap();
    let id: i64 = String::from_utf8_lossy(&made.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(id >= 0, "shmget on the host: {made:?}");
    let find = format!(
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)\n\
         r = libc.shmget({key}, 0, 0)\n\
         print('shm', 0 if r >= 0 else ctypes.get_errno())\n\
         print('ns', os.readlink('/proc/self/ns/ipc'), os.readlink('/proc/self/ns/uts'))\n\
         print('host', os.uname().nodename)"
    );
    let host = Command::new(python()).args(["-c", &find]).output().unwrap();
    let out = Jailed::new("version = 1\n").python(&find).await;
    let _ = Command::new("ipcrm").args(["-m", &id.to_string()]).status();
    let host = String::from_utf8_lossy(&host.stdout).to_string();
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(host.contains("shm 0"), "the host finds its segment: {host}");
    assert!(
        out.stdout.contains(&format!("shm {}", libc::ENOENT)),
        "{out}"
    );
    let line = |text: &str, tag: &str| {
        let found = text.lines().find(|l| l.starts_with(tag));
        found.unwrap_or_default().to_string()
    };
    assert_ne!(line(&host, "ns "), line(&out.stdout, "ns "), "{out}");
    assert_eq!(line(&host, "host "), line(&out.stdout, "host "), "{out}");
}

/// An i386 call (`int 0x80`) from a 64-bit process carries another architecture: the
/// filter kills the process rather than read its number against the x86_64 table.
#[cfg(target_arch = "x86_64")]
#[tokio::test]
async fn run_kills_a_command_that_calls_the_kernel_through_another_abi() {
    require_jail!();
    let script = r#"
import ctypes, mmap
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3")  # mov eax, 20 (i386 getpid); int 0x80; ret
call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("i386 getpid", call())
"#;
    let host = Command::new(python())
        .args(["-c", script])
        .output()
        .unwrap();
    let host = String::from_utf8_lossy(&host.stdout).to_string();
    if !host.contains("i386 getpid") {
        eprintln!("skipped: this kernel has no i386 system calls ({host})");
        return;
    }
    let out = Jailed::new("version = 1\n").python(script).await;
    assert_eq!(out.code(), Some(128 + libc::SIGSYS), "{out}");
    assert!(!out.stdout.contains("i386 getpid"), "{out}");
}

#[tokio::test]
async fn run_seccomp_log_lets_the_listed_calls_run_and_says_so() {
    require_jail!();
    let probes = [
        probe("unshare", libc::SYS_unshare, &[-1]),
        probe("keyctl", libc::SYS_keyctl, &[9999, 0, 0, 0, 0]),
    ];
    let script = script(&probes);
    let host = outside(&script);
    let out = Jailed::new("version = 1\n")
        .arg("--seccomp-log")
        .python(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stderr.contains("filter only logs"), "{out}");
    assert_eq!(errnos(&out.stdout), host, "the calls ran as outside: {out}");
    assert!(host.values().all(|e| *e != libc::EPERM), "{host:?}");
    let out = Jailed::new("version = 1\n")
        .arg("--seccomp-log")
        .arg("--env-only")
        .run(&["true"])
        .await;
    assert_eq!(out.code(), Some(125), "not with --env-only: {out}");
}
