//! TCP checks: a handshake, then the least that makes a server speak (a TLS ClientHello
//! or an HTTP/1.1 `GET /`, each naming a random host under `invalid.`), then what comes
//! back. This proxy's transparent listener takes every handshake in a jail and then
//! refuses: it closes with no byte back (TLS), or answers with `X-Egress-Denied` (HTTP):
//! both are `closed` (docs/reference/command-line.md, "probe").

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

use super::reply::{first_line, read_reply, refusal};
use super::{random_name, web, Part};

/// `tcp4-direct` / `tcp6-direct`: ports 443 (a ClientHello) and 80 (a `GET /`).
pub(super) async fn direct(ip: IpAddr, t: Duration) -> Vec<Part> {
    let (tls, http) = tokio::join!(
        tls_hello(SocketAddr::new(ip, 443), t),
        http_get(SocketAddr::new(ip, 80), t)
    );
    vec![tls, http]
}

/// `dot`: a ClientHello to port 853.
pub(super) async fn dot(addr: SocketAddr, t: Duration) -> Vec<Part> {
    vec![tls_hello(addr, t).await]
}

/// A handshake to `addr`, then a ClientHello for a random name.
pub(super) async fn tls_hello(addr: SocketAddr, t: Duration) -> Part {
    let hello = web::client_hello(&random_name());
    exchange(addr, &hello, t).await
}

/// A handshake to `addr`, then `GET /` for a random name.
pub(super) async fn http_get(addr: SocketAddr, t: Duration) -> Part {
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        random_name()
    );
    exchange(addr, request.as_bytes(), t).await
}

/// Connect, send `opening`, and judge what comes back, all within `t`.
async fn exchange(addr: SocketAddr, opening: &[u8], t: Duration) -> Part {
    let deadline = Instant::now() + t;
    let mut stream = match timeout_at(deadline, TcpStream::connect(addr)).await {
        Err(_) => return Part::closed(format!("{addr}: no handshake in {} ms", t.as_millis())),
        Ok(Err(e)) => return Part::closed(format!("{addr}: {e}")),
        Ok(Ok(s)) => s,
    };
    if let Err(e) = stream.write_all(opening).await {
        return Part::closed(format!("{addr}: handshake, then {e}"));
    }
    let mut reply = Vec::new();
    let read = read_reply(&mut stream, &mut reply, deadline).await;
    if !reply.is_empty() {
        return judge_reply(addr, &reply);
    }
    match read {
        Ok(()) => Part::closed(format!(
            "{addr}: handshake taken, then closed with no byte back (a transparent refusal)"
        )),
        Err(e) if e.kind() == io::ErrorKind::TimedOut => Part::unknown(format!(
            "{addr}: handshake completed, no byte back in {} ms",
            t.as_millis()
        )),
        Err(e) => Part::closed(format!("{addr}: handshake taken, then {e}")),
    }
}

/// Bytes came back: this proxy's refusal (an HTTP answer with `X-Egress-Denied`) is
/// `closed`, anything else a peer that answered.
fn judge_reply(addr: SocketAddr, reply: &[u8]) -> Part {
    if let Some(refusal) = refusal(reply) {
        return Part::closed(format!("{addr}: refused by egress-proxy ({refusal})"));
    }
    Part::open(format!(
        "{addr}: {} bytes back ({})",
        reply.len(),
        first_line(reply)
    ))
}

/// `ipv6-any`: the IPv6 routes other than loopback's, and a handshake to the target.
pub(super) async fn ipv6_any(target: Ipv6Addr, t: Duration) -> Vec<Part> {
    let routes = match std::fs::read_to_string("/proc/net/ipv6_route") {
        Ok(table) => routes(&table),
        Err(e) => return vec![Part::unknown(format!("/proc/net/ipv6_route: {e}"))],
    };
    if routes.is_empty() {
        return vec![Part::closed("no IPv6 route but loopback's")];
    }
    let shown = routes
        .iter()
        .take(4)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    let hello = tls_hello(SocketAddr::new(IpAddr::V6(target), 443), t).await;
    vec![Part::new(
        hello.verdict,
        format!("routes {shown}; {}", hello.evidence),
    )]
}

/// The routes of `/proc/net/ipv6_route` (`DEST/LEN dev DEV`) through a device other
/// than `lo`, link-local and multicast ones left out (every interface has those).
pub(super) fn routes(table: &str) -> Vec<String> {
    let mut routes = Vec::new();
    for line in table.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(dest), Some(len), Some(dev)) = (fields.first(), fields.get(1), fields.last())
        else {
            continue;
        };
        let Ok(bits) = u128::from_str_radix(dest, 16) else {
            continue;
        };
        let dest = Ipv6Addr::from(bits);
        let len = u8::from_str_radix(len, 16).unwrap_or(0);
        let local = dest.segments()[0] & 0xffc0 == 0xfe80 || dest.segments()[0] >> 8 == 0xff;
        if *dev != "lo" && fields.len() == 10 && !local {
            routes.push(format!("{dest}/{len} dev {dev}"));
        }
    }
    routes
}

#[cfg(test)]
mod tests {
    use super::{exchange, routes};
    use crate::probe::reply::{first_line, refusal};
    use crate::probe::Verdict;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the probe makes of a loopback server that, after reading the opening,
    /// answers `answer` and closes (`None`: stays silent).
    async fn against(answer: Option<&'static [u8]>) -> (Verdict, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf).await;
            match answer {
                Some(bytes) => {
                    let _ = s.write_all(bytes).await;
                }
                None => tokio::time::sleep(Duration::from_secs(2)).await,
            }
        });
        let part = exchange(addr, b"GET / HTTP/1.1\r\n\r\n", Duration::from_millis(300)).await;
        server.abort();
        (part.verdict, part.evidence)
    }

    #[tokio::test]
    async fn what_comes_back_after_the_handshake_decides() {
        let denied: &[u8] = b"HTTP/1.1 403 Egress denied: private_address\r\nX-Egress-Denied: private_address\r\n\r\n";
        let (v, e) = against(Some(denied)).await;
        assert_eq!(v, Verdict::Closed, "{e}");
        assert!(
            e.contains("refused by egress-proxy (403 private_address)"),
            "{e}"
        );
        let (v, e) = against(Some(b"")).await;
        assert_eq!(v, Verdict::Closed, "{e}");
        assert!(e.contains("no byte back"), "{e}");
        let (v, e) = against(Some(b"SSH-2.0-OpenSSH_9.6\r\n")).await;
        assert_eq!(v, Verdict::Open, "{e}");
        assert!(e.contains("SSH-2.0-OpenSSH_9.6"), "{e}");
        let (v, e) = against(Some(b"HTTP/1.1 403 Forbidden\r\n\r\n")).await;
        assert_eq!(v, Verdict::Open, "another server's 403 is an answer: {e}");
        let (v, e) = against(None).await;
        assert_eq!(v, Verdict::Unknown, "{e}");
    }

    #[test]
    fn this_proxys_refusal_is_told_by_its_header() {
        let denied = b"HTTP/1.1 403 Egress denied: not_in_org_allowlist\r\nX-Egress-Denied: not_in_org_allowlist\r\n\r\n";
        assert_eq!(refusal(denied).as_deref(), Some("403 not_in_org_allowlist"));
        assert_eq!(refusal(b"HTTP/1.1 403 Forbidden\r\n\r\n"), None);
        assert_eq!(refusal(b"\x16\x03\x03\x00\x10"), None);
        assert_eq!(first_line(b"\x16\x03\x03\x00"), "starting 16030300");
        assert_eq!(first_line(b"HTTP/1.1 200 OK\r\n"), "HTTP/1.1 200 OK");
    }

    #[test]
    fn only_routes_off_loopback_count() {
        let table = "\
20010db8000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo
ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
";
        assert_eq!(routes(table), vec!["2001:db8::/64 dev eth0".to_string()]);
        assert!(routes("").is_empty());
    }
}
