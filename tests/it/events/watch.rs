//! `egress-proxy watch` as a user runs it: the built binary as a child process reading
//! a running proxy's event stream (docs/reference/command-line.md, "watch").

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use super::*;
use crate::support::proxy::{binary, free_port, run_expect_exit};
use crate::support::unique_temp_dir;

/// A running `watch`, its output lines gathered by threads.
struct Watch {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A file holding the admin token, as a user keeps it.
fn token_file(token: &str) -> String {
    let path = unique_temp_dir("watch").join("admin.token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path.display().to_string()
}

impl Watch {
    /// `watch --admin URL --admin-token-file F EXTRA...`, once it says it is watching.
    async fn start(proxy: &Proxy, extra: &[&str]) -> Watch {
        let url = format!("http://{}", proxy.admin().addr);
        let mut child = Command::new(binary())
            .args([
                "watch",
                "--admin",
                &url,
                "--admin-token-file",
                &token_file(TOKEN),
            ])
            .args(extra)
            .env_remove("EGRESS_PROXY_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn egress-proxy watch");
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        let watch = Watch {
            child,
            stdout,
            stderr,
        };
        let said = watch.next(&watch.stderr).await;
        assert!(said.contains("watching"), "{said}");
        watch
    }

    /// The next line from `rx`, waiting at most [`EVENT_TIMEOUT`].
    async fn next(&self, rx: &mpsc::Receiver<String>) -> String {
        let started = Instant::now();
        loop {
            if let Ok(line) = rx.try_recv() {
                return line;
            }
            assert!(
                started.elapsed() < EVENT_TIMEOUT,
                "no line from watch in time"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn watch_prints_a_line_for_a_denied_request() {
    let origin = Origin::start().await;
    let proxy = proxy(&origin).await;
    let watch = Watch::start(&proxy, &[]).await;
    let resp = get_via_proxy(proxy.addr, &url("evil.test", &origin), &[]).await;
    assert_eq!(resp.status, 403);
    let line = watch.next(&watch.stdout).await;
    let dest = format!("evil.test:{}", origin.port());
    for part in ["egress.denied", &dest, "not_in_org_allowlist", "session=-"] {
        assert!(line.contains(part), "{part:?} in {line:?}");
    }
    assert!(!line.contains('\x1b'), "no colour into a pipe: {line:?}");
}

#[tokio::test]
async fn watch_json_prints_each_record_line_and_passes_the_filters() {
    let origin = Origin::start().await;
    let proxy = proxy(&origin).await;
    let watch = Watch::start(&proxy, &["--json", "--event", "egress.denied"]).await;
    get_via_proxy(proxy.addr, &url("allowed.test", &origin), &[]).await;
    get_via_proxy(proxy.addr, &url("evil.test", &origin), &[]).await;
    let line = watch.next(&watch.stdout).await;
    let record: Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(
        record["event"], "egress.denied",
        "the allowed one is filtered out"
    );
    assert_eq!(record["host"], "evil.test");
    let logged = proxy
        .wait_audit(|r| r["event"] == "egress.denied", Duration::from_secs(3))
        .await;
    assert_eq!(record, logged, "the line is the audit log's");
}

#[tokio::test]
async fn watch_exits_2_on_a_wrong_token_or_an_unreachable_admin_api() {
    let origin = Origin::start().await;
    let proxy = proxy(&origin).await;
    let url = format!("http://{}", proxy.admin().addr);
    let wrong = token_file("not-the-token");
    let (code, stderr) = run_expect_exit(&["watch", "--admin", &url, "--admin-token-file", &wrong]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("refused the token (401)"), "{stderr}");
    let closed = format!("http://{}", free_port("127.0.0.1".parse().unwrap()));
    let (code, stderr) = run_expect_exit(&["watch", "--admin", &closed]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot reach the admin API"), "{stderr}");
    let (code, stderr) = run_expect_exit(&["watch", "--admin", "https://127.0.0.1:1"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--admin"), "{stderr}");
}
