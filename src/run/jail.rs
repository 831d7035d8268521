//! The jail's network namespace, made on a thread of its own (never a tokio worker: a
//! namespace belongs to the thread that entered it, and so does every socket it creates
//! and every process it starts).
//!
//! The thread unshares a network namespace that holds only `lo`, brings `lo` up with a
//! default route (source `127.0.0.1`), applies the ruleset (over netlink), binds the
//! proxy's listening sockets there and hands them back. Then, told to, it unshares PID,
//! IPC and UTS namespaces and starts the jail's first process (`__jail-init`, [`super::init`]), waits
//! for it and reports its status. Nothing is made on the host: the namespaces live as
//! long as a process, a thread or a socket of `run` holds them, so they end with `run`,
//! even when it is killed.

use std::ffi::OsString;
use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;

use nix::sched::{unshare, CloneFlags};
use tokio::sync::oneshot;

use super::rules::{self, Ports};
pub(super) use super::rules::{PROXY_PORT, SOCKS_PORT};

/// `ip` arguments that give `lo` the jail's second loopback address, 127.0.0.2 (see
/// [`make`]): loopback still, so it stays inside the namespace.
const ADDRCONFIG_ADDRESS: [&str; 5] = ["addr", "add", "127.0.0.2/32", "dev", "lo"];

/// Why the jail could not be made; `run` exits 125 and CMD never starts.
#[derive(Debug, thiserror::Error)]
pub(super) enum JailError {
    #[error("cannot create the {what} namespace: {source} (needs CAP_SYS_ADMIN)")]
    Namespace {
        what: &'static str,
        source: nix::Error,
    },
    #[error("cannot run `{command}`: {source} (is {package} installed?)")]
    ToolMissing {
        command: String,
        package: &'static str,
        source: io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    ToolFailed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("cannot confine the jail's network: {0}")]
    Rules(rules::ApplyError),
    #[error("cannot listen on {addr} in the jail: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("cannot watch the jail's Unix sockets: {0}")]
    Diag(io::Error),
    #[error("cannot start the jail's first process: {0}")]
    Spawn(io::Error),
    #[error("the jail's thread ended early")]
    Thread,
}

/// The proxy's listening sockets, bound inside the jail's network namespace on
/// 127.0.0.1 (blocking std sockets; make them non-blocking before handing them to tokio).
pub(super) struct JailSockets {
    /// The explicit proxy, [`PROXY_PORT`].
    pub proxy: TcpListener,
    /// The SOCKS5 listener, [`SOCKS_PORT`].
    pub socks: TcpListener,
    /// Every redirected TCP connection, [`rules::TRANSPARENT_PORT`].
    pub transparent: TcpListener,
    /// Every DNS query over UDP, [`rules::DNS_PORT`].
    pub dns_udp: UdpSocket,
    /// Every DNS query over TCP, [`rules::DNS_PORT`].
    pub dns_tcp: TcpListener,
    /// The jail's `sock_diag` socket, for the connect supervisor (taken by `run`).
    pub unix_diag: Option<super::unix::Diag>,
}

/// What the jail's first process is started with.
pub(super) struct Init {
    /// `__jail-init`'s arguments (user, `--`, CMD and its arguments).
    pub args: Vec<OsString>,
    /// CMD's environment (init passes its own on).
    pub env: Vec<(OsString, OsString)>,
    /// Init's (and CMD's) 0, 1 and 2.
    pub stdio: super::pty::ChildStdio,
    /// The jail's end of the connect supervisor's socket: init's descriptor 3.
    pub supervisor: Option<OwnedFd>,
}

/// The jail's first process, started.
pub(super) struct Started {
    /// Its PID as `run` sees it (signals are passed to it).
    pub pid: u32,
    /// Its exit status, once it has exited.
    pub exit: oneshot::Receiver<io::Result<ExitStatus>>,
}

/// A jail whose namespace and sockets are made, its command not started yet.
pub(super) struct Jail {
    go: mpsc::Sender<Init>,
    started: mpsc::Receiver<Result<Started, JailError>>,
}

impl Jail {
    /// Make the namespace, apply the ruleset and bind the sockets, on a new thread.
    pub(super) fn create(ports: Ports) -> Result<(Jail, JailSockets), JailError> {
        let (made_tx, made) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        let (started_tx, started) = mpsc::channel();
        std::thread::Builder::new()
            .name("egress-jail".into())
            .spawn(move || {
                let sockets = match make(ports) {
                    Ok(sockets) => sockets,
                    Err(e) => return drop(made_tx.send(Err(e))),
                };
                if made_tx.send(Ok(sockets)).is_err() {
                    return;
                }
                // Dropped without a command: the jail ends with this thread.
                if let Ok(init) = go_rx.recv() {
                    start_and_wait(init, &started_tx);
                }
            })
            .map_err(JailError::Spawn)?;
        let sockets = made.recv().map_err(|_| JailError::Thread)??;
        Ok((Jail { go, started }, sockets))
    }

    /// Start the jail's first process (in a new PID namespace inside the jail).
    pub(super) fn start(self, init: Init) -> Result<Started, JailError> {
        self.go.send(init).map_err(|_| JailError::Thread)?;
        self.started.recv().map_err(|_| JailError::Thread)?
    }
}

/// On the jail's thread: the namespace, its routes and rules, the sockets.
fn make(ports: Ports) -> Result<JailSockets, JailError> {
    unshare(CloneFlags::CLONE_NEWNET).map_err(|source| JailError::Namespace {
        what: "network",
        source,
    })?;
    pass_net_admin_on();
    tool("ip", "iproute2", &["link", "set", "lo", "up"], None)?;
    // A second loopback address: glibc's getaddrinfo with AI_ADDRCONFIG (getent ahosts,
    // wget, ...) returns IPv4 only where an IPv4 address other than 127.0.0.1 exists, so
    // with 127.0.0.1 alone those tools would resolve nothing in the jail.
    tool("ip", "iproute2", &ADDRCONFIG_ADDRESS, None)?;
    let route = ["route", "add", "default", "dev", "lo", "src", "127.0.0.1"];
    tool("ip", "iproute2", &route, None)?;
    // Over netlink, as `rules --apply` does: the jail needs no `nft` (one transaction,
    // all or nothing).
    rules::apply(&rules::jail_ruleset(ports)).map_err(JailError::Rules)?;
    let at = |port| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let tcp = |port| {
        let addr = at(port);
        TcpListener::bind(addr).map_err(|source| JailError::Bind { addr, source })
    };
    let dns = at(ports.dns);
    Ok(JailSockets {
        proxy: tcp(PROXY_PORT)?,
        socks: tcp(SOCKS_PORT)?,
        transparent: tcp(ports.transparent)?,
        dns_udp: UdpSocket::bind(dns).map_err(|source| JailError::Bind { addr: dns, source })?,
        dns_tcp: tcp(ports.dns)?,
        unix_diag: Some(super::unix::Diag::open().map_err(JailError::Diag)?),
    })
}

/// On the jail's thread: start init in PID, IPC and UTS namespaces of its own (when it
/// exits, every process left in the jail is killed), report it, then wait for it.
fn start_and_wait(init: Init, started: &mpsc::Sender<Result<Started, JailError>>) {
    let supervisor = init.supervisor;
    // IPC and UTS too: System V IPC and POSIX message queues of the jail's own, and a
    // host name of its own (the host's, to start with).
    let own = CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC | CloneFlags::CLONE_NEWUTS;
    let spawned = unshare(own)
        .map_err(|source| JailError::Namespace {
            what: "PID, IPC and UTS",
            source,
        })
        .and_then(|()| {
            // `/proc/self/exe` is this binary even if its file was replaced since.
            let mut command = Command::new("/proc/self/exe");
            command
                .arg("__jail-init")
                .args(&init.args)
                .env_clear()
                .envs(init.env);
            init.stdio.apply(&mut command);
            if let Some(fd) = &supervisor {
                as_descriptor_3(&mut command, fd.as_raw_fd());
            }
            command.spawn().map_err(JailError::Spawn)
        });
    // Init holds its own copy now.
    drop(supervisor);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return drop(started.send(Err(e))),
    };
    let (exit_tx, exit) = oneshot::channel();
    let pid = child.id();
    if started.send(Ok(Started { pid, exit })).is_err() {
        let _ = child.kill();
    }
    let _ = exit_tx.send(child.wait());
}

/// `fd` as the child's descriptor 3 (without close-on-exec), where `__jail-init
/// --supervised` expects the connect supervisor's socket.
#[allow(unsafe_code)]
fn as_descriptor_3(command: &mut Command, fd: RawFd) {
    use std::os::unix::process::CommandExt;
    let setup = move || -> io::Result<()> {
        // SAFETY: dup2 and fcntl take plain integers; both are async-signal-safe.
        let rc = unsafe {
            if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            }
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: `setup` makes only async-signal-safe calls and allocates nothing.
    unsafe { command.pre_exec(setup) };
}

/// Without root (`run` given CAP_SYS_ADMIN and CAP_NET_ADMIN by file capabilities),
/// `ip` and `nft` would start with none: raise CAP_NET_ADMIN into this thread's ambient
/// set, which the processes it starts inherit. (The jail's init clears it for CMD.) A
/// failure shows as theirs.
fn pass_net_admin_on() {
    use caps::{CapSet, Capability};
    if nix::unistd::geteuid().is_root() {
        return;
    }
    let cap = Capability::CAP_NET_ADMIN;
    let _ = caps::raise(None, CapSet::Inheritable, cap)
        .and_then(|()| caps::raise(None, CapSet::Ambient, cap));
}

/// Run `program` (iproute2's `ip`, `nft`) from this thread, so inside its namespace,
/// with `input` on its standard input.
fn tool(
    program: &str,
    package: &'static str,
    args: &[&str],
    input: Option<&str>,
) -> Result<(), JailError> {
    let command = format!("{program} {}", args.join(" "));
    let mut child = Command::new(find(program))
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| JailError::ToolMissing {
            command: command.clone(),
            package,
            source,
        })?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        // A write error shows as the tool's failure below.
        let _ = stdin.write_all(text.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|source| JailError::ToolMissing {
            command: command.clone(),
            package,
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(JailError::ToolFailed {
        command,
        status: out.status,
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// `program` on `PATH`, or in the system directories `PATH` may lack (`ip` and `nft`
/// live in `/usr/sbin` or `/sbin` on many systems).
fn find(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| PathBuf::from(program))
}
