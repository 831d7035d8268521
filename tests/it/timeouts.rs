//! `--connect-timeout` (docs/reference/answers.md): an allowed destination that never answers the
//! connection gets 504, for plain HTTP and for `CONNECT`.
//!
//! Loopback has no address that drops packets, so the test makes one: a listener that
//! never accepts, with its accept queue filled. Linux then drops further SYNs to it, and
//! a connect hangs until the caller gives up.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::support::client::{connect_via_proxy, get_via_proxy};
use crate::support::proxy::ProxyBuilder;

/// A listener that accepts nothing and whose accept queue is full, with the
/// connections that fill it (kept open so the queue stays full).
async fn blackhole() -> (TcpListener, Vec<TcpStream>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    // Connect until one hangs: from then on the queue is full.
    for _ in 0..16 {
        match tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => fillers.push(stream),
            Ok(Err(e)) => panic!("filling the accept queue of {addr}: {e}"),
            Err(_) => return (listener, fillers),
        }
    }
    panic!("the accept queue of {addr} never filled");
}

async fn proxy_to(addr: SocketAddr) -> crate::support::proxy::Proxy {
    ProxyBuilder::standard(addr.port())
        .arg("--connect-timeout")
        .arg("0.5")
        .start()
        .await
}

#[tokio::test]
async fn plain_request_to_a_silent_address_gets_504_after_the_connect_timeout() {
    let (listener, _fillers) = blackhole().await;
    let addr = listener.local_addr().unwrap();
    let proxy = proxy_to(addr).await;
    let started = Instant::now();
    let url = format!("http://allowed.test:{}/", addr.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.status, 504, "{resp:?}\n{}", proxy.diagnostics());
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "answered before the timeout ran out: {:?}",
        started.elapsed()
    );
    assert_eq!(resp.json()["error"]["type"], "upstream_error", "{resp:?}");
}

#[tokio::test]
async fn connect_to_a_silent_address_gets_504_and_no_tunnel() {
    let (listener, _fillers) = blackhole().await;
    let addr = listener.local_addr().unwrap();
    let proxy = proxy_to(addr).await;
    let target = format!("allowed.test:{}", addr.port());
    let (resp, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(resp.status, 504, "{resp:?}\n{}", proxy.diagnostics());
}
