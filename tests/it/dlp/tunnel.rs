//! A session's own canaries in a tunnel's server name and first bytes (docs/reference/dlp.md,
//! "Where the proxy looks"), beside the organization's: the tunnel is closed before any
//! of its bytes reach upstream, and the session ends. The negative control in each: a
//! session without that canary sends the same bytes.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::canaries::client_hello;
use super::session::{created, session_with};
use crate::support::client::{connect_via_proxy, get_via_proxy};
use crate::support::origin::Origin;
use crate::support::proxy::Proxy;
use crate::support::sessions;

/// The session's canary, chosen (a value of 16 to 256 printable bytes).
const OWN: &str = "my-session-canary-in-a-tunnel-01";

/// A session allowing `allowed.test`, with the canary [`OWN`] or without; its
/// `Proxy-Authorization` value.
async fn session(proxy: &Proxy, with_canary: bool) -> (String, String) {
    let canaries = match with_canary {
        true => json!([{ "value": OWN }]),
        false => json!([]),
    };
    let (status, body) = session_with(proxy, canaries, json!({})).await;
    assert_eq!(status, 201, "{body}");
    let made = created(&body);
    (made.id.clone(), made.proxy_auth())
}

/// Open a tunnel to `allowed.test` as `auth`, send `first`, and say whether the proxy
/// closed it (else the origin's first answer bytes, as text).
async fn tunnel(proxy: &Proxy, port: u16, auth: &str, first: &[u8]) -> Result<String, ()> {
    let target = format!("allowed.test:{port}");
    let headers = [("proxy-authorization", auth)];
    let (answer, conn) = connect_via_proxy(proxy.addr, &target, &headers).await;
    assert_eq!(answer.status, 200, "the tunnel opens: {}", answer.text());
    let mut stream = conn.into_stream();
    stream.write_all(first).await.unwrap();
    let mut buf = [0u8; 256];
    match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
        other => {
            assert!(other.is_ok(), "neither closed nor answered");
            Err(())
        }
    }
}

#[tokio::test]
async fn a_sessions_canary_in_a_tunnels_first_bytes_closes_it_unsent_and_ends_it() {
    let origin = Origin::start().await;
    let proxy = sessions::proxy_with(&sessions::org(origin.port()), &[]).await;
    let (tripping, auth) = session(&proxy, true).await;
    let (_, other) = session(&proxy, false).await;
    // A plain-HTTP request sent down an opaque tunnel: its first bytes.
    let first = format!("GET /?k={OWN} HTTP/1.1\r\nHost: allowed.test\r\n\r\n");
    // The negative control: a session without the canary sends the same; it arrives.
    let through = tunnel(&proxy, origin.port(), &other, first.as_bytes()).await;
    assert!(
        through
            .as_deref()
            .is_ok_and(|t| t.starts_with("HTTP/1.1 200")),
        "{through:?}"
    );
    assert_eq!(origin.hits(), 1);
    let closed = tunnel(&proxy, origin.port(), &auth, first.as_bytes()).await;
    assert_eq!(closed, Err(()), "closed unsent");
    assert_eq!(origin.hits(), 1, "nothing more reached the origin");
    let record = tripped(&proxy).await;
    assert_eq!(record["dlp"]["found_in"], "first_bytes", "{record}");
    assert_eq!(record["dlp"]["id"], "c1", "{record}");
    assert_eq!(record["session"], tripping.as_str(), "{record}");
    let url = format!("http://allowed.test:{}/", origin.port());
    session_ended(&proxy, &url, &auth).await;
    assert!(!proxy.audit_text().contains(OWN));
}

#[tokio::test]
async fn a_sessions_canary_in_a_tunnels_server_name_is_exfiltration_not_a_mismatch() {
    let origin = Origin::start().await;
    let proxy = sessions::proxy_with(&sessions::org(origin.port()), &[]).await;
    let (tripping, auth) = session(&proxy, true).await;
    let (_, other) = session(&proxy, false).await;
    let hex = data_encoding::HEXLOWER.encode(OWN.as_bytes());
    let (a, b) = hex.split_at(30);
    let hello = client_hello(&format!("{a}.{b}.allowed.test"));
    // The negative control: without the canary, the same hello is only a server name
    // that is not the tunnel's host, and its session goes on.
    assert_eq!(tunnel(&proxy, origin.port(), &other, &hello).await, Err(()));
    proxy
        .wait_audit(|r| r["reason"] == "sni_mismatch", Duration::from_secs(5))
        .await;
    assert_eq!(tunnel(&proxy, origin.port(), &auth, &hello).await, Err(()));
    let record = tripped(&proxy).await;
    assert_eq!(record["dlp"]["found_in"], "sni", "{record}");
    assert_eq!(record["dlp"]["encoding"], "hex", "{record}");
    assert_eq!(record["session"], tripping.as_str(), "{record}");
    let url = format!("http://allowed.test:{}/", origin.port());
    session_ended(&proxy, &url, &auth).await;
    let still = get_via_proxy(proxy.addr, &url, &[("proxy-authorization", &other)]).await;
    assert_eq!(still.status, 200, "the other goes on: {}", still.text());
    assert_eq!(origin.hits(), 1);
    // The control's mismatch names the server name; the canary's record never does.
    assert!(!record.to_string().contains(a), "{record}");
}

/// The one `exfiltration_detected` record a trip writes.
async fn tripped(proxy: &Proxy) -> serde_json::Value {
    proxy
        .wait_audit(
            |r| r["reason"] == "exfiltration_detected",
            Duration::from_secs(5),
        )
        .await
}

/// The tripping session was ended: its `session.ended` record, and 407 for its next
/// request.
async fn session_ended(proxy: &Proxy, url: &str, auth: &str) {
    proxy
        .wait_audit(|r| r["event"] == "session.ended", Duration::from_secs(5))
        .await;
    let after = get_via_proxy(proxy.addr, url, &[("proxy-authorization", auth)]).await;
    assert_eq!(after.status, 407, "the session ended: {}", after.text());
}
