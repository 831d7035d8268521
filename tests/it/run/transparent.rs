//! Inside the jail, a connection that ignores `HTTP_PROXY` is taken by the transparent
//! listener and judged by its original destination (docs/guides/confinement.md).

use super::{require_jail, Jailed};

/// Python for the scripts below: send a request on `s` and read until the peer closes.
pub(super) const EXCHANGE: &str = r#"
def exchange(s, request):
    s.sendall(request)
    data = b""
    while True:
        c = s.recv(65536)
        if not c:
            return data
        data += c
"#;
use crate::support::origin::{HttpsOrigin, Origin};

#[tokio::test]
async fn run_judges_a_connection_that_ignores_the_proxy_by_where_it_was_going() {
    require_jail!();
    let origin = Origin::start().await;
    // 8.8.8.8 is caught inside: the proxy answers for it, refusing (no CIDR opens it),
    // and a refused destination is never dialed.
    let script = r#"
import socket
s = socket.create_connection(("8.8.8.8", 80), timeout=10)
data = exchange(s, b"GET /x HTTP/1.1\r\nHost: 8.8.8.8\r\nConnection: close\r\n\r\n")
print(data.split(b"\r\n")[0].decode())
t = socket.create_connection(("127.0.0.1", 3129), timeout=10)
print("direct", t.recv(10))
"#;
    let out = Jailed::standard(origin.port())
        .python(&format!("{EXCHANGE}{script}"))
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        out.stdout
            .contains("HTTP/1.1 403 Egress denied: not_in_org_allowlist"),
        "{out}"
    );
    assert!(
        out.stdout.contains("direct b''"),
        "a connection to the listener itself is closed: {out}"
    );
    let caught = out
        .audit
        .iter()
        .find(|r| r["host"] == "8.8.8.8")
        .unwrap_or_else(|| panic!("no record of 8.8.8.8: {out}"));
    assert_eq!(caught["via"], "transparent", "{out}");
    assert_eq!(caught["reason"], "not_in_org_allowlist", "{out}");
    assert_eq!(caught["url"], "http://8.8.8.8:80/x", "{out}");
    let direct = out
        .audit
        .iter()
        .find(|r| r["reason"] == "invalid_request" && r["via"] == "transparent");
    assert!(direct.is_some(), "{out}");
    assert_eq!(origin.hits(), 0);
}

/// A program that ignores the proxy entirely, resolving through the jail's
/// `resolv.conf` and connecting to what it got, reaches an allowed name (DNS listener,
/// synthetic address, transparent listener, the same judge), and a denied name does not
/// even resolve; DNS sent to a public resolver is answered inside.
#[tokio::test]
async fn run_reaches_an_allowed_name_with_the_proxy_ignored_and_a_denied_one_does_not_resolve() {
    require_jail!();
    let origin = Origin::start().await;
    let script = format!(
        r#"
import socket, struct
addr = socket.gethostbyname("allowed.test")
print("resolved", addr)
s = socket.create_connection((addr, {port}), timeout=10)
data = exchange(s, b"GET /direct HTTP/1.1\r\nHost: allowed.test:{port}\r\nConnection: close\r\n\r\n")
print("status", data.split(b"\r\n")[0].decode())
print("body", data.split(b"\r\n\r\n", 1)[1].decode())
try:
    socket.gethostbyname("denied.test")
    print("denied resolved")
except socket.gaierror:
    print("denied unresolved")
# A raw query for allowed.test to 8.8.8.8:53 over UDP: answered by the proxy.
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x07allowed\x04test\x00" + struct.pack(">HH", 1, 1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.sendto(q, ("8.8.8.8", 53))
r, peer = u.recvfrom(512)
print("udp answer from", peer[0], "answers", struct.unpack(">H", r[6:8])[0], "ip", socket.inet_ntoa(r[-4:]))
"#,
        port = origin.port()
    );
    let out = Jailed::standard(origin.port())
        .python(&format!("{EXCHANGE}{script}"))
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        out.stdout.contains("resolved 198.1"),
        "a synthetic address: {out}"
    );
    assert!(out.stdout.contains("status HTTP/1.1 200"), "{out}");
    assert!(
        out.stdout.contains(&format!("body {}", origin.body())),
        "{out}"
    );
    assert!(out.stdout.contains("denied unresolved"), "{out}");
    assert!(
        out.stdout
            .contains("udp answer from 8.8.8.8 answers 1 ip 198.1"),
        "caught inside and answered by the proxy: {out}"
    );
    assert_eq!(origin.hits(), 1, "{out}");
    let allowed = out
        .audit
        .iter()
        .any(|r| r["host"] == "allowed.test" && r["via"] == "transparent");
    // The allowed request writes no record without --audit-allowed; the denied name's
    // query does, via dns, and no query left for it.
    let denied = out
        .audit
        .iter()
        .find(|r| r["host"] == "denied.test")
        .unwrap_or_else(|| panic!("no record of denied.test: {out}"));
    assert_eq!(denied["via"], "dns", "{out}");
    assert_eq!(denied["method"], "DNS", "{out}");
    assert!(denied["port"].is_null(), "{out}");
    assert!(!allowed, "{out}");
}

/// A synthetic address stands for one name: a TLS server name or a `Host` naming another
/// (here a name the policy allows too: domain fronting) is `host_mismatch`, audited,
/// and nothing reaches the origin; the same connection with the right name does.
#[tokio::test]
async fn a_server_name_or_host_other_than_the_name_the_address_stands_for_is_host_mismatch() {
    require_jail!();
    let origin = Origin::start().await;
    let tls = HttpsOrigin::start().await;
    let (port, tls_port) = (origin.port(), tls.port());
    let script = format!(
        r#"
import socket, ssl
a = socket.gethostbyname("allowed.test")
o = socket.gethostbyname("other.test")
print("addresses", "same" if a == o else "differ")
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
def tls(sni):
    try:
        with ctx.wrap_socket(socket.create_connection((a, {tls_port}), timeout=10), server_hostname=sni):
            return "handshake"
    except (OSError, ssl.SSLError) as e:
        return "refused " + type(e).__name__
def http(host):
    s = socket.create_connection((a, {port}), timeout=10)
    data = exchange(s, f"GET /m HTTP/1.1\r\nHost: {{host}}:{port}\r\nConnection: close\r\n\r\n".encode())
    return data.split(b"\r\n")[0].decode()
print("tls-match", tls("allowed.test"))
print("tls-mismatch", tls("other.test"))
print("http-match", http("allowed.test"))
print("http-mismatch", http("other.test"))
"#
    );
    let out = super::tools::jail_allowing(&["allowed.test", "other.test"], &[port, tls_port])
        .python(&format!("{EXCHANGE}{script}"))
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    for line in [
        "addresses differ",
        "tls-match handshake",
        "tls-mismatch refused",
        "http-match HTTP/1.1 200 OK",
        "http-mismatch HTTP/1.1 403 Egress denied: host_mismatch",
    ] {
        assert!(out.stdout.contains(line), "{line}: {out}");
    }
    assert_eq!(tls.handshakes(), 1, "only the matching hello: {out}");
    assert_eq!(tls.connections(), 1, "{out}");
    assert_eq!(origin.hits(), 1, "{out}");
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
    assert_eq!(mismatches, ["CONNECT", "GET"], "{out}");
}

/// Every refused connection in the jail has its own record: a client sends `hello` to a
/// literal address (caught by the jail's rules, refused: no CIDR opens it) and waits,
/// while a ClientHello to the same address and port arrives on a second connection.
/// Two records, one per connection (the first when the header timeout ends its wait).
#[tokio::test]
async fn two_refused_connections_to_one_address_leave_two_records() {
    require_jail!();
    let origin = Origin::start().await;
    let script = r#"
import socket, ssl, time
ctx = ssl.create_default_context()
tls = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname=None)
try:
    tls.do_handshake()
except ssl.SSLWantReadError:
    pass
hello = out.read()
a = socket.create_connection(("10.89.0.1", 4443), timeout=30)
a.sendall(b"hello")
time.sleep(0.3)
b = socket.create_connection(("10.89.0.1", 4443), timeout=30)
b.sendall(hello)
def closed(s):
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True
print("second closed", closed(b))
print("first closed", closed(a))
"#;
    let out = Jailed::standard(origin.port()).python(script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("second closed True"), "{out}");
    assert!(out.stdout.contains("first closed True"), "{out}");
    let records: Vec<_> = out
        .audit
        .iter()
        .filter(|r| r["host"] == "10.89.0.1")
        .collect();
    assert_eq!(records.len(), 2, "one record per refused connection: {out}");
    for r in &records {
        assert_eq!(r["event"], "egress.denied", "{out}");
        assert_eq!(r["port"], 4443, "{out}");
        assert_eq!(r["via"], "transparent", "{out}");
        assert_eq!(r["reason"], "private_address", "{out}");
    }
    assert_ne!(records[0]["client"], records[1]["client"], "{out}");
    assert_eq!(origin.hits(), 0);
}
