//! [`ProxyBuilder`]: the flags of one proxy process, and starting it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::stderr::drain_stderr;
use super::{binary, configure_env, Proxy, START_TIMEOUT};
use crate::support::unique_temp_dir;

/// Builder for one proxy process.
pub(crate) struct ProxyBuilder {
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
    pub(crate) fn standard(origin_port: u16) -> ProxyBuilder {
        ProxyBuilder::new(crate::support::org::Org::standard(origin_port).to_toml())
            .policy(crate::support::org::allowlist_json(&["allowed.test"]))
            .pin("allowed.test")
    }

    /// `org` is the organization policy TOML text.
    pub(crate) fn new(org: impl Into<String>) -> ProxyBuilder {
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
    pub(crate) fn log(mut self, filter: &str) -> Self {
        self.log = Some(filter.to_string());
        self
    }

    /// `--org PATH`: the file the test made, instead of one written from the org text.
    pub(crate) fn org_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.org_at = Some(path.into());
        self
    }

    /// Start the proxy through `command`, which must exec it in place (`prlimit ...`).
    pub(crate) fn run_under(mut self, command: &[&str]) -> Self {
        self.run_under = command.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `--audit-log PATH` (`/dev/full`, or a file on a filesystem the test mounted).
    pub(crate) fn audit_log(mut self, path: impl Into<PathBuf>) -> Self {
        self.audit_at = Some(path.into());
        self
    }

    /// The admin API on `127.0.0.1:0` with this bearer token (written to a file).
    pub(crate) fn admin(mut self, token: &str) -> Self {
        self.admin = Some(Some(token.to_string()));
        self
    }

    /// The admin API on `127.0.0.1:0` without a token file (loopback only).
    pub(crate) fn admin_without_token(mut self) -> Self {
        self.admin = Some(None);
        self
    }

    /// `--policy` with this request policy JSON.
    pub(crate) fn policy(mut self, json: impl Into<String>) -> Self {
        self.policy = Some(json.into());
        self
    }

    /// `--resolve NAME=127.0.0.1`.
    pub(crate) fn pin(self, name: &str) -> Self {
        self.pin_to(name, "127.0.0.1")
    }

    pub(crate) fn pin_to(mut self, name: &str, ip: &str) -> Self {
        self.pins.push((name.to_string(), ip.to_string()));
        self
    }

    /// `--dns-server ADDR`.
    pub(crate) fn dns_server(mut self, addr: SocketAddr) -> Self {
        self.dns = Some(addr);
        self
    }

    /// `--audit-allowed`.
    pub(crate) fn audit_allowed(mut self) -> Self {
        self.audit_allowed = true;
        self
    }

    /// `--listen ADDR` instead of `127.0.0.1:0`, for tests that must write the proxy's
    /// own port into its org file (see [`free_port`]). Loopback addresses only.
    pub(crate) fn listen(mut self, addr: SocketAddr) -> Self {
        assert!(addr.ip().is_loopback(), "test bug: listen on loopback only");
        self.listen = Some(addr);
        self
    }

    pub(crate) fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    pub(crate) async fn start(self) -> Proxy {
        assert!(
            !self.pins.is_empty() || self.dns.is_some(),
            "test bug: a proxy needs --resolve pins or --dns-server, never the system resolver"
        );
        let dir = unique_temp_dir("proxy");
        let audit_path = self
            .audit_at
            .clone()
            .unwrap_or_else(|| dir.join("audit.jsonl"));

        let mut cmd = self.command(&dir, &audit_path);
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
            crate::support::admin::AdminClient {
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

    /// `egress-proxy serve` with this builder's flags, the org and policy files (and the
    /// admin token) written into `dir`.
    fn command(&self, dir: &Path, audit_path: &Path) -> Command {
        let org_path = match &self.org_at {
            Some(path) => path.clone(),
            None => {
                let path = dir.join("org.toml");
                std::fs::write(&path, &self.org).expect("write org file");
                path
            }
        };
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
            .arg(audit_path);
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
        cmd
    }
}
