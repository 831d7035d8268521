//! Starts the `egress-proxy` binary on `127.0.0.1:0` and reads its audit log.
//!
//! Every proxy gets `--resolve` pins or a `--dns-server`: no test may reach the
//! system resolver. The child is killed when the [`Proxy`] is dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::unique_temp_dir;

/// How long the proxy may take to print its listening address.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a record may take to reach the audit file (docs/reference/audit-log.md says 1 s).
pub const AUDIT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long to wait after the expected records for unexpected extra ones.
pub const QUIET_PERIOD: Duration = Duration::from_millis(300);

/// The binary under test: this crate's, or `EGRESS_PROXY_BIN` when set (to run
/// these tests against another build of the proxy).
pub fn binary() -> String {
    std::env::var("EGRESS_PROXY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_egress-proxy").to_string())
}

/// Builder for one proxy process.
pub struct ProxyBuilder {
    org: String,
    policy: Option<String>,
    pins: Vec<(String, String)>,
    dns: Option<SocketAddr>,
    audit_allowed: bool,
    listen: Option<SocketAddr>,
    args: Vec<String>,
    /// `--admin-listen 127.0.0.1:0`, with `--admin-token-file` when the token is set.
    admin: Option<Option<String>>,
    /// `--audit-log PATH` instead of a file in the proxy's temp dir.
    audit_at: Option<PathBuf>,
    /// A command that execs the proxy (same pid), e.g. `prlimit --nofile=S:H`.
    run_under: Vec<String>,
    /// `EGRESS_PROXY_LOG` for this proxy (its own log's filter), e.g. `debug`.
    log: Option<String>,
    /// `--org PATH` of a file the test laid out (a ConfigMap's symlinks), not written here.
    org_at: Option<PathBuf>,
}

impl ProxyBuilder {
    /// The usual proxy of these tests: the organization allows `allowed.test` on the
    /// origin's port with loopback opened (`Org::standard`), the proxy-level policy
    /// allows `allowed.test`, and the name is pinned to 127.0.0.1.
    pub fn standard(origin_port: u16) -> ProxyBuilder {
        ProxyBuilder::new(super::org::Org::standard(origin_port).to_toml())
            .policy(super::org::allowlist_json(&["allowed.test"]))
            .pin("allowed.test")
    }

    /// `org` is the organization policy TOML text.
    pub fn new(org: impl Into<String>) -> ProxyBuilder {
        ProxyBuilder {
            org: org.into(),
            policy: None,
            pins: Vec::new(),
            dns: None,
            audit_allowed: false,
            listen: None,
            args: Vec::new(),
            admin: None,
            audit_at: None,
            run_under: Vec::new(),
            log: None,
            org_at: None,
        }
    }

    /// The proxy's own log at `filter` (`EGRESS_PROXY_LOG`), e.g. `debug`.
    pub fn log(mut self, filter: &str) -> Self {
        self.log = Some(filter.to_string());
        self
    }

    /// `--org PATH`: the file the test made, instead of one written from the org text.
    pub fn org_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.org_at = Some(path.into());
        self
    }

    /// Start the proxy through `command`, which must exec it in place (`prlimit ...`).
    pub fn run_under(mut self, command: &[&str]) -> Self {
        self.run_under = command.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `--audit-log PATH` (`/dev/full`, or a file on a filesystem the test mounted).
    pub fn audit_log(mut self, path: impl Into<PathBuf>) -> Self {
        self.audit_at = Some(path.into());
        self
    }

    /// The admin API on `127.0.0.1:0` with this bearer token (written to a file).
    pub fn admin(mut self, token: &str) -> Self {
        self.admin = Some(Some(token.to_string()));
        self
    }

    /// The admin API on `127.0.0.1:0` without a token file (loopback only).
    pub fn admin_without_token(mut self) -> Self {
        self.admin = Some(None);
        self
    }

    /// `--policy` with this request policy JSON.
    pub fn policy(mut self, json: impl Into<String>) -> Self {
        self.policy = Some(json.into());
        self
    }

    /// `--resolve NAME=127.0.0.1`.
    pub fn pin(self, name: &str) -> Self {
        self.pin_to(name, "127.0.0.1")
    }

    pub fn pin_to(mut self, name: &str, ip: &str) -> Self {
        self.pins.push((name.to_string(), ip.to_string()));
        self
    }

    /// `--dns-server ADDR`.
    pub fn dns_server(mut self, addr: SocketAddr) -> Self {
        self.dns = Some(addr);
        self
    }

    /// `--audit-allowed`.
    pub fn audit_allowed(mut self) -> Self {
        self.audit_allowed = true;
        self
    }

    /// `--listen ADDR` instead of `127.0.0.1:0`, for tests that must write the proxy's
    /// own port into its org file (see [`free_port`]). Loopback addresses only.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        assert!(addr.ip().is_loopback(), "test bug: listen on loopback only");
        self.listen = Some(addr);
        self
    }

    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    pub async fn start(self) -> Proxy {
        assert!(
            !self.pins.is_empty() || self.dns.is_some(),
            "test bug: a proxy needs --resolve pins or --dns-server, never the system resolver"
        );
        let dir = unique_temp_dir("proxy");
        let org_path = match &self.org_at {
            Some(path) => path.clone(),
            None => {
                let path = dir.join("org.toml");
                std::fs::write(&path, &self.org).expect("write org file");
                path
            }
        };
        let audit_path = self
            .audit_at
            .clone()
            .unwrap_or_else(|| dir.join("audit.jsonl"));

        let mut cmd = match self.run_under.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(binary());
                cmd
            }
            None => Command::new(binary()),
        };
        cmd.arg("serve")
            .arg("--org")
            .arg(&org_path)
            .arg("--listen")
            .arg(
                self.listen
                    .map_or_else(|| "127.0.0.1:0".to_string(), |a| a.to_string()),
            )
            .arg("--audit-log")
            .arg(&audit_path);
        if let Some(policy) = &self.policy {
            let path = dir.join("policy.json");
            std::fs::write(&path, policy).expect("write policy file");
            cmd.arg("--policy").arg(path);
        }
        for (name, ip) in &self.pins {
            cmd.arg("--resolve").arg(format!("{name}={ip}"));
        }
        if let Some(dns) = self.dns {
            cmd.arg("--dns-server").arg(dns.to_string());
        }
        if self.audit_allowed {
            cmd.arg("--audit-allowed");
        }
        if let Some(token) = &self.admin {
            cmd.arg("--admin-listen").arg("127.0.0.1:0");
            if let Some(token) = token {
                let path = dir.join("admin-token");
                // Surrounding whitespace, as an editor leaves it: the proxy trims it.
                std::fs::write(&path, format!("  {token}\n")).expect("write token file");
                cmd.arg("--admin-token-file").arg(path);
            }
        }
        cmd.args(&self.args);
        configure_env(&mut cmd);
        if let Some(filter) = &self.log {
            cmd.env("EGRESS_PROXY_LOG", filter);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let command_line = format!("{cmd:?}");
        let mut child = cmd.spawn().expect("spawn egress-proxy");

        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let pipe = child.stderr.take().expect("stderr pipe");
        let buf = stderr.clone();
        std::thread::spawn(move || drain_stderr(pipe, buf, tx));

        let started = Instant::now();
        let addr = loop {
            if let Ok(addr) = rx.try_recv() {
                break addr;
            }
            if let Ok(Some(status)) = child.try_wait() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                panic!(
                    "egress-proxy exited with {status} before listening\ncommand: {command_line}\norg file:\n{}\nstderr:\n{}",
                    self.org,
                    stderr.lock().unwrap()
                );
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "egress-proxy printed no `listening on` line within {START_TIMEOUT:?}\ncommand: {command_line}\nstderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let admin = self.admin.as_ref().map(|token| {
            let text = stderr.lock().unwrap().clone();
            let addr = text
                .lines()
                .find_map(|l| l.split("admin API on ").nth(1))
                .and_then(|rest| rest.trim().parse().ok())
                .unwrap_or_else(|| panic!("no `admin API on` line before `listening on`\n{text}"));
            super::admin::AdminClient {
                addr,
                token: token.clone(),
            }
        });
        Proxy {
            addr,
            audit_path,
            dir,
            child: Some(child),
            stderr,
            admin,
        }
    }
}

/// A loopback port that was free a moment ago (bound, then released), for a proxy
/// whose org file must name its own port before it starts.
pub fn free_port(ip: std::net::IpAddr) -> SocketAddr {
    let listener = std::net::TcpListener::bind((ip, 0)).expect("bind a free port");
    listener.local_addr().expect("free port addr")
}

/// Quiet, uncoloured logs; `EGRESS_IT_RUST_LOG` passes a filter through.
fn configure_env(cmd: &mut Command) {
    cmd.env("NO_COLOR", "1").env_remove("EGRESS_PROXY_LOG");
    if let Ok(filter) = std::env::var("EGRESS_IT_RUST_LOG") {
        cmd.env("EGRESS_PROXY_LOG", filter);
    }
}

fn drain_stderr(
    pipe: std::process::ChildStderr,
    buf: Arc<Mutex<String>>,
    tx: mpsc::Sender<SocketAddr>,
) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    let mut found = false;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = strip_ansi(&String::from_utf8_lossy(&line));
        buf.lock().unwrap().push_str(&text);
        if !found {
            if let Some(addr) = parse_listening(&text) {
                found = true;
                let _ = tx.send(addr);
            }
        }
    }
}

/// The address after `listening on `, up to whitespace or quoting punctuation.
pub fn parse_listening(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("listening on ")? + "listening on ".len()..];
    let token: String = rest
        .trim_start_matches(['"', '`', '\''])
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, '"' | '`' | '\'' | ','))
        .collect();
    token.parse().ok()
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip a CSI sequence: ESC [ ... final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A running proxy.
pub struct Proxy {
    pub addr: SocketAddr,
    pub audit_path: PathBuf,
    pub dir: PathBuf,
    child: Option<Child>,
    stderr: Arc<Mutex<String>>,
    /// The admin API, when started with one.
    pub admin: Option<super::admin::AdminClient>,
}

impl Proxy {
    /// The admin API client; panics when the proxy has none.
    pub fn admin(&self) -> &super::admin::AdminClient {
        self.admin
            .as_ref()
            .expect("test bug: the proxy has no admin API")
    }

    /// The organization file the proxy was started with (rewrite it, then reload).
    pub fn org_path(&self) -> PathBuf {
        self.dir.join("org.toml")
    }

    /// Send SIGHUP (reload the policies).
    pub fn hup(&self) {
        self.signal("HUP");
    }

    /// Send the signal `name` (`HUP`, `USR1`, ...) to the proxy.
    pub fn signal(&self, name: &str) {
        let pid = self.pid().to_string();
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(&pid)
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{name} {pid} failed");
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether stderr shows `needle` within `limit` (a reader thread copies it in, so a
    /// line the proxy just wrote may not be there yet).
    pub async fn stderr_shows(&self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.stderr().contains(needle) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The audit file's text ("" while it does not exist).
    pub fn audit_text(&self) -> String {
        std::fs::read_to_string(&self.audit_path).unwrap_or_default()
    }

    /// Proxy stderr and audit file, for failure messages.
    pub fn diagnostics(&self) -> String {
        format!(
            "--- proxy stderr ---\n{}\n--- audit log {} ---\n{}",
            self.stderr(),
            self.audit_path.display(),
            self.audit_text()
        )
    }

    /// Every complete audit line, parsed. Panics on a line that is not JSON.
    pub fn audit_lines(&self) -> Vec<Value> {
        let text = self.audit_text();
        let mut lines: Vec<&str> = text.split('\n').collect();
        // The last piece is either "" or a line still being written.
        lines.pop();
        lines
            .into_iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!(
                        "audit line is not JSON ({e}): {l:?}\n{}",
                        self.diagnostics()
                    )
                })
            })
            .collect()
    }

    /// Wait for the first `egress.allowed` record (needs `audit_allowed`); returns it.
    pub async fn allowed_record(&self) -> Value {
        self.wait_audit(|r| r["event"] == "egress.allowed", AUDIT_TIMEOUT)
            .await
    }

    /// Wait until a record matches `pred`; returns it. Panics after `timeout`.
    pub async fn wait_audit(&self, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
        let started = Instant::now();
        loop {
            if let Some(found) = self.audit_lines().into_iter().find(|v| pred(v)) {
                return found;
            }
            if started.elapsed() > timeout {
                panic!(
                    "no matching audit record within {timeout:?}\n{}",
                    self.diagnostics()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Wait until the log holds `n` records, then a quiet period, and assert that
    /// exactly `n` are there. Returns them.
    pub async fn expect_audit_count(&self, n: usize) -> Vec<Value> {
        let started = Instant::now();
        while self.audit_lines().len() < n {
            if started.elapsed() > AUDIT_TIMEOUT {
                panic!(
                    "expected {n} audit record(s) within {AUDIT_TIMEOUT:?}, found {}\n{}",
                    self.audit_lines().len(),
                    self.diagnostics()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        tokio::time::sleep(QUIET_PERIOD).await;
        let lines = self.audit_lines();
        assert_eq!(
            lines.len(),
            n,
            "expected exactly {n} audit record(s)\n{}",
            self.diagnostics()
        );
        lines
    }

    /// Wait for exactly one record in the whole log and return it.
    pub async fn single_audit(&self) -> Value {
        self.expect_audit_count(1).await.remove(0)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    /// Send SIGTERM and wait (bounded) for the exit status.
    pub async fn terminate(&mut self) -> ExitStatus {
        self.send_term();
        self.wait_exit().await
    }

    /// Send SIGTERM, without waiting.
    pub fn send_term(&self) {
        let pid = self.pid().to_string();
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(&pid)
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
    }

    /// Wait (at most 10 s) for the process to exit; panics if it does not.
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let started = Instant::now();
        loop {
            let child = self.child.as_mut().expect("child");
            if let Some(status) = child.try_wait().expect("try_wait") {
                // Let the stderr thread catch the last lines.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return status;
            }
            if started.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "egress-proxy did not exit within 10 s\n{}",
                    self.diagnostics()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Run the binary with `args` where it is expected to exit on its own (a bad
/// start); returns the exit code and stderr. Panics if it runs over 20 s.
pub fn run_expect_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(binary());
    cmd.args(args);
    configure_env(&mut cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn egress-proxy");
    let pipe = child.stderr.take().expect("stderr pipe");
    let buf = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let reader = {
        let buf = buf.clone();
        std::thread::spawn(move || drain_stderr(pipe, buf, tx))
    };
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if let Ok(addr) = rx.try_recv() {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "egress-proxy {args:?} was expected to refuse to start but listens on {addr}\nstderr:\n{}",
                buf.lock().unwrap()
            );
        }
        if started.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "egress-proxy {args:?} was expected to exit but still ran after {START_TIMEOUT:?}\nstderr:\n{}",
                buf.lock().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = reader.join();
    let stderr = buf.lock().unwrap().clone();
    (status.code(), stderr)
}
