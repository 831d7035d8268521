//! A raw HTTP client over TCP, so tests choose every byte sent to the proxy.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::http::{header, Reader};
use super::IO_TIMEOUT;

/// A response as the client read it.
#[derive(Clone, Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub status_line: String,
    /// Names lower-cased, order and duplicates kept.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the response when it is not.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {self:?}"))
    }
}

/// One client connection to the proxy, for several requests (keep-alive).
pub(crate) struct Conn {
    reader: Reader<TcpStream>,
}

impl Conn {
    pub(crate) async fn open(addr: SocketAddr) -> Conn {
        let stream = within("connect to proxy", TcpStream::connect(addr)).await;
        stream.set_nodelay(true).ok();
        Conn {
            reader: Reader::new(stream),
        }
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) {
        within("write request", self.reader.inner.write_all(bytes)).await;
    }

    /// Write `bytes` where the proxy may already have closed (after a refusal): an
    /// error is no failure, it only means nothing more could be sent.
    pub(crate) async fn send_lossy(&mut self, bytes: &[u8]) -> bool {
        matches!(
            tokio::time::timeout(IO_TIMEOUT, self.reader.inner.write_all(bytes)).await,
            Ok(Ok(()))
        )
    }

    /// `GET http://{authority}{path}` on this connection, and its response.
    pub(crate) async fn get(&mut self, authority: &str, path: &str) -> Response {
        let req = format!("GET http://{authority}{path} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
        self.send(req.as_bytes()).await;
        self.read_response().await
    }

    /// Read one full response (body framed by length, chunks, or end of stream).
    pub(crate) async fn read_response(&mut self) -> Response {
        read_response(&mut self.reader, false).await
    }

    /// The next response, or `None` when the proxy closes (or stays silent for
    /// `IO_TIMEOUT`) instead: for bytes the proxy may rightly drop.
    pub(crate) async fn next_response(&mut self) -> Option<Response> {
        match tokio::time::timeout(IO_TIMEOUT, self.reader.read_head()).await {
            Ok(Ok(Some(head))) => Some(finish_response(&mut self.reader, head, false).await),
            _ => None,
        }
    }

    /// A connection over an already open stream (a tunnel), to speak HTTP through it.
    pub(crate) fn from_stream(stream: TcpStream) -> Conn {
        Conn {
            reader: Reader::new(stream),
        }
    }

    /// Read a response head, and its body only when it is not a 2xx to a CONNECT.
    pub(crate) async fn read_connect_response(&mut self) -> Response {
        read_response(&mut self.reader, true).await
    }

    /// The stream, for tunnels. Panics if the proxy sent bytes after the head.
    pub(crate) fn into_stream(self) -> TcpStream {
        assert!(
            self.reader.buf.is_empty(),
            "proxy sent bytes after the CONNECT answer: {:?}",
            String::from_utf8_lossy(&self.reader.buf)
        );
        self.reader.inner
    }

    /// Whether the peer has closed (reads EOF or an error) within `IO_TIMEOUT`.
    pub(crate) async fn closed_by_peer(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(
            tokio::time::timeout(
                IO_TIMEOUT,
                tokio::io::AsyncReadExt::read(&mut self.reader.inner, &mut buf)
            )
            .await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

pub(crate) async fn read_response<R: AsyncRead + Unpin>(
    reader: &mut Reader<R>,
    connect: bool,
) -> Response {
    let head = within("read response head", reader.read_head())
        .await
        .unwrap_or_else(|| panic!("connection closed before a response"));
    finish_response(reader, head, connect).await
}

/// The rest of a response whose head was read.
async fn finish_response<R: AsyncRead + Unpin>(
    reader: &mut Reader<R>,
    head: super::http::Head,
    connect: bool,
) -> Response {
    let status_line = head.start_line.clone();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let no_body = (connect && (200..300).contains(&status))
        || status == 204
        || status == 304
        || (100..200).contains(&status);
    let body = if no_body {
        Vec::new()
    } else {
        within("read response body", reader.read_body(&head, true)).await
    };
    Response {
        status,
        status_line,
        headers: head.headers,
        body,
    }
}

/// Await `fut`, failing the test after `IO_TIMEOUT` or on an I/O error.
pub(crate) async fn within<T, E: std::fmt::Debug>(
    what: &str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> T {
    match tokio::time::timeout(IO_TIMEOUT, fut).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => panic!("{what}: {e:?}"),
        Err(_) => panic!("{what}: timed out after {IO_TIMEOUT:?}"),
    }
}

/// Send `bytes` on a new connection and read one response.
pub(crate) async fn send_raw(proxy: SocketAddr, bytes: &[u8]) -> Response {
    let mut conn = Conn::open(proxy).await;
    conn.send(bytes).await;
    conn.read_response().await
}

/// The authority (`host:port`) of an absolute `http://` URL.
pub(crate) fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// Render `METHOD URL HTTP/1.1` with `Host` from the URL, the extra headers and
/// `Connection: close`.
pub(crate) fn request_bytes(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut out = format!("{method} {url} HTTP/1.1\r\nHost: {}\r\n", authority(url));
    for (name, value) in headers {
        out += &format!("{name}: {value}\r\n");
    }
    if !body.is_empty() {
        out += &format!("Content-Length: {}\r\n", body.len());
    }
    out += "Connection: close\r\n\r\n";
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// `GET url` through the proxy with extra headers.
pub(crate) async fn get_via_proxy(
    proxy: SocketAddr,
    url: &str,
    headers: &[(&str, &str)],
) -> Response {
    send_raw(proxy, &request_bytes("GET", url, headers, b"")).await
}

/// `CONNECT target` with extra headers. Returns the answer and, for the tunnel,
/// the connection.
pub(crate) async fn connect_via_proxy(
    proxy: SocketAddr,
    target: &str,
    headers: &[(&str, &str)],
) -> (Response, Conn) {
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    for (name, value) in headers {
        req += &format!("{name}: {value}\r\n");
    }
    req += "\r\n";
    let mut conn = Conn::open(proxy).await;
    conn.send(req.as_bytes()).await;
    let response = conn.read_connect_response().await;
    (response, conn)
}

/// A TLS client config trusting only `cert`.
pub(crate) fn tls_config(cert: CertificateDer<'static>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("add root");
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// Handshake TLS as `secure.test` over `stream`, send `GET path`, read the answer.
pub(crate) async fn https_get<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    cert: CertificateDer<'static>,
    path: &str,
) -> Response {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(cert)));
    let name = ServerName::try_from("secure.test").expect("server name");
    let mut tls = within("TLS handshake", connector.connect(name, stream)).await;
    let req = format!("GET {path} HTTP/1.1\r\nHost: secure.test\r\nConnection: close\r\n\r\n");
    within("write TLS request", tls.write_all(req.as_bytes())).await;
    let mut reader = Reader::new(tls);
    read_response(&mut reader, false).await
}
