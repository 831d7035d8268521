//! Canaries in WebSocket messages sent upstream (docs/reference/dlp.md, "WebSocket
//! messages"): a message carrying one, split across two frames and two TCP writes, closes
//! the connection before the value reaches the origin, which keeps every byte it gets
//! (an origin of the test's own that switches protocols and records the frames); a clean
//! message before it arrives whole and at once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{values_file, with_canaries, VALUE};
use crate::support::client::Conn;
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::ProxyBuilder;

/// RFC 6455 1.3's example key and the accept value that answers it.
pub(super) const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// An origin that answers a handshake with `101` and keeps every byte after it.
async fn ws_sink() -> (u16, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let kept = got.clone();
    tokio::spawn(async move {
        if let Ok((stream, _)) = listener.accept().await {
            keep_after_101(stream, kept).await;
        }
    });
    (port, got)
}

/// Answer the handshake on `stream` with `101` and keep every byte after it in `kept`.
pub(super) async fn keep_after_101<S>(mut stream: S, kept: Arc<Mutex<Vec<u8>>>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    // Bounded: each read waits at most 10 s.
    loop {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf));
        let n = match read.await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return,
        };
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            kept.lock().unwrap().extend_from_slice(&buf[..n]);
            continue;
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            kept.lock().unwrap().extend_from_slice(&head[end + 4..]);
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Accept: {ACCEPT}\r\n\r\n"
            );
            stream.write_all(answer.as_bytes()).await.unwrap();
            stream.flush().await.unwrap();
        }
    }
}

/// A masked client frame (payload under 126 bytes).
pub(super) fn frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![
        opcode | if fin { 0x80 } else { 0 },
        0x80 | payload.len() as u8,
    ];
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// The payloads of the masked frames in `raw`, unmasked and joined (a frame cut short
/// gives what arrived of it).
pub(super) fn payloads(raw: &[u8]) -> Vec<u8> {
    let (mut out, mut at) = (Vec::new(), 0);
    while at + 6 <= raw.len() {
        let len = usize::from(raw[at + 1] & 0x7f);
        let mask = &raw[at + 2..at + 6];
        let end = (at + 6 + len).min(raw.len());
        out.extend(
            raw[at + 6..end]
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ mask[i % 4]),
        );
        at = end;
    }
    out
}

#[tokio::test]
async fn a_canary_split_across_websocket_frames_closes_it_before_the_origin_has_it() {
    let (port, got) = ws_sink().await;
    let file = values_file("websocket");
    let org = with_canaries(Org::standard(port).allow("ws.test"), &file, "refuse");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["ws.test"]))
        .pin("ws.test")
        .start()
        .await;
    let authority = format!("ws.test:{port}");
    let mut conn = Conn::open(proxy.addr).await;
    let handshake = format!(
        "GET http://{authority}/chat HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    conn.send(handshake.as_bytes()).await;
    let answer = conn.read_connect_response().await;
    assert_eq!(answer.status, 101, "{answer:?}");
    let mut stream = conn.into_stream();
    // The probe: a clean message reaches the origin whole, without waiting for more.
    let clean = frame(1, true, b"{\"msg\": \"hello, nothing secret\"}");
    stream.write_all(&clean).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.lock().unwrap().len() < clean.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*got.lock().unwrap(), clean, "{}", proxy.diagnostics());
    // The value in two frames of one message, each its own TCP write.
    let text = format!("{{\"msg\": \"{VALUE}\"}}");
    let (a, b) = text.as_bytes().split_at(18);
    stream.write_all(&frame(1, false, a)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = stream.write_all(&frame(0, true, b)).await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
    let record = proxy
        .wait_audit(
            |r| r["reason"] == "exfiltration_detected",
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(record["dlp"]["found_in"], "websocket", "{record}");
    assert_eq!(record["dlp"]["id"], "org:2", "{record}");
    assert!(record.get("url").is_none(), "{record}");
    let received = payloads(&got.lock().unwrap());
    let shown = String::from_utf8_lossy(&received);
    assert!(!shown.contains(&VALUE[..6]), "the origin got {shown:?}");
    assert!(!proxy.audit_text().contains(VALUE) && !proxy.stderr().contains(VALUE));
}
