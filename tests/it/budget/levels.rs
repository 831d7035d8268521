//! Budgets per session, and budgets that widen the level above.

use super::*;

/// Each session has a budget of its own: one session spending its budget leaves
/// another's untouched.
#[tokio::test]
async fn per_session_budgets_are_independent() {
    const BUDGET: usize = 500;
    let sink = Sink::start().await;
    let proxy = ProxyBuilder::new(org(sink.addr.port(), None))
        .pin("sink.test")
        .admin("budget-token")
        .start()
        .await;
    let policy = allowlist(Some(BUDGET as u64));
    let a = proxy.admin().create_session(&policy, None).await;
    let b = proxy.admin().create_session(&policy, None).await;
    let (auth_a, auth_b) = (a.proxy_auth(), b.proxy_auth());
    let stream = tunnel(&proxy, &sink, &[("Proxy-Authorization", &auth_a)]).await;
    send_until_closed(stream, &pattern(2000), 100, Duration::from_millis(1)).await;
    assert_eq!(sink.ended(0).await.len(), BUDGET, "session a: its budget");
    // Session b still has all of its own.
    let mut stream = tunnel(&proxy, &sink, &[("Proxy-Authorization", &auth_b)]).await;
    stream.write_all(&pattern(300)).await.unwrap();
    assert_eq!(sink.at_least(1, 300).await.len(), 300);
    send_until_closed(stream, &pattern(300), 50, Duration::from_millis(1)).await;
    assert_eq!(
        sink.ended(1).await.len(),
        BUDGET,
        "session b: its budget, no more"
    );
    // Both spent now; a's next tunnel is refused.
    let target = format!("sink.test:{}", sink.addr.port());
    let (resp, _) =
        connect_via_proxy(proxy.addr, &target, &[("Proxy-Authorization", &auth_a)]).await;
    assert_eq!(
        resp.header("x-egress-denied"),
        Some("upload_budget_exceeded")
    );
    assert_eq!(sink.connections(), 2);
}

/// A request level that asks for a larger budget than the level above widens it: the
/// header is refused whole (naming it), and so is a session.
#[tokio::test]
async fn a_larger_max_upload_bytes_is_policy_widening() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::new(org(origin.port(), Some(1000)))
        .policy(allowlist(Some(800)).to_string())
        .pin("sink.test")
        .admin("budget-token")
        .start()
        .await;
    let header = allowlist(Some(900)).to_string();
    let url = format!("http://sink.test:{}/", origin.port());
    let resp =
        crate::support::client::get_via_proxy(proxy.addr, &url, &[("X-Network-Policy", &header)])
            .await;
    let want = Denial::new(403, "policy_widening").level("request");
    assert_denied_response(&resp, &want, &proxy);
    let record = &records_with(&proxy, "policy_widening", 1).await[0];
    let rule = record["rule"].as_str().unwrap();
    assert!(rule.contains("max_upload_bytes = 900"), "{rule}");
    assert!(
        rule.contains("max_upload_bytes = 800"),
        "names the level above: {rule}"
    );
    assert_eq!(origin.hits(), 0);
    // A session: 422, naming the entry.
    let body = json!({"network_policy": allowlist(Some(1001))}).to_string();
    let resp = proxy
        .admin()
        .call("POST", "/v1/sessions", Some(&body))
        .await;
    assert_eq!(resp.status, 422, "{resp:?}");
    let offending = resp.json()["error"]["offending"].to_string();
    assert!(offending.contains("max_upload_bytes = 1001"), "{offending}");
}

/// A `--policy` whose budget is larger than the organization's stops `serve` (exit 2,
/// naming it), and `lint` finds the same entry.
#[test]
fn a_widening_budget_file_stops_serve_and_is_a_lint_finding() {
    let dir = crate::support::unique_temp_dir("budget-widening");
    let org_path = dir.join("org.toml");
    let policy_path = dir.join("policy.json");
    std::fs::write(&org_path, org(8080, Some(100))).unwrap();
    std::fs::write(&policy_path, allowlist(Some(101)).to_string()).unwrap();
    let (org_arg, policy_arg) = (org_path.to_str().unwrap(), policy_path.to_str().unwrap());
    let args = [
        "serve",
        "--org",
        org_arg,
        "--policy",
        policy_arg,
        "--listen",
        "127.0.0.1:0",
        "--audit-log",
        "-",
    ];
    let (code, stderr) = crate::support::proxy::run_expect_exit(&args);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("max_upload_bytes = 101"), "{stderr}");
    let out = std::process::Command::new(crate::support::proxy::binary())
        .args(["lint", "--org", org_arg, policy_arg])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("widens-org-policy"), "{text}");
    assert!(text.contains("upload_bytes = 100"), "{text}");
}
