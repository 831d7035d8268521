//! [`Proxy`]: the running child, its signals and its exit; [`run_expect_exit`] for a
//! start that must fail.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::stderr::drain_stderr;
use super::{binary, configure_env, START_TIMEOUT};

/// A running proxy.
pub(crate) struct Proxy {
    pub addr: SocketAddr,
    pub audit_path: PathBuf,
    pub dir: PathBuf,
    pub(super) child: Option<Child>,
    pub(super) stderr: Arc<Mutex<String>>,
    /// The admin API, when started with one.
    pub admin: Option<crate::support::admin::AdminClient>,
}

impl Proxy {
    /// The admin API client; panics when the proxy has none.
    pub(crate) fn admin(&self) -> &crate::support::admin::AdminClient {
        self.admin
            .as_ref()
            .expect("test bug: the proxy has no admin API")
    }

    /// The organization file the proxy was started with (rewrite it, then reload).
    pub(crate) fn org_path(&self) -> PathBuf {
        self.dir.join("org.toml")
    }

    /// Send SIGHUP (reload the policies).
    pub(crate) fn hup(&self) {
        self.signal("HUP");
    }

    /// Send the signal `name` (`HUP`, `USR1`, ...) to the proxy.
    pub(crate) fn signal(&self, name: &str) {
        let pid = self.pid().to_string();
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(&pid)
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{name} {pid} failed");
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether stderr shows `needle` within `limit` (a reader thread copies it in, so a
    /// line the proxy just wrote may not be there yet).
    pub(crate) async fn stderr_shows(&self, needle: &str, limit: Duration) -> bool {
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

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    /// Send SIGTERM and wait (bounded) for the exit status.
    pub(crate) async fn terminate(&mut self) -> ExitStatus {
        self.send_term();
        self.wait_exit().await
    }

    /// Send SIGTERM, without waiting.
    pub(crate) fn send_term(&self) {
        let pid = self.pid().to_string();
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(&pid)
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
    }

    /// Wait (at most 10 s) for the process to exit; panics if it does not.
    pub(crate) async fn wait_exit(&mut self) -> ExitStatus {
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
pub(crate) fn run_expect_exit(args: &[&str]) -> (Option<i32>, String) {
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
