//! The checks that speak HTTP or TLS: `doh`, `proxy-enforces`, `proxy-allows` and the
//! proxy half of `metadata` (docs/reference/command-line.md, "probe"). A TLS handshake
//! here only shows that a channel is open: the certificate is not checked, and nothing
//! is sent over the session.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

use super::proxy_env::ProxyEnv;
use super::reply::{first_line, read_reply, refusal};
use super::Part;
use crate::config::probe::ProbeUrl;

/// Accepts any certificate: the probe asks whether a handshake completes, not whom with.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

/// The bytes of a TLS ClientHello naming `name`.
pub(super) fn client_hello(name: &str) -> Vec<u8> {
    let mut hello = Vec::new();
    let server = ServerName::try_from(name.to_string()).expect("a valid DNS name");
    if let Ok(mut conn) = rustls::ClientConnection::new(tls_config(), server) {
        let _ = conn.write_tls(&mut hello);
    }
    hello
}

/// A whole TLS handshake over `stream`, for `name`, by `deadline`.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    name: ServerName<'static>,
    deadline: Instant,
) -> Result<(), String> {
    let connector = tokio_rustls::TlsConnector::from(tls_config());
    match timeout_at(deadline, connector.connect(name, stream)).await {
        Err(_) => Err("no TLS handshake in time".into()),
        Ok(Err(e)) => Err(format!("TLS: {e}")),
        Ok(Ok(_)) => Ok(()),
    }
}

/// `doh`: a TLS handshake with port 443 of the target, directly and through
/// `HTTPS_PROXY`.
pub(super) async fn doh(target: IpAddr, env: &ProxyEnv, t: Duration) -> Vec<Part> {
    let addr = SocketAddr::new(target, 443);
    let direct = async {
        let deadline = Instant::now() + t;
        match timeout_at(deadline, TcpStream::connect(addr)).await {
            Err(_) => Part::closed(format!("{addr}: no handshake in {} ms", t.as_millis())),
            Ok(Err(e)) => Part::closed(format!("{addr}: {e}")),
            Ok(Ok(s)) => match handshake(s, ServerName::from(target), deadline).await {
                Ok(()) => Part::open(format!("{addr}: TLS handshake completed")),
                Err(e) => Part::closed(format!("{addr}: {e}")),
            },
        }
    };
    let url =
        ProbeUrl::parse(&format!("https://{}/dns-query", authority(addr))).expect("a valid URL");
    let proxied = async {
        let deadline = Instant::now() + t;
        match Via::start(&url, env, deadline).await {
            None => None,
            Some(Err(part)) => Some(part),
            Some(Ok(Via::Tunnel(stream, proxy))) => Some(
                match handshake(stream, ServerName::from(target), deadline).await {
                    Ok(()) => Part::open(format!("via {proxy}: TLS handshake with {addr}")),
                    Err(e) => Part::closed(format!("via {proxy}: tunnel to {addr}, then {e}")),
                },
            ),
            Some(Ok(Via::Answer(reply, proxy))) => Some(answer_part(&reply, &proxy, &url)),
        }
    };
    let (direct, proxied) = tokio::join!(direct, proxied);
    std::iter::once(direct).chain(proxied).collect()
}

fn authority(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V6(v6) => format!("[{v6}]"),
        IpAddr::V4(v4) => v4.to_string(),
    }
}

/// A proxy's answer: its refusal `closed`, anything else `open`.
fn answer_part(reply: &[u8], proxy: &str, url: &ProbeUrl) -> Part {
    let target = url.authority();
    match refusal(reply) {
        Some(r) => Part::closed(format!("via {proxy}: {target} refused ({r})")),
        None if reply.is_empty() => {
            Part::closed(format!("via {proxy}: {target}: closed with no answer"))
        }
        None => Part::open(format!("via {proxy}: {target}: {}", first_line(reply))),
    }
}

/// Where a request through a proxy variable got to.
enum Via {
    /// `CONNECT` answered 2xx: the tunnel.
    Tunnel(TcpStream, String),
    /// The proxy's answer (a refusal, an error, a forwarded response), maybe empty.
    Answer(Vec<u8>, String),
}

impl Via {
    /// `None` when no proxy variable covers `url`; a failure is a `closed` part.
    async fn start(url: &ProbeUrl, env: &ProxyEnv, deadline: Instant) -> Option<Result<Via, Part>> {
        let proxy = match env.for_url(url.https)? {
            Ok(p) => p,
            Err(e) => return Some(Err(Part::unknown(e.clone()))),
        };
        let name = proxy.url.authority();
        let auth = match &proxy.authorization {
            Some(value) => format!("Proxy-Authorization: {value}\r\n"),
            None => String::new(),
        };
        let connect = async {
            let (host, port) = (proxy.url.host.as_str(), proxy.url.port);
            let mut stream = TcpStream::connect((host, port)).await?;
            let target = url.authority();
            let request = match url.https {
                true => format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n"),
                false => format!(
                    "GET http://{target}{} HTTP/1.1\r\nHost: {target}\r\n{auth}Connection: close\r\n\r\n",
                    url.path
                ),
            };
            stream.write_all(request.as_bytes()).await?;
            Ok::<_, std::io::Error>(stream)
        };
        let mut stream = match timeout_at(deadline, connect).await {
            Err(_) => return Some(Err(Part::closed(format!("{name}: no answer in time")))),
            Ok(Err(e)) => return Some(Err(Part::closed(format!("proxy {name}: {e}")))),
            Ok(Ok(s)) => s,
        };
        let mut reply = Vec::new();
        let read = read_reply(&mut stream, &mut reply, deadline).await;
        if reply.is_empty() {
            if let Err(e) = read {
                return Some(Err(Part::closed(format!("via {name}: {e}"))));
            }
        }
        let tunnel =
            url.https && (reply.starts_with(b"HTTP/1.1 2") || reply.starts_with(b"HTTP/1.0 2"));
        Some(Ok(match tunnel && refusal(&reply).is_none() {
            true => Via::Tunnel(stream, name),
            false => Via::Answer(reply, name),
        }))
    }
}

/// The proxy variables' half of a check for `url`: nothing when none covers it.
pub(super) async fn through_proxy(url: &ProbeUrl, env: &ProxyEnv, t: Duration) -> Option<Part> {
    let deadline = Instant::now() + t;
    Some(match Via::start(url, env, deadline).await? {
        Err(part) => part,
        Ok(Via::Tunnel(_, proxy)) => {
            Part::open(format!("via {proxy}: tunnel to {} opened", url.authority()))
        }
        Ok(Via::Answer(reply, proxy)) => answer_part(&reply, &proxy, url),
    })
}

/// `proxy-enforces`: each `--denied` URL through the proxy variables.
pub(super) async fn enforces(denied: &[ProbeUrl], env: &ProxyEnv, t: Duration) -> Vec<Part> {
    let mut parts = Vec::new();
    for url in denied {
        parts.push(match through_proxy(url, env, t).await {
            Some(part) => part,
            None => Part::unknown(format!(
                "no {} variable for {}",
                if url.https {
                    "HTTPS_PROXY"
                } else {
                    "HTTP_PROXY"
                },
                url.authority()
            )),
        });
    }
    parts
}

/// `proxy-allows`: each `--allowed` URL, through the proxy variables when they cover
/// it, else directly. `open` means reached; a 5xx or a refusal is not.
pub(super) async fn allows(allowed: &[ProbeUrl], env: &ProxyEnv, t: Duration) -> Vec<Part> {
    if allowed.is_empty() {
        return vec![Part::unknown("no --allowed URL given")];
    }
    let mut parts = Vec::new();
    for url in allowed {
        let deadline = Instant::now() + t;
        let part = match Via::start(url, env, deadline).await {
            Some(Err(part)) => part,
            Some(Ok(Via::Tunnel(_, proxy))) => {
                Part::open(format!("via {proxy}: reached {}", url.authority()))
            }
            Some(Ok(Via::Answer(reply, proxy))) => reached(&reply, &format!("via {proxy}"), url),
            None => direct(url, deadline).await,
        };
        parts.push(part);
    }
    parts
}

/// An answer for `url` counts as reached unless it is a refusal, a 5xx or nothing.
fn reached(reply: &[u8], how: &str, url: &ProbeUrl) -> Part {
    let target = url.authority();
    if let Some(r) = refusal(reply) {
        return Part::closed(format!("{how}: {target} refused ({r})"));
    }
    let line = first_line(reply);
    let server_error = line.split(' ').nth(1).is_some_and(|c| c.starts_with('5'));
    match reply.starts_with(b"HTTP/") && !server_error {
        true => Part::open(format!("{how}: reached {target} ({line})")),
        false if reply.is_empty() => Part::closed(format!("{how}: {target}: no answer")),
        false => Part::closed(format!("{how}: {target}: {line}")),
    }
}

/// An allowed URL with no proxy variable: a TLS handshake (https) or a `GET` (http).
async fn direct(url: &ProbeUrl, deadline: Instant) -> Part {
    let target = url.authority();
    let connect = TcpStream::connect((url.host.as_str(), url.port));
    let mut stream = match timeout_at(deadline, connect).await {
        Err(_) => return Part::closed(format!("{target}: no handshake in time")),
        Ok(Err(e)) => return Part::closed(format!("{target}: {e}")),
        Ok(Ok(s)) => s,
    };
    if url.https {
        let Ok(name) = ServerName::try_from(url.host.clone()) else {
            return Part::unknown(format!("{target}: not a TLS server name"));
        };
        return match handshake(stream, name, deadline).await {
            Ok(()) => Part::open(format!("direct: reached {target} (TLS handshake)")),
            Err(e) => Part::closed(format!("direct: {target}: {e}")),
        };
    }
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n",
        url.path
    );
    if let Err(e) = stream.write_all(request.as_bytes()).await {
        return Part::closed(format!("direct: {target}: {e}"));
    }
    let mut reply = Vec::new();
    let _ = read_reply(&mut stream, &mut reply, deadline).await;
    reached(&reply, "direct", url)
}
