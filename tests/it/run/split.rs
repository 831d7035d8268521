//! Inside the jail, the transparent listener judges a connection to a name on the same
//! bytes however the client split its writes, and a client that waits for its server to
//! speak first (SSH, SMTP, MySQL) reaches it (docs/reference/confinement.md,
//! "Transparent listener").

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::transparent::EXCHANGE;
use super::{require_jail, Jailed};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::{HttpsOrigin, Origin};

/// Python for the scripts below: `send(addr, port, writes)` writes each `(pause, bytes)`
/// after its pause and returns the answer's first line; `hello(sni)` is a TLS client's
/// first flight, and `handshake(addr, port, sni, split)` sends it through `split` and
/// finishes the handshake.
const SPLIT: &str = r#"
import socket, ssl, time
def send(addr, port, writes):
    s = socket.create_connection((addr, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for pause, data in writes[:-1]:
        time.sleep(pause)
        s.sendall(data)
    time.sleep(writes[-1][0])
    return exchange(s, writes[-1][1]).split(b"\r\n")[0].decode() or "closed"
def bytewise(data):
    return [(0.002, data[i:i + 1]) for i in range(len(data))]
def handshake(addr, port, sni, split):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=sni)
    s = socket.create_connection((addr, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    try:
        for pause, data in split(outgoing.read()):
            time.sleep(pause)
            s.sendall(data)
        while True:
            try:
                tls.do_handshake()
                # The client's last flight; the server's tickets say it has read it.
                s.sendall(outgoing.read())
                s.recv(65536)
                return "handshake"
            except ssl.SSLWantReadError:
                s.sendall(outgoing.read())
                data = s.recv(65536)
                if not data:
                    return "closed"
                incoming.write(data)
    except (OSError, ssl.SSLError) as e:
        return "closed " + type(e).__name__
"#;

/// To an address standing for `allowed.test`: a `G` then the rest, a leading empty line,
/// one byte at a time, a first byte at 0.5 s and the rest a second later (past the 1 s a
/// silent client gets), and ClientHellos in pieces: each is judged as the same bytes in
/// one write, so a `Host` or server name naming `other.test` is `host_mismatch` and
/// reaches nothing, and the allowed ones arrive intact.
#[tokio::test]
async fn split_writes_to_a_name_are_judged_as_the_same_bytes_written_at_once() {
    require_jail!();
    let origin = Origin::start().await;
    let tls = HttpsOrigin::start().await;
    let (port, tls_port) = (origin.port(), tls.port());
    let script = format!(
        r#"
a = socket.gethostbyname("allowed.test")
def get(host):
    return f"GET /split HTTP/1.1\r\nHost: {{host}}:{port}\r\nConnection: close\r\n\r\n".encode()
fronted, allowed = get("other.test"), get("allowed.test")
print("g-then-rest", send(a, {port}, [(0, b"G"), (0.3, fronted[1:])]))
print("crlf", send(a, {port}, [(0, b"\r\n" + fronted)]))
print("bytewise", send(a, {port}, bytewise(fronted)))
print("late-first-byte", send(a, {port}, [(0.5, b"G"), (1.0, fronted[1:])]))
print("bytewise-allowed", send(a, {port}, bytewise(allowed)))
print("hello-1-then-rest", handshake(a, {tls_port}, "other.test", lambda h: [(0, h[:1]), (0.3, h[1:])]))
print("hello-pieces", handshake(a, {tls_port}, "other.test", lambda h: [(0.002, h[i:i + 7]) for i in range(0, len(h), 7)]))
print("hello-pieces-allowed", handshake(a, {tls_port}, "allowed.test", lambda h: [(0.002, h[i:i + 7]) for i in range(0, len(h), 7)]))
"#
    );
    let out = super::tools::jail_allowing(&["allowed.test", "other.test"], &[port, tls_port])
        .python(&format!("{EXCHANGE}{SPLIT}{script}"))
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    let mismatch = "HTTP/1.1 403 Egress denied: host_mismatch";
    for line in [
        format!("g-then-rest {mismatch}"),
        format!("crlf {mismatch}"),
        format!("bytewise {mismatch}"),
        format!("late-first-byte {mismatch}"),
        "bytewise-allowed HTTP/1.1 200 OK".into(),
        "hello-1-then-rest closed".into(),
        "hello-pieces closed".into(),
        "hello-pieces-allowed handshake".into(),
    ] {
        assert!(out.stdout.contains(&line), "{line}: {out}");
    }
    let requests = origin.requests();
    assert_eq!(requests.len(), 1, "only the allowed request arrived: {out}");
    assert_eq!(requests[0].target, "/split", "{out}");
    let host = format!("allowed.test:{port}");
    assert_eq!(requests[0].header("host"), Some(host.as_str()), "{out}");
    assert_eq!(origin.connections(), 1, "{out}");
    assert_eq!(tls.handshakes(), 1, "only the allowed hello: {out}");
    assert_eq!(tls.connections(), 1, "{out}");
    let mismatches: Vec<_> = out
        .audit
        .iter()
        .filter(|r| r["reason"] == "host_mismatch")
        .map(|r| {
            assert_eq!(r["via"], "transparent", "{out}");
            assert_eq!(r["host"], "allowed.test", "{out}");
            r["method"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    assert_eq!(
        mismatches,
        ["GET", "GET", "GET", "GET", "CONNECT", "CONNECT"],
        "{out}"
    );
}

/// A server on the host's loopback that greets each client with a banner and then
/// echoes what it reads; it counts the connections it accepted.
async fn banner_server() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let _ = stream.write_all(b"SSH-2.0-banner.test\r\n").await;
                let mut buf = [0u8; 1024];
                while let Ok(n @ 1..) = stream.read(&mut buf).await {
                    let _ = stream.write_all(&buf[..n]).await;
                }
            });
        }
    });
    (port, accepted)
}

/// A jail allowing `banner.test` on `port`, pinned to the host's loopback, with `[tunnels]
/// require_tls` as given.
fn banner_jail(port: u16, require_tls: bool) -> Jailed {
    let org = Org::new()
        .ports(&[port])
        .loopback()
        .allow("banner.test")
        .tunnels(Some(require_tls), None);
    Jailed::new(org.to_toml())
        .policy(allowlist_json(&["banner.test"]))
        .arg("--audit-allowed")
        .arg("--resolve")
        .arg("banner.test=127.0.0.1")
}

/// A client that connects by name and waits for the server to speak: after 1 s of its
/// silence the connection is an opaque tunnel to the name, so it reads the banner well
/// before `--header-timeout` (10 s) would have passed; where `require_tls` is on, the
/// same connection is refused and the server never sees it.
#[tokio::test]
async fn a_server_that_speaks_first_is_reached_by_name_unless_tunnels_require_tls() {
    require_jail!();
    let (port, accepted) = banner_server().await;
    let script = format!(
        r#"
import socket
a = socket.gethostbyname("banner.test")
s = socket.create_connection((a, {port}), timeout=10)
s.settimeout(5)
try:
    banner = s.recv(100)
    print("banner", banner.decode().strip() or "closed")
    s.sendall(b"ping\n")
    print("echo", s.recv(100).decode().strip())
except socket.timeout:
    print("banner timed out")
except ConnectionResetError:
    print("banner closed")
"#
    );
    let out = banner_jail(port, false).python(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("banner SSH-2.0-banner.test"), "{out}");
    assert!(out.stdout.contains("echo ping"), "{out}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "{out}");
    let tunnel = out
        .audit
        .iter()
        .find(|r| r["host"] == "banner.test" && r["method"] == "CONNECT")
        .unwrap_or_else(|| panic!("no record of the tunnel: {out}"));
    assert_eq!(tunnel["event"], "egress.allowed", "{out}");
    assert_eq!(tunnel["via"], "transparent", "{out}");

    let out = banner_jail(port, true).python(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("banner closed"), "{out}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "never dialed: {out}");
    let refused = out
        .audit
        .iter()
        .find(|r| r["host"] == "banner.test" && r["method"] == "CONNECT")
        .unwrap_or_else(|| panic!("no record of the refusal: {out}"));
    assert_eq!(refused["reason"], "sni_mismatch", "{out}");
    assert_eq!(refused["via"], "transparent", "{out}");
}
