//! The attacker's view, part 3 (issue 5): the TLS server name on `CONNECT` tunnels.
//! An allowed `CONNECT` host with a ClientHello naming another server (domain fronting)
//! must close the tunnel before any byte reaches upstream; bytes that are not TLS, or a
//! hello without a name, follow `[tunnels] require_tls` / `require_sni`.
//!
//! The HTTPS origin counts the bytes it receives below TLS, so "nothing reached
//! upstream" is measured, not inferred (the proxy dials before it reads the hello).

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::client::{connect_via_proxy, tls_config, within, Conn, Response};
use crate::support::expect::{assert_denied_record, Denial};
use crate::support::http::Reader;
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::{HttpsOrigin, Origin};
use crate::support::proxy::{Proxy, ProxyBuilder};

/// A proxy allowing `secure.test` on the origin's port, with `[tunnels]` as given.
async fn tls_proxy(origin_port: u16, tunnels: Option<(Option<bool>, Option<bool>)>) -> Proxy {
    let mut org = Org::new()
        .allow("secure.test")
        .allow("allowed.test")
        .ports(&[443, origin_port])
        .loopback();
    if let Some((tls, sni)) = tunnels {
        org = org.tunnels(tls, sni);
    }
    ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["secure.test", "allowed.test"]))
        .pin("secure.test")
        .pin("allowed.test")
        .pin("evil.test")
        .start()
        .await
}

/// Open a tunnel that the proxy answers 200 to; return the raw stream.
async fn open_tunnel(proxy: &Proxy, target: &str) -> TcpStream {
    let (resp, conn) = connect_via_proxy(proxy.addr, target, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    conn.into_stream()
}

/// The first flight rustls's client sends for `name` (an IP name sends no SNI).
fn client_hello(name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(name.to_string()).expect("server name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let mut out = Vec::new();
    conn.write_tls(&mut out).expect("write hello");
    out
}

/// The same handshake bytes re-framed as two TLS records, split at `at`.
fn two_records(hello: &[u8], at: usize) -> Vec<u8> {
    let (header, payload) = hello.split_at(5);
    let mut out = Vec::new();
    for part in [&payload[..at], &payload[at..]] {
        out.extend_from_slice(&header[..3]);
        out.extend_from_slice(&(part.len() as u16).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// Send `bytes` in small writes with pauses, as a client dribbling its hello would.
async fn dribble(stream: &mut TcpStream, bytes: &[u8]) {
    for chunk in bytes.chunks(7) {
        if stream.write_all(chunk).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A TLS handshake as `name` over `stream`, then `GET /`. `Err` when the tunnel closed.
async fn tls_get(
    stream: TcpStream,
    origin: &HttpsOrigin,
    name: &str,
) -> Result<Response, std::io::Error> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(origin.cert_der())));
    let server = ServerName::try_from(name.to_string()).expect("server name");
    let handshake = tokio::time::timeout(
        crate::support::IO_TIMEOUT,
        connector.connect(server, stream),
    );
    let mut tls = handshake.await.expect("handshake timed out")?;
    let req = format!("GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
    within("write over TLS", tls.write_all(req.as_bytes())).await;
    let mut reader = Reader::new(tls);
    let head = within("read head", reader.read_head())
        .await
        .expect("a head");
    let body = within("read body", reader.read_body(&head, true)).await;
    let status = head
        .start_line
        .split(' ')
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap_or(0);
    Ok(Response {
        status,
        status_line: head.start_line,
        headers: head.headers,
        body,
    })
}

/// The tunnel was refused after it opened: the stream closes, the origin got no byte,
/// and the log holds exactly one `sni_mismatch` record for the `CONNECT` host.
async fn assert_tunnel_refused(
    mut stream: TcpStream,
    origin: &HttpsOrigin,
    proxy: &Proxy,
    host: &str,
) {
    let mut conn_closed = [0u8; 1];
    let read = tokio::time::timeout(
        crate::support::IO_TIMEOUT,
        tokio::io::AsyncReadExt::read(&mut stream, &mut conn_closed),
    )
    .await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the tunnel stayed open: {read:?}\n{}",
        proxy.diagnostics()
    );
    let record = proxy.single_audit().await;
    let want = Denial::new(403, "sni_mismatch").at(host, origin.port());
    let id = record["request_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_denied_record(&record, &want, &id, proxy);
    assert_eq!(record["method"], "CONNECT", "{record}");
    assert_eq!(
        origin.bytes_received(),
        0,
        "bytes reached the origin\n{}",
        proxy.diagnostics()
    );
    assert_eq!(origin.handshakes(), 0);
}

#[tokio::test]
async fn sni_naming_another_host_closes_the_tunnel_before_any_byte_reaches_upstream() {
    let origin = HttpsOrigin::start().await;
    let proxy = tls_proxy(origin.port(), None).await;
    let stream = open_tunnel(&proxy, &format!("secure.test:{}", origin.port())).await;
    let result = tls_get(stream, &origin, "evil.test").await;
    assert!(result.is_err(), "the handshake went through: {result:?}");
    assert_eq!(origin.bytes_received(), 0, "{}", proxy.diagnostics());
    let record = proxy.single_audit().await;
    assert_eq!(record["event"], "egress.denied", "{record}");
    assert_eq!(record["reason"], "sni_mismatch", "{record}");
    assert_eq!(record["host"], "secure.test", "{record}");
    assert_eq!(origin.handshakes(), 0);
}

#[tokio::test]
async fn sni_mismatch_split_across_records_and_writes_is_still_refused() {
    let origin = HttpsOrigin::start().await;
    let proxy = tls_proxy(origin.port(), None).await;
    let mut stream = open_tunnel(&proxy, &format!("secure.test:{}", origin.port())).await;
    // A reader that judged the first record alone would see no server name yet.
    let hello = two_records(&client_hello("evil.test"), 40);
    dribble(&mut stream, &hello).await;
    assert_tunnel_refused(stream, &origin, &proxy, "secure.test").await;
}

#[tokio::test]
async fn matching_sni_in_another_case_passes_end_to_end() {
    let origin = HttpsOrigin::start().await;
    let proxy = tls_proxy(origin.port(), Some((Some(true), Some(true)))).await;
    let stream = open_tunnel(&proxy, &format!("SECURE.test.:{}", origin.port())).await;
    let resp = tls_get(stream, &origin, "Secure.Test")
        .await
        .expect("handshake");
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(resp.text(), origin.body());
    assert_eq!(origin.handshakes(), 1);
    proxy.expect_audit_count(0).await;
}

#[tokio::test]
async fn plain_bytes_on_a_require_tls_port_are_refused() {
    let origin = HttpsOrigin::start().await;
    let proxy = tls_proxy(origin.port(), Some((Some(true), None))).await;
    let mut stream = open_tunnel(&proxy, &format!("secure.test:{}", origin.port())).await;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: secure.test\r\n\r\n")
        .await
        .expect("write");
    assert_tunnel_refused(stream, &origin, &proxy, "secure.test").await;
}

#[tokio::test]
async fn connect_nested_in_a_tunnel_on_a_require_tls_port_is_refused() {
    let origin = HttpsOrigin::start().await;
    let proxy = tls_proxy(origin.port(), Some((Some(true), None))).await;
    // The allowed host's port could be an upstream proxy: a second CONNECT inside our
    // tunnel would reach through it to anywhere. Not TLS, so never relayed.
    let mut stream = open_tunnel(&proxy, &format!("secure.test:{}", origin.port())).await;
    stream
        .write_all(b"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
        .await
        .expect("write");
    assert_tunnel_refused(stream, &origin, &proxy, "secure.test").await;
}

#[tokio::test]
async fn plain_bytes_pass_on_a_port_other_than_443_by_default() {
    let origin = Origin::start().await;
    let proxy = tls_proxy(origin.port(), None).await;
    let stream = open_tunnel(&proxy, &format!("allowed.test:{}", origin.port())).await;
    let mut tunnel = Conn::from_stream(stream);
    tunnel
        .send(b"GET /plain HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
        .await;
    let resp = tunnel.read_response().await;
    assert_eq!(
        resp.text(),
        origin.body(),
        "{resp:?}\n{}",
        proxy.diagnostics()
    );
    assert_eq!(origin.requests()[0].target, "/plain");
    proxy.expect_audit_count(0).await;
}

#[tokio::test]
async fn client_hello_without_sni_on_a_require_sni_port_is_refused() {
    let origin = HttpsOrigin::start().await;
    let proxy = tls_proxy(origin.port(), Some((None, Some(true)))).await;
    let mut stream = open_tunnel(&proxy, &format!("secure.test:{}", origin.port())).await;
    // rustls sends no server_name extension for an IP-address name.
    stream
        .write_all(&client_hello("127.0.0.1"))
        .await
        .expect("write");
    assert_tunnel_refused(stream, &origin, &proxy, "secure.test").await;
}

#[tokio::test]
async fn client_hello_without_sni_passes_where_sni_is_not_required() {
    let origin = HttpsOrigin::start().await;
    let proxy = tls_proxy(origin.port(), Some((Some(true), Some(false)))).await;
    let mut stream = open_tunnel(&proxy, &format!("secure.test:{}", origin.port())).await;
    let hello = client_hello("127.0.0.1");
    stream.write_all(&hello).await.expect("write");
    let started = std::time::Instant::now();
    while origin.bytes_received() < hello.len() && started.elapsed() < crate::support::IO_TIMEOUT {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        origin.bytes_received(),
        hello.len(),
        "{}",
        proxy.diagnostics()
    );
    proxy.expect_audit_count(0).await;
}

#[tokio::test]
async fn sni_on_a_tunnel_to_a_literal_ip_is_refused() {
    let origin = HttpsOrigin::start().await;
    let org = Org::new().ports(&[443, origin.port()]).cidr("127.0.0.1/32");
    let policy = serde_json::json!({
        "type": "allowlist",
        "allowed_domains": ["secure.test"],
        "allowed_cidrs": ["127.0.0.1/32"],
    });
    let org = org.allow("secure.test");
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(policy.to_string())
        .pin("secure.test")
        .start()
        .await;
    let stream = open_tunnel(&proxy, &format!("127.0.0.1:{}", origin.port())).await;
    let result = tls_get(stream, &origin, "secure.test").await;
    assert!(result.is_err(), "the handshake went through: {result:?}");
    let record = proxy.single_audit().await;
    assert_eq!(record["reason"], "sni_mismatch", "{record}");
    assert_eq!(record["host"], "127.0.0.1", "{record}");
    assert_eq!(origin.bytes_received(), 0, "{}", proxy.diagnostics());
}
