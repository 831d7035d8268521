//! The load client (and WebSocket echo origin) of `benches/h2.sh`, by hand, loopback only.
//!
//! A Python client is slower than the proxy it would measure; this one is hyper's client
//! on one thread (a current-thread runtime), so every configuration gets the same client
//! CPU. Modes (`CONNECT` is sent to `127.0.0.1:PROXY`, names are never resolved here):
//!
//! ```text
//! h2 PROXY TARGET NAME CA SECONDS STREAMS   one CONNECT + TLS (ALPN h2) tunnel, STREAMS
//!                                           GETs in flight on its one connection
//! h1 PROXY TARGET NAME CA SECONDS CONNS     CONNS tunnels (ALPN http/1.1), one keep-alive
//!                                           GET at a time on each
//! ws PROXY TARGET NAME CA SECONDS BYTES     one WebSocket (HTTP/1.1 upgrade) inside a tunnel,
//!                                           ping-pong: a masked text message of BYTES (< 126),
//!                                           then its echo; PROXY `-` dials TARGET directly
//! ws-origin PORT CERT KEY                   a WebSocket echo server over TLS on 127.0.0.1:PORT
//! ```
//!
//! TARGET is the `CONNECT` target (`HOST:PORT`); NAME is the TLS server name (and the
//! requests' authority is NAME and TARGET's port), verified against CA alone. The load
//! modes print `COUNT SECONDS PER_SECOND CLIENT_BUSY` (the client's share of a core), timed from the first request once every
//! tunnel is up; every answer must be a 200 (an echo, the same bytes). Under `cargo
//! bench` (no mode) it says what it is and does nothing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sha1::{Digest, Sha1};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

type Error = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "h2_load (the client of benches/h2.sh): h2|h1|ws PROXY TARGET NAME CA SECONDS N, or ws-origin PORT CERT KEY";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !matches!(
        args.first().map(String::as_str),
        Some("h2" | "h1" | "ws" | "ws-origin")
    ) {
        // `cargo bench` runs every bench target with `--bench`: nothing to do here.
        eprintln!("{USAGE}");
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(e) = runtime.block_on(run(&args)) {
        eprintln!("h2_load: {e}");
        std::process::exit(1);
    }
}

async fn run(args: &[String]) -> Result<(), Error> {
    if args[0] == "ws-origin" {
        let [_, port, cert, key] = args else {
            return Err(USAGE.into());
        };
        return ws_origin(port.parse()?, cert, key).await;
    }
    let [mode, proxy, target, name, ca, seconds, n] = args else {
        return Err(USAGE.into());
    };
    let dial = Dial {
        proxy: (proxy != "-").then(|| proxy.parse()).transpose()?,
        target: target.clone(),
        name: ServerName::try_from(name.clone())?,
        authority: format!("{name}:{}", target.rsplit(':').next().unwrap_or("443")),
        ca: ca.clone(),
    };
    let duration = Duration::from_secs_f64(seconds.parse()?);
    let n: usize = n.parse()?;
    let cpu0 = cpu_ns();
    let (count, elapsed) = match mode.as_str() {
        "h2" => h2(&dial, duration, n).await?,
        "h1" => h1(&dial, duration, n).await?,
        _ => ws(&dial, duration, n).await?,
    };
    // The client's share of a core over the run (setup included, a little): near 1.00,
    // and the client is what limits the figure.
    let busy = (cpu_ns() - cpu0) as f64 / 1e9 / elapsed.as_secs_f64();
    let secs = elapsed.as_secs_f64();
    println!("{count} {secs:.3} {:.0} {:.2}", count as f64 / secs, busy);
    Ok(())
}

/// CPU time of this thread, which is all of the client's work (one current-thread
/// runtime): the first field of /proc/thread-self/schedstat, in ns.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// How to reach the origin: through the proxy's `CONNECT`, or straight to TARGET.
struct Dial {
    proxy: Option<u16>,
    target: String,
    name: ServerName<'static>,
    authority: String,
    ca: String,
}

impl Dial {
    /// A TLS connection for NAME offering `alpn`, inside a tunnel (or direct).
    async fn connect(&self, alpn: &[u8]) -> Result<TlsStream<TcpStream>, Error> {
        let tcp = match self.proxy {
            Some(port) => {
                let mut tcp = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port))).await?;
                let t = &self.target;
                let head = format!("CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n\r\n");
                tcp.write_all(head.as_bytes()).await?;
                let answer = read_head(&mut tcp).await?;
                if !answer.starts_with(b"HTTP/1.1 200") {
                    return Err(
                        format!("CONNECT refused: {}", String::from_utf8_lossy(&answer)).into(),
                    );
                }
                tcp
            }
            None => TcpStream::connect(self.target.as_str()).await?,
        };
        tcp.set_nodelay(true)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(&self.ca)? {
            roots.add(cert?)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        let tls = TlsConnector::from(Arc::new(config))
            .connect(self.name.clone(), tcp)
            .await?;
        if tls.get_ref().1.alpn_protocol() != Some(alpn) {
            return Err(format!("ALPN {} was not agreed", String::from_utf8_lossy(alpn)).into());
        }
        Ok(tls)
    }

    fn uri(&self) -> Uri {
        format!("https://{}/", self.authority)
            .parse()
            .expect("a URI")
    }
}

/// Read an HTTP head (up to the blank line) byte by byte, so nothing after it is taken.
async fn read_head(tcp: &mut TcpStream) -> Result<Vec<u8>, Error> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        if tcp.read(&mut byte).await? == 0 {
            return Err("closed before the CONNECT answer".into());
        }
        head.push(byte[0]);
    }
    Ok(head)
}

/// One connection's hyper client, either version.
enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Empty<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
}

impl Sender {
    /// One GET and the whole of its answer, which must be a 200.
    /// (HTTP/1.1 in origin form with a `Host`, as a browser sends it inside a tunnel;
    /// h2 with `:authority` and `:scheme` from the absolute URI.)
    async fn get(&mut self, uri: &Uri) -> Result<(), Error> {
        let response = match self {
            Sender::H1(s) => {
                let authority = uri.authority().map_or("", |a| a.as_str());
                let request = Request::get("/")
                    .header(hyper::header::HOST, authority)
                    .body(Empty::new())?;
                s.ready().await?;
                s.send_request(request).await?
            }
            Sender::H2(s) => {
                let request = Request::get(uri.clone()).body(Empty::new())?;
                s.ready().await?;
                s.send_request(request).await?
            }
        };
        if response.status() != StatusCode::OK {
            return Err(format!("answer {}", response.status()).into());
        }
        response.into_body().collect().await?;
        Ok(())
    }
}

/// Until the deadline, each sender sends a GET, waits for its whole answer and counts it
/// (the h2 sender is one clone per stream).
async fn drive(
    senders: Vec<Sender>,
    uri: Uri,
    duration: Duration,
) -> Result<(u64, Duration), Error> {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|mut sender| {
            let (stop, count, uri) = (stop.clone(), count.clone(), uri.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    sender.get(&uri).await?;
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed();
    let done = count.load(Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    Ok((done, elapsed))
}

async fn h2(dial: &Dial, duration: Duration, streams: usize) -> Result<(u64, Duration), Error> {
    let tls = dial.connect(b"h2").await?;
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(tls))
        .await?;
    tokio::spawn(conn);
    let senders = (0..streams).map(|_| Sender::H2(sender.clone())).collect();
    drive(senders, dial.uri(), duration).await
}

async fn h1(dial: &Dial, duration: Duration, conns: usize) -> Result<(u64, Duration), Error> {
    let mut senders = Vec::new();
    for _ in 0..conns {
        let tls = dial.connect(b"http/1.1").await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        senders.push(Sender::H1(sender));
    }
    drive(senders, dial.uri(), duration).await
}

/// The key of every handshake (RFC 6455's example): the origin answers it, the client
/// checks the answer when it is the origin's (the proxy answers its own key upstream).
const WS_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn ws_accept(key: &str) -> String {
    let digest = Sha1::new()
        .chain_update(key.as_bytes())
        .chain_update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
        .finalize();
    base64::engine::general_purpose::STANDARD.encode(digest)
}

/// Ping-pong over one WebSocket: a masked text frame of `bytes`, then its echo.
async fn ws(dial: &Dial, duration: Duration, bytes: usize) -> Result<(u64, Duration), Error> {
    if !(1..126).contains(&bytes) {
        return Err("ws: BYTES must be 1 to 125".into());
    }
    let mut tls = BufReader::new(dial.connect(b"http/1.1").await?);
    let head = format!(
        "GET /echo HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {WS_KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n",
        dial.authority
    );
    tls.write_all(head.as_bytes()).await?;
    tls.flush().await?;
    let answer = read_lines(&mut tls).await?;
    if !answer.starts_with("HTTP/1.1 101") || !answer.contains(&ws_accept(WS_KEY)) {
        return Err(format!("no WebSocket: {answer}").into());
    }
    let mask = [0x5a, 0x17, 0xc3, 0x08];
    let payload: Vec<u8> = (0..bytes).map(|i| b'a' + (i % 26) as u8).collect();
    let mut frame = vec![0x81, 0x80 | bytes as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    let mut echo = vec![0u8; 2 + bytes];
    let (start, mut count) = (Instant::now(), 0u64);
    while start.elapsed() < duration {
        tls.write_all(&frame).await?;
        tls.flush().await?;
        tls.read_exact(&mut echo).await?;
        if echo[..2] != [0x81, bytes as u8] || echo[2..] != payload[..] {
            return Err("ws: the echo is not the message".into());
        }
        count += 1;
    }
    Ok((count, start.elapsed()))
}

/// An HTTP head read line by line from a buffered stream, as text.
async fn read_lines<S: tokio::io::AsyncBufRead + Unpin>(s: &mut S) -> Result<String, Error> {
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        if s.read_line(&mut head).await? == 0 {
            return Err("closed in a head".into());
        }
    }
    Ok(head)
}

/// The echo origin: each connection's handshake answered with its accept value, then
/// every frame sent back unmasked, as it came, until a close frame or the end.
async fn ws_origin(port: u16, cert: &str, key: &str) -> Result<(), Error> {
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, PrivateKeyDer::from_pem_file(key)?)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            if let Err(e) = echo(acceptor, tcp).await {
                eprintln!("ws-origin: {e}");
            }
        });
    }
}

async fn echo(acceptor: TlsAcceptor, tcp: TcpStream) -> Result<(), Error> {
    let mut tls = BufReader::new(acceptor.accept(tcp).await?);
    let head = read_lines(&mut tls).await?;
    let key = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("sec-websocket-key")
                .then(|| value.trim().to_string())
        })
        .ok_or("no Sec-WebSocket-Key")?;
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        ws_accept(&key)
    );
    tls.write_all(answer.as_bytes()).await?;
    tls.flush().await?;
    let mut payload = Vec::new();
    loop {
        let mut h = [0u8; 2];
        if tls.read(&mut h[..1]).await? == 0 {
            return Ok(());
        }
        tls.read_exact(&mut h[1..]).await?;
        let len = match h[1] & 0x7f {
            126 => tls.read_u16().await? as usize,
            127 => tls.read_u64().await? as usize,
            n => n as usize,
        };
        let mut mask = [0u8; 4];
        if h[1] & 0x80 != 0 {
            tls.read_exact(&mut mask).await?;
        }
        payload.resize(len, 0);
        tls.read_exact(&mut payload).await?;
        payload
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b ^= mask[i % 4]);
        let mut frame = vec![h[0]];
        match len {
            0..=125 => frame.push(len as u8),
            126..=65535 => {
                frame.push(126);
                frame.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                frame.push(127);
                frame.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&payload);
        tls.write_all(&frame).await?;
        tls.flush().await?;
        if h[0] & 0x0f == 0x8 {
            return Ok(());
        }
    }
}
