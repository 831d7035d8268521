//! `run`'s orchestration, from its [`RunConfig`]: the privileges, the jail (or the
//! environment alone with `--env-only`), serving, CMD's status.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use caps::{CapSet, Capability};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{getegid, geteuid, Pid};
use tokio::sync::oneshot;

use super::env::{self, Ids, UserError};
use super::jail::{Init, Jail, JailError, JailSockets};
use super::pty::{self, ChildStdio};
use super::rules::Ports;
use super::signals::Signals;
use super::trust;
use super::unix::{AllowUnix, Diag, Supervisor};
use super::view;
use crate::config::{CaSource, RunConfig, ServeConfig};
use crate::serve::{self, Listeners, StartError};

/// Why `run` stopped on its own account.
#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("{0}")]
    Flags(String),
    #[error("{0}")]
    User(#[from] UserError),
    #[error(
        "missing privileges: {0} (run needs root, or CAP_SYS_ADMIN and CAP_NET_ADMIN; \
         --env-only sets only the environment, which is not a boundary)"
    )]
    Privileges(String),
    #[error("{0}")]
    Jail(#[from] JailError),
    #[error("{0}")]
    Start(#[from] StartError),
    #[error("cannot serve the jail's sockets: {0}")]
    Listen(io::Error),
    #[error("cannot block signals: {0}")]
    Signals(nix::Error),
    #[error("cannot give the command a terminal of its own: {0}")]
    Terminal(io::Error),
    #[error("cannot start the runtime: {0}")]
    Runtime(io::Error),
    #[error("cannot wait for the command: {0}")]
    Wait(io::Error),
    #[error("the proxy stopped while the command ran")]
    ProxyStopped,
    #[error("cannot supervise the command's connections: {0}")]
    Supervisor(io::Error),
    #[error("cannot start the command's first process: {0}")]
    Spawn(io::Error),
    #[error("the interception CA: {0}")]
    Ca(String),
    #[error("{0}")]
    Load(#[from] crate::load::LoadError),
}

/// CMD started: its (or the jail's init's) PID and its exit status to come.
struct Running {
    pid: u32,
    exit: oneshot::Receiver<io::Result<ExitStatus>>,
}

pub(super) fn main(args: RunConfig) -> u8 {
    // First, before any thread or child: nothing `run` starts (the jail's init above
    // all, which CMD could otherwise reach through /proc/1/fd) inherits a descriptor of
    // the caller's but 0, 1 and 2.
    super::session::close_inherited_on_exec();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("egress-proxy: run: error: {e}");
            125
        }
    }
}

fn run(args: RunConfig) -> Result<u8, RunError> {
    let mut config = args.serve.clone();
    let policies = crate::load::load(&config.org, config.policy.as_deref())?;
    let run_ca =
        trust::run_ca(args.ca.as_deref(), &policies.inspected_entries()).map_err(RunError::Ca)?;
    let allow_unix = AllowUnix::new(&args.allow_unix).map_err(RunError::Flags)?;
    let sudo = if geteuid().is_root() {
        (
            std::env::var("SUDO_UID").ok(),
            std::env::var("SUDO_GID").ok(),
        )
    } else {
        (None, None)
    };
    let ids = env::command_ids(args.user.as_deref(), sudo)?;
    let asked = view::jail_view(&args, &policies.org, ids.uid).map_err(RunError::Flags)?;
    drop(policies);
    let view::JailView {
        init_args: mut view_args,
        writable,
        later,
    } = asked;
    if !args.env_only {
        view_args.push("--supervised".into());
    }
    let mut cmd_env = env::command_env(std::env::vars_os());
    // `--canary`: each variable a fresh value, which the proxy looks for.
    let (canary_vars, canaries) = env::canaries(&args.canaries).map_err(RunError::Flags)?;
    cmd_env.retain(|(name, _)| !canary_vars.iter().any(|(var, _)| var == name));
    cmd_env.extend(canary_vars);
    config.canaries = canaries.into();
    // A bundle for `--env-only`, removed when `run` ends (the jail's is on its own /run).
    let mut env_only_bundle = None;
    if let Some(ca) = &run_ca {
        config.ca = Some(CaSource::Loaded(ca.ca.clone()));
        if args.env_only {
            let dir = tempdir_for_bundle().map_err(RunError::Ca)?;
            let path = dir.path.join("ca-bundle.pem");
            trust::write_bundle(&path, &ca.ca.pem).map_err(RunError::Ca)?;
            trust::bundle_env(&mut cmd_env, &path);
            env_only_bundle = Some(dir);
        } else {
            trust::bundle_env(&mut cmd_env, std::path::Path::new(trust::JAIL_BUNDLE));
            cmd_env.push((trust::CA_ENV.into(), ca.ca.pem.clone().into()));
        }
    }
    // Before any thread starts, so that every thread inherits the mask.
    let signals = Signals::block(false).map_err(RunError::Signals)?;
    // CMD's own terminal when ours is one; dropped when `run` returns, which restores ours.
    let (stdio, _relay) =
        pty::start(nix::unistd::Uid::from_raw(ids.uid)).map_err(RunError::Terminal)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let (uid, gid) = (ids.uid.to_string(), ids.gid.to_string());
    let mut init_args: Vec<OsString> = ["--uid", &uid, "--gid", &gid].map(OsString::from).to_vec();
    init_args.extend(view_args);
    if args.seccomp_log {
        init_args.push("--seccomp-log".into());
    }
    init_args.push("--".into());
    init_args.extend(args.command);
    if args.env_only {
        eprintln!(
            "egress-proxy: run: warning: --env-only: CMD only has the proxy in its environment; \
             this is NOT a boundary: it can still reach the network directly"
        );
        let start = move || start_unconfined(init_args, cmd_env, stdio);
        let code = runtime.block_on(serve_then(config, None, start, signals));
        drop(env_only_bundle);
        return code;
    }
    let missing = missing_capabilities(ids);
    if !missing.is_empty() {
        return Err(RunError::Privileges(missing.join(", ")));
    }
    for path in &args.allow_unix {
        eprintln!(
            "egress-proxy: run: warning: --allow-unix {}: CMD may connect to the Unix \
             sockets there, outside the jail",
            path.display()
        );
    }
    if writable.everything() {
        eprintln!(
            "egress-proxy: run: warning: --writable /: CMD may write anywhere its user may; \
             the jail is network-only (the proxy's own files stay covered, /proc/sys and /sys \
             stay read-only)"
        );
    } else if writable.started_in_root {
        eprintln!(
            "egress-proxy: run: note: started in /, which stays read-only: CMD may write in \
             /tmp, /var/tmp, /dev/shm and each --writable PATH"
        );
    }
    if args.seccomp_log {
        eprintln!(
            "egress-proxy: run: warning: --seccomp-log: the system call filter only logs: \
             the calls it lists run (the kernel logs each), for diagnosis"
        );
    }
    let (jail, mut sockets) = Jail::create(Ports::default())?;
    let supervisor = supervise_connects(sockets.unix_diag.take(), allow_unix)?;
    runtime
        .block_on(async move {
            let listeners = hand_over(sockets).map_err(RunError::Listen)?;
            let start = move || {
                let started = jail.start(Init {
                    args: init_args,
                    env: cmd_env,
                    stdio,
                    supervisor: Some(supervisor),
                })?;
                Ok(Running {
                    pid: started.pid,
                    exit: started.exit,
                })
            };
            serve_then(config, Some(listeners), start, signals).await
        })
        .inspect(|_| {
            // CMD has exited: what it left that runs later, before anything runs it.
            for line in later.created() {
                eprintln!("{line}");
            }
        })
}

/// Start `run`'s connect supervisor (docs/reference/confinement.md, "Unix sockets"): the
/// jail's end of its socket, for init's descriptor 3.
fn supervise_connects(
    diag: Option<Diag>,
    allow: AllowUnix,
) -> Result<std::os::fd::OwnedFd, RunError> {
    let diag = diag.ok_or_else(|| RunError::Supervisor(io::Error::other("no sock_diag socket")))?;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(RunError::Supervisor)?;
    Supervisor {
        from_jail: ours.into(),
        diag,
        allow,
    }
    .start()
    .map_err(RunError::Supervisor)?;
    Ok(theirs.into())
}

/// The capabilities the jail needs that this process lacks: the namespaces, mounts and
/// rules always; switching CMD's user when it is not ours; clearing the bounding set of
/// a root CMD.
fn missing_capabilities(ids: Ids) -> Vec<&'static str> {
    use Capability::*;
    let mut needed = vec![
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
    ];
    if ids.uid != geteuid().as_raw() {
        needed.push((CAP_SETUID, "CAP_SETUID"));
    }
    if ids.gid != getegid().as_raw() {
        needed.push((CAP_SETGID, "CAP_SETGID"));
    }
    if ids.uid == 0 {
        needed.push((CAP_SETPCAP, "CAP_SETPCAP"));
    }
    needed
        .into_iter()
        .filter(|(cap, _)| !caps::has_cap(None, CapSet::Effective, *cap).unwrap_or(false))
        .map(|(_, name)| name)
        .collect()
}

/// Tokio's listeners for the sockets bound in the jail: the explicit proxy and SOCKS5
/// (what CMD's proxy variables name), the transparent listener and the DNS listener (UDP
/// and TCP), where the ruleset sends the jail's traffic.
fn hand_over(sockets: JailSockets) -> io::Result<Listeners> {
    let JailSockets {
        proxy,
        socks,
        transparent,
        dns_udp,
        dns_tcp,
        unix_diag: _,
    } = sockets;
    proxy.set_nonblocking(true)?;
    socks.set_nonblocking(true)?;
    transparent.set_nonblocking(true)?;
    dns_udp.set_nonblocking(true)?;
    dns_tcp.set_nonblocking(true)?;
    Ok(Listeners {
        proxy: tokio::net::TcpListener::from_std(proxy)?,
        admin: None,
        transparent: Some(tokio::net::TcpListener::from_std(transparent)?),
        socks: Some(tokio::net::TcpListener::from_std(socks)?),
        dns: Some((
            tokio::net::UdpSocket::from_std(dns_udp)?,
            tokio::net::TcpListener::from_std(dns_tcp)?,
        )),
    })
}

/// Serve; once serving, `start` CMD and pass it the signals; when it exits, stop serving
/// and flush the audit log; CMD's status as `run`'s exit code.
async fn serve_then(
    config: ServeConfig,
    listeners: Option<Listeners>,
    start: impl FnOnce() -> Result<Running, RunError>,
    signals: Signals,
) -> Result<u8, RunError> {
    let (ready, is_ready) = oneshot::channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let options = serve::Options {
        keep_sighup: true,
        ready: Some(ready),
    };
    let shutdown = async {
        let _ = stopped.await;
    };
    let serving = serve::serve_with(config, listeners, shutdown, options);
    tokio::pin!(serving);
    tokio::select! {
        biased;
        result = &mut serving => return Err(result.err().map_or(RunError::ProxyStopped, RunError::Start)),
        _ = is_ready => {}
    }
    let running = match start() {
        Ok(running) => running,
        Err(e) => {
            let _ = stop.send(());
            let _ = serving.await;
            return Err(e);
        }
    };
    if let Err(e) = signals.forward_to(running.pid) {
        tracing::warn!(error = %e, "signals will not be passed to the command");
    }
    let mut exit = running.exit;
    let status = tokio::select! {
        biased;
        status = &mut exit => status,
        result = &mut serving => {
            // The proxy is CMD's only way out: without it, CMD does not go on.
            let _ = kill(Pid::from_raw(running.pid as i32), Signal::SIGKILL);
            let _ = exit.await;
            return Err(result.err().map_or(RunError::ProxyStopped, RunError::Start));
        }
    };
    let _ = stop.send(());
    serving.await?;
    let status = status
        .map_err(|_| RunError::Wait(io::Error::other("the waiting thread ended")))?
        .map_err(RunError::Wait)?;
    Ok(exit_code(status))
}

/// The code `run` exits with for this status of CMD (or of the jail's init, which exits
/// with CMD's).
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => 125,
    }
}

/// `--env-only`: the same first process (`__jail-init --env-only`), started here: it
/// switches to CMD's user and supervises CMD, with no namespace.
fn start_unconfined(
    init_args: Vec<OsString>,
    cmd_env: Vec<(OsString, OsString)>,
    stdio: ChildStdio,
) -> Result<Running, RunError> {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg("__jail-init")
        .arg("--env-only")
        .args(init_args)
        .env_clear()
        .envs(cmd_env);
    stdio.apply(&mut cmd);
    let (spawned_tx, spawned) = std::sync::mpsc::channel();
    let (exit_tx, exit) = oneshot::channel();
    std::thread::Builder::new()
        .name("egress-command".into())
        .spawn(move || match cmd.spawn() {
            Err(e) => drop(spawned_tx.send(Err(e))),
            Ok(mut child) => {
                let _ = spawned_tx.send(Ok(child.id()));
                let _ = exit_tx.send(child.wait());
            }
        })
        .map_err(RunError::Spawn)?;
    let pid = spawned
        .recv()
        .map_err(|_| RunError::Spawn(io::Error::other("the starting thread ended")))?
        .map_err(RunError::Spawn)?;
    Ok(Running { pid, exit })
}

/// A directory of this run's own, removed when dropped.
struct TempDir {
    path: std::path::PathBuf,
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn tempdir_for_bundle() -> Result<TempDir, String> {
    let path = std::env::temp_dir().join(format!("egress-proxy-run-{}", std::process::id()));
    std::fs::create_dir_all(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
    Ok(TempDir { path })
}
