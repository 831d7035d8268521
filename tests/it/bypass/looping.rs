//! The attacker's view, part 2b (issue 5): loops and chains. Requests to the proxy's
//! own listener (in any spelling, by name, and through the unspecified address, which a
//! `connect()` turns into a local one), and an allowed origin that is itself a proxy:
//! it must only ever see origin-form requests, never an upgrade turned tunnel, never a
//! `CONNECT` relayed by us.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::bypass::assert_no_connection;
use crate::support::client::{connect_via_proxy, get_via_proxy, send_raw, Conn};
use crate::support::expect::{assert_denials_logged, assert_refused_as_one_of};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{free_port, Proxy, ProxyBuilder};

/// A proxy on a port chosen beforehand, whose org opens all of loopback, that port, and
/// literal IPs at the request level too: nothing but the own-listener rule stands
/// between a client and a loop. `cidr` is what the org and the policy open.
async fn loop_proxy(cidr: &str, listen_ip: IpAddr, origin: &Origin) -> Proxy {
    for _ in 0..5 {
        let listen = free_port(listen_ip);
        let org = Org::new()
            .allow("loop.test")
            .allow("zero.test")
            .ports(&[80, 443, listen.port(), origin.port()])
            .cidr(cidr);
        let policy = serde_json::json!({
            "type": "allowlist",
            "allowed_domains": ["loop.test", "zero.test"],
            "allowed_cidrs": [cidr],
        });
        let builder = ProxyBuilder::new(org.to_toml())
            .policy(policy.to_string())
            .pin_to("loop.test", "127.0.0.1")
            .pin_to("zero.test", "0.0.0.0")
            .listen(listen);
        let proxy = builder.start().await;
        if proxy.addr == listen {
            return proxy;
        }
    }
    panic!("could not start a proxy on a chosen port");
}

/// Send each loop target (plain HTTP and CONNECT) and expect `private_address`, with
/// exactly one audit line per request: a looped request would add a second.
async fn assert_loops_refused(proxy: &Proxy, hosts: &[&str]) {
    let port = proxy.addr.port();
    let mut refusals = Vec::new();
    for host in hosts {
        let resp = get_via_proxy(proxy.addr, &format!("http://{host}:{port}/"), &[]).await;
        refusals.push(assert_refused_as_one_of(
            &resp,
            403,
            &["private_address"],
            proxy,
        ));
        let (resp, _conn) = connect_via_proxy(proxy.addr, &format!("{host}:{port}"), &[]).await;
        refusals.push(assert_refused_as_one_of(
            &resp,
            403,
            &["private_address"],
            proxy,
        ));
    }
    assert_denials_logged(proxy, &refusals).await;
}

#[tokio::test]
async fn requests_to_the_proxys_own_listener_are_private_address() {
    let origin = Origin::start().await;
    let proxy = loop_proxy("127.0.0.0/8", IpAddr::V4(Ipv4Addr::LOCALHOST), &origin).await;
    // Control: the same literal-IP route to another port of loopback is allowed.
    let resp = get_via_proxy(
        proxy.addr,
        &format!("http://127.0.0.1:{}/", origin.port()),
        &[],
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_loops_refused(
        &proxy,
        &[
            "127.0.0.1",
            "loop.test",
            "2130706433",
            "127.1",
            "[::ffff:127.0.0.1]",
        ],
    )
    .await;
    assert!(proxy
        .audit_lines()
        .iter()
        .all(|r| r["rule"] == "own listener"));
}

#[tokio::test]
async fn unspecified_address_reaching_the_proxys_own_listener_is_private_address() {
    let origin = Origin::start().await;
    // An org that opens every IPv4 address: 0.0.0.0 is then covered by a CIDR, but a
    // connect() to 0.0.0.0 lands on the local listener, the proxy itself.
    let proxy = loop_proxy("0.0.0.0/0", IpAddr::V4(Ipv4Addr::LOCALHOST), &origin).await;
    assert_loops_refused(&proxy, &["0.0.0.0", "0", "zero.test"]).await;
}

#[tokio::test]
async fn unspecified_ipv6_address_reaching_the_proxys_own_listener_is_private_address() {
    let origin = Origin::start().await;
    // The same on IPv6: a proxy on [::1], an org opening every IPv6 address; a
    // connect() to [::] lands on [::1].
    let proxy = loop_proxy("::/0", IpAddr::V6(Ipv6Addr::LOCALHOST), &origin).await;
    assert_loops_refused(&proxy, &["[::]", "[::1]"]).await;
}

#[tokio::test]
async fn allowed_origin_receives_origin_form_targets_only() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port()).start().await;
    let p = origin.port();
    for path in ["/path?q=1", "/http://evil.test/", "//evil.test:443/x"] {
        let resp = get_via_proxy(proxy.addr, &format!("http://allowed.test:{p}{path}"), &[]).await;
        assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    }
    let targets: Vec<String> = origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(
        targets,
        ["/path?q=1", "/http://evil.test/", "//evil.test:443/x"]
    );
    for request in origin.requests() {
        assert_eq!(
            request.header_all("host"),
            vec![format!("allowed.test:{p}")]
        );
        assert_eq!(request.method, "GET");
    }
}

/// A WebSocket handshake is forwarded with its upgrade (docs/reference/inspection.md,
/// "WebSocket"), but only upstream's `101` opens anything: an origin that answers 200
/// leaves a plain request, and the bytes after it are read as a request of their own.
#[tokio::test]
async fn an_upgrade_that_upstream_declines_is_not_turned_into_a_tunnel() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port()).start().await;
    let p = origin.port();
    let mut conn = Conn::open(proxy.addr).await;
    let head = format!(
        "GET http://allowed.test:{p}/ws HTTP/1.1\r\nHost: allowed.test:{p}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    );
    conn.send(head.as_bytes()).await;
    let resp = conn.read_response().await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let seen = &origin.requests()[0];
    assert_eq!(seen.header("upgrade"), Some("websocket"), "{seen:?}");
    // What would travel in a tunnel is read by the proxy as a new (origin-form, so
    // refused) request: it never reaches the origin.
    conn.send_lossy(b"GET /inside HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n")
        .await;
    let resp = conn.read_response().await;
    let refusals = vec![assert_refused_as_one_of(
        &resp,
        400,
        &["invalid_request"],
        &proxy,
    )];
    assert_denials_logged(&proxy, &refusals).await;
    assert_eq!(origin.hits(), 1, "{:?}", origin.requests());
}

#[tokio::test]
async fn upstream_101_does_not_open_a_tunnel() {
    let rogue = RogueOrigin::start().await;
    let proxy = ProxyBuilder::new(Org::standard(rogue.addr.port()).to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin("allowed.test")
        .start()
        .await;
    let p = rogue.addr.port();
    let mut conn = Conn::open(proxy.addr).await;
    let head = format!(
        "GET http://allowed.test:{p}/ HTTP/1.1\r\nHost: allowed.test:{p}\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n"
    );
    conn.send(head.as_bytes()).await;
    // Whatever the client is told, what follows must not reach the rogue origin.
    let _ = tokio::time::timeout(crate::support::IO_TIMEOUT, conn.read_connect_response()).await;
    conn.send_lossy(b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let after = rogue.bytes_after_head();
    assert!(
        after.is_empty(),
        "bytes reached the origin after its 101: {:?}\n{}",
        String::from_utf8_lossy(&after),
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn connect_with_an_absolute_form_target_is_refused_400() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .pin("evil.test")
        .start()
        .await;
    let p = origin.port();
    let mut refusals = Vec::new();
    for target in [
        "http://evil.test:443/".to_string(),
        format!("http://allowed.test:{p}/"),
        format!("http://allowed.test:{p}"),
        format!("https://allowed.test:{p}/"),
    ] {
        let raw = format!("CONNECT {target} HTTP/1.1\r\nHost: allowed.test:{p}\r\n\r\n");
        let resp = send_raw(proxy.addr, raw.as_bytes()).await;
        let reasons = ["invalid_request", "invalid_host"];
        refusals.push(assert_refused_as_one_of(&resp, 400, &reasons, &proxy));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}

#[tokio::test]
async fn request_pipelined_after_a_refused_connect_reaches_no_one() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .pin("evil.test")
        .audit_allowed()
        .start()
        .await;
    let p = origin.port();
    // One write: a CONNECT the policy refuses, then what the client hoped to tunnel.
    let bytes = format!(
        "CONNECT evil.test:{p} HTTP/1.1\r\nHost: evil.test:{p}\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: evil.test:{p}\r\nConnection: close\r\n\r\n"
    );
    let mut conn = Conn::open(proxy.addr).await;
    conn.send(bytes.as_bytes()).await;
    let first = conn.read_connect_response().await;
    let mut refusals = vec![assert_refused_as_one_of(
        &first,
        403,
        &["not_in_org_allowlist"],
        &proxy,
    )];
    // The pipelined bytes are either dropped with the connection or read as a request
    // of their own, which (origin-form) is refused in turn.
    if let Some(second) = conn.next_response().await {
        refusals.push(assert_refused_as_one_of(
            &second,
            400,
            &["invalid_request"],
            &proxy,
        ));
    }
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}

/// An origin that answers `101 Switching Protocols` to any request, as an upstream
/// proxy or tunnel endpoint might, and records every byte it receives after the head.
struct RogueOrigin {
    addr: SocketAddr,
    after: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl RogueOrigin {
    async fn start() -> RogueOrigin {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let after = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = after.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let mut answered = false;
                    loop {
                        let n = match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if answered {
                            log.lock().unwrap().extend_from_slice(&chunk[..n]);
                            continue;
                        }
                        seen.extend_from_slice(&chunk[..n]);
                        if let Some(end) = crate::support::find(&seen, b"\r\n\r\n") {
                            log.lock().unwrap().extend_from_slice(&seen[end + 4..]);
                            let answer = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n";
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                            answered = true;
                        }
                    }
                });
            }
        });
        RogueOrigin { addr, after }
    }

    fn bytes_after_head(&self) -> Vec<u8> {
        self.after.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn unspecified_address_never_reaches_loopback_that_no_cidr_covers() {
    let origin = Origin::start().await;
    // `0.0.0.0/2` opens 0-63.x.x.x: not loopback. The unspecified address is in it.
    let org = Org::new()
        .allow("allowed.test")
        .ports(&[80, 443, origin.port()])
        .cidr("0.0.0.0/2");
    let policy = serde_json::json!({
        "type": "allowlist",
        "allowed_domains": ["allowed.test"],
        "allowed_cidrs": ["0.0.0.0/2"],
    });
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(policy.to_string())
        .pin("allowed.test")
        .start()
        .await;
    let url = format!("http://0.0.0.0:{}/secret", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    let refusals = vec![assert_refused_as_one_of(
        &resp,
        403,
        &["private_address"],
        &proxy,
    )];
    assert_denials_logged(&proxy, &refusals).await;
    assert_no_connection(&origin, &proxy);
}
