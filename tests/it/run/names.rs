//! Names and addresses in the jail: lookups the way real programs make them
//! (`AI_ADDRCONFIG`, reverse lookups of the synthetic addresses).

use std::net::Ipv4Addr;

use hickory_proto::rr::RecordType;

use super::transparent::EXCHANGE;
use super::{require_jail, Jailed};
use crate::support::dns::DnsServer;
use crate::support::dns_client::{a_records, UdpClient};
use crate::support::origin::Origin;
use crate::support::proxy::QUIET_PERIOD;

/// Lookups with `AI_ADDRCONFIG` (`getent ahosts`, wget, Python asking for it) return
/// IPv4 only where an IPv4 address other than 127.0.0.1 exists: the jail has one, on
/// `lo`, so they resolve an allowed name and reach it; a denied name still does not.
#[tokio::test]
async fn lookups_with_ai_addrconfig_resolve_an_allowed_name_in_the_jail() {
    require_jail!();
    let origin = Origin::start().await;
    let port = origin.port();
    let script = format!(
        r#"
import socket, subprocess
got = subprocess.run(["getent", "ahostsv4", "allowed.test"], capture_output=True, text=True)
print("getent", got.returncode, got.stdout.split()[:1])
info = socket.getaddrinfo("allowed.test", {port}, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_ADDRCONFIG)
print("families", sorted({{i[0].name for i in info}}))
s = socket.create_connection(info[0][4], timeout=10)
data = exchange(s, b"GET /addrconfig HTTP/1.1\r\nHost: allowed.test:{port}\r\nConnection: close\r\n\r\n")
print("status", data.split(b"\r\n")[0].decode())
denied = subprocess.run(["getent", "ahostsv4", "denied.test"], capture_output=True)
print("denied", denied.returncode)
"#
    );
    let out = Jailed::standard(port)
        .python(&format!("{EXCHANGE}{script}"))
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("getent 0 ['198.18."), "{out}");
    assert!(out.stdout.contains("families ['AF_INET']"), "{out}");
    assert!(out.stdout.contains("status HTTP/1.1 200 OK"), "{out}");
    assert!(out.stdout.contains("denied 2"), "{out}");
    assert_eq!(origin.hits(), 1, "{out}");
}

/// A reverse lookup of a synthetic address the jail's DNS handed out gives the name it
/// stands for (a `PTR` answer); one for another address finds nothing.
#[tokio::test]
async fn a_reverse_lookup_of_a_synthetic_address_names_what_it_stands_for() {
    require_jail!();
    let script = r#"
import socket, subprocess
addr = socket.gethostbyname("allowed.test")
print("forward", addr)
print("reverse", socket.gethostbyaddr(addr)[0])
got = subprocess.run(["getent", "hosts", addr], capture_output=True, text=True)
print("getent", got.stdout.split())
try:
    socket.gethostbyaddr("198.18.255.1")
    print("unassigned found")
except socket.herror:
    print("unassigned unknown")
"#;
    let out = Jailed::standard(80).python(script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    let addr = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("forward "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(addr.starts_with("198.1"), "{out}");
    assert!(out.stdout.contains("reverse allowed.test\n"), "{out}");
    assert!(
        out.stdout
            .contains(&format!("getent ['{addr}', 'allowed.test']")),
        "{out}"
    );
    assert!(out.stdout.contains("unassigned unknown"), "{out}");
}

/// DNS sent to public resolvers, over UDP and TCP, is answered by the proxy from the
/// policy, and nothing reaches the upstream server `run` was given, though it answers
/// every name when asked from outside.
#[tokio::test]
async fn dns_to_public_resolvers_over_udp_and_tcp_is_answered_inside_and_nothing_leaves() {
    require_jail!();
    let upstream = DnsServer::builder()
        .record("allowed.test", Ipv4Addr::LOCALHOST)
        .record("denied.test", Ipv4Addr::LOCALHOST)
        .start()
        .await;
    let mut outside = UdpClient::new(upstream.addr()).await;
    let answer = outside.query("denied.test.", RecordType::A).await;
    assert_eq!(
        a_records(&answer),
        [Ipv4Addr::LOCALHOST],
        "upstream answers it"
    );
    let asked_outside = upstream.queried_names().len();
    assert!(
        asked_outside >= 1,
        "the upstream server records what it is asked"
    );
    let script = r#"
import socket, struct
def question(name, ident):
    labels = b"".join(bytes([len(l)]) + l.encode() for l in name.split("."))
    return struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack(">HH", 1, 1)
def summary(reply):
    rcode, answers = struct.unpack(">H", reply[2:4])[0] & 0xF, struct.unpack(">H", reply[6:8])[0]
    ip = socket.inet_ntoa(reply[-4:]) if answers else "-"
    return f"rcode={rcode} answers={answers} ip={ip}"
for name in ("allowed.test", "denied.test"):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(5)
    u.sendto(question(name, 1), ("8.8.8.8", 53))
    print("udp", name, summary(u.recvfrom(512)[0]))
    t = socket.create_connection(("1.1.1.1", 53), timeout=5)
    q = question(name, 2)
    t.sendall(struct.pack(">H", len(q)) + q)
    n = struct.unpack(">H", t.recv(2))[0]
    data = b""
    while len(data) < n:
        data += t.recv(n - len(data))
    print("tcp", name, summary(data))
"#;
    let out = Jailed::standard(80)
        .arg("--dns-server")
        .arg(upstream.addr().to_string())
        .python(script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    for via in ["udp", "tcp"] {
        assert!(
            out.stdout
                .contains(&format!("{via} allowed.test rcode=0 answers=1 ip=198.1")),
            "{via}: {out}"
        );
        assert!(
            out.stdout
                .contains(&format!("{via} denied.test rcode=3 answers=0")),
            "{via}: NXDOMAIN: {out}"
        );
    }
    tokio::time::sleep(QUIET_PERIOD).await;
    assert_eq!(
        upstream.queried_names().len(),
        asked_outside,
        "a query left the jail: {:?}\n{out}",
        upstream.queried_names()
    );
    let denied: Vec<_> = out
        .audit
        .iter()
        .filter(|r| r["host"] == "denied.test")
        .collect();
    assert!(
        !denied.is_empty() && denied.iter().all(|r| r["via"] == "dns"),
        "{out}"
    );
}
