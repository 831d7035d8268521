//! The attacker's view, part 1b (issue 5): the request line and head. Userinfo naming
//! an allowed host, `Host` headers that differ from the target, and CR/LF, spaces or
//! tabs in a `CONNECT` target. Same three checks as `bypass`: the refusal, no origin
//! connection, one `egress.denied` line per attempt.

use crate::bypass::{assert_no_connection, open_proxy, refusal, BAD_TARGET};
use crate::support::client::{send_raw, Conn};
use crate::support::expect::assert_denials_logged;
use crate::support::origin::Origin;

#[tokio::test]
async fn userinfo_naming_an_allowed_host_is_refused_400() {
    let origin = Origin::start().await;
    let proxy = open_proxy(&origin).await;
    let p = origin.port();
    let urls = [
        format!("http://allowed.test@evil.test:{p}/"),
        format!("http://allowed.test:{p}@evil.test:{p}/"),
        format!("http://evil.test:{p}@allowed.test:{p}/"),
        format!("http://allowed.test:x@evil.test:{p}/"),
    ];
    let mut refusals = Vec::new();
    for url in &urls {
        let raw =
            format!("GET {url} HTTP/1.1\r\nHost: allowed.test:{p}\r\nConnection: close\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        refusals.push(refusal(&resp, 400, &["invalid_request"], &proxy));
    }
    for target in [
        format!("allowed.test@evil.test:{p}"),
        format!("allowed.test:{p}@evil.test:{p}"),
        format!("evil.test:{p}@allowed.test:{p}"),
    ] {
        let raw = format!("CONNECT {target} HTTP/1.1\r\nHost: allowed.test:{p}\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        refusals.push(refusal(&resp, 400, &["invalid_request"], &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}

#[tokio::test]
async fn userinfo_lookalikes_are_judged_on_the_real_host() {
    let origin = Origin::start().await;
    let proxy = open_proxy(&origin).await;
    let p = origin.port();
    // A fragment or query that holds `@allowed.test`, an encoded `@`, a backslash: the
    // host is `evil.test` (or unreadable); never `allowed.test`.
    let targets = [
        format!("http://evil.test:{p}#@allowed.test:{p}/"),
        format!("http://evil.test:{p}?@allowed.test:{p}/"),
        format!("http://allowed.test%40evil.test:{p}/"),
        format!("http://evil.test:{p}\\@allowed.test:{p}/"),
    ];
    let reasons = [
        "invalid_host",
        "invalid_request",
        "not_in_org_allowlist",
        "host_mismatch",
    ];
    let mut refusals = Vec::new();
    for url in &targets {
        let raw = format!("GET {url} HTTP/1.1\r\nHost: evil.test:{p}\r\nConnection: close\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        let status = if resp.status == 403 { 403 } else { 400 };
        refusals.push(refusal(&resp, status, &reasons, &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}

#[tokio::test]
async fn host_header_differing_from_the_target_is_host_mismatch() {
    let origin = Origin::start().await;
    let proxy = open_proxy(&origin).await;
    let p = origin.port();
    let heads = [
        // One Host naming another name, another port, or smuggling userinfo.
        format!("GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: evil.test\r\n"),
        format!("GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: evil.test:{p}\r\n"),
        format!("GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: allowed.test:{}\r\n", p ^ 1),
        format!("GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: allowed.test@evil.test\r\n"),
        // A second Host header, after or before the matching one.
        format!("GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: allowed.test:{p}\r\nHost: evil.test:{p}\r\n"),
        format!("GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: evil.test:{p}\r\nHost: allowed.test:{p}\r\n"),
        // The same on a CONNECT.
        format!("CONNECT allowed.test:{p} HTTP/1.1\r\nHost: evil.test:{p}\r\n"),
        format!("CONNECT allowed.test:{p} HTTP/1.1\r\nHost: allowed.test:{p}\r\nHost: evil.test:{p}\r\n"),
    ];
    let mut refusals = Vec::new();
    for head in &heads {
        let raw = format!("{head}Connection: close\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        refusals.push(refusal(&resp, 403, &["host_mismatch"], &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}

#[tokio::test]
async fn absolute_url_to_an_allowed_name_never_shows_the_origin_another_host() {
    let origin = Origin::start().await;
    let proxy = open_proxy(&origin).await;
    let p = origin.port();
    // Allowed: the Host header agrees. The origin sees only the approved authority.
    let raw = format!(
        "GET http://allowed.test:{p}/x HTTP/1.1\r\nHost: ALLOWED.test.:{p}\r\nX-Forwarded-Host: evil.test\r\nConnection: close\r\n\r\n"
    );
    let resp = send_raw(proxy.addr, raw.as_bytes()).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let seen = origin.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].header_all("host"),
        vec![format!("allowed.test:{p}")]
    );
    assert_eq!(seen[0].target, "/x");

    // Refused: `Host: evil.test`. Nothing more reaches the origin.
    let raw = format!(
        "GET http://allowed.test:{p}/y HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n"
    );
    let resp = send_raw(proxy.addr, raw.as_bytes()).await;
    let refusals = vec![refusal(&resp, 403, &["host_mismatch"], &proxy)];
    assert_denials_logged(&proxy, &refusals).await;
    assert_eq!(origin.hits(), 1, "{:?}", origin.requests());
    assert!(
        origin.requests().iter().all(|r| !r.target.contains("evil")),
        "{:?}",
        origin.requests()
    );
}

#[tokio::test]
async fn crlf_spaces_and_tabs_in_a_connect_target_are_refused_400_without_a_tunnel() {
    let origin = Origin::start().await;
    let proxy = open_proxy(&origin).await;
    let p = origin.port();
    // Each first token is a name the policy allows on this port, so a lax parser that
    // read only up to the first separator would open a tunnel to the origin.
    let lines = [
        format!("CONNECT evil.test:{p}\r\nX: allowed.test:{p} HTTP/1.1\r\n"),
        format!("CONNECT allowed.test:{p}\r\nX: evil.test:{p} HTTP/1.1\r\n"),
        format!("CONNECT allowed.test:{p}\nX: y HTTP/1.1\r\n"),
        format!("CONNECT allowed.test:{p}\rX: y HTTP/1.1\r\n"),
        format!("CONNECT allowed.test:{p} evil.test:{p} HTTP/1.1\r\n"),
        format!("CONNECT evil.test:{p} allowed.test:{p} HTTP/1.1\r\n"),
        format!("CONNECT allowed.test:{p}\tevil.test:{p} HTTP/1.1\r\n"),
        format!("CONNECT allowed.test:{p}\tHTTP/1.1\r\n"),
        format!("CONNECT\tallowed.test:{p}\tHTTP/1.1\r\n"),
        format!("CONNECT allowed.test:{p}%0d%0aX: HTTP/1.1\r\n"),
        format!("CONNECT allowed.test:{p}\0 HTTP/1.1\r\n"),
    ];
    let mut refusals = Vec::new();
    for line in &lines {
        let raw = format!("{line}Host: allowed.test:{p}\r\n\r\n");
        let mut conn = Conn::open(proxy.addr).await;
        conn.send(raw.as_bytes()).await;
        let resp = conn.read_connect_response().await;
        assert_eq!(
            resp.status,
            400,
            "{line:?}: {resp:?}\n{}",
            proxy.diagnostics()
        );
        refusals.push(refusal(&resp, 400, BAD_TARGET, &proxy));
        // A tunnel would carry this on; a refused connection drops it.
        conn.send_lossy(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
            .await;
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}
