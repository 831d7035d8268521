//! HTTP/1.1 origins on `127.0.0.1:0` that record every request they receive.
//!
//! Each answers `200 OK` with the body `origin:<name>` and keeps the connection
//! alive until the peer closes it or sends `Connection: close`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use super::http::{header, Reader};
use super::IO_TIMEOUT;

/// One request as the origin saw it.
#[derive(Clone, Debug)]
pub(crate) struct RecordedRequest {
    pub method: String,
    pub target: String,
    /// Names lower-cased, order and duplicates kept.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of header `name`.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// Every value of header `name`, in order.
    pub(crate) fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

#[derive(Default)]
struct State {
    requests: Mutex<Vec<RecordedRequest>>,
    /// TCP connections accepted (before any TLS handshake).
    connections: AtomicUsize,
    /// Bytes read from clients, counted below TLS (HTTPS origin only).
    bytes_received: AtomicUsize,
    /// TLS handshakes completed (HTTPS origin only).
    handshakes: AtomicUsize,
    /// Bytes of HTTP read from clients (above TLS for the HTTPS origin): every request
    /// head and body as it arrived.
    http_bytes: AtomicUsize,
}

/// A plain HTTP origin.
pub(crate) struct Origin {
    addr: SocketAddr,
    name: String,
    state: Arc<State>,
}

impl Origin {
    /// Start an origin named `origin`.
    pub(crate) async fn start() -> Origin {
        Origin::start_named("origin").await
    }

    /// Start an origin whose answers say `origin:<name>`.
    pub(crate) async fn start_named(name: &str) -> Origin {
        Origin::start_at(name, "127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bind origin")
    }

    /// Start an origin named `name` on `addr` (a loopback address, port 0 for any);
    /// `Err` when the address is taken, so a caller can try another port.
    pub(crate) async fn start_at(name: &str, addr: SocketAddr) -> std::io::Result<Origin> {
        assert!(
            addr.ip().is_loopback(),
            "test bug: origins listen on loopback only"
        );
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr().expect("origin addr");
        let state = Arc::new(State::default());
        let (st, nm) = (state.clone(), name.to_string());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                st.connections.fetch_add(1, Ordering::SeqCst);
                let stream = Counted {
                    inner: stream,
                    state: st.clone(),
                    count: |s| &s.http_bytes,
                };
                tokio::spawn(serve(stream, nm.clone(), st.clone()));
            }
        });
        Ok(Origin {
            addr,
            name: name.to_string(),
            state,
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The body this origin answers with.
    pub(crate) fn body(&self) -> String {
        format!("origin:{}", self.name)
    }

    /// A snapshot of the requests received so far.
    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// How many requests were received.
    pub(crate) fn hits(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// How many TCP connections were accepted.
    pub(crate) fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Bytes read from all clients: every request head and body, as they arrived.
    pub(crate) fn http_bytes(&self) -> usize {
        self.state.http_bytes.load(Ordering::SeqCst)
    }
}

/// An HTTPS origin with a self-signed certificate for `secure.test`.
pub(crate) struct HttpsOrigin {
    addr: SocketAddr,
    cert: CertificateDer<'static>,
    state: Arc<State>,
}

impl HttpsOrigin {
    pub(crate) async fn start() -> HttpsOrigin {
        let certified = rcgen::generate_simple_self_signed(vec!["secure.test".into()])
            .expect("generate certificate");
        let cert = certified.cert.der().clone();
        let key =
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("server certificate");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
        let addr = listener.local_addr().expect("origin addr");
        let state = Arc::new(State::default());
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                st.connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, st) = (acceptor.clone(), st.clone());
                tokio::spawn(async move {
                    let stream = Counted {
                        inner: stream,
                        state: st.clone(),
                        count: |s| &s.bytes_received,
                    };
                    if let Ok(Ok(tls)) =
                        tokio::time::timeout(IO_TIMEOUT, acceptor.accept(stream)).await
                    {
                        st.handshakes.fetch_add(1, Ordering::SeqCst);
                        let tls = Counted {
                            inner: tls,
                            state: st.clone(),
                            count: |s| &s.http_bytes,
                        };
                        serve(tls, "secure".to_string(), st).await;
                    }
                });
            }
        });
        HttpsOrigin { addr, cert, state }
    }

    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The certificate a client must trust.
    pub(crate) fn cert_der(&self) -> CertificateDer<'static> {
        self.cert.clone()
    }

    pub(crate) fn body(&self) -> String {
        "origin:secure".to_string()
    }

    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    pub(crate) fn hits(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// TCP connections accepted, counted before the TLS handshake.
    pub(crate) fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Bytes received from all clients, below TLS: 0 means no byte of any
    /// ClientHello ever arrived.
    pub(crate) fn bytes_received(&self) -> usize {
        self.state.bytes_received.load(Ordering::SeqCst)
    }

    /// TLS handshakes completed.
    pub(crate) fn handshakes(&self) -> usize {
        self.state.handshakes.load(Ordering::SeqCst)
    }

    /// Bytes of HTTP read from all clients, above TLS: every request head and body, as
    /// they arrived.
    pub(crate) fn http_bytes(&self) -> usize {
        self.state.http_bytes.load(Ordering::SeqCst)
    }
}

/// A stream that counts the bytes read from it into one counter of the origin's state.
struct Counted<S> {
    inner: S,
    state: Arc<State>,
    count: fn(&State) -> &AtomicUsize,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        (self.count)(&self.state).fetch_add(read, Ordering::SeqCst);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serve requests on one connection until it closes or asks to.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(stream: S, name: String, state: Arc<State>) {
    let mut reader = Reader::new(stream);
    loop {
        let head = match reader.read_head().await {
            Ok(Some(head)) => head,
            _ => return,
        };
        let Ok(body) = reader.read_body(&head, false).await else {
            return;
        };
        let mut parts = head.start_line.splitn(3, ' ');
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let close = head
            .header("connection")
            .is_some_and(|v| v.to_ascii_lowercase().contains("close"));
        state.requests.lock().unwrap().push(RecordedRequest {
            method,
            target,
            headers: head.headers,
            body,
        });
        let payload = format!("origin:{name}");
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{}",
            payload.len(),
            if close { "Connection: close\r\n" } else { "" },
            payload
        );
        if reader.inner.write_all(answer.as_bytes()).await.is_err() || close {
            let _ = reader.inner.shutdown().await;
            return;
        }
    }
}
