//! Inside the jail, a connection that ignores `HTTP_PROXY` is taken by the transparent
//! listener and judged by its original destination (docs/guides/confinement.md).

use super::{require_jail, Jailed};
use crate::support::origin::Origin;

#[tokio::test]
async fn run_judges_a_connection_that_ignores_the_proxy_by_where_it_was_going() {
    require_jail!();
    let origin = Origin::start().await;
    // 8.8.8.8 is caught inside: the proxy answers for it, refusing (no CIDR opens it),
    // and a refused destination is never dialed.
    let script = r#"
import socket
s = socket.create_connection(("8.8.8.8", 80), timeout=10)
s.sendall(b"GET /x HTTP/1.1\r\nHost: 8.8.8.8\r\nConnection: close\r\n\r\n")
data = b""
while True:
    c = s.recv(65536)
    if not c:
        break
    data += c
print(data.split(b"\r\n")[0].decode())
t = socket.create_connection(("127.0.0.1", 3129), timeout=10)
print("direct", t.recv(10))
"#;
    let out = Jailed::standard(origin.port()).python(script).await;
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
