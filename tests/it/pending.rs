//! No one client holds every slot (docs/reference/command-line.md,
//! `--max-pending-per-client`; docs/reference/control-plane.md, "Limits"): connections
//! from one client address that have not finished their request head or SOCKS5 handshake
//! are at most 64, past it a new one is closed at once and counted, while another address
//! is served; the admin listener serves at most 256 connections and closes idle ones
//! after `--header-timeout`. Every loop is bounded.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::socks::{socks_addr, Socks, To};
use crate::support::admin::metric;
use crate::support::client::get_via_proxy;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

/// The default `--max-pending-per-client`.
const PENDING: usize = 64;

/// A connection to `to` from the loopback address `from`.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// Whether the peer closes `stream` within `limit` (bytes it sends are read past).
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 512];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// `GET http://allowed.test:PORT/` through the proxy from `from`: the status line.
async fn get_from(from: &str, proxy: SocketAddr, port: u16) -> String {
    let mut stream = connect_from(from, proxy).await;
    let req = format!(
        "GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: allowed.test:{port}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer));
    let _ = read.await;
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().unwrap_or("").to_string()
}

/// A SOCKS5 greeting (no authentication) from `from`: whether it is answered `05 00`.
async fn socks_greeting_from(from: &str, socks: SocketAddr) -> bool {
    let mut stream = connect_from(from, socks).await;
    stream.write_all(&[5, 1, 0]).await.unwrap();
    let mut reply = [0u8; 2];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut reply));
    matches!(read.await, Ok(Ok(_))) && reply == [5, 0]
}

/// Open `n` connections from 127.0.0.1 to `to`, each sending `first` and no more.
async fn unfinished(to: SocketAddr, n: usize, first: &[u8]) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..n {
        let mut stream = connect_from("127.0.0.1", to).await;
        stream.write_all(first).await.unwrap();
        held.push(stream);
    }
    held
}

/// Whether `attempt` succeeds within 5 s, tried every 100 ms: the proxy sees the 64
/// close on its own time (a loaded machine may take more than a moment).
async fn eventually<F, Fut>(attempt: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if attempt().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `egress_pending_refused_total{listener=...}`.
async fn refused(proxy: &Proxy, listener: &str) -> Option<f64> {
    let text = proxy.admin().metrics().await;
    let series = format!("egress_pending_refused_total{{listener=\"{listener}\"}}");
    metric(&text, &series)
}

/// 64 unfinished connections from 127.0.0.1 to `to`, then six more that are closed at
/// once; the 64 stay open.
async fn fill_and_overflow(to: SocketAddr, first: &[u8]) -> Vec<TcpStream> {
    let mut held = unfinished(to, PENDING, first).await;
    // Let the proxy accept the 64 before the six arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..6 {
        let mut extra = connect_from("127.0.0.1", to).await;
        let _ = extra.write_all(first).await;
        assert!(
            closed_within(&mut extra, Duration::from_secs(2)).await,
            "connection {} past the limit was not closed at once",
            PENDING + 1 + i
        );
    }
    for stream in held.iter_mut().take(3) {
        assert!(
            !closed_within(stream, Duration::from_millis(100)).await,
            "one of the first 64 was closed"
        );
    }
    held
}

#[tokio::test]
async fn one_client_holds_at_most_64_unfinished_heads_and_others_are_served() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .admin_without_token()
        .arg("--header-timeout")
        .arg("60")
        .start()
        .await;
    let port = origin.port();
    assert!(get_from("127.0.0.1", proxy.addr, port)
        .await
        .contains(" 200"));
    let held = fill_and_overflow(proxy.addr, b"GET http://allowed.test/ HTTP/1.1\r\n").await;
    assert_eq!(refused(&proxy, "proxy").await, Some(6.0));
    let other = get_from("127.0.0.2", proxy.addr, port).await;
    assert!(other.contains(" 200"), "another address: {other}");
    drop(held);
    assert!(
        eventually(|| async {
            get_from("127.0.0.1", proxy.addr, port)
                .await
                .contains(" 200")
        })
        .await,
        "127.0.0.1 after its 64 closed"
    );
}

#[tokio::test]
async fn one_client_holds_at_most_64_unfinished_socks5_greetings() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .admin_without_token()
        .arg("--header-timeout")
        .arg("60")
        .arg("--socks-listen")
        .arg("127.0.0.1:0")
        .start()
        .await;
    let socks = socks_addr(&proxy);
    // The control finishes its handshake, so its slot is free before its reply comes:
    // a greeting alone holds one until the proxy sees it close, which on a loaded
    // machine can be after the 64 below arrive.
    let (code, control) = Socks::connect(socks, &To::name("allowed.test"), origin.port()).await;
    assert_eq!(code, 0, "control");
    drop(control);
    // A greeting that offers one method and never names it.
    let held = fill_and_overflow(socks, &[5, 1]).await;
    assert_eq!(refused(&proxy, "socks5").await, Some(6.0));
    assert!(
        socks_greeting_from("127.0.0.2", socks).await,
        "another address"
    );
    drop(held);
    assert!(
        eventually(|| socks_greeting_from("127.0.0.1", socks)).await,
        "127.0.0.1 again"
    );
}

#[tokio::test]
async fn the_admin_listener_serves_256_connections_and_closes_idle_ones() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .admin_without_token()
        .arg("--header-timeout")
        .arg("6")
        .start()
        .await;
    let admin = proxy.admin().addr;
    let started = tokio::time::Instant::now();
    let mut idle = Vec::new();
    for _ in 0..256 {
        idle.push(TcpStream::connect(admin).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut waiting = TcpStream::connect(admin).await.unwrap();
    let health = format!("GET /healthz HTTP/1.1\r\nHost: {admin}\r\n\r\n");
    waiting.write_all(health.as_bytes()).await.unwrap();
    let mut buf = [0u8; 512];
    let early = tokio::time::timeout(Duration::from_secs(1), waiting.read(&mut buf)).await;
    assert!(early.is_err(), "the 257th admin connection was served");
    // 300 in all: the proxy port still accepts and serves.
    for _ in 0..43 {
        idle.push(TcpStream::connect(admin).await.unwrap());
    }
    let url = format!("http://allowed.test:{}/", origin.port());
    assert_eq!(get_via_proxy(proxy.addr, &url, &[]).await.status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "too slow to tell"
    );
    drop(idle.swap_remove(0));
    let answered = tokio::time::timeout(Duration::from_secs(2), waiting.read(&mut buf)).await;
    let n = answered.expect("answered once a slot freed").unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Idle connections, new ones and the one kept alive, are closed after the timeout.
    assert!(
        closed_within(&mut waiting, Duration::from_secs(8)).await,
        "kept alive"
    );
    for stream in idle.iter_mut().take(5) {
        assert!(closed_within(stream, Duration::from_secs(8)).await, "idle");
    }
}
