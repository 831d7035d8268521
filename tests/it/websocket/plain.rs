//! Plain HTTP: an absolute-form `GET ws-host` with `Upgrade: websocket` is forwarded
//! with its upgrade and relayed after the `101` (raw bytes, so the exact frames are
//! seen); an `h2c` upgrade is refused `invalid_request` and never reaches the origin.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::client::{get_via_proxy, send_raw, Conn};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{ProxyBuilder, AUDIT_TIMEOUT};
use crate::support::ws_origin::{require_websockets, WsOrigin};
use crate::support::IO_TIMEOUT;

/// RFC 6455 1.3's example key and the accept value that answers it.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// A masked client text frame carrying `text` (under 126 bytes).
fn masked_text(text: &[u8]) -> Vec<u8> {
    let mask = [0x11, 0x22, 0x33, 0x44];
    let mut frame = vec![0x81, 0x80 | text.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(text.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

#[tokio::test]
async fn a_plain_http_websocket_is_forwarded_with_its_upgrade_and_relayed() {
    require_websockets!();
    let origin = WsOrigin::plain();
    let org = Org::standard(origin.port).allow("ws.test").to_toml();
    let proxy = ProxyBuilder::new(org)
        .policy(allowlist_json(&["ws.test"]))
        .pin("ws.test")
        .start()
        .await;
    let authority = format!("ws.test:{}", origin.port);
    let mut conn = Conn::open(proxy.addr).await;
    let handshake = format!(
        "GET http://{authority}/chat HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    conn.send(handshake.as_bytes()).await;
    let answer = conn.read_connect_response().await;
    assert_eq!(answer.status, 101, "{answer:?}");
    assert_eq!(answer.header("sec-websocket-accept"), Some(ACCEPT));
    assert!(answer
        .header("upgrade")
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket")));
    let mut stream = conn.into_stream();
    stream.write_all(&masked_text(b"hello")).await.unwrap();
    let mut echo = [0u8; 7];
    tokio::time::timeout(IO_TIMEOUT, stream.read_exact(&mut echo))
        .await
        .expect("the echo in time")
        .unwrap();
    assert_eq!(&echo, b"\x81\x05hello", "the origin's frame, unchanged");
    // A close frame, the origin's in answer, and the connection closed.
    stream.write_all(&[0x88, 0x80, 0, 0, 0, 0]).await.unwrap();
    let mut close = [0u8; 2];
    tokio::time::timeout(IO_TIMEOUT, stream.read_exact(&mut close))
        .await
        .expect("the close in time")
        .unwrap();
    assert_eq!(close[0], 0x88, "{close:?}");
    drop(stream);
    assert_eq!(
        origin.closed(1, Duration::from_secs(15)),
        [("/chat".to_string(), 5)]
    );
    let closed = proxy
        .wait_audit(|r| r["event"] == "websocket.closed", AUDIT_TIMEOUT)
        .await;
    assert_eq!(closed["url"], format!("http://{authority}/chat"));
}

#[tokio::test]
async fn an_h2c_upgrade_is_refused_and_never_reaches_the_origin() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port()).start().await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let authority = format!("allowed.test:{}", origin.port());
    let h2c = format!(
        "GET {url} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade, HTTP2-Settings\r\n\
         Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
    );
    let answer = send_raw(proxy.addr, h2c.as_bytes()).await;
    assert_eq!(answer.status, 400, "{answer:?}");
    assert_eq!(answer.header("x-egress-denied"), Some("invalid_request"));
    assert_eq!(origin.hits(), 0, "the h2c request reached the origin");
    // Without the upgrade, the same request does.
    assert_eq!(get_via_proxy(proxy.addr, &url, &[]).await.status, 200);
    assert_eq!(origin.hits(), 1);
}
