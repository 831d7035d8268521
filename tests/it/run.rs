//! `egress-proxy run` (docs/guides/confinement.md) and `rules`: CMD in a network whose
//! only way out is the proxy. The jail needs root (and `nft`, `ip`, `python3`): without
//! them these tests print why and pass without checking anything. Origins listen on the
//! host's loopback, which the jail does not share; every "cannot reach" check shows in the
//! same test that the thing is reachable from outside, so a broken probe cannot pass.

mod canary;
mod confine;
mod exits;
mod files;
mod git;
mod hold;
mod inspect;
mod kernel;
mod later;
mod lifecycle;
mod names;
mod otlp;
mod own;
mod parent;
mod reach;
mod rules;
mod rules_apply;
mod socks;
mod split;
mod ssh;
mod terminal;
mod tls_origin;
mod tools;
mod transparent;
mod unix;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::binary;
use crate::support::unique_temp_dir;

/// How long one `run` may take before the test fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// A fresh directory of the host's that CMD sees and may write: under the crate's
/// `target/tmp`, inside the starting directory of every `run` these tests start (the
/// crate's root). The host's `/tmp`, where [`unique_temp_dir`] makes them, is not in
/// CMD's view: the jail's `/tmp` is its own.
pub(crate) fn shared_dir(tag: &str) -> PathBuf {
    let dir = unique_temp_dir(tag);
    let shared = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir.file_name().unwrap());
    let _ = std::fs::remove_dir_all(&shared);
    std::fs::create_dir_all(&shared).expect("create a directory under target/tmp");
    let _ = std::fs::remove_dir(&dir);
    shared
}

/// Why the jail tests cannot run here, if they cannot.
pub(crate) fn skip_reason() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("run's jail needs root".into());
    }
    for tool in ["nft", "ip", "python3", "nsenter"] {
        if which(tool).is_none() {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    None
}

/// Return from the test, saying why, when the jail cannot be made here.
macro_rules! require_jail {
    () => {
        if let Some(reason) = crate::run::skip_reason() {
            eprintln!("skipped: {reason}");
            return;
        }
    };
}
pub(crate) use require_jail;

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

/// The real Python interpreter (not a version manager's shim), for scripts in the jail.
pub(crate) fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("run python3");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    })
}

/// One `egress-proxy run`, built up.
pub(crate) struct Jailed {
    pub dir: PathBuf,
    org: String,
    policy: Option<String>,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
}

/// What a finished `run` left.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub audit: Vec<Value>,
}

impl Outcome {
    pub(crate) fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- audit ---\n{:#?}",
            self.status, self.stdout, self.stderr, self.audit
        )
    }
}

impl Jailed {
    /// `allowed.test` allowed on `port` (and 80, 443) with loopback open, pinned to
    /// 127.0.0.1, the request policy allowing it.
    pub(crate) fn standard(port: u16) -> Jailed {
        Jailed::new(Org::standard(port).to_toml())
            .policy(allowlist_json(&["allowed.test"]))
            .arg("--resolve")
            .arg("allowed.test=127.0.0.1")
    }

    pub(crate) fn new(org: impl Into<String>) -> Jailed {
        Jailed {
            dir: unique_temp_dir("run"),
            org: org.into(),
            policy: None,
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    pub(crate) fn policy(mut self, json: impl Into<String>) -> Jailed {
        self.policy = Some(json.into());
        self
    }

    pub(crate) fn arg(mut self, arg: impl Into<OsString>) -> Jailed {
        self.args.push(arg.into());
        self
    }

    pub(crate) fn env(mut self, name: &str, value: &str) -> Jailed {
        self.env.push((name.into(), value.into()));
        self
    }

    pub(crate) fn audit_path(&self) -> PathBuf {
        self.dir.join("audit.jsonl")
    }

    /// The command line, CMD after `--`. `run` is not started yet.
    pub(crate) fn command(&self, cmd: &[&str]) -> Command {
        let org = self.dir.join("org.toml");
        std::fs::write(&org, &self.org).expect("write org");
        let mut c = Command::new(binary());
        c.arg("run").arg("--org").arg(org);
        c.arg("--audit-log").arg(self.audit_path());
        if let Some(policy) = &self.policy {
            let path = self.dir.join("policy.json");
            std::fs::write(&path, policy).expect("write policy");
            c.arg("--policy").arg(path);
        }
        c.args(&self.args).arg("--").args(cmd);
        // Deterministic: CMD runs as the caller unless a test says otherwise.
        c.env_remove("SUDO_UID").env_remove("SUDO_GID");
        c.env("NO_COLOR", "1").env_remove("EGRESS_PROXY_LOG");
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Run `cmd` in the jail to its end.
    pub(crate) async fn run(self, cmd: &[&str]) -> Outcome {
        let command = self.command(cmd);
        let audit = self.audit_path();
        tokio::task::spawn_blocking(move || finish(command.spawn_child(), &audit))
            .await
            .expect("join")
    }

    /// Run a Python script in the jail.
    pub(crate) async fn python(self, script: &str) -> Outcome {
        self.run(&[python(), "-c", script]).await
    }

    /// Run a shell script in the jail.
    pub(crate) async fn sh(self, script: &str) -> Outcome {
        self.run(&["sh", "-c", script]).await
    }
}

trait SpawnChild {
    fn spawn_child(self) -> Child;
}

impl SpawnChild for Command {
    fn spawn_child(mut self) -> Child {
        self.spawn().expect("spawn egress-proxy run")
    }
}

/// Wait for `child` (killed after [`RUN_TIMEOUT`]) and collect what it left.
pub(crate) fn finish(mut child: Child, audit: &Path) -> Outcome {
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "run did not end within {RUN_TIMEOUT:?}: {}",
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let audit = std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
        .collect();
    Outcome {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        audit,
    }
}

/// The processes below `pid` (children first), from `/proc/PID/task/*/children`.
pub(crate) fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return found;
    };
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            found.push(child);
            found.extend(descendants(child));
        }
    }
    found
}

/// Wait until `run` (`pid`) has started the jail's init (not one of the `ip` or `nft`
/// it runs before), and return its pid.
pub(crate) fn wait_for_init(pid: u32) -> u32 {
    let started = Instant::now();
    loop {
        let init = descendants(pid).into_iter().find(|child| {
            std::fs::read(format!("/proc/{child}/cmdline"))
                .is_ok_and(|line| line.split(|b| *b == 0).any(|arg| arg == b"__jail-init"))
        });
        if let Some(init) = init {
            return init;
        }
        assert!(
            started.elapsed() < RUN_TIMEOUT,
            "run {pid} started no process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait for `path` to exist (CMD writes it when it has done its part).
pub(crate) fn wait_for_file(path: &Path, child: &mut Child) {
    let started = Instant::now();
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut err);
            }
            panic!("run exited with {status} before {}: {err}", path.display());
        }
        assert!(started.elapsed() < RUN_TIMEOUT, "no {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process `pid` still runs (a zombie waiting for a reaper does not).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        !matches!(state, Some("Z") | Some("X") | None)
    })
}
