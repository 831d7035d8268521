//! The audit log (docs/reference/audit-log.md) and the process lifecycle: SIGTERM, bad starts.

use std::path::Path;

use serde_json::Value;

use crate::support::client::{connect_via_proxy, get_via_proxy, request_bytes, send_raw, Conn};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{run_expect_exit, ProxyBuilder, AUDIT_TIMEOUT};
use crate::support::unique_temp_dir;

#[tokio::test]
async fn audit_allowed_records_bytes_after_the_connection_closes() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .audit_allowed()
        .start()
        .await;
    // A body both ways, so the counts are positive whether or not the proxy
    // counts message heads (the audit log reference does not say).
    let url = format!("http://allowed.test:{}/counted", origin.port());
    let body = vec![b'u'; 1000];
    let resp = send_raw(proxy.addr, &request_bytes("POST", &url, &[], &body)).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let record = proxy.allowed_record().await;
    let ctx = format!("{record}\n{}", proxy.diagnostics());
    let up = record["bytes_up"].as_u64();
    let down = record["bytes_down"].as_u64();
    assert!(
        up.is_some_and(|n| n >= body.len() as u64),
        "bytes_up: {ctx}"
    );
    assert!(
        down.is_some_and(|n| n >= origin.body().len() as u64),
        "bytes_down: {ctx}"
    );
    assert_eq!(record["method"], "POST", "{record}");
    assert_eq!(record["host"], "allowed.test", "{record}");
    assert_eq!(record["port"], origin.port(), "{record}");
    assert!(
        record["url"]
            .as_str()
            .is_some_and(|u| u.contains("/counted")),
        "{record}"
    );
}

#[tokio::test]
async fn denied_audit_record_carries_every_spec_field() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::new(Org::standard(origin.port()).to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("evil.test")
        .start()
        .await;
    let url = format!("http://evil.test:{}/path?q=1", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 403, "{resp:?}\n{}", proxy.diagnostics());
    let record = proxy.single_audit().await;
    let ctx = format!("{record}\n{}", proxy.diagnostics());
    for field in [
        "ts",
        "event",
        "request_id",
        "session",
        "client",
        "method",
        "host",
        "port",
        "url",
        "reason",
        "rule",
        "policy_level",
        "shared_hosting",
        "resolved_ip",
    ] {
        assert!(record.get(field).is_some(), "missing field {field}: {ctx}");
    }
    assert!(
        record["ts"].as_str().is_some_and(|t| t.contains('T')),
        "ts: {ctx}"
    );
    assert_eq!(record["session"], Value::Null, "session: {ctx}");
    assert!(
        record["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:")),
        "client: {ctx}"
    );
    assert_eq!(record["method"], "GET", "{ctx}");
    assert!(
        record["url"]
            .as_str()
            .is_some_and(|u| u.contains("evil.test") && u.contains("/path?q=1")),
        "url: {ctx}"
    );
    assert_eq!(record["shared_hosting"], false, "{ctx}");
    // A denied name is never resolved, so there is no address.
    assert_eq!(record["resolved_ip"], Value::Null, "{ctx}");
}

#[tokio::test]
async fn audit_never_contains_proxy_authorization_credentials() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::new(Org::standard(origin.port()).to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("evil.test")
        .start()
        .await;
    let url = format!("http://evil.test:{}/", origin.port());
    let resp = get_via_proxy(
        proxy.addr,
        &url,
        &[("Proxy-Authorization", "Basic dXNlcjpzM2NyZXQ=")],
    )
    .await;
    // Unknown credentials may be 407 auth_required or the policy's 403; either
    // way it is a logged refusal.
    assert!(
        resp.status == 403 || resp.status == 407,
        "{resp:?}\n{}",
        proxy.diagnostics()
    );
    proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    let audit = proxy.audit_text();
    let stderr = proxy.stderr();
    for secret in ["dXNlcjpzM2NyZXQ=", "s3cret"] {
        assert!(
            !audit.contains(secret),
            "audit log leaks {secret}:\n{audit}"
        );
        assert!(
            !stderr.contains(secret),
            "proxy log leaks {secret}:\n{stderr}"
        );
    }
}

#[tokio::test]
async fn sigterm_exits_zero_with_every_record_written() {
    let origin = Origin::start().await;
    let mut proxy = ProxyBuilder::new(Org::standard(origin.port()).to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("evil.test")
        .start()
        .await;
    const N: usize = 5;
    for i in 0..N {
        let url = format!("http://evil.test:{}/{i}", origin.port());
        let resp = get_via_proxy(proxy.addr, &url, &[]).await;
        assert_eq!(resp.status, 403, "{resp:?}\n{}", proxy.diagnostics());
    }
    // No waiting for the log: shutdown itself must flush it.
    let status = proxy.terminate().await;
    assert_eq!(status.code(), Some(0), "{status}\n{}", proxy.diagnostics());
    let records = proxy.audit_lines();
    assert_eq!(records.len(), N, "{}", proxy.diagnostics());
    let mut ids: Vec<&str> = records
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "request ids are not distinct: {records:?}");
}

#[tokio::test]
async fn sigterm_with_an_idle_client_connection_still_exits_zero() {
    let origin = Origin::start().await;
    let mut proxy = ProxyBuilder::standard(origin.port()).start().await;
    let _idle = Conn::open(proxy.addr).await;
    let status = proxy.terminate().await;
    assert_eq!(status.code(), Some(0), "{status}\n{}", proxy.diagnostics());
}

/// Run `serve` on `org_path` (with its audit log in `dir`, `allowed.test` pinned and the
/// `extra` arguments), expecting it to exit on its own: its exit code and stderr.
fn serve_expect_exit(dir: &Path, org_path: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let audit = dir.join("audit.jsonl");
    let mut args = vec![
        "serve",
        "--org",
        org_path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--audit-log",
        audit.to_str().unwrap(),
        "--resolve",
        "allowed.test=127.0.0.1",
    ];
    args.extend_from_slice(extra);
    run_expect_exit(&args)
}

#[test]
fn org_file_with_an_unknown_key_exits_2_naming_file_and_line() {
    let dir = unique_temp_dir("badorg");
    let org_path = dir.join("unknown-key-org.toml");
    // Line 3 holds the unknown key.
    std::fs::write(
        &org_path,
        "version = 1\nallowed_domains = [\"allowed.test\"]\nsurprise_key = true\n",
    )
    .unwrap();
    let (code, stderr) = serve_expect_exit(&dir, &org_path, &[]);
    assert_eq!(code, Some(2), "stderr:\n{stderr}");
    assert!(
        stderr.contains("unknown-key-org.toml"),
        "file not named:\n{stderr}"
    );
    assert!(stderr.contains("surprise_key"), "key not named:\n{stderr}");
    assert!(
        stderr.contains("line 3") || stderr.contains(":3:"),
        "line 3 not named:\n{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unreadable_org_file_exits_2_naming_it() {
    let dir = unique_temp_dir("noorg");
    let org_path = dir.join("missing-org.toml");
    let (code, stderr) = serve_expect_exit(&dir, &org_path, &[]);
    assert_eq!(code, Some(2), "stderr:\n{stderr}");
    assert!(
        stderr.contains("missing-org.toml"),
        "file not named:\n{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn widening_policy_file_stops_serve_with_exit_2_naming_the_entry() {
    let dir = unique_temp_dir("widening");
    let org_path = dir.join("org.toml");
    std::fs::write(&org_path, Org::standard(8080).to_toml()).unwrap();
    let policy_path = dir.join("widening.json");
    std::fs::write(
        &policy_path,
        allowlist_json(&["allowed.test", "evil.test", "*.other.test"]),
    )
    .unwrap();
    let policy = policy_path.to_str().unwrap();
    let (code, stderr) = serve_expect_exit(&dir, &org_path, &["--policy", policy]);
    assert_eq!(code, Some(2), "stderr:\n{stderr}");
    // Every offending entry is named.
    assert!(stderr.contains("evil.test"), "entry not named:\n{stderr}");
    assert!(
        stderr.contains("*.other.test"),
        "entry not named:\n{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn workers_flag_starts_that_many_worker_threads_and_they_serve() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .arg("--workers")
        .arg("3")
        .start()
        .await;
    let tasks = std::fs::read_dir(format!("/proc/{}/task", proxy.pid())).unwrap();
    let workers = tasks
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|comm| comm.starts_with("egress-worker-"))
        .count();
    assert_eq!(workers, 3, "{}", proxy.diagnostics());
    // Each request on its own connection: whichever worker accepts it serves it.
    for i in 0..12 {
        let url = format!("http://allowed.test:{}/{i}", origin.port());
        let resp = get_via_proxy(proxy.addr, &url, &[]).await;
        assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    }
}

#[test]
fn zero_workers_is_a_usage_error() {
    let dir = unique_temp_dir("zero-workers");
    let org_path = dir.join("org.toml");
    std::fs::write(
        &org_path,
        "version = 1\nallowed_domains = [\"allowed.test\"]\n",
    )
    .unwrap();
    let (code, stderr) = serve_expect_exit(&dir, &org_path, &["--workers", "0"]);
    assert_eq!(code, Some(2), "stderr:\n{stderr}");
    assert!(stderr.contains("--workers"), "flag not named:\n{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn sigterm_keeps_an_open_tunnel_through_the_grace_period_then_closes_it() {
    let origin = Origin::start().await;
    let mut proxy = ProxyBuilder::standard(origin.port())
        .arg("--shutdown-grace")
        .arg("2")
        .start()
        .await;
    let target = format!("allowed.test:{}", origin.port());
    let (resp, mut tunnel) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let signalled = std::time::Instant::now();
    proxy.send_term();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Inside the grace period the tunnel still carries a request and its answer.
    let get = format!("GET /during-grace HTTP/1.1\r\nHost: {target}\r\n\r\n");
    tunnel.send(get.as_bytes()).await;
    let resp = tunnel.read_response().await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert!(
        signalled.elapsed() < std::time::Duration::from_secs(2),
        "the request ran past the grace period; the test proves nothing"
    );
    // Once the grace period is over the proxy closes the tunnel and exits 0.
    assert!(tunnel.closed_by_peer().await, "{}", proxy.diagnostics());
    let status = proxy.wait_exit().await;
    assert_eq!(status.code(), Some(0), "{status}\n{}", proxy.diagnostics());
    assert!(origin
        .requests()
        .iter()
        .any(|r| r.target == "/during-grace"));
}
