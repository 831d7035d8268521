//! Reading the first bytes of a `CONNECT` tunnel without terminating TLS: the client's
//! ClientHello is parsed by rustls's `Acceptor` (nothing is answered to the client) and
//! the bytes are handed on unchanged once the tunnel is judged.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

use super::refusal::Refusal;
use crate::policy::tls::{judge_first_bytes, FirstBytes};
use crate::policy::{Target, Tunnels, Verdict};

/// The most bytes read while waiting for a whole ClientHello (a record is at most 16 KiB
/// plus its header; a hello spread over two records still fits).
pub const MAX_HELLO_BYTES: usize = 2 * (16 * 1024 + 5);

/// What the ClientHello reader makes of the bytes seen so far: `None` while more are
/// needed. Pure, so it can be fuzzed and table-tested.
pub fn read_hello(bytes: &[u8]) -> Option<FirstBytes> {
    match bytes.first() {
        None => return None,
        Some(0x16) => {}
        Some(_) => return Some(FirstBytes::NotTls),
    }
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rest = bytes;
    while !rest.is_empty() {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => return Some(FirstBytes::NotTls),
        }
    }
    match acceptor.accept() {
        Ok(Some(accepted)) => Some(FirstBytes::Tls {
            server_name: accepted.client_hello().server_name().map(str::to_string),
        }),
        Ok(None) if bytes.len() < MAX_HELLO_BYTES => None,
        Ok(None) | Err(_) => Some(FirstBytes::NotTls),
    }
}

/// Read from the client until its first bytes can be judged. If upstream speaks first
/// (SMTP, SSH servers), or `timeout` passes with nothing from the client, that is
/// [`FirstBytes::ServerFirst`]. Returns what was seen and every byte read, to be sent on
/// unchanged.
pub async fn first_bytes<R: AsyncRead + Unpin>(
    client: &mut R,
    upstream: &TcpStream,
    timeout: Duration,
) -> (FirstBytes, Vec<u8>) {
    let mut buf = Vec::with_capacity(1024);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut chunk = vec![0u8; 4096];
    loop {
        let read = tokio::select! {
            // `read` is cancel-safe: if upstream wins, no client byte was taken.
            read = tokio::time::timeout_at(deadline, client.read(&mut chunk)) => read,
            _ = upstream.readable(), if buf.is_empty() => return (FirstBytes::ServerFirst, buf),
        };
        match read {
            Ok(Ok(n)) if n > 0 => {
                buf.extend_from_slice(&chunk[..n]);
                if let Some(first) = read_hello(&buf) {
                    return (first, buf);
                }
            }
            // Closed or failed before a judgeable start.
            Ok(_) => return (FirstBytes::NotTls, buf),
            Err(_) if buf.is_empty() => return (FirstBytes::ServerFirst, buf),
            Err(_) => return (FirstBytes::NotTls, buf),
        }
    }
}

/// Judge a tunnel by its first bytes (docs/reference/policy-files.md, "Tunnels"): `Ok` with the bytes to send upstream
/// first, or the `sni_mismatch` refusal, in which case nothing has reached upstream.
pub async fn admit<R: AsyncRead + Unpin>(
    client: &mut R,
    upstream: &TcpStream,
    target: &Target,
    tunnels: &Tunnels,
    timeout: Duration,
) -> Result<Vec<u8>, Refusal> {
    let (first, bytes) = first_bytes(client, upstream, timeout).await;
    match judge_first_bytes(&first, target, tunnels) {
        None => Ok(bytes),
        Some(decision) => match decision.verdict {
            Verdict::Allow => Ok(bytes),
            Verdict::Deny(reason) | Verdict::WouldDeny(reason) => {
                Err(Refusal::from_decision(&decision, reason, target))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real ClientHello made by rustls's own client for `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn =
            rustls::ClientConnection::new(std::sync::Arc::new(config), server_name).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn reads_the_server_name_of_a_real_hello() {
        let hello = client_hello("secure.test");
        assert_eq!(
            read_hello(&hello),
            Some(FirstBytes::Tls {
                server_name: Some("secure.test".into())
            })
        );
    }

    #[test]
    fn a_partial_hello_needs_more_bytes() {
        let hello = client_hello("secure.test");
        assert_eq!(read_hello(&hello[..hello.len() / 2]), None);
        assert_eq!(read_hello(&hello[..3]), None);
    }

    #[test]
    fn other_bytes_are_not_tls() {
        assert_eq!(read_hello(b"GET / HTTP/1.1\r\n"), Some(FirstBytes::NotTls));
        assert_eq!(read_hello(b"SSH-2.0-x\r\n"), Some(FirstBytes::NotTls));
        // A handshake record carrying a ServerHello (type 2) is no ClientHello.
        let server_hello = [0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00];
        assert_eq!(read_hello(&server_hello), Some(FirstBytes::NotTls));
        assert_eq!(read_hello(&[]), None);
    }
}
