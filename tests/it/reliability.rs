//! Nothing gets through unrecorded (docs/reference/audit-log.md, "When records are
//! written"): a log that cannot be written refuses every request (503
//! `audit_unavailable`, `/healthz` 503) until a write succeeds, `--audit-failure open`
//! keeps serving and counts what was lost, and SIGUSR1 reopens the file for rotation.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::admin::metric;
use crate::support::client::{connect_via_proxy, get_via_proxy, Response};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::unique_temp_dir;

const TOKEN: &str = "reliability-token";

async fn proxy_logging_to(origin: &Origin, audit: &Path, args: &[&str]) -> Proxy {
    let mut builder = ProxyBuilder::standard(origin.port())
        .admin(TOKEN)
        .audit_log(audit);
    for arg in args {
        builder = builder.arg(arg);
    }
    builder.start().await
}

/// The status of `/healthz`.
async fn health(proxy: &Proxy) -> u16 {
    proxy.admin().call("GET", "/healthz", None).await.status
}

/// Wait (up to `limit`) until `/healthz` answers `status`.
async fn wait_health(proxy: &Proxy, status: u16, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while health(proxy).await != status {
        assert!(
            tokio::time::Instant::now() < deadline,
            "/healthz never answered {status}\n{}",
            proxy.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A request the org denies (never resolved): answered 403 unless the audit log fails.
async fn denied(proxy: &Proxy, n: usize) -> Response {
    get_via_proxy(proxy.addr, &format!("http://evil-{n}.test/"), &[]).await
}

fn request_id(resp: &Response) -> String {
    resp.json()["error"]["request_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no request id: {resp:?}"))
        .to_string()
}

fn assert_audit_unavailable(resp: &Response, proxy: &Proxy) {
    assert_eq!(resp.status, 503, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(resp.header("x-egress-denied"), Some("audit_unavailable"));
    assert_eq!(resp.json()["error"]["reason"], "audit_unavailable");
}

/// Every line of `path`, each of which must be one whole JSON record.
fn records(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a whole record ({e}): {l:?}"))
        })
        .collect()
}

fn ids(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["request_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn an_unwritable_audit_log_refuses_every_request_and_fails_health() {
    let origin = Origin::start().await;
    let proxy = proxy_logging_to(&origin, Path::new("/dev/full"), &[]).await;
    assert_eq!(health(&proxy).await, 200);
    // The request whose record first fails may already have been answered.
    let first = denied(&proxy, 0).await;
    assert!(matches!(first.status, 403 | 503), "{first:?}");
    wait_health(&proxy, 503, Duration::from_secs(5)).await;

    let url = format!("http://allowed.test:{}/", origin.port());
    assert_audit_unavailable(&get_via_proxy(proxy.addr, &url, &[]).await, &proxy);
    assert_audit_unavailable(&denied(&proxy, 1).await, &proxy);
    let target = format!("allowed.test:{}", origin.port());
    let (resp, _) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_audit_unavailable(&resp, &proxy);
    assert_eq!(
        origin.hits() + origin.connections(),
        0,
        "nothing reached upstream"
    );
    let text = proxy.admin().metrics().await;
    assert_eq!(metric(&text, "egress_audit_failing"), Some(1.0), "{text}");
    assert!(
        proxy
            .stderr_shows("cannot write the audit log", Duration::from_secs(2))
            .await,
        "{}",
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn audit_failure_open_keeps_serving_and_counts_the_lost_records() {
    let origin = Origin::start().await;
    let proxy = proxy_logging_to(
        &origin,
        Path::new("/dev/full"),
        &["--audit-failure", "open"],
    )
    .await;
    assert_eq!(denied(&proxy, 0).await.status, 403);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = proxy.admin().metrics().await;
        if metric(&text, "egress_audit_lost_total") == Some(1.0) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The same allowed request the closed proxy refuses is served.
    let url = format!("http://allowed.test:{}/", origin.port());
    assert_eq!(get_via_proxy(proxy.addr, &url, &[]).await.status, 200);
    assert_eq!(origin.hits(), 1);
    assert_eq!(denied(&proxy, 1).await.status, 403);
    assert_eq!(health(&proxy).await, 200);
}

/// A small tmpfs this test mounts (root only), unmounted when dropped.
struct SmallFs {
    dir: PathBuf,
}

impl SmallFs {
    fn mount(kib: usize) -> Option<SmallFs> {
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            eprintln!("skipped: mounting a small filesystem needs root");
            return None;
        }
        let dir = unique_temp_dir("smallfs");
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={kib}k,mode=0700"),
                "tmpfs",
            ])
            .arg(&dir)
            .status();
        if !mounted.is_ok_and(|s| s.success()) {
            eprintln!("skipped: cannot mount a tmpfs at {}", dir.display());
            return None;
        }
        Some(SmallFs { dir })
    }

    /// Fill the filesystem with one file, until a write fails for want of space.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.dir.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
        path
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[tokio::test]
async fn a_full_disk_refuses_until_space_is_freed_then_writes_every_record_whole() {
    let Some(fs) = SmallFs::mount(256) else {
        return;
    };
    let audit = fs.dir.join("audit.jsonl");
    let origin = Origin::start().await;
    let proxy = proxy_logging_to(&origin, &audit, &[]).await;
    let mut answered = Vec::new();
    let before = denied(&proxy, 0).await;
    assert_eq!(before.status, 403, "{before:?}");
    answered.push(request_id(&before));
    proxy.expect_audit_count(1).await;

    let filler = fs.fill();
    // The file's last page may still hold a few records: deny until a write fails.
    let mut n = 1;
    while health(&proxy).await != 503 {
        assert!(
            n < 100,
            "the full disk never failed a write\n{}",
            proxy.diagnostics()
        );
        let resp = denied(&proxy, n).await;
        answered.push(request_id(&resp));
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for n in n..n + 4 {
        let resp = denied(&proxy, n).await;
        assert_audit_unavailable(&resp, &proxy);
        answered.push(request_id(&resp));
    }
    let url = format!("http://allowed.test:{}/", origin.port());
    let refused = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_audit_unavailable(&refused, &proxy);
    answered.push(request_id(&refused));
    assert_eq!(origin.hits(), 0);

    std::fs::remove_file(filler).unwrap();
    wait_health(&proxy, 200, Duration::from_secs(5)).await;
    assert_eq!(get_via_proxy(proxy.addr, &url, &[]).await.status, 200);
    assert_eq!(origin.hits(), 1);
    // Every refusal answered, the one before the failure and those during it, is in the
    // file exactly once, whole.
    let written = proxy.expect_audit_count(answered.len()).await;
    let mut found = ids(&written);
    found.sort();
    answered.sort();
    assert_eq!(found, answered, "{}", proxy.diagnostics());
    assert!(
        proxy
            .stderr_shows("writable again", Duration::from_secs(2))
            .await,
        "{}",
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn sigusr1_reopens_the_audit_log_and_no_record_is_lost_or_doubled() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port()).start().await;
    let rotated = proxy.dir.join("audit.jsonl.1");
    let addr = proxy.addr;
    // A steady stream of denials while the file is renamed and reopened under it.
    let load = tokio::spawn(async move {
        let mut answered = Vec::new();
        for n in 0..60 {
            let resp = get_via_proxy(addr, &format!("http://evil-{n}.test/"), &[]).await;
            assert_eq!(resp.status, 403, "{resp:?}");
            answered.push(request_id(&resp));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        answered
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::fs::rename(&proxy.audit_path, &rotated).unwrap();
    proxy.signal("USR1");
    assert!(
        proxy
            .stderr_shows("audit log reopened", Duration::from_secs(5))
            .await,
        "{}",
        proxy.diagnostics()
    );
    let mut answered = load.await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let (old, new) = loop {
        let (old, new) = (records(&rotated), records(&proxy.audit_path));
        if old.len() + new.len() >= answered.len() || tokio::time::Instant::now() > deadline {
            break (old, new);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        !old.is_empty(),
        "records before the rename stay in the old file"
    );
    assert!(
        !new.is_empty(),
        "a new file at the original path: {}",
        proxy.diagnostics()
    );
    let old: HashSet<String> = ids(&old).into_iter().collect();
    let new: HashSet<String> = ids(&new).into_iter().collect();
    assert!(old.is_disjoint(&new), "a record is in both files");
    let mut found: Vec<String> = old.union(&new).cloned().collect();
    found.sort();
    answered.sort();
    assert_eq!(found, answered, "a record is missing");
}
