//! A reader that opens the stream and never reads, with a small receive buffer, while
//! 1,000 requests go through: every request is answered, the log keeps every record,
//! and the proxy closes the stuck reader's connection.

use std::sync::Arc;

use tokio::net::TcpSocket;

use super::*;

/// Requests made while the reader is stuck, before waiting for it to be dropped.
const REQUESTS: usize = 1000;
/// Concurrent clients making them.
const CLIENTS: usize = 8;
/// Further requests, in rounds of [`CLIENTS`], while waiting for the drop: the socket
/// buffers the kernel gives the proxy's side are not the test's to choose.
const MORE_ROUNDS: usize = 200;

/// `n` denied requests from [`CLIENTS`] clients at once; each must be answered 403.
async fn denied_requests(proxy: &Proxy, origin: &Origin, n: usize) {
    let url = Arc::new(url("evil.test", origin));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (addr, url) = (proxy.addr, url.clone());
        let count = n / CLIENTS + usize::from(c < n % CLIENTS);
        clients.push(tokio::spawn(async move {
            for _ in 0..count {
                let resp =
                    tokio::time::timeout(Duration::from_secs(10), get_via_proxy(addr, &url, &[]))
                        .await
                        .expect("a request is answered while a reader is stuck");
                assert_eq!(resp.status, 403, "{resp:?}");
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_reader_is_dropped_and_slows_nothing() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .audit_allowed()
        .admin(TOKEN)
        .log("info")
        .start()
        .await;
    let admin = proxy.admin().addr;
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(2048).unwrap();
    let mut stuck = socket.connect(admin).await.unwrap();
    request(&mut stuck, admin, "", TOKEN).await;
    // A reader that does read, and is not dropped (it sees no denied record).
    let mut healthy = Events::open(&proxy, "?event=egress.allowed").await;

    let started = Instant::now();
    denied_requests(&proxy, &origin, REQUESTS).await;
    let took = started.elapsed();
    let mut made = REQUESTS;
    let dropped = || proxy.stderr().contains("an event reader");
    for _ in 0..MORE_ROUNDS {
        if dropped() {
            break;
        }
        denied_requests(&proxy, &origin, CLIENTS).await;
        made += CLIENTS;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually("the stuck reader dropped", Duration::from_secs(10), dropped).await;

    // Every record is in the log.
    eventually("every record in the log", Duration::from_secs(10), || {
        proxy.audit_lines().len() >= made
    })
    .await;
    assert_eq!(proxy.audit_lines().len(), made, "{took:?}");
    // The proxy closed the stuck reader's connection: reading it now reaches its end.
    let mut buf = vec![0u8; 64 * 1024];
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stuck.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stuck reader's connection is still open");
    // The reader that reads is still served.
    let resp = get_via_proxy(proxy.addr, &url("allowed.test", &origin), &[]).await;
    assert_eq!(resp.status, 200);
    assert_eq!(healthy.next().await.data["host"], "allowed.test");
    eprintln!("{REQUESTS} requests with a stuck reader took {took:?}; {made} made in all");
}
