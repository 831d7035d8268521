//! An origin that keeps every byte it receives, request or not, so a test can show a
//! canary never reached it, whole or in part; it answers `200 ok` to a request it read
//! to its end (by `Content-Length` or the last chunk) and waits for more otherwise.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The sink: its address and what it received, per connection.
pub(super) struct Sink {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// Whether `buf` holds a whole request: its head, and its body by its framing.
fn complete(buf: &[u8]) -> bool {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let body = &buf[end + 4..];
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    body.len() >= length
}

impl Sink {
    pub(super) async fn start() -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let all = received.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let all = all.clone();
                tokio::spawn(async move {
                    let index = {
                        let mut all = all.lock().unwrap();
                        all.push(Vec::new());
                        all.len() - 1
                    };
                    let mut buf = [0u8; 16 * 1024];
                    let mut whole = Vec::new();
                    // Bounded: each read waits at most 10 s, and a request ends it.
                    loop {
                        let read =
                            tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf));
                        let n = match read.await {
                            Ok(Ok(n)) if n > 0 => n,
                            _ => return,
                        };
                        whole.extend_from_slice(&buf[..n]);
                        all.lock().unwrap()[index].extend_from_slice(&buf[..n]);
                        if complete(&whole) {
                            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                            let _ = stream.write_all(answer).await;
                            return;
                        }
                    }
                });
            }
        });
        Sink { addr, received }
    }

    pub(super) fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every byte received, on every connection, joined.
    pub(super) fn bytes(&self) -> Vec<u8> {
        self.received.lock().unwrap().concat()
    }

    /// Whether the bytes received hold `needle` anywhere.
    pub(super) fn holds(&self, needle: &[u8]) -> bool {
        self.bytes().windows(needle.len()).any(|w| w == needle)
    }
}
