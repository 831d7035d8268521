//! The jail's system call filter (docs/reference/confinement.md, "System calls"): the
//! calls a confined command has no use for, as one table ([`TABLE`]) that the docs
//! quote, compiled to BPF by `seccompiler` and installed by the jail's init after
//! `no_new_privs`, so init and everything it starts inherit it.
//!
//! A `seccompiler` filter has one answer for every rule it matches, so the table is
//! installed as one filter per answer (`EPERM`, `EAFNOSUPPORT`, `ENOSYS`); the kernel
//! runs every installed filter and an error wins over "allow". Each filter first checks
//! the call's architecture and kills the process on any other (an i386 `int 0x80` call
//! on x86_64 has other numbers and would otherwise pass the table); on x86_64 a filter
//! of its own answers `ENOSYS` to every x32 call (numbers with bit 30 set, which share
//! x86_64's architecture value). `--seccomp-log` installs the same table with "log"
//! for an answer; the architecture checks stay.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// What a matching call gets instead of running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Answer {
    /// "Operation not permitted": the call exists but the jail refuses it.
    Eperm,
    /// "Address family not supported": a socket of a family the jail does not have.
    Eafnosupport,
    /// "Function not implemented": only `clone3`, so the C library falls back to `clone`.
    Enosys,
}

impl Answer {
    fn errno(self) -> u32 {
        (match self {
            Answer::Eperm => libc::EPERM,
            Answer::Eafnosupport => libc::EAFNOSUPPORT,
            Answer::Enosys => libc::ENOSYS,
        }) as u32
    }
}

/// Which calls of a system call match (arguments compared on their low 32 bits, as the
/// kernel reads them: `int` pids, `unsigned int` requests and families, clone's flags).
#[derive(Clone, Copy, Debug)]
pub(super) enum When {
    /// Every call.
    Always,
    /// Argument `arg` has any of `bits` set.
    AnyBit { arg: u8, bits: &'static [u64] },
    /// Argument `arg` is one of `values`.
    OneOf { arg: u8, values: &'static [u64] },
    /// Any of the arguments `args` is 1: the jail's init, PID 1 of its PID namespace.
    Init { args: &'static [u8] },
    /// Argument 0 is none of `values`.
    NoneOf { values: &'static [u64] },
    /// Argument 0 is `family` and argument 1, masked with `0xf` (`SOCK_NONBLOCK` and
    /// `SOCK_CLOEXEC` may be or-ed in), is `kind`.
    Socket { family: u64, kind: u64 },
}

/// One line of the filter: a system call, when it matches, and its answer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub call: &'static str,
    pub nr: libc::c_long,
    pub when: When,
    pub answer: Answer,
}

macro_rules! entry {
    ($call:ident, $when:expr, $answer:ident) => {
        Entry {
            call: stringify!($call),
            nr: sys::$call,
            when: $when,
            answer: Answer::$answer,
        }
    };
}

/// The system call numbers the table names, as `libc` spells them (`SYS_` dropped).
#[allow(non_upper_case_globals)]
mod sys {
    pub(super) use libc::{
        SYS_add_key as add_key, SYS_bpf as bpf, SYS_clone as clone, SYS_clone3 as clone3,
        SYS_delete_module as delete_module, SYS_fanotify_init as fanotify_init,
        SYS_finit_module as finit_module, SYS_fsconfig as fsconfig, SYS_fsmount as fsmount,
        SYS_fsopen as fsopen, SYS_fspick as fspick, SYS_init_module as init_module,
        SYS_io_uring_enter as io_uring_enter, SYS_io_uring_register as io_uring_register,
        SYS_io_uring_setup as io_uring_setup, SYS_ioctl as ioctl,
        SYS_kexec_file_load as kexec_file_load, SYS_kexec_load as kexec_load, SYS_keyctl as keyctl,
        SYS_kill as kill, SYS_mount as mount, SYS_mount_setattr as mount_setattr,
        SYS_move_mount as move_mount, SYS_name_to_handle_at as name_to_handle_at,
        SYS_open_by_handle_at as open_by_handle_at, SYS_open_tree as open_tree,
        SYS_perf_event_open as perf_event_open, SYS_pidfd_open as pidfd_open,
        SYS_pivot_root as pivot_root, SYS_process_vm_readv as process_vm_readv,
        SYS_process_vm_writev as process_vm_writev, SYS_ptrace as ptrace,
        SYS_request_key as request_key, SYS_rt_sigqueueinfo as rt_sigqueueinfo,
        SYS_rt_tgsigqueueinfo as rt_tgsigqueueinfo, SYS_setns as setns, SYS_socket as socket,
        SYS_socketpair as socketpair, SYS_tgkill as tgkill, SYS_tkill as tkill,
        SYS_umount2 as umount2, SYS_unshare as unshare, SYS_userfaultfd as userfaultfd,
    };
}

/// Every namespace flag of `clone` (argument 0 on x86_64 and aarch64).
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x80, // CLONE_NEWTIME
];

/// The terminal requests that make input or act on the console.
// (libc's type for ioctl requests differs between C libraries.)
#[allow(clippy::unnecessary_cast)]
const TERMINAL_INPUT: &[u64] = &[libc::TIOCSTI as u64, libc::TIOCLINUX as u64];

/// The address families a socket may have in the jail.
const FAMILIES: &[u64] = &[
    libc::AF_UNIX as u64,
    libc::AF_INET as u64,
    libc::AF_INET6 as u64,
    libc::AF_NETLINK as u64,
];

const UNIX_DATAGRAM: When = When::Socket {
    family: libc::AF_UNIX as u64,
    kind: libc::SOCK_DGRAM as u64,
};

/// The filter. docs/reference/confinement.md, "System calls", lists the same calls.
///
/// - The calls that reach the kernel's own machinery (io_uring, BPF, perf, modules,
///   kexec, file handles, fanotify, mounts, namespaces, keyrings) answer `EPERM`.
/// - `clone` with a namespace flag answers `EPERM`; `clone3` always answers `ENOSYS`:
///   its flags are in memory a filter cannot read, and on `ENOSYS` the C library falls
///   back to `clone`, whose flags the filter reads.
/// - `ioctl` `TIOCSTI` and `TIOCLINUX` answer `EPERM` (input into a terminal).
/// - Tracing, signalling or reading the memory of PID 1, the jail's init, answers
///   `EPERM`; CMD's own processes stay traceable (a debugger works).
/// - A socket of a family other than `AF_UNIX`, `AF_INET`, `AF_INET6` and `AF_NETLINK`
///   answers `EAFNOSUPPORT` (`AF_VSOCK`, which no network namespace confines, included).
/// - A Unix datagram socket answers `EPERM`: unconnected, it sends to any socket path
///   with `sendto`/`sendmsg`, without the `connect` that the Unix-socket supervisor
///   checks (a stream or seqpacket socket ignores or refuses an address on send).
pub(super) const TABLE: &[Entry] = &[
    entry!(io_uring_setup, When::Always, Eperm),
    entry!(io_uring_enter, When::Always, Eperm),
    entry!(io_uring_register, When::Always, Eperm),
    entry!(bpf, When::Always, Eperm),
    entry!(perf_event_open, When::Always, Eperm),
    entry!(userfaultfd, When::Always, Eperm),
    entry!(kexec_load, When::Always, Eperm),
    entry!(kexec_file_load, When::Always, Eperm),
    entry!(init_module, When::Always, Eperm),
    entry!(finit_module, When::Always, Eperm),
    entry!(delete_module, When::Always, Eperm),
    entry!(open_by_handle_at, When::Always, Eperm),
    entry!(name_to_handle_at, When::Always, Eperm),
    entry!(fanotify_init, When::Always, Eperm),
    entry!(pivot_root, When::Always, Eperm),
    entry!(mount, When::Always, Eperm),
    entry!(umount2, When::Always, Eperm),
    entry!(move_mount, When::Always, Eperm),
    entry!(fsopen, When::Always, Eperm),
    entry!(fsmount, When::Always, Eperm),
    entry!(fsconfig, When::Always, Eperm),
    entry!(fspick, When::Always, Eperm),
    entry!(open_tree, When::Always, Eperm),
    entry!(mount_setattr, When::Always, Eperm),
    entry!(setns, When::Always, Eperm),
    entry!(unshare, When::Always, Eperm),
    entry!(add_key, When::Always, Eperm),
    entry!(keyctl, When::Always, Eperm),
    entry!(request_key, When::Always, Eperm),
    entry!(
        clone,
        When::AnyBit {
            arg: 0,
            bits: NAMESPACE_FLAGS
        },
        Eperm
    ),
    entry!(clone3, When::Always, Enosys),
    entry!(
        ioctl,
        When::OneOf {
            arg: 1,
            values: TERMINAL_INPUT
        },
        Eperm
    ),
    entry!(ptrace, When::Init { args: &[1] }, Eperm),
    entry!(kill, When::Init { args: &[0] }, Eperm),
    entry!(tkill, When::Init { args: &[0] }, Eperm),
    entry!(tgkill, When::Init { args: &[0, 1] }, Eperm),
    entry!(pidfd_open, When::Init { args: &[0] }, Eperm),
    entry!(process_vm_readv, When::Init { args: &[0] }, Eperm),
    entry!(process_vm_writev, When::Init { args: &[0] }, Eperm),
    entry!(rt_sigqueueinfo, When::Init { args: &[0] }, Eperm),
    entry!(rt_tgsigqueueinfo, When::Init { args: &[0, 1] }, Eperm),
    entry!(socket, When::NoneOf { values: FAMILIES }, Eafnosupport),
    entry!(socketpair, When::NoneOf { values: FAMILIES }, Eafnosupport),
    entry!(socket, UNIX_DATAGRAM, Eperm),
    entry!(socketpair, UNIX_DATAGRAM, Eperm),
];

/// The architecture the filter is built for: this binary's.
#[cfg(target_arch = "x86_64")]
const ARCH: Option<TargetArch> = Some(TargetArch::x86_64);
#[cfg(target_arch = "aarch64")]
const ARCH: Option<TargetArch> = Some(TargetArch::aarch64);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARCH: Option<TargetArch> = None;

/// Install the filter on this process (`no_new_privs` must be set): every process it
/// starts afterwards inherits it. `log_only` (`--seccomp-log`): the table's calls run
/// and the kernel logs them.
pub(super) fn install(log_only: bool) -> Result<(), String> {
    for program in programs(log_only)? {
        seccompiler::apply_filter(&program).map_err(|e| format!("system call filter: {e}"))?;
    }
    Ok(())
}

/// The BPF programs, in the order they are installed.
pub(super) fn programs(log_only: bool) -> Result<Vec<BpfProgram>, String> {
    let arch = ARCH.ok_or("the system call filter is built for x86_64 and aarch64 only")?;
    let mut by_answer: BTreeMap<Answer, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for entry in TABLE {
        let rules = by_answer
            .entry(entry.answer)
            .or_default()
            .entry(entry.nr)
            .or_default();
        rules.extend(rules_for(entry.when).map_err(|e| format!("{}: {e}", entry.call))?);
    }
    let mut programs = Vec::new();
    if cfg!(target_arch = "x86_64") {
        programs.push(no_x32());
    }
    for (answer, rules) in by_answer {
        let action = if log_only {
            SeccompAction::Log
        } else {
            SeccompAction::Errno(answer.errno())
        };
        let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch)
            .map_err(|e| format!("system call filter: {e}"))?;
        programs.push(
            filter
                .try_into()
                .map_err(|e| format!("system call filter: {e}"))?,
        );
    }
    Ok(programs)
}

/// The rules (any of which matches) for `when`; none for every call.
fn rules_for(when: When) -> Result<Vec<SeccompRule>, String> {
    let cond = |arg, op, value| SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value);
    let rule = |conditions: Vec<_>| SeccompRule::new(conditions);
    let built: Result<Vec<SeccompRule>, seccompiler::BackendError> = match when {
        When::Always => Ok(Vec::new()),
        When::AnyBit { arg, bits } => bits
            .iter()
            .map(|&bit| rule(vec![cond(arg, SeccompCmpOp::MaskedEq(bit), bit)?]))
            .collect(),
        When::OneOf { arg, values } => values
            .iter()
            .map(|&value| rule(vec![cond(arg, SeccompCmpOp::Eq, value)?]))
            .collect(),
        When::Init { args } => args
            .iter()
            .map(|&arg| rule(vec![cond(arg, SeccompCmpOp::Eq, 1)?]))
            .collect(),
        When::NoneOf { values } => values
            .iter()
            .map(|&value| cond(0, SeccompCmpOp::Ne, value))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|all| Ok(vec![rule(all)?])),
        When::Socket { family, kind } => (|| {
            Ok(vec![rule(vec![
                cond(0, SeccompCmpOp::Eq, family)?,
                cond(1, SeccompCmpOp::MaskedEq(0xf), kind)?,
            ])?])
        })(),
    };
    built.map_err(|e| format!("system call filter: {e}"))
}

/// x86_64 only: every x32 call (its number has bit 30 set; its architecture value is
/// x86_64's, so the table's checks would not see it) answers `ENOSYS`.
fn no_x32() -> BpfProgram {
    const LOAD_NR: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET: u16 = 0x06; // BPF_RET | BPF_K
    let stmt = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    vec![
        stmt(LOAD_NR, 0), // seccomp_data.nr
        sock_filter {
            code: JGE,
            jt: 0,
            jf: 1,
            k: 0x4000_0000, // __X32_SYSCALL_BIT
        },
        stmt(RET, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        stmt(RET, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_compiles_for_both_answers() {
        assert_eq!(
            programs(false).unwrap().len(),
            programs(true).unwrap().len()
        );
    }

    #[test]
    fn an_unconditional_call_has_no_conditional_entry() {
        for entry in TABLE.iter().filter(|e| matches!(e.when, When::Always)) {
            let same = TABLE.iter().filter(|e| e.nr == entry.nr).count();
            assert_eq!(same, 1, "{} is in the table twice", entry.call);
        }
    }

    /// The docs quote the table: the same calls, each with the same answer.
    #[test]
    fn the_docs_list_the_tables_calls() {
        let docs = include_str!("../../docs/reference/confinement.md");
        let section = docs
            .split("<!-- seccomp table -->")
            .nth(1)
            .expect("docs/reference/confinement.md marks the seccomp table");
        let mut documented: Vec<(String, String)> = section
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (cells[1].trim_matches('`').to_string(), cells[3].to_string())
            })
            .collect();
        let mut code: Vec<(String, String)> = TABLE
            .iter()
            .map(|e| (e.call.to_string(), format!("{:?}", e.answer).to_uppercase()))
            .collect();
        documented.sort();
        code.sort();
        assert_eq!(documented, code);
    }
}
