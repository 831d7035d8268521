//! A real OpenSSH server (Debian's `openssh-server`) on a free loopback port, started by
//! the test with a throw-away host key and a throw-away client key authorised for the
//! user the tests run as; and the client command lines that reach it through a SOCKS5
//! proxy with `nc -X 5` as `ProxyCommand`, as docs/reference/clients.md shows them.
//!
//! Tests that need it skip, saying why, when `sshd`, `ssh`, `nc` (the OpenBSD one, with
//! `-X`) or `git` is missing (`.ci/run` installs them).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::proxy::free_port;
use super::unique_temp_dir;

/// How long a started `sshd` may take to say it is listening.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one client script (ssh, git over ssh) may take before the test fails.
pub(crate) const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The server, with an absolute path: `sshd` re-executes itself and refuses otherwise.
const SSHD: &str = "/usr/sbin/sshd";

/// git without the system's or the user's configuration.
pub(crate) const GIT: &str = "GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git";

/// Why the SSH tests cannot run here, if they cannot: a missing tool, or an `nc`
/// without SOCKS5 (`-X 5` is netcat-openbsd's; netcat-traditional has no `-X`).
pub(crate) fn skip_reason() -> Option<String> {
    if !Path::new(SSHD).is_file() {
        return Some(format!(
            "{SSHD} is not installed (apt-get install openssh-server)"
        ));
    }
    for tool in ["ssh", "ssh-keygen", "nc", "git"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    let nc = Command::new("sh")
        .args(["-c", "nc -h 2>&1 | grep -q -- '-X proxy_protocol'"])
        .status()
        .is_ok_and(|s| s.success());
    if !nc {
        return Some("`nc` has no `-X` (apt-get install netcat-openbsd)".into());
    }
    None
}

/// Return from the test, saying why, when sshd, ssh, nc or git is missing.
macro_rules! require_ssh {
    () => {
        if let Some(reason) = crate::support::sshd::skip_reason() {
            eprintln!("skipped: {reason}");
            return;
        }
    };
}
pub(crate) use require_ssh;

/// One `sshd -D -e`; killed (by its PID) when dropped.
pub(crate) struct Sshd {
    child: Child,
    port: u16,
    dir: PathBuf,
    user: String,
}

impl Sshd {
    /// Start one on 127.0.0.1 with fresh keys in a fresh directory, one `run`'s jail
    /// sees (its client key and known hosts are used inside).
    pub(crate) fn start() -> Sshd {
        let dir = crate::run::shared_dir("sshd");
        keygen(&dir.join("host"));
        keygen(&dir.join("client"));
        std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys")).unwrap();
        if nix::unistd::geteuid().is_root() {
            // Privilege separation needs it; Debian's service unit makes it at boot.
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let port = free_port("127.0.0.1".parse().unwrap()).port();
        let d = dir.display();
        let config = format!(
            "ListenAddress 127.0.0.1:{port}\nHostKey {d}/host\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
             StrictModes no\nPrintMotd no\nUseDNS no\nLogLevel VERBOSE\n"
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        let log = std::fs::File::create(dir.join("sshd.log")).unwrap();
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        let user = whoami();
        let mut sshd = Sshd {
            child,
            port,
            dir,
            user,
        };
        sshd.wait_listening();
        sshd
    }

    fn wait_listening(&mut self) {
        let ready = format!("Server listening on 127.0.0.1 port {}", self.port);
        let started = Instant::now();
        while !self.log().contains(&ready) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("sshd exited ({status}) before listening:\n{}", self.log());
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "sshd did not listen within {READY_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// What sshd logged (`-e`: to standard error, kept in a file).
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }

    /// How many TCP connections sshd has accepted (its `Connection from` lines).
    pub(crate) fn connections(&self) -> usize {
        self.log().matches("Connection from ").count()
    }

    /// The directory it owns, for the tests' own files (repositories, clones).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// `ssh` with no configuration but these options: the throw-away client key, the
    /// host key accepted unseen and never recorded, no prompts, a connect timeout.
    fn ssh_base(&self) -> String {
        format!(
            "ssh -F /dev/null -i {}/client -o StrictHostKeyChecking=no \
             -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o ConnectTimeout=10 \
             -o LogLevel=ERROR",
            self.dir.display()
        )
    }

    /// The `ssh` command for git (`GIT_SSH_COMMAND`) through SOCKS5 at `socks`.
    pub(crate) fn ssh_via(&self, socks: &str) -> String {
        format!(
            "{} -o ProxyCommand='nc -X 5 -x {socks} %h %p'",
            self.ssh_base()
        )
    }

    /// `ssh USER@HOST true` on sshd's port through SOCKS5 at `socks` (`nc -X 5` sends
    /// HOST to the proxy as a name: ssh does not resolve it when a ProxyCommand is set).
    pub(crate) fn ssh_true_via(&self, socks: &str, host: &str) -> String {
        self.ssh_true_with(&format!("nc -X 5 -x {socks} %h %p"), host)
    }

    /// `ssh USER@HOST true` with `nc 127.0.0.1 %p` as ProxyCommand: straight to sshd,
    /// no proxy, whatever HOST is. Shows the server lets this client in under that name.
    pub(crate) fn ssh_true_direct(&self, host: &str) -> String {
        self.ssh_true_with("nc 127.0.0.1 %p", host)
    }

    fn ssh_true_with(&self, proxy_command: &str, host: &str) -> String {
        format!(
            "{} -o ProxyCommand='{proxy_command}' -p {} {}@{host} true",
            self.ssh_base(),
            self.port,
            self.user
        )
    }

    /// `ssh://USER@HOST:PORT/PATH`, for git.
    pub(crate) fn url(&self, host: &str, path: &Path) -> String {
        format!("ssh://{}@{host}:{}{}", self.user, self.port, path.display())
    }

    /// A bare repository `repo.git` in sshd's directory with one commit holding
    /// `README`; its absolute path.
    pub(crate) fn bare_repository(&self) -> PathBuf {
        let work = self.dir.join("seed");
        let bare = self.dir.join("repo.git");
        let script = format!(
            "set -e; {GIT} init -q -b main {w}; echo 'over ssh' > {w}/README; \
             {GIT} -C {w} add README; \
             {GIT} -C {w} -c user.name=t -c user.email=t@t.test commit -q -m one; \
             {GIT} clone -q --bare {w} {b}; rm -rf {w}",
            w = work.display(),
            b = bare.display()
        );
        let out = bounded_sh(&script);
        assert!(out.status.success(), "{out:?}");
        bare
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "egress-proxy-test",
            "-f",
        ])
        .arg(path)
        .output()
        .expect("run ssh-keygen");
    assert!(out.status.success(), "ssh-keygen: {out:?}");
}

fn whoami() -> String {
    let uid = nix::unistd::geteuid();
    nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| "root".into())
}

/// `script` run by `sh` on the host with no proxy in its environment, killed if it
/// takes longer than [`CLIENT_TIMEOUT`] (with what it started). Blocking: call it from a blocking thread when
/// the test's runtime serves something meanwhile.
pub(crate) fn bounded_sh(script: &str) -> Output {
    let dir = unique_temp_dir("sh");
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new("sh")
        .args(["-c", script])
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .expect("run sh");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for sh") {
            break status;
        }
        if started.elapsed() > CLIENT_TIMEOUT {
            // Its own process group: ssh and nc under it go too, nothing else.
            let group = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            panic!(
                "`{script}` took over {CLIENT_TIMEOUT:?}\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = Output {
        status,
        stdout: std::fs::read(&out).unwrap_or_default(),
        stderr: std::fs::read(&err).unwrap_or_default(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    output
}
