//! The leaky lab's servers, each bound inside the lab's network namespace: TLS on 443
//! and 853, HTTP on 80, DNS on 53 (UDP and TCP) answering every name with an address,
//! a UDP echo on 443 standing in for QUIC, and a forward proxy that either forwards
//! everything or refuses everything as egress-proxy does.

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// base64 of `probe:s3cr%et` percent-decoded (`probe:s3cr%et` is `probe:s3cr%25et` in
/// the URL): the credentials the open lab's proxy requires.
pub(super) const PROXY_AUTH_B64: &str = "cHJvYmU6czNjciVldA==";

/// How the lab's proxy answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LabProxy {
    /// Forwards every request and opens every tunnel.
    Open,
    /// Refuses everything with egress-proxy's refusal (403, `X-Egress-Denied`).
    Refusing,
}

fn tls_acceptor() -> tokio_rustls::TlsAcceptor {
    let cert = rcgen::generate_simple_self_signed(vec!["lab.test".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A TLS server: every handshake completed, then closed.
pub(super) fn tls(listener: TcpListener) {
    let acceptor = tls_acceptor();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut s) = acceptor.accept(stream).await {
                    let _ = s.shutdown().await;
                }
            });
        }
    });
}

/// An HTTP server: `200 ok` to every request.
pub(super) fn http(listener: TcpListener) {
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let _ = stream.read(&mut buf).await;
                let answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
}

/// The answer to a query: `192.0.2.1` for whatever name it asks.
fn dns_answer(query: &[u8]) -> Option<Vec<u8>> {
    let q = Message::from_vec(query).ok()?;
    let question = q.queries().first()?.clone();
    let mut m = Message::new();
    m.set_id(q.id())
        .set_message_type(MessageType::Response)
        .set_recursion_available(true)
        .set_response_code(ResponseCode::NoError);
    m.add_query(question.clone());
    let a = RData::A(A::new(192, 0, 2, 1));
    m.add_answer(Record::from_rdata(question.name().clone(), 60, a));
    m.to_vec().ok()
}

pub(super) fn dns_udp(socket: UdpSocket) {
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            if let Some(answer) = dns_answer(&buf[..n]) {
                let _ = socket.send_to(&answer, from).await;
            }
        }
    });
}

pub(super) fn dns_tcp(listener: TcpListener) {
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut len = [0u8; 2];
                if stream.read_exact(&mut len).await.is_err() {
                    return;
                }
                let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
                if stream.read_exact(&mut query).await.is_err() {
                    return;
                }
                if let Some(answer) = dns_answer(&query) {
                    let mut framed = (answer.len() as u16).to_be_bytes().to_vec();
                    framed.extend_from_slice(&answer);
                    let _ = stream.write_all(&framed).await;
                }
            });
        }
    });
}

/// A UDP echo: every datagram sent back.
pub(super) fn udp_echo(socket: UdpSocket) {
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(&buf[..n], from).await;
        }
    });
}

/// A forward proxy requiring credentials: `CONNECT` relayed, any other request answered
/// `200`; or every request refused with egress-proxy's refusal.
pub(super) fn proxy(listener: TcpListener, kind: LabProxy) {
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(proxy_one(stream, kind));
        }
    });
}

async fn proxy_one(mut stream: TcpStream, kind: LabProxy) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let mut words = line.split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    // As a gateway's sessions do: without the credentials the proxy variables carry
    // (lab.rs, `PROXY_AUTH`), egress-proxy's 407 refusal.
    let authorized = String::from_utf8_lossy(&head)
        .lines()
        .any(|l| l.eq_ignore_ascii_case(&format!("proxy-authorization: basic {PROXY_AUTH_B64}")));
    if kind == LabProxy::Open && !authorized {
        let answer = "HTTP/1.1 407 Egress denied: auth_required\r\nX-Egress-Denied: auth_required\r\nProxy-Authenticate: Basic realm=\"egress\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        let _ = stream.write_all(answer.as_bytes()).await;
        return;
    }
    if kind == LabProxy::Refusing {
        let body = r#"{"error": {"type": "egress_denied", "reason": "not_in_org_allowlist"}}"#;
        let answer = format!(
            "HTTP/1.1 403 Egress denied: not_in_org_allowlist\r\nX-Egress-Denied: not_in_org_allowlist\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
        return;
    }
    if method != "CONNECT" {
        let answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        let _ = stream.write_all(answer.as_bytes()).await;
        return;
    }
    let Ok(addr) = target.parse::<SocketAddr>() else {
        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        return;
    };
    let Ok(mut upstream) = TcpStream::connect(addr).await else {
        let _ = stream.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    let _ = stream
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await;
    let _ = tokio::io::copy_bidirectional(&mut stream, &mut upstream).await;
}
