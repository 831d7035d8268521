//! What CMD can reach in the jail, and what it cannot change.

use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use super::{require_jail, Jailed};
use crate::support::origin::Origin;

#[tokio::test]
async fn run_gives_cmd_the_proxy_environment_and_no_bypass() {
    require_jail!();
    let out = Jailed::standard(80)
        .env("NO_PROXY", "*")
        .env("no_proxy", "allowed.test")
        .env("HTTPS_PROXY", "http://elsewhere.test:1")
        .env("all_proxy", "socks5://elsewhere.test:1")
        .run(&["env"])
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    let vars: Vec<&str> = out.stdout.lines().collect();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        let line = format!("{name}=http://127.0.0.1:3128");
        assert!(vars.contains(&line.as_str()), "{line} missing: {out}");
    }
    for name in ["ALL_PROXY", "all_proxy"] {
        let line = format!("{name}=socks5h://127.0.0.1:1080");
        assert!(vars.contains(&line.as_str()), "{line} missing: {out}");
    }
    assert!(vars.contains(&"NODE_USE_ENV_PROXY=1"), "{out}");
    assert!(
        !vars
            .iter()
            .any(|v| v.starts_with("NO_PROXY=") || v.starts_with("no_proxy=")),
        "{out}"
    );
}

#[tokio::test]
async fn run_reaches_an_allowed_name_through_http_proxy_and_audits_a_denied_one() {
    require_jail!();
    let origin = Origin::start().await;
    let script = format!(
        r#"
import urllib.request, urllib.error
print(urllib.request.urlopen("http://allowed.test:{port}/hello", timeout=10).read().decode())
try:
    urllib.request.urlopen("http://denied.test:{port}/", timeout=10)
except urllib.error.HTTPError as e:
    print("denied", e.code)
"#,
        port = origin.port()
    );
    let out = Jailed::standard(origin.port())
        .arg("--audit-allowed")
        .python(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains(&origin.body()), "{out}");
    assert!(out.stdout.contains("denied 403"), "{out}");
    assert_eq!(origin.hits(), 1, "{out}");
    let events: Vec<_> = out
        .audit
        .iter()
        .map(|r| (r["event"].clone(), r["host"].clone()))
        .collect();
    assert!(
        events.contains(&("egress.allowed".into(), "allowed.test".into()))
            && events.contains(&("egress.denied".into(), "denied.test".into())),
        "the audit log is flushed before run exits: {out}"
    );
}

#[tokio::test]
async fn run_cannot_reach_the_hosts_loopback_but_reaches_its_own() {
    require_jail!();
    // Host services on loopback, v4 and v6: reachable from outside the jail.
    let v4 = TcpListener::bind("127.0.0.1:0").expect("bind v4");
    let v6 = TcpListener::bind("[::1]:0").ok();
    let reachable = |listener: &TcpListener| {
        TcpStream::connect(listener.local_addr().unwrap()).expect("reachable from the host");
        listener.accept().expect("accepted");
    };
    reachable(&v4);
    if let Some(v6) = &v6 {
        reachable(v6);
    }
    let v6_port = v6.as_ref().map_or(0, |l| l.local_addr().unwrap().port());
    let script = format!(
        r#"
import socket
def probe(addr):
    try:
        socket.create_connection(addr, timeout=3).close(); return "open"
    except OSError as e:
        return "closed " + type(e).__name__
print("host v4", probe(("127.0.0.1", {port})))
print("host v6", probe(("::1", {v6_port})))
own = socket.socket(); own.bind(("127.0.0.1", 0)); own.listen()
c = socket.create_connection(own.getsockname(), timeout=3); s, _ = own.accept()
c.sendall(b"ping"); print("own v4", s.recv(4).decode())
own6 = socket.socket(socket.AF_INET6); own6.bind(("::1", 0)); own6.listen()
c6 = socket.create_connection(own6.getsockname()[:2], timeout=3); s6, _ = own6.accept()
c6.sendall(b"ping"); print("own v6", s6.recv(4).decode())
"#,
        port = v4.local_addr().unwrap().port()
    );
    let out = Jailed::standard(80).python(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("host v4 closed"), "{out}");
    assert!(out.stdout.contains("host v6 closed"), "{out}");
    assert!(out.stdout.contains("own v4 ping"), "{out}");
    assert!(out.stdout.contains("own v6 ping"), "{out}");
    for listener in std::iter::once(&v4).chain(v6.as_ref()) {
        listener.set_nonblocking(true).unwrap();
        let accepted = listener.accept();
        assert!(
            accepted
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
            "a connection from the jail reached the host: {accepted:?}\n{out}"
        );
    }
}

#[tokio::test]
async fn run_leaves_no_way_out_for_udp_icmp_or_ipv6() {
    require_jail!();
    // A UDP server on the host's loopback answers from outside the jail.
    let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    udp.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    probe
        .send_to(b"outside", udp.local_addr().unwrap())
        .unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = udp.recv_from(&mut buf).expect("reachable from the host");
    assert_eq!(&buf[..n], b"outside");
    let script = format!(
        r#"
import socket
def attempt(name, f):
    try:
        f(); print(name, "sent")
    except OSError as e:
        print(name, "refused", type(e).__name__, e.errno)
def udp(addr):
    s = socket.socket(socket.AF_INET6 if ":" in addr[0] else socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"inside", addr)
attempt("udp-other-port", lambda: udp(("198.51.100.1", 9999)))
attempt("quic", lambda: udp(("198.51.100.1", 443)))
attempt("udp-host-loopback", lambda: udp(("127.0.0.1", {udp_port})))
attempt("udp-v6", lambda: udp(("2001:db8::1", 443)))
attempt("udp-link-local", lambda: udp(("fe80::1%lo", 53)))
attempt("icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP).sendto(b"\x08\0\0\0\0\0\0\0", ("198.51.100.1", 0)))
attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("tcp-v6", lambda: socket.create_connection(("2001:db8::1", 443), timeout=3))
attempt("tcp-link-local", lambda: socket.create_connection(("fe80::1%lo", 443), timeout=3))
"#,
        udp_port = udp.local_addr().unwrap().port()
    );
    let out = Jailed::standard(80).python(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    for name in [
        "udp-other-port",
        "quic",
        "udp-v6",
        "udp-link-local",
        "icmp",
        "raw",
        "tcp-v6",
        "tcp-link-local",
    ] {
        assert!(
            out.stdout.contains(&format!("{name} refused")),
            "{name}: {out}"
        );
    }
    // Loopback UDP is the jail's own: the send succeeds and nothing reaches the host.
    assert!(out.stdout.contains("udp-host-loopback sent"), "{out}");
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a datagram from the jail reached the host: {out}"
    );
}

#[tokio::test]
async fn run_cmd_as_root_has_no_capabilities_and_cannot_change_rules_or_routes() {
    require_jail!();
    let script = "nft flush ruleset; echo nft=$?; ip route del default; echo route=$?; \
                  ip link set lo down; echo link=$?; grep -E '^(Cap|NoNewPrivs)' /proc/self/status; \
                  id -u; echo 1 > /proc/sys/net/ipv4/ip_forward; echo sysctl=$?";
    let out = Jailed::standard(80).sh(script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    for failed in ["nft=0", "route=0", "link=0", "sysctl=0"] {
        assert!(!out.stdout.contains(failed), "{failed}: {out}");
    }
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            out.stdout.contains(&format!("{set}:\t0000000000000000")),
            "{set}: {out}"
        );
    }
    assert!(out.stdout.contains("NoNewPrivs:\t1"), "{out}");
    assert!(
        out.stdout.lines().any(|l| l == "0"),
        "CMD runs as the caller, root: {out}"
    );
}

#[tokio::test]
async fn run_resolv_conf_names_the_proxy_and_run_is_empty() {
    require_jail!();
    let host_resolv = std::fs::read("/etc/resolv.conf").ok();
    let out = Jailed::standard(80)
        .sh("cat /etc/resolv.conf; echo run:; ls -A /run; echo var-run:; ls -A /var/run; echo end")
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("nameserver 127.0.0.1\n"), "{out}");
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.starts_with("nameserver"))
            .count(),
        1,
        "{out}"
    );
    let listing = out.stdout.split("\nrun:\n").nth(1).unwrap_or_default();
    assert_eq!(
        listing, "var-run:\nend\n",
        "/run and /var/run are empty: {out}"
    );
    assert_eq!(
        std::fs::read("/etc/resolv.conf").ok(),
        host_resolv,
        "the host's file is untouched"
    );
}
