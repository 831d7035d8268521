//! The reason of a refusal in the status line's reason phrase, as read on the wire:
//! curl, git, pip and npm show only that line of a refused `CONNECT`
//! (`docs/reference/clients.md`). The status code, `X-Egress-Denied` and the JSON body
//! stay as they were.

use std::time::Duration;

use tokio::net::TcpStream;

use crate::support::client::{connect_via_proxy, get_via_proxy, send_raw, Response};
use crate::support::expect::{assert_denied_response, assert_single_denial, Denial};
use crate::support::origin::Origin;
use crate::support::proxy::{free_port, Proxy, ProxyBuilder};

/// The standard proxy, with `evil.test` pinned (it is refused before any lookup).
async fn standard_proxy(origin: &Origin, args: &[&str]) -> Proxy {
    let mut builder = ProxyBuilder::standard(origin.port()).pin("evil.test");
    for arg in args {
        builder = builder.arg(arg);
    }
    builder.start().await
}

fn assert_status_line(resp: &Response, want: &str, proxy: &Proxy) {
    assert_eq!(
        resp.status_line,
        want,
        "status line on the wire: {resp:?}\n{}",
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn denied_absolute_form_request_names_the_reason_in_the_status_line() {
    let origin = Origin::start().await;
    let proxy = standard_proxy(&origin, &[]).await;
    let url = format!("http://evil.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_status_line(
        &resp,
        "HTTP/1.1 403 Egress denied: not_in_org_allowlist",
        &proxy,
    );
    let want = Denial::new(403, "not_in_org_allowlist").at("evil.test", origin.port());
    assert_single_denial(&resp, &want, &proxy).await;
}

#[tokio::test]
async fn denied_connect_names_the_reason_in_the_status_line() {
    let origin = Origin::start().await;
    let proxy = standard_proxy(&origin, &[]).await;
    let (resp, _conn) = connect_via_proxy(proxy.addr, "evil.test:443", &[]).await;
    assert_status_line(
        &resp,
        "HTTP/1.1 403 Egress denied: not_in_org_allowlist",
        &proxy,
    );
    let want = Denial::new(403, "not_in_org_allowlist").at("evil.test", 443);
    assert_single_denial(&resp, &want, &proxy).await;
}

#[tokio::test]
async fn auth_required_keeps_its_standard_phrase_and_adds_the_reason() {
    use crate::support::sessions::{org, proxy_with};
    let origin = Origin::start().await;
    let proxy = proxy_with(&org(origin.port()), &["--require-session"]).await;
    let target = format!("allowed.test:{}", origin.port());
    let (resp, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_status_line(
        &resp,
        "HTTP/1.1 407 Proxy Authentication Required: auth_required",
        &proxy,
    );
    assert_denied_response(&resp, &Denial::new(407, "auth_required"), &proxy);
    assert_eq!(
        resp.header("proxy-authenticate"),
        Some("Basic realm=\"egress-proxy\""),
        "{resp:?}"
    );
}

#[tokio::test]
async fn malformed_request_refused_before_parsing_names_the_reason() {
    let origin = Origin::start().await;
    let proxy = standard_proxy(&origin, &[]).await;
    // Credentials in the target: refused by the first look at the head, before hyper.
    let resp = send_raw(proxy.addr, b"GET http://u@a.test/ HTTP/1.1\r\n\r\n").await;
    assert_status_line(&resp, "HTTP/1.1 400 Bad Request: invalid_request", &proxy);
    assert_single_denial(&resp, &Denial::new(400, "invalid_request"), &proxy).await;
}

#[tokio::test]
async fn oversized_head_names_the_reason() {
    let origin = Origin::start().await;
    let proxy = standard_proxy(&origin, &["--max-header-bytes", "2048"]).await;
    let req = format!(
        "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nX-Big: {}\r\n\r\n",
        "a".repeat(4096)
    );
    let resp = send_raw(proxy.addr, req.as_bytes()).await;
    assert_status_line(
        &resp,
        "HTTP/1.1 431 Request Header Fields Too Large: invalid_request",
        &proxy,
    );
    assert_single_denial(&resp, &Denial::new(431, "invalid_request"), &proxy).await;
}

#[tokio::test]
async fn connection_over_the_limit_names_the_reason() {
    let origin = Origin::start().await;
    let args = [
        "--max-connections",
        "1",
        "--connection-wait",
        "0.2",
        "--header-timeout",
        "5",
    ];
    let proxy = standard_proxy(&origin, &args).await;
    // The one slot is held by an idle client.
    let _holder = TcpStream::connect(proxy.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_status_line(
        &resp,
        "HTTP/1.1 503 Service Unavailable: limit_exceeded",
        &proxy,
    );
    assert_single_denial(&resp, &Denial::new(503, "limit_exceeded"), &proxy).await;
}

#[tokio::test]
async fn tunnel_over_the_limit_names_the_reason() {
    let origin = Origin::start().await;
    let proxy = standard_proxy(&origin, &["--max-tunnels-per-client", "1"]).await;
    let target = format!("allowed.test:{}", origin.port());
    let (first, conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(
        first.status_line,
        "HTTP/1.1 200 OK",
        "an opened tunnel keeps the standard phrase\n{}",
        proxy.diagnostics()
    );
    let _held = conn.into_stream();
    let (second, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_status_line(
        &second,
        "HTTP/1.1 429 Too Many Requests: limit_exceeded",
        &proxy,
    );
    let want = Denial::new(429, "limit_exceeded").at("allowed.test", origin.port());
    assert_single_denial(&second, &want, &proxy).await;
}

#[tokio::test]
async fn unreachable_allowed_destination_keeps_the_standard_phrase() {
    // A 502 is a failure, not a refusal: its status line is the standard one.
    let port = free_port("127.0.0.1".parse().unwrap()).port();
    let proxy = ProxyBuilder::standard(port).start().await;
    let (resp, _conn) = connect_via_proxy(proxy.addr, &format!("allowed.test:{port}"), &[]).await;
    assert_status_line(&resp, "HTTP/1.1 502 Bad Gateway", &proxy);
    assert_eq!(resp.header("x-egress-denied"), None, "{resp:?}");
}
