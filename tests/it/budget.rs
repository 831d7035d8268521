//! Upload budgets on the wire (docs/reference/policy-files.md, "Upload budget"): what
//! the origin receives is counted on the origin's side, never taken from the proxy's
//! word.

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

/// A TCP origin that answers nothing and keeps every byte each connection sent it.
struct Sink {
    addr: SocketAddr,
    conns: Conns,
}

impl Sink {
    async fn start() -> Sink {
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
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => conns.lock().unwrap()[i].0.extend_from_slice(&buf[..n]),
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
    ProxyBuilder::new(org(port, Some(upload_bytes)))
        .policy(allowlist(None).to_string())
        .pin("sink.test")
        .audit_allowed()
        .start()
        .await
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

/// A bulk upload through a tunnel (the relay splices it on Linux): the origin gets
/// exactly the budget's bytes, then an end.
#[tokio::test]
async fn a_bulk_tunnel_upload_stops_at_exactly_the_budget() {
    const BUDGET: usize = 1024 * 1024 + 17;
    let sink = Sink::start().await;
    let proxy = proxy(sink.addr.port(), BUDGET as u64).await;
    let stream = tunnel(&proxy, &sink, &[]).await;
    let sent = pattern(4 * BUDGET);
    send_until_closed(stream, &sent, sent.len(), Duration::ZERO).await;
    let got = sink.ended(0).await;
    assert_eq!(got.len(), BUDGET, "{}", proxy.diagnostics());
    assert!(got == sent[..BUDGET], "the first bytes, in order");
}

/// Small writes through a tunnel (the relay copies them): the same exact stop.
#[tokio::test]
async fn a_tunnel_of_small_writes_stops_at_exactly_the_budget() {
    const BUDGET: usize = 1000;
    let sink = Sink::start().await;
    let proxy = proxy(sink.addr.port(), BUDGET as u64).await;
    let stream = tunnel(&proxy, &sink, &[]).await;
    let sent = pattern(3000);
    send_until_closed(stream, &sent, 70, Duration::from_millis(2)).await;
    let got = sink.ended(0).await;
    assert_eq!(got, sent[..BUDGET], "{}", proxy.diagnostics());
}

/// The tunnel the budget closed leaves one record, saying so, with the bytes it carried
/// (and no allowed record besides it, even with `--audit-allowed`).
#[tokio::test]
async fn a_tunnel_closed_by_the_budget_has_one_record_saying_why() {
    const BUDGET: usize = 5000;
    let sink = Sink::start().await;
    let proxy = proxy(sink.addr.port(), BUDGET as u64).await;
    let stream = tunnel(&proxy, &sink, &[]).await;
    send_until_closed(stream, &pattern(20_000), 1000, Duration::from_millis(1)).await;
    let records = records_with(&proxy, "upload_budget_exceeded", 1).await;
    let rec = &records[0];
    assert_eq!(rec["event"], "egress.denied", "{rec}");
    assert_eq!(rec["method"], "CONNECT", "{rec}");
    assert_eq!(rec["host"], "sink.test", "{rec}");
    assert_eq!(rec["rule"], "upload_bytes = 5000", "{rec}");
    assert_eq!(rec["policy_level"], "org", "{rec}");
    assert_eq!(rec["bytes_up"], BUDGET, "{rec}");
    assert_eq!(rec["resolved_ip"], "127.0.0.1", "{rec}");
    let all = proxy.audit_lines();
    assert_eq!(all.len(), 1, "one record for the tunnel: {all:#?}");
    assert_eq!(sink.ended(0).await.len(), BUDGET);
}

/// Once the budget is spent, a new tunnel is refused at `CONNECT`: the origin sees no
/// connection.
#[tokio::test]
async fn a_new_tunnel_once_the_budget_is_spent_is_refused_at_connect() {
    const BUDGET: usize = 300;
    let sink = Sink::start().await;
    let proxy = proxy(sink.addr.port(), BUDGET as u64).await;
    let stream = tunnel(&proxy, &sink, &[]).await;
    send_until_closed(stream, &pattern(1000), 100, Duration::from_millis(1)).await;
    assert_eq!(sink.ended(0).await.len(), BUDGET);
    let target = format!("sink.test:{}", sink.addr.port());
    let (resp, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    let want = Denial::new(403, "upload_budget_exceeded")
        .at("sink.test", sink.addr.port())
        .level("org");
    let id = assert_denied_response(&resp, &want, &proxy);
    let phrase = "Egress denied: upload_budget_exceeded";
    assert!(resp.status_line.contains(phrase), "{resp:?}");
    let records = records_with(&proxy, "upload_budget_exceeded", 2).await;
    assert_denied_record(&records[1], &want, &id, &proxy);
    assert_eq!(sink.connections(), 1, "no second connection upstream");
}

fn post(port: u16, body: &[u8], extra: &str) -> Vec<u8> {
    let mut req = format!(
        "POST http://sink.test:{port}/up HTTP/1.1\r\nHost: sink.test:{port}\r\n\
         Content-Length: {}\r\n{extra}\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// A body whose `Content-Length` is more than what is left is refused before anything
/// is sent; one that fits goes through, and spends the budget.
#[tokio::test]
async fn a_content_length_over_the_budget_is_refused_and_the_origin_sees_nothing() {
    let origin = Origin::start().await;
    let proxy = proxy(origin.port(), 100).await;
    let resp = send_raw(proxy.addr, &post(origin.port(), &[b'x'; 101], "")).await;
    let want = Denial::new(403, "upload_budget_exceeded")
        .at("sink.test", origin.port())
        .level("org");
    assert_denied_response(&resp, &want, &proxy);
    assert_eq!(origin.connections(), 0, "{}", proxy.diagnostics());
    let record = &records_with(&proxy, "upload_budget_exceeded", 1).await[0];
    assert!(record["url"].as_str().unwrap().ends_with("/up"), "{record}");
    // Exactly the budget fits, once.
    let resp = send_raw(proxy.addr, &post(origin.port(), &[b'y'; 100], "")).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(origin.requests()[0].body, vec![b'y'; 100]);
    let resp = send_raw(proxy.addr, &post(origin.port(), b"z", "")).await;
    assert_denied_response(&resp, &want, &proxy);
    // A body-less request sends nothing, so it still goes.
    let get = format!(
        "GET http://sink.test:{0}/ HTTP/1.1\r\nHost: sink.test:{0}\r\n\r\n",
        origin.port()
    );
    assert_eq!(send_raw(proxy.addr, get.as_bytes()).await.status, 200);
    assert_eq!(origin.hits(), 2);
}

/// A narrower `X-Network-Policy` budget applies to its request.
#[tokio::test]
async fn a_header_budget_narrows_its_request() {
    let origin = Origin::start().await;
    let proxy = proxy(origin.port(), 1000).await;
    let header = format!("X-Network-Policy: {}\r\n", allowlist(Some(10)));
    let resp = send_raw(proxy.addr, &post(origin.port(), &[b'x'; 11], &header)).await;
    let want = Denial::new(403, "upload_budget_exceeded").level("request");
    assert_denied_response(&resp, &want, &proxy);
    let record = &records_with(&proxy, "upload_budget_exceeded", 1).await[0];
    assert_eq!(record["rule"], "max_upload_bytes = 10", "{record}");
    assert_eq!(origin.connections(), 0);
}

/// Decode a chunked body as far as it goes: the payload, and whether it ended.
fn dechunk(mut bytes: &[u8]) -> (Vec<u8>, bool) {
    let mut payload = Vec::new();
    loop {
        let Some(eol) = bytes.windows(2).position(|w| w == b"\r\n") else {
            return (payload, false);
        };
        let size_text = std::str::from_utf8(&bytes[..eol]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap(), 16).unwrap();
        if size == 0 {
            return (payload, true);
        }
        let data = &bytes[eol + 2..];
        let take = size.min(data.len());
        payload.extend_from_slice(&data[..take]);
        if data.len() < size + 2 {
            return (payload, false);
        }
        bytes = &data[size + 2..];
    }
}

/// A chunked body is never delivered past the budget: the origin gets the bytes that
/// fit and no end of the body; the client, with no answer started, gets 403.
#[tokio::test]
async fn a_chunked_body_is_cut_at_the_budget() {
    const BUDGET: usize = 1000;
    let sink = Sink::start().await;
    let port = sink.addr.port();
    let proxy = proxy(port, BUDGET as u64).await;
    let mut conn = Conn::open(proxy.addr).await;
    let head = format!(
        "POST http://sink.test:{port}/chunks HTTP/1.1\r\nHost: sink.test:{port}\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    conn.send(head.as_bytes()).await;
    let sent = pattern(300 * 6);
    for chunk in sent.chunks(300) {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(chunk);
        framed.extend_from_slice(b"\r\n");
        if !conn.send_lossy(&framed).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = conn.send_lossy(b"0\r\n\r\n").await;
    let resp: Response = conn.read_response().await;
    let want = Denial::new(403, "upload_budget_exceeded").at("sink.test", port);
    assert_denied_response(&resp, &want, &proxy);
    let got = sink.ended(0).await;
    let at = crate::support::find(&got, b"\r\n\r\n").expect("a head upstream") + 4;
    let (payload, ended) = dechunk(&got[at..]);
    assert_eq!(payload, sent[..BUDGET], "exactly the bytes that fit");
    assert!(!ended, "the body never ended upstream");
    let record = &records_with(&proxy, "upload_budget_exceeded", 1).await[0];
    assert_eq!(record["method"], "POST", "{record}");
    // The head's bytes are counted in `bytes_up` too (docs/reference/audit-log.md).
    let up = record["bytes_up"].as_u64().unwrap() as usize;
    assert!(up >= BUDGET, "{record}");
}

/// Each session has a budget of its own: one session spending its budget leaves
/// another's untouched.
#[tokio::test]
async fn per_session_budgets_are_independent() {
    const BUDGET: usize = 500;
    let sink = Sink::start().await;
    let proxy = ProxyBuilder::new(org(sink.addr.port(), None))
        .pin("sink.test")
        .admin("budget-token")
        .start()
        .await;
    let policy = allowlist(Some(BUDGET as u64));
    let a = proxy.admin().create_session(&policy, None).await;
    let b = proxy.admin().create_session(&policy, None).await;
    let (auth_a, auth_b) = (a.proxy_auth(), b.proxy_auth());
    let stream = tunnel(&proxy, &sink, &[("Proxy-Authorization", &auth_a)]).await;
    send_until_closed(stream, &pattern(2000), 100, Duration::from_millis(1)).await;
    assert_eq!(sink.ended(0).await.len(), BUDGET, "session a: its budget");
    // Session b still has all of its own.
    let mut stream = tunnel(&proxy, &sink, &[("Proxy-Authorization", &auth_b)]).await;
    stream.write_all(&pattern(300)).await.unwrap();
    assert_eq!(sink.at_least(1, 300).await.len(), 300);
    send_until_closed(stream, &pattern(300), 50, Duration::from_millis(1)).await;
    assert_eq!(
        sink.ended(1).await.len(),
        BUDGET,
        "session b: its budget, no more"
    );
    // Both spent now; a's next tunnel is refused.
    let target = format!("sink.test:{}", sink.addr.port());
    let (resp, _) =
        connect_via_proxy(proxy.addr, &target, &[("Proxy-Authorization", &auth_a)]).await;
    assert_eq!(
        resp.header("x-egress-denied"),
        Some("upload_budget_exceeded")
    );
    assert_eq!(sink.connections(), 2);
}

/// A request level that asks for a larger budget than the level above widens it: the
/// header is refused whole (naming it), and so is a session.
#[tokio::test]
async fn a_larger_max_upload_bytes_is_policy_widening() {
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::new(org(origin.port(), Some(1000)))
        .policy(allowlist(Some(800)).to_string())
        .pin("sink.test")
        .admin("budget-token")
        .start()
        .await;
    let header = allowlist(Some(900)).to_string();
    let url = format!("http://sink.test:{}/", origin.port());
    let resp =
        crate::support::client::get_via_proxy(proxy.addr, &url, &[("X-Network-Policy", &header)])
            .await;
    let want = Denial::new(403, "policy_widening").level("request");
    assert_denied_response(&resp, &want, &proxy);
    let record = &records_with(&proxy, "policy_widening", 1).await[0];
    let rule = record["rule"].as_str().unwrap();
    assert!(rule.contains("max_upload_bytes = 900"), "{rule}");
    assert!(
        rule.contains("max_upload_bytes = 800"),
        "names the level above: {rule}"
    );
    assert_eq!(origin.hits(), 0);
    // A session: 422, naming the entry.
    let body = json!({"network_policy": allowlist(Some(1001))}).to_string();
    let resp = proxy
        .admin()
        .call("POST", "/v1/sessions", Some(&body))
        .await;
    assert_eq!(resp.status, 422, "{resp:?}");
    let offending = resp.json()["error"]["offending"].to_string();
    assert!(offending.contains("max_upload_bytes = 1001"), "{offending}");
}

/// A `--policy` whose budget is larger than the organization's stops `serve` (exit 2,
/// naming it), and `lint` finds the same entry.
#[test]
fn a_widening_budget_file_stops_serve_and_is_a_lint_finding() {
    let dir = crate::support::unique_temp_dir("budget-widening");
    let org_path = dir.join("org.toml");
    let policy_path = dir.join("policy.json");
    std::fs::write(&org_path, org(8080, Some(100))).unwrap();
    std::fs::write(&policy_path, allowlist(Some(101)).to_string()).unwrap();
    let (org_arg, policy_arg) = (org_path.to_str().unwrap(), policy_path.to_str().unwrap());
    let args = [
        "serve",
        "--org",
        org_arg,
        "--policy",
        policy_arg,
        "--listen",
        "127.0.0.1:0",
        "--audit-log",
        "-",
    ];
    let (code, stderr) = crate::support::proxy::run_expect_exit(&args);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("max_upload_bytes = 101"), "{stderr}");
    let out = std::process::Command::new(crate::support::proxy::binary())
        .args(["lint", "--org", org_arg, policy_arg])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("widens-org-policy"), "{text}");
    assert!(text.contains("upload_bytes = 100"), "{text}");
}
