//! Upload budgets on the wire (docs/reference/policy-files.md, "Upload budget"): what
//! the origin receives is counted on the origin's side, never taken from the proxy's
//! word.
//!
//! - `tunnel`: tunnels (copied, and spliced with `--tunnel-splice`) stop at exactly the budget, their record, and
//!   the refused `CONNECT` once it is spent.
//! - `body`: request bodies: a `Content-Length` over what is left, a chunked body cut.
//! - `heads`: request heads, plain and inspected: a flood of large headers stops at
//!   the budget.
//! - `levels`: budgets per session, and a larger budget below is `policy_widening`.

mod body;
mod heads;
mod levels;
mod tunnel;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::client::{connect_via_proxy, send_raw, Conn, Response};
use crate::support::expect::{assert_denied_record, assert_denied_response, Denial};
use crate::support::org::Org;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder, AUDIT_TIMEOUT};

/// One entry per connection: its bytes, and whether it has ended.
type Conns = Arc<Mutex<Vec<(Vec<u8>, bool)>>>;

/// A TCP origin that keeps every byte each connection sent it, and answers nothing (or,
/// with `answer`, writes those bytes as soon as a request head has come).
struct Sink {
    addr: SocketAddr,
    conns: Conns,
}

impl Sink {
    async fn start() -> Sink {
        Sink::answering(None).await
    }

    async fn answering(answer: Option<&'static [u8]>) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Conns = Arc::default();
        let kept = conns.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let conns = kept.clone();
                let i = {
                    let mut conns = conns.lock().unwrap();
                    conns.push((Vec::new(), false));
                    conns.len() - 1
                };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut answer = answer;
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => conns.lock().unwrap()[i].0.extend_from_slice(&buf[..n]),
                        }
                        let headed = crate::support::find(&conns.lock().unwrap()[i].0, b"\r\n\r\n");
                        if let (Some(_), Some(bytes)) = (headed, answer) {
                            answer = None;
                            let _ = stream.write_all(bytes).await;
                        }
                    }
                    conns.lock().unwrap()[i].1 = true;
                });
            }
        });
        Sink { addr, conns }
    }

    fn connections(&self) -> usize {
        self.conns.lock().unwrap().len()
    }

    /// The bytes connection `i` sent, once it has ended (within 10 s).
    async fn ended(&self, i: usize) -> Vec<u8> {
        for _ in 0..1000 {
            if let Some((bytes, true)) = self.conns.lock().unwrap().get(i) {
                return bytes.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("origin connection {i} did not end");
    }

    /// The bytes connection `i` has sent so far, once at least `n` came (within 10 s).
    async fn at_least(&self, i: usize, n: usize) -> Vec<u8> {
        for _ in 0..1000 {
            if let Some((bytes, _)) = self.conns.lock().unwrap().get(i) {
                if bytes.len() >= n {
                    return bytes.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("origin connection {i} did not get {n} bytes");
    }
}

/// The organization file: `sink.test` on `port`, loopback reachable, `[limits]` if set.
fn org(port: u16, upload_bytes: Option<u64>) -> String {
    let mut text = Org::new()
        .allow("sink.test")
        .ports(&[port])
        .loopback()
        .to_toml();
    if let Some(n) = upload_bytes {
        text += &format!("\n[limits]\nupload_bytes = {n}\n");
    }
    text
}

fn allowlist(budget: Option<u64>) -> Value {
    let mut policy = json!({"type": "allowlist", "allowed_domains": ["sink.test"]});
    if let Some(n) = budget {
        policy["max_upload_bytes"] = n.into();
    }
    policy
}

/// A proxy for `sink.test` at `port` under an organization budget.
async fn proxy(port: u16, upload_bytes: u64) -> Proxy {
    proxy_with(port, upload_bytes, &[]).await
}

/// [`proxy`], with more flags.
async fn proxy_with(port: u16, upload_bytes: u64, args: &[&str]) -> Proxy {
    let mut builder = ProxyBuilder::new(org(port, Some(upload_bytes)))
        .policy(allowlist(None).to_string())
        .pin("sink.test")
        .audit_allowed();
    for arg in args {
        builder = builder.arg(arg);
    }
    builder.start().await
}

/// `len` bytes of a pattern that does not start like TLS (the tunnel is not judged as
/// a ClientHello).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 23) as u8).collect()
}

/// Open a tunnel to `sink.test` (with extra headers); panics unless it opens.
async fn tunnel(proxy: &Proxy, sink: &Sink, headers: &[(&str, &str)]) -> TcpStream {
    let target = format!("sink.test:{}", sink.addr.port());
    let (resp, conn) = connect_via_proxy(proxy.addr, &target, headers).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    conn.into_stream()
}

/// Send `bytes` into a tunnel in writes of `write` bytes, `pause` apart, until the proxy
/// stops taking them; then wait for it to close the tunnel.
async fn send_until_closed(mut stream: TcpStream, bytes: &[u8], write: usize, pause: Duration) {
    for piece in bytes.chunks(write) {
        if stream.write_all(piece).await.is_err() {
            break;
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    let mut rest = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.read(&mut rest).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    closed
        .await
        .expect("the proxy closes a tunnel at its budget");
}

/// The records of `proxy` with this `reason`, once `n` of them came.
async fn records_with(proxy: &Proxy, reason: &str, n: usize) -> Vec<Value> {
    let pred = |r: &Value| r["reason"] == reason;
    let _ = proxy.wait_audit(pred, AUDIT_TIMEOUT).await;
    tokio::time::sleep(crate::support::proxy::QUIET_PERIOD).await;
    let found: Vec<Value> = proxy.audit_lines().into_iter().filter(pred).collect();
    assert_eq!(found.len(), n, "{found:#?}\n{}", proxy.diagnostics());
    found
}
