//! Allowed plain-HTTP requests are forwarded faithfully (docs/reference/answers.md, "What upstream sees").

use crate::support::client::{get_via_proxy, request_bytes, send_raw, Conn};
use crate::support::org::allowlist_json;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

async fn proxy_for(origin: &Origin) -> Proxy {
    ProxyBuilder::standard(origin.port()).start().await
}

#[tokio::test]
async fn allowed_get_reaches_origin_with_its_body() {
    let origin = Origin::start().await;
    let proxy = proxy_for(&origin).await;
    let url = format!("http://allowed.test:{}/hello", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(resp.text(), origin.body());
    assert_eq!(origin.hits(), 1, "{}", proxy.diagnostics());
    assert_eq!(origin.requests()[0].method, "GET");
}

#[tokio::test]
async fn client_keep_alive_serves_two_requests_on_one_connection() {
    let origin = Origin::start().await;
    let proxy = proxy_for(&origin).await;
    let authority = format!("allowed.test:{}", origin.port());
    let mut conn = Conn::open(proxy.addr).await;
    for path in ["/one", "/two"] {
        let resp = conn.get(&authority, path).await;
        assert_eq!(
            resp.status,
            200,
            "{path}: {resp:?}\n{}",
            proxy.diagnostics()
        );
        assert_eq!(resp.text(), origin.body(), "{path}");
    }
    let targets: Vec<String> = origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(targets.len(), 2, "{targets:?}");
    assert!(
        targets[0].ends_with("/one") && targets[1].ends_with("/two"),
        "{targets:?}"
    );
}

#[tokio::test]
async fn path_and_query_reach_origin_unchanged() {
    let origin = Origin::start().await;
    let proxy = proxy_for(&origin).await;
    let url = format!("http://allowed.test:{}/a/b?q=1&r=%20x", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let target = &origin.requests()[0].target;
    // Origin-form is what proxies send; absolute-form is legal HTTP/1.1 too.
    assert!(
        target == "/a/b?q=1&r=%20x" || *target == url,
        "origin saw request-target {target:?}"
    );
}

#[tokio::test]
async fn upstream_host_header_is_the_approved_authority() {
    let origin = Origin::start().await;
    let proxy = proxy_for(&origin).await;
    // Same authority in another case: allowed, and the upstream Host is rewritten
    // from the approved (normalised) target, once.
    let authority = format!("Allowed.TEST:{}", origin.port());
    let req = format!(
        "GET http://{authority}/ HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    );
    let resp = send_raw(proxy.addr, req.as_bytes()).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let hosts: Vec<String> = origin.requests()[0]
        .header_all("host")
        .into_iter()
        .map(str::to_string)
        .collect();
    assert_eq!(
        hosts,
        vec![format!("allowed.test:{}", origin.port())],
        "upstream Host headers"
    );
}

#[tokio::test]
async fn hop_by_hop_headers_never_reach_origin() {
    let origin = Origin::start().await;
    let proxy = proxy_for(&origin).await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let policy = allowlist_json(&["allowed.test"]);
    let authority = format!("allowed.test:{}", origin.port());
    let req = format!(
        "GET {url} HTTP/1.1\r\nHost: {authority}\r\n\
         Connection: keep-alive, X-Secret-Hop\r\n\
         X-Secret-Hop: named-by-connection\r\n\
         Keep-Alive: timeout=5\r\n\
         Proxy-Connection: keep-alive\r\n\
         Proxy-Authorization: Basic dXNlcjpzM2NyZXQ=\r\n\
         TE: trailers\r\n\
         Trailer: X-Checksum\r\n\
         Upgrade: websocket\r\n\
         X-Network-Policy: {policy}\r\n\
         X-Custom: kept\r\n\r\n"
    );
    let mut conn = Conn::open(proxy.addr).await;
    conn.send(req.as_bytes()).await;
    let resp = conn.read_response().await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let seen = &origin.requests()[0];
    for name in [
        "x-secret-hop",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "te",
        "trailer",
        "upgrade",
        "x-network-policy",
    ] {
        assert!(
            seen.header(name).is_none(),
            "hop-by-hop header {name} reached the origin: {:?}",
            seen.headers
        );
    }
    // Connection may be re-added by the proxy's own client, but never naming
    // the client's extension header.
    for value in seen.header_all("connection") {
        assert!(
            !value.to_ascii_lowercase().contains("x-secret-hop"),
            "client's Connection header reached the origin: {:?}",
            seen.headers
        );
    }
    assert_eq!(seen.header("x-custom"), Some("kept"), "{:?}", seen.headers);
}

#[tokio::test]
async fn post_body_is_forwarded_intact() {
    let origin = Origin::start().await;
    let proxy = proxy_for(&origin).await;
    let body: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let url = format!("http://allowed.test:{}/upload", origin.port());
    let resp = send_raw(
        proxy.addr,
        &request_bytes(
            "POST",
            &url,
            &[("Content-Type", "application/octet-stream")],
            &body,
        ),
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let seen = &origin.requests()[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.body.len(), body.len());
    assert!(seen.body == body, "POST body changed on the way");
}

#[tokio::test]
async fn chunked_request_body_is_reframed_intact() {
    let origin = Origin::start().await;
    let proxy = proxy_for(&origin).await;
    let authority = format!("allowed.test:{}", origin.port());
    let req = format!(
        "POST http://{authority}/c HTTP/1.1\r\nHost: {authority}\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    );
    let resp = send_raw(proxy.addr, req.as_bytes()).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(origin.requests()[0].body, b"hello world");
}

/// An origin on loopback that reads one request head, then waits `hold` and either
/// closes without an answer or answers 200.
async fn holding_origin(hold: std::time::Duration, answer: bool) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                tokio::time::sleep(hold).await;
                if answer {
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    addr
}

/// Nothing gets through unrecorded: an allowed request that reached upstream is
/// recorded even when the client leaves before the answer, or upstream fails after
/// taking the request.
#[tokio::test]
async fn an_allowed_request_is_recorded_however_its_exchange_ends() {
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    use crate::support::proxy::AUDIT_TIMEOUT;

    // The client goes away before the answer.
    let slow = holding_origin(Duration::from_millis(700), true).await;
    let proxy = ProxyBuilder::standard(slow.port())
        .audit_allowed()
        .start()
        .await;
    let mut client = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let head = format!(
        "GET http://allowed.test:{0}/gone HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\n",
        slow.port()
    );
    client.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    drop(client);
    let record = proxy
        .wait_audit(
            |r| r["event"] == "egress.allowed",
            AUDIT_TIMEOUT + Duration::from_secs(1),
        )
        .await;
    assert_eq!(
        record["url"],
        format!("http://allowed.test:{}/gone", slow.port())
    );
    assert_eq!(record["via"], "proxy");

    // Upstream takes the request, then closes without answering: 502, and recorded.
    let dead = holding_origin(Duration::from_millis(10), false).await;
    let proxy = ProxyBuilder::standard(dead.port())
        .audit_allowed()
        .start()
        .await;
    let url = format!("http://allowed.test:{}/dropped", dead.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 502, "{resp:?}");
    let record = proxy.single_audit().await;
    assert_eq!(record["event"], "egress.allowed", "{record}");
    assert_eq!(record["url"], url);
}
