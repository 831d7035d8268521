//! The pool's keeping and reuse of connections, against origins on loopback.

use super::*;
use http_body_util::{BodyExt, Empty};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// An origin answering every request on a connection with `ok`; after the first
/// answer it closes the connection if `close_after_one`.
async fn origin(close_after_one: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if stream.write_all(answer).await.is_err() || close_after_one {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn get() -> Request<Body> {
    let body = Empty::new().map_err(|never| match never {}).boxed();
    Request::builder().uri("/").body(body).unwrap()
}

/// One exchange, its body read to the end, its connection put back.
async fn exchange(pool: &Upstream, addrs: &[CheckedAddr]) -> CheckedAddr {
    let (resp, lease) = pool.send(addrs, get(), None, None, || true).await.unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"ok");
    let reached = lease.addr();
    pool.put_back(lease);
    reached
}

fn idle_count(pool: &Upstream) -> usize {
    pool.idle.lock().unwrap().values().map(Vec::len).sum()
}

#[tokio::test]
async fn a_kept_connection_serves_only_its_own_address() {
    let pool = Upstream::with_tls(Duration::from_secs(1), None);
    let a = CheckedAddr::unchecked_for_test(origin(false).await);
    let b = CheckedAddr::unchecked_for_test(origin(false).await);
    exchange(&pool, &[a]).await;
    assert_eq!(idle_count(&pool), 1);
    // A request approved only for `b` never gets `a`'s connection.
    assert!(pool.checkout(&[b], None, false).is_none());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (_, reached, _) = pool
        .checkout(&[b, a], None, false)
        .expect("a's connection, kept");
    assert_eq!(reached, a);
}

#[tokio::test]
async fn sweep_drops_connections_upstream_closed() {
    let pool = Upstream::with_tls(Duration::from_secs(1), None);
    let addr = CheckedAddr::unchecked_for_test(origin(true).await);
    exchange(&pool, &[addr]).await;
    // Time for the connection's task to read upstream's close.
    tokio::time::sleep(Duration::from_millis(100)).await;
    pool.sweep();
    assert_eq!(idle_count(&pool), 0);
    // And the next request still gets through, on a new connection.
    exchange(&pool, &[addr]).await;
}
