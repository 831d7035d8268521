//! Names and addresses in the jail: lookups the way real programs make them
//! (`AI_ADDRCONFIG`, reverse lookups of the synthetic addresses).

use super::transparent::EXCHANGE;
use super::{require_jail, Jailed};
use crate::support::origin::Origin;

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
