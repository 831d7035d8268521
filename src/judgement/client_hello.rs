//! Reading a tunnel's first bytes without terminating TLS: the client's ClientHello is
//! parsed by rustls's `Acceptor` (nothing is answered to the client) and the bytes are
//! handed on unchanged once the tunnel is judged. Used by every listener that opens
//! tunnels: a `CONNECT`'s first bytes ([`admit`]), and the transparent listener's peek
//! before it dials ([`read_hello`]). Not interception: that is `crate::proxy::intercept`
//! and `crate::tls`.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

use super::refusal::Refusal;
use crate::dlp::{By, Detectors, FoundIn, Hit, Scanner};
use crate::policy::{judge_first_bytes, FirstBytes};
use crate::policy::{Target, Tunnels, Verdict};

/// The most bytes read while waiting for a whole ClientHello (a record is at most 16 KiB
/// plus its header; a hello spread over two records still fits).
pub(crate) const MAX_HELLO_BYTES: usize = 2 * (16 * 1024 + 5);

/// The first byte of a TLS handshake record.
pub(crate) const TLS_HANDSHAKE: u8 = 0x16;

/// What the ClientHello reader makes of the bytes seen so far: `None` while more are
/// needed. Bytes that start a handshake record but give no ClientHello it can read
/// (malformed, or not whole within [`MAX_HELLO_BYTES`]) are [`FirstBytes::Unreadable`],
/// never bytes that are not TLS: the server might read a name from them that the proxy
/// did not see. Pure, so it can be fuzzed and table-tested.
pub(crate) fn read_hello(bytes: &[u8]) -> Option<FirstBytes> {
    match bytes.first() {
        None => return None,
        Some(&TLS_HANDSHAKE) => {}
        Some(_) => return Some(FirstBytes::NotTls),
    }
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rest = bytes;
    loop {
        // Looking after each read lets the reader know a hello spans records, so one
        // larger than a record is joined rather than overflowing its buffer.
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return Some(FirstBytes::Tls {
                    server_name: accepted.client_hello().server_name().map(str::to_string),
                })
            }
            Ok(None) => {}
            Err(_) => return Some(FirstBytes::Unreadable),
        }
        match acceptor.read_tls(&mut rest) {
            Ok(0) if bytes.len() < MAX_HELLO_BYTES => return None,
            Ok(0) | Err(_) => return Some(FirstBytes::Unreadable),
            Ok(_) => {}
        }
    }
}

/// What bytes the reader still waited on are when no more will come (the client closed,
/// or the time is up): nothing is [`FirstBytes::ServerFirst`], a hello begun is
/// [`FirstBytes::Unreadable`].
pub(crate) fn cut_short(bytes: &[u8]) -> FirstBytes {
    match bytes.first() {
        None => FirstBytes::ServerFirst,
        Some(&TLS_HANDSHAKE) => FirstBytes::Unreadable,
        Some(_) => FirstBytes::NotTls,
    }
}

/// Read from the client until its first bytes can be judged. If upstream speaks first
/// (SMTP, SSH servers), or `timeout` passes with nothing from the client, that is
/// [`FirstBytes::ServerFirst`]. Returns what was seen and every byte read, to be sent on
/// unchanged.
pub(crate) async fn first_bytes<R: AsyncRead + Unpin>(
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
            // Closed, failed or timed out before a judgeable start.
            Ok(_) if buf.is_empty() => return (FirstBytes::NotTls, buf),
            Ok(_) | Err(_) => return (cut_short(&buf), buf),
        }
    }
}

/// Judge a tunnel by its first bytes (docs/reference/policy-files.md, "Tunnels"): `Ok` with the bytes to send upstream
/// first and the secret a detector only reports, if they carry one (the caller records
/// it `egress.flagged`), or the `sni_mismatch` refusal (`exfiltration_detected` when
/// they carry one of `canaries`, the organization's and the session's), in which case
/// nothing has reached upstream.
pub(crate) async fn admit<R: AsyncRead + Unpin>(
    client: &mut R,
    upstream: &TcpStream,
    target: &Target,
    tunnels: &Tunnels,
    canaries: &[&Scanner],
    detectors: &Detectors,
    timeout: Duration,
) -> Result<(Vec<u8>, Option<Hit>), Refusal> {
    let (first, bytes) = first_bytes(client, upstream, timeout).await;
    let reported = judge_first(&first, &bytes, target, tunnels, canaries, detectors)?;
    Ok((bytes, reported))
}

/// The verdict on a tunnel's first bytes, however they were read (from the tunnel, or
/// peeked by the transparent listener): `Err` with the refusal, else `Ok` with the
/// secret a detector found and only reports (docs/reference/dlp.md: it goes on, and
/// the caller records it `egress.flagged`). A server name, or first bytes as sent (a
/// ClientHello, or the start of another protocol), that carry one of `canaries` are
/// `exfiltration_detected`, and one that carries a secret a detector refuses
/// `secret_detected`, whatever `[tunnels]` says of them; else `[tunnels]` judges
/// (`sni_mismatch`; report mode refuses a tunnel's first bytes too: nothing of them is
/// sent), unless a reported secret was found, which is then the reason recorded (a
/// mismatching server name that carries it is never written in the record).
pub(crate) fn judge_first(
    first: &FirstBytes,
    bytes: &[u8],
    target: &Target,
    tunnels: &Tunnels,
    canaries: &[&Scanner],
    detectors: &Detectors,
) -> Result<Option<Hit>, Refusal> {
    let name = match first {
        FirstBytes::Tls {
            server_name: Some(name),
        } => Some(name),
        _ => None,
    };
    let in_name = |c: &&Scanner| name.and_then(|n| c.scan_name(n, FoundIn::Sni));
    // A name's first secret: refused, or only reported (then no refused one is in it).
    let (name_refused, name_reported) =
        match name.and_then(|n| detectors.scan_name(n, FoundIn::Sni)) {
            Some(hit) if hit.by == By::Reported => (None, Some(hit)),
            hit => (hit, None),
        };
    let hit = (canaries.iter().find_map(in_name))
        .or(name_refused)
        .or_else(|| (canaries.iter()).find_map(|c| c.scan(bytes, FoundIn::FirstBytes)))
        .or_else(|| detectors.scan_refused(bytes, FoundIn::FirstBytes));
    if let Some(hit) = hit {
        return Err(Refusal::exfiltration(hit, target));
    }
    let reported = name_reported.or_else(|| detectors.scan_reported(bytes, FoundIn::FirstBytes));
    match judge_first_bytes(first, target, tunnels) {
        None => Ok(reported),
        Some(decision) => match (decision.verdict, reported) {
            (Verdict::Allow, reported) => Ok(reported),
            (Verdict::Deny(_) | Verdict::WouldDeny(_), Some(hit)) => {
                Err(Refusal::exfiltration(hit, target))
            }
            (Verdict::Deny(reason) | Verdict::WouldDeny(reason), None) => {
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

    /// The handshake message inside a hello made by [`client_hello`] (one record).
    fn handshake_message(hello: &[u8]) -> Vec<u8> {
        let len = u16::from_be_bytes([hello[3], hello[4]]) as usize;
        hello[5..5 + len].to_vec()
    }

    /// `message` framed into handshake records of at most `size` bytes each.
    fn framed(message: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for part in message.chunks(size) {
            out.extend_from_slice(&[TLS_HANDSHAKE, 0x03, 0x01]);
            out.extend_from_slice(&(part.len() as u16).to_be_bytes());
            out.extend_from_slice(part);
        }
        out
    }

    /// The hello's message with an unknown extension of `pad` zero bytes added.
    fn padded(message: &[u8], pad: usize) -> Vec<u8> {
        let body = &message[4..];
        // version, random, then the session id, cipher suites and compression methods.
        let mut at = 2 + 32;
        at += 1 + body[at] as usize;
        at += 2 + u16::from_be_bytes([body[at], body[at + 1]]) as usize;
        at += 1 + body[at] as usize;
        let ext_len = u16::from_be_bytes([body[at], body[at + 1]]) as usize;
        let mut out = body[..at].to_vec();
        out.extend_from_slice(&((ext_len + 4 + pad) as u16).to_be_bytes());
        out.extend_from_slice(&body[at + 2..]);
        out.extend_from_slice(&[0xfe, 0x00]);
        out.extend_from_slice(&(pad as u16).to_be_bytes());
        out.resize(out.len() + pad, 0);
        let mut message = vec![0x01];
        message.extend_from_slice(&(out.len() as u32).to_be_bytes()[1..]);
        message.extend(out);
        message
    }

    /// The `employee-id` pattern, reported (`report`) or refused.
    fn detectors(report: bool) -> Detectors {
        let re = "EMP-[0-9]{6}";
        let rule = crate::dlp::Rule {
            id: "employee-id".into(),
            kind: "pattern",
            bytes: regex::bytes::Regex::new(re).unwrap(),
            names: (regex::bytes::RegexBuilder::new(re).case_insensitive(true))
                .build()
                .unwrap(),
            longest: 10,
        };
        Detectors::new(vec![rule], report, Vec::new())
    }

    #[test]
    fn a_reported_secret_goes_on_unless_the_tunnel_is_refused_anyway_then_it_is_the_reason() {
        let target = Target {
            host: crate::policy::Host::parse("allowed.test").unwrap(),
            port: 8080,
        };
        let tunnels = Tunnels::default();
        let judge = |first: &FirstBytes, bytes: &[u8], report| {
            judge_first(first, bytes, &target, &tunnels, &[], &detectors(report))
        };
        let plain = b"GET /?id=EMP-123456 HTTP/1.1\r\n\r\n";
        let hit = judge(&FirstBytes::NotTls, plain, true).unwrap().unwrap();
        assert_eq!(
            (&*hit.id, hit.found_in),
            ("employee-id", FoundIn::FirstBytes)
        );
        assert_eq!(hit.by, By::Reported);
        let refused = judge(&FirstBytes::NotTls, plain, false).unwrap_err();
        assert_eq!(refused.reason, crate::policy::Reason::SecretDetected);
        assert_eq!(
            judge(&FirstBytes::NotTls, b"GET / HTTP/1.1", true).unwrap(),
            None
        );
        // A server name that is not the target's carries it: the secret is the reason,
        // and the name is in neither the refusal's host nor its rule.
        let sni = FirstBytes::Tls {
            server_name: Some("emp-123456.evil.test".into()),
        };
        let refused = judge(&sni, b"", true).unwrap_err();
        assert_eq!(refused.reason, crate::policy::Reason::SecretDetected);
        assert_eq!(refused.dlp.as_ref().unwrap().found_in, FoundIn::Sni);
        assert!(format!("{refused:?}")
            .to_lowercase()
            .find("emp-123456")
            .is_none());
    }

    #[test]
    fn a_hello_in_many_records_or_larger_than_one_is_read_whole() {
        let secure = Some(FirstBytes::Tls {
            server_name: Some("secure.test".into()),
        });
        let message = handshake_message(&client_hello("secure.test"));
        assert_eq!(read_hello(&framed(&message, 16 * 1024)), secure);
        assert_eq!(read_hello(&framed(&message, 7)), secure);
        let large = framed(&padded(&message, 20_000), 16 * 1024);
        assert!(large.len() > 16 * 1024 + 5 && large.len() < MAX_HELLO_BYTES);
        assert_eq!(read_hello(&large), secure);
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
        assert_eq!(read_hello(&[]), None);
    }

    #[test]
    fn a_handshake_record_without_a_readable_hello_is_unreadable() {
        // A handshake record carrying a ServerHello (type 2) is no ClientHello.
        let server_hello = [0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00];
        assert_eq!(read_hello(&server_hello), Some(FirstBytes::Unreadable));
        // A record longer than TLS allows.
        assert_eq!(
            read_hello(&[0x16, 0x03, 0x01, 0xff, 0xff, 0x01]),
            Some(FirstBytes::Unreadable)
        );
    }

    #[test]
    fn a_hello_that_never_completes_is_unreadable_not_other_bytes() {
        // Two full records of a ClientHello announced longer than both.
        let record = |body: &[u8]| {
            let mut r = vec![TLS_HANDSHAKE, 0x03, 0x01, 0x40, 0x00];
            r.extend_from_slice(body);
            r.resize(5 + 16 * 1024, 0);
            r
        };
        let mut endless = record(&[0x01, 0x00, 0x9c, 0x40, 0x03, 0x03]);
        endless.extend(record(&[]));
        assert_eq!(endless.len(), MAX_HELLO_BYTES);
        assert_eq!(read_hello(&endless[..100]), None);
        assert_eq!(read_hello(&endless), Some(FirstBytes::Unreadable));
        let hello = client_hello("secure.test");
        assert_eq!(cut_short(&hello[..10]), FirstBytes::Unreadable);
        assert_eq!(cut_short(b""), FirstBytes::ServerFirst);
    }
}
