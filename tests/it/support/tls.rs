//! Interception's test side (docs/reference/inspection.md): a CA made by `ca init`, the
//! HTTPS origin's certificate as the proxy's `--upstream-ca`, and a client that opens a
//! `CONNECT` tunnel and speaks HTTP/1.1 inside it over TLS, trusting the proxy's CA.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::client::{read_response, tls_config, within, Conn, Response};
use super::http::Reader;
use super::proxy::binary;

/// A CA directory made by the real `egress-proxy ca init`.
pub(crate) fn ca_init(dir: &Path) -> PathBuf {
    let ca = dir.join("ca");
    let out = std::process::Command::new(binary())
        .args(["ca", "init"])
        .arg(&ca)
        .output()
        .expect("run ca init");
    assert!(out.status.success(), "ca init failed: {out:?}");
    ca
}

/// The CA certificate of a CA directory.
pub(crate) fn ca_cert(ca_dir: &Path) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(ca_dir.join("ca.pem")).expect("read ca.pem")
}

/// `der` as a PEM file at `path`.
pub(crate) fn write_pem(path: &Path, der: &CertificateDer<'_>) {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem += std::str::from_utf8(line).unwrap();
        pem += "\n";
    }
    pem += "-----END CERTIFICATE-----\n";
    std::fs::write(path, pem).expect("write PEM");
}

/// A TLS connection inside a `CONNECT` tunnel, for several requests.
pub(crate) struct Inner {
    reader: Reader<TlsStream<TcpStream>>,
    pub host: String,
}

impl Inner {
    /// `CONNECT host:port` through `proxy` (with `headers`), then TLS as `host`
    /// trusting only `trust`. Panics unless the proxy answers 200.
    pub(crate) async fn open(
        proxy: SocketAddr,
        host: &str,
        port: u16,
        trust: CertificateDer<'static>,
        headers: &[(&str, &str)],
    ) -> Inner {
        let (answer, conn) =
            super::client::connect_via_proxy(proxy, &format!("{host}:{port}"), headers).await;
        assert_eq!(
            answer.status,
            200,
            "CONNECT answered {}: {}",
            answer.status_line,
            answer.text()
        );
        Inner::handshake(conn, host, trust).await
    }

    /// TLS as `host` over an open tunnel, offering `http/1.1` (the requests of
    /// [`Inner::request`] are HTTP/1.1).
    pub(crate) async fn handshake(conn: Conn, host: &str, trust: CertificateDer<'static>) -> Inner {
        Inner::handshake_offering(conn, host, trust, &[b"http/1.1"]).await
    }

    /// TLS as `host` over an open tunnel, offering `alpn` in that order.
    pub(crate) async fn handshake_offering(
        conn: Conn,
        host: &str,
        trust: CertificateDer<'static>,
        alpn: &[&[u8]],
    ) -> Inner {
        let mut config = tls_config(trust);
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::try_from(host.to_string()).expect("server name");
        let tls = within(
            "TLS handshake inside the tunnel",
            connector.connect(name, conn.into_stream()),
        )
        .await;
        Inner {
            reader: Reader::new(tls),
            host: host.to_string(),
        }
    }

    /// The protocol the proxy chose in the handshake (ALPN).
    pub(crate) fn alpn(&self) -> Option<Vec<u8>> {
        self.reader
            .inner
            .get_ref()
            .1
            .alpn_protocol()
            .map(<[u8]>::to_vec)
    }

    /// Send `method path` with `Host: host` (or `host_header`), extra headers and a body;
    /// read the answer.
    pub(crate) async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let mut head = format!("{method} {path} HTTP/1.1\r\n");
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            head += &format!("Host: {}\r\n", self.host);
        }
        for (name, value) in headers {
            head += &format!("{name}: {value}\r\n");
        }
        head += &format!("Content-Length: {}\r\n\r\n", body.len());
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        within(
            "write a request inside the tunnel",
            self.reader.inner.write_all(&bytes),
        )
        .await;
        read_response(&mut self.reader, false).await
    }
}

/// What every interception test starts from: an HTTPS origin for `secure.test`, a CA
/// made by `ca init`, and the origin's certificate as a PEM file for `--upstream-ca`.
pub(crate) struct Testbed {
    pub origin: super::origin::HttpsOrigin,
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub upstream_ca: PathBuf,
}

impl Testbed {
    pub(crate) async fn start(tag: &str) -> Testbed {
        let origin = super::origin::HttpsOrigin::start().await;
        let dir = super::unique_temp_dir(tag);
        let ca = ca_init(&dir);
        let upstream_ca = dir.join("origin.pem");
        write_pem(&upstream_ca, &origin.cert_der());
        Testbed {
            origin,
            dir,
            ca,
            upstream_ca,
        }
    }

    /// `builder` intercepting with this CA and trusting the origin upstream, with
    /// `secure.test` pinned to it.
    pub(crate) fn proxy(&self, builder: super::proxy::ProxyBuilder) -> super::proxy::ProxyBuilder {
        builder
            .pin("secure.test")
            .arg("--ca")
            .arg(self.ca.to_str().unwrap())
            .arg("--upstream-ca")
            .arg(self.upstream_ca.to_str().unwrap())
    }

    /// A TLS connection to the origin inside a `CONNECT` through `proxy`, trusting the CA.
    pub(crate) async fn inner(
        &self,
        proxy: &super::proxy::Proxy,
        headers: &[(&str, &str)],
    ) -> Inner {
        let port = self.origin.port();
        Inner::open(proxy.addr, "secure.test", port, ca_cert(&self.ca), headers).await
    }
}
