//! What CMD cannot reach besides the host's loopback: the host's other addresses (its
//! IPv4 address and its IPv6 link-local ones, where the host has them) and the admin
//! API of a proxy on the host; and the jail's own listening sockets are only the
//! proxy's four. Each target is shown reachable from outside the jail first.

use std::net::{IpAddr, SocketAddr, SocketAddrV6, TcpListener, TcpStream};

use super::{require_jail, Jailed};
use crate::support::proxy::ProxyBuilder;

/// The host's first address of each kind that is not loopback: IPv4, and IPv6
/// link-local with its interface index.
fn host_addresses() -> (Option<IpAddr>, Option<SocketAddrV6>) {
    let addrs = if_addrs::get_if_addrs().unwrap_or_default();
    let v4 = addrs
        .iter()
        .map(|a| a.ip())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback());
    let link_local = addrs.iter().find_map(|a| match a.ip() {
        IpAddr::V6(v6) if v6.is_unicast_link_local() => {
            Some(SocketAddrV6::new(v6, 0, 0, a.index.unwrap_or(0)))
        }
        _ => None,
    });
    (v4, link_local)
}

/// A listener on `addr` that the host itself can connect to.
fn reachable_listener(addr: SocketAddr) -> Option<TcpListener> {
    let listener = TcpListener::bind(addr).ok()?;
    TcpStream::connect(listener.local_addr().unwrap()).expect("reachable from the host");
    listener.accept().expect("accepted");
    listener.set_nonblocking(true).unwrap();
    Some(listener)
}

#[tokio::test]
async fn run_cannot_reach_the_hosts_other_addresses_or_a_host_proxys_admin_api() {
    require_jail!();
    let (v4, link_local) = host_addresses();
    let v4 = v4.and_then(|ip| reachable_listener(SocketAddr::new(ip, 0)));
    let v6 = link_local.and_then(|a| reachable_listener(SocketAddr::V6(a)));
    if v4.is_none() || v6.is_none() {
        eprintln!(
            "note: the host has no IPv4 ({v4:?}) or link-local IPv6 ({v6:?}) address to probe"
        );
    }
    let host = ProxyBuilder::standard(80).admin("t0ken").start().await;
    let admin = host.admin().addr;
    let health = host.admin().call("GET", "/healthz", None).await;
    assert_eq!(health.status, 200, "the admin API answers from outside");
    let v4_addr = v4.as_ref().map(|l| l.local_addr().unwrap());
    let v6_addr = v6.as_ref().map(|l| match l.local_addr().unwrap() {
        SocketAddr::V6(a) => a,
        other => panic!("{other}"),
    });
    let script = format!(
        r#"
import socket
def probe(name, family, addr):
    if addr is None:
        return print(name, "absent")
    try:
        s = socket.socket(family); s.settimeout(5); s.connect(addr)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        print(name, "answered", s.recv(64).split(b"\r\n")[0].decode())
    except OSError as e:
        print(name, "refused", type(e).__name__)
probe("admin", socket.AF_INET, ("127.0.0.1", {admin_port}))
probe("host-v4", socket.AF_INET, {v4})
probe("link-local", socket.AF_INET6, {v6})
listening = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).readlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A":
            listening.add(int(local.rsplit(":", 1)[1], 16))
print("listening", sorted(listening))
"#,
        admin_port = admin.port(),
        v4 = v4_addr.map_or("None".into(), |a| format!("(\"{}\", {})", a.ip(), a.port())),
        v6 = v6_addr.map_or("None".into(), |a| format!(
            "(\"{}\", {}, 0, {})",
            a.ip(),
            a.port(),
            a.scope_id()
        )),
    );
    let out = Jailed::standard(80).python(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("admin refused"), "{out}");
    assert!(
        out.stdout.contains("listening [1080, 3053, 3128, 3129]"),
        "only the proxy's sockets, no admin API: {out}"
    );
    if let Some(addr) = v4_addr {
        // Redirected to the transparent listener and judged as that IP: refused there.
        assert!(
            out.stdout.contains("host-v4 answered HTTP/1.1 403"),
            "{out}"
        );
        let ip = addr.ip().to_string();
        assert!(
            out.audit
                .iter()
                .any(|r| r["host"] == ip.as_str() && r["via"] == "transparent"),
            "{out}"
        );
    }
    if v6_addr.is_some() {
        assert!(out.stdout.contains("link-local refused"), "{out}");
    }
    for listener in v4.iter().chain(v6.iter()) {
        let accepted = listener.accept();
        assert!(
            accepted
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "a connection from the jail reached the host: {accepted:?}\n{out}"
        );
    }
}
