//! Real h2 clients through an intercepted tunnel: curl `--http2` and Python httpx.

use std::time::Duration;

use super::{python_missing, run, show, Setup};
use crate::support::proxy::AUDIT_TIMEOUT;

#[tokio::test]
async fn curl_over_h2_gets_an_allowed_stream_a_refused_one_and_another_on_one_connection() {
    let s = Setup::start().await;
    let proxy = format!("http://{}", s.proxy.addr);
    let each = |method: &str, path: &str| {
        let mut args = vec!["--http2", "-sS", "-o", "/dev/null", "--noproxy", ""];
        args.extend(["-x", &proxy, "--cacert"]);
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push(s.ca_pem());
        args.extend(["-X".into(), method.into(), s.url(path)]);
        if method == "POST" {
            // A body the refusal leaves unread: the stream is still ended cleanly
            // after its 403 (RST_STREAM NO_ERROR), which curl reads whole.
            args.extend(["--data-binary".into(), "secret data".into()]);
        }
        args.extend([
            "-w".into(),
            "%{http_version} %{http_code} %{num_connects}\\n".into(),
        ]);
        args
    };
    let mut args = each("GET", "/one");
    for (method, path) in [("POST", "/write"), ("GET", "/two")] {
        args.push("--next".into());
        args.extend(each(method, path));
    }
    let out = run("curl", args, Duration::from_secs(30)).await;
    assert!(out.status.success(), "{}", show(&out));
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    // HTTP/2 every time; one connection (the tunnel) made, then reused.
    assert_eq!(lines, ["2 200 1", "2 403 0", "2 200 0"], "{}", show(&out));
    let seen: Vec<(String, String)> = s
        .bed
        .origin
        .requests()
        .iter()
        .map(|r| (r.method.clone(), r.target.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            ("GET".to_string(), "/one".to_string()),
            ("GET".into(), "/two".into())
        ],
        "the refused POST reached the origin"
    );
    let denied = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_eq!(denied["reason"], "method_not_allowed");
    assert_eq!(denied["method"], "POST");
    assert_eq!(denied["url"], s.url("/write"));
    let allowed = s
        .proxy
        .wait_audit(
            |r| r["event"] == "egress.allowed" && r["method"] == "GET",
            AUDIT_TIMEOUT,
        )
        .await;
    assert_eq!(allowed["url"], s.url("/one"));
}

/// httpx with `http2=True` through the proxy, trusting its CA: an allowed GET, a refused
/// POST, an allowed GET, one client (one pooled connection); each line the HTTP version
/// and status.
const HTTPX: &str = r#"
import ssl, sys
import httpx
proxy, ca, base = sys.argv[1], sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
with httpx.Client(http2=True, proxy=proxy, verify=ctx, trust_env=False) as client:
    for method, path in [("GET", "/a"), ("POST", "/b"), ("GET", "/c")]:
        r = client.request(method, base + path, content=b"x" if method == "POST" else None)
        print(r.http_version, r.status_code, r.headers.get("x-egress-denied", "-"))
"#;

#[tokio::test]
async fn httpx_over_h2_sends_allowed_and_refused_requests_on_one_connection() {
    if python_missing("httpx, h2") {
        return;
    }
    let s = Setup::start().await;
    let args = vec![
        "-c".to_string(),
        HTTPX.to_string(),
        format!("http://{}", s.proxy.addr),
        s.ca_pem(),
        s.url(""),
    ];
    let out = run("python3", args, Duration::from_secs(30)).await;
    assert!(out.status.success(), "{}", show(&out));
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(
        lines,
        [
            "HTTP/2 200 -",
            "HTTP/2 403 method_not_allowed",
            "HTTP/2 200 -"
        ],
        "{}",
        show(&out)
    );
    assert_eq!(
        s.bed.origin.hits(),
        2,
        "the refused POST reached the origin"
    );
    // One tunnel for the three: the client kept its h2 connection. (A tunnel's record
    // is written when it closes, which it has: the client is gone.)
    let is_tunnel =
        |r: &serde_json::Value| r["method"] == "CONNECT" && r["event"] == "egress.allowed";
    s.proxy.wait_audit(is_tunnel, AUDIT_TIMEOUT).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let connects = s.proxy.audit_lines().into_iter().filter(is_tunnel).count();
    assert_eq!(connects, 1, "{}", s.proxy.audit_text());
}
