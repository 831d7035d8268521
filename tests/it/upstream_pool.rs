//! The upstream connection pool: kept-open connections are reused, a connection
//! upstream closed is never handed out, and an approved address that refuses the
//! connection falls back to the next approved one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::client::{get_via_proxy, Conn};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

#[tokio::test]
async fn requests_in_turn_share_one_upstream_connection() {
    let origin = Origin::start().await;
    // One worker, so every client connection draws on the same pool.
    let proxy = ProxyBuilder::standard(origin.port())
        .arg("--workers")
        .arg("1")
        .start()
        .await;
    let authority = format!("allowed.test:{}", origin.port());
    let mut conn = Conn::open(proxy.addr).await;
    for path in ["/one", "/two"] {
        let resp = conn.get(&authority, path).await;
        assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    }
    // A new client connection after the first one's exchanges ended.
    let resp = get_via_proxy(proxy.addr, &format!("http://{authority}/three"), &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(origin.hits(), 3);
    assert_eq!(origin.connections(), 1, "{}", proxy.diagnostics());
}

/// An origin that answers one request per connection and then closes it, without
/// saying so in the answer (no `Connection: close`). Returns its address and a count of
/// the connections it accepted.
async fn closing_origin() -> (std::net::SocketAddr, tokio::sync::watch::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (count_tx, count) = tokio::sync::watch::channel(0usize);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count_tx.send_modify(|n| *n += 1);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                let _ = stream.write_all(answer).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (addr, count)
}

#[tokio::test]
async fn a_connection_upstream_closed_is_not_reused() {
    let (addr, connections) = closing_origin().await;
    let proxy = ProxyBuilder::standard(addr.port()).start().await;
    let authority = format!("allowed.test:{}", addr.port());
    let mut conn = Conn::open(proxy.addr).await;
    for path in ["/one", "/two"] {
        let resp = conn.get(&authority, path).await;
        assert_eq!(
            resp.status,
            200,
            "{path}: {resp:?}\n{}",
            proxy.diagnostics()
        );
        assert_eq!(resp.text(), "ok");
        // Time for the proxy to see upstream's close before the next request.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(*connections.borrow(), 2, "{}", proxy.diagnostics());
}

#[tokio::test]
async fn a_refusing_address_falls_back_to_the_next_approved_one() {
    // The origin on 127.0.0.2; nothing listens on 127.0.0.3 at its port.
    let origin = Origin::start_at("second", "127.0.0.2:0".parse().unwrap())
        .await
        .unwrap();
    let proxy = ProxyBuilder::new(Org::standard(origin.port()).to_toml())
        .policy(allowlist_json(&["allowed.test"]))
        .pin_to("allowed.test", "127.0.0.3")
        .pin_to("allowed.test", "127.0.0.2")
        .audit_allowed()
        .start()
        .await;
    let url = format!("http://allowed.test:{}/fallback", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(resp.text(), "origin:second");
    let record = proxy.allowed_record().await;
    assert_eq!(record["resolved_ip"], "127.0.0.2", "{record}");
}

/// An origin that answers the first request on each connection and keeps it open, then
/// reads the next request on it and closes without an answer: what an upstream does when
/// its keep-alive timeout ends a connection just as a request goes out. Returns its
/// address, and the request lines it read, in order.
async fn dropping_origin() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                for answered in [true, false] {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut byte).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => head.push(byte[0]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head);
                    log.lock()
                        .unwrap()
                        .push(text.lines().next().unwrap_or("").to_owned());
                    if !answered {
                        return; // dropped: no answer, the connection closes
                    }
                    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Through a one-worker proxy to a [`dropping_origin`]: a first GET answered, then the
/// kept connection left idle long enough that the proxy keeps a copy of the next
/// request. Returns the proxy, the client connection, the authority and the origin's log.
async fn after_an_idle_kept_connection() -> (Proxy, Conn, String, Arc<Mutex<Vec<String>>>) {
    let (addr, seen) = dropping_origin().await;
    let proxy = ProxyBuilder::standard(addr.port())
        .arg("--workers")
        .arg("1")
        .start()
        .await;
    let authority = format!("allowed.test:{}", addr.port());
    let mut conn = Conn::open(proxy.addr).await;
    let resp = conn.get(&authority, "/one").await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    (proxy, conn, authority, seen)
}

/// A GET over a kept-open connection that upstream drops without answering is sent
/// again over a new connection, and the client sees only the answer.
#[tokio::test]
async fn a_get_that_a_kept_connection_dropped_is_sent_again() {
    let (proxy, mut conn, authority, seen) = after_an_idle_kept_connection().await;
    let resp = conn.get(&authority, "/two").await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(resp.text(), "ok");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            "GET /one HTTP/1.1",
            "GET /two HTTP/1.1",
            "GET /two HTTP/1.1"
        ],
        "dropped once, then sent again"
    );
}

/// A POST is not idempotent: dropped the same way, it is answered 502 and never sent
/// a second time.
#[tokio::test]
async fn a_post_that_a_kept_connection_dropped_is_not_sent_again() {
    let (proxy, mut conn, authority, seen) = after_an_idle_kept_connection().await;
    let post = format!(
        "POST http://{authority}/order HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 4\r\n\r\nbody"
    );
    conn.send(post.as_bytes()).await;
    let resp = conn.read_response().await;
    assert_eq!(resp.status, 502, "{resp:?}\n{}", proxy.diagnostics());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, ["GET /one HTTP/1.1", "POST /order HTTP/1.1"]);
}
