//! Secret detectors in WebSocket messages sent upstream (docs/reference/dlp.md,
//! "WebSocket messages", "Secret detectors"): a message carrying a detector's match (not
//! a canary), split across two frames and two TCP writes, closes the connection before
//! the match reaches the origin whole, on a plain `ws://` upgrade and inside an
//! intercepted tunnel; a clean message before it arrives whole. The origins keep every
//! byte they get after the `101` ([`keep_after_101`]).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use super::detectors::{dlp_records, GITHUB};
use super::websocket::{frame, keep_after_101, payloads, KEY};
use crate::support::client::{connect_via_proxy, tls_config, Conn};
use crate::support::org::{allowlist_json, Org};
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::tls::{ca_cert, ca_init, write_pem};
use crate::support::unique_temp_dir;

/// An AWS access key id's shape (AWS's documented example).
const AWS: &str = "AKIAIOSFODNN7EXAMPLE";

/// What the origin kept after the `101`.
type Kept = Arc<Mutex<Vec<u8>>>;

/// A plain origin for `ws.test` and a TLS one for `secure.test` (its certificate in
/// `dir`), each answering one handshake with `101` and keeping what follows.
async fn origins(dir: &Path) -> ((u16, Kept), (u16, Kept)) {
    let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tls = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ports = (
        plain.local_addr().unwrap().port(),
        tls.local_addr().unwrap().port(),
    );
    let (plain_kept, tls_kept) = (Kept::default(), Kept::default());
    let kept = plain_kept.clone();
    tokio::spawn(async move {
        if let Ok((stream, _)) = plain.accept().await {
            keep_after_101(stream, kept).await;
        }
    });
    let certified = rcgen::generate_simple_self_signed(vec!["secure.test".into()]).unwrap();
    let cert = certified.cert.der().clone();
    write_pem(&dir.join("origin.pem"), &cert);
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let kept = tls_kept.clone();
    // Every connection: the proxy dials one when the tunnel opens (kept for a later
    // request) and may dial another for the upgrade.
    tokio::spawn(async move {
        while let Ok((stream, _)) = tls.accept().await {
            let (acceptor, kept) = (acceptor.clone(), kept.clone());
            tokio::spawn(async move {
                let accepted = acceptor.accept(stream);
                let accepted = tokio::time::timeout(Duration::from_secs(10), accepted);
                if let Ok(Ok(stream)) = accepted.await {
                    keep_after_101(stream, kept).await;
                }
            });
        }
    });
    ((ports.0, plain_kept), (ports.1, tls_kept))
}

/// A proxy with `[dlp]` refusing AWS key ids and GitHub tokens, allowing `ws.test` on
/// `plain` and `secure.test` (inspected) on `tls`; the CA directory it intercepts with.
async fn proxy(dir: &Path, plain: u16, tls: u16) -> (Proxy, std::path::PathBuf) {
    let ca = ca_init(dir);
    let org = Org::new()
        .allow("ws.test")
        .allow_entry(r#"{ host = "secure.test", inspect = true }"#)
        .ports(&[plain, tls])
        .loopback()
        .raw_line(
            "[dlp]\ndetectors = [\"aws_access_key_id\", \"github_token\"]\naction = \"refuse\"",
        );
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["ws.test", "secure.test"]))
        .pin("ws.test")
        .pin("secure.test")
        .arg("--ca")
        .arg(ca.to_str().unwrap())
        .arg("--upstream-ca")
        .arg(dir.join("origin.pem").to_str().unwrap())
        .admin("events-token")
        .start()
        .await;
    (proxy, ca)
}

/// The handshake for `authority`, `target` as the request line has it.
fn handshake(target: &str, authority: &str) -> String {
    format!(
        "GET {target} HTTP/1.1\r\nHost: {authority}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

/// Read an answer's head from `stream` and give its status line.
async fn status_line<S: AsyncRead + Unpin>(stream: &mut S) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    // Bounded: a head of at most 8 KiB, each read at most 10 s.
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte));
        match read.await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&head);
    head.lines().next().unwrap_or_default().to_string()
}

/// Send a clean message, then `secret` in a message split across two frames (two TCP
/// writes): the clean one arrives whole, the connection is closed, and the origin never
/// has `secret`, nor any of the second message.
async fn clean_then_secret<S>(mut stream: S, got: &Kept, secret: &str, proxy: &Proxy)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let clean = frame(1, true, b"{\"msg\": \"hello, nothing secret\"}");
    stream.write_all(&clean).await.unwrap();
    stream.flush().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.lock().unwrap().len() < clean.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*got.lock().unwrap(), clean, "{}", proxy.diagnostics());
    let text = format!("{{\"key\": \"{secret}\"}}");
    let (a, b) = text.as_bytes().split_at(9 + secret.len() / 2);
    stream.write_all(&frame(1, false, a)).await.unwrap();
    stream.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = stream.write_all(&frame(0, true, b)).await;
    let _ = stream.flush().await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
    let received = payloads(&got.lock().unwrap());
    let shown = String::from_utf8_lossy(&received);
    assert!(!shown.contains(secret), "the origin got {shown:?}");
    // The message is shorter than what the proxy holds back: none of it went on.
    assert_eq!(
        shown, "{\"msg\": \"hello, nothing secret\"}",
        "the origin got more than the clean message"
    );
}

#[tokio::test]
async fn a_detectors_match_split_across_websocket_frames_closes_it_plain_or_inspected() {
    let dir = unique_temp_dir("dlp-ws-detectors");
    let ((plain, plain_got), (tls, tls_got)) = origins(&dir).await;
    let (proxy, ca) = proxy(&dir, plain, tls).await;

    // A plain `ws://` upgrade (absolute-form), a GitHub token in its message.
    let authority = format!("ws.test:{plain}");
    let mut conn = Conn::open(proxy.addr).await;
    let target = format!("http://{authority}/chat");
    conn.send(handshake(&target, &authority).as_bytes()).await;
    let answer = conn.read_connect_response().await;
    assert_eq!(answer.status, 101, "{answer:?}");
    clean_then_secret(conn.into_stream(), &plain_got, GITHUB, &proxy).await;
    let records = dlp_records(&proxy, "egress.denied", 1).await;
    assert_eq!(records.len(), 1, "{}", proxy.diagnostics());

    // `wss://` inside an intercepted tunnel, an AWS access key id in its message.
    let authority = format!("secure.test:{tls}");
    let (answer, conn) = connect_via_proxy(proxy.addr, &authority, &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let mut config = tls_config(ca_cert(&ca));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("secure.test").unwrap();
    let mut stream = connector.connect(name, conn.into_stream()).await.unwrap();
    stream
        .write_all(handshake("/chat", &authority).as_bytes())
        .await
        .unwrap();
    stream.flush().await.unwrap();
    let status = status_line(&mut stream).await;
    assert!(
        status.starts_with("HTTP/1.1 101"),
        "{status}: {}",
        proxy.diagnostics()
    );
    clean_then_secret(stream, &tls_got, AWS, &proxy).await;

    let records = dlp_records(&proxy, "egress.denied", 2).await;
    assert_eq!(records.len(), 2, "one each: {}", proxy.diagnostics());
    for (record, (id, host)) in records.iter().zip([
        ("github_token", "ws.test"),
        ("aws_access_key_id", "secure.test"),
    ]) {
        assert_eq!(record["reason"], "secret_detected", "{record}");
        assert_eq!(record["policy_level"], "dlp", "{record}");
        assert_eq!(record["host"], host, "{record}");
        let want = serde_json::json!({
            "id": id, "kind": "detector", "encoding": "plain", "found_in": "websocket"
        });
        assert_eq!(record["dlp"], want, "{record}");
        assert!(record.get("url").is_none(), "{record}");
    }
    super::shown::assert_never_shown(&proxy, &[GITHUB, AWS], &[]).await;
}
