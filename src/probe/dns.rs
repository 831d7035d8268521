//! The DNS checks: one `A` query for a random name under `invalid.` to each system
//! nameserver (`udp-dns-system`) and to port 53 of the target over UDP and TCP
//! (`udp-dns-direct`). No resolver may answer such a name with an address, and a real
//! one's `NXDOMAIN` carries the root zone's `SOA`; this proxy's DNS listener refuses
//! with an authoritative `NXDOMAIN` and no records at all, which is `closed`
//! (docs/reference/confinement.md, "DNS listener").

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::task::JoinSet;
use tokio::time::{timeout_at, Instant};

use super::{random_name, Part};

/// At most this many datagrams are read while waiting for the answer.
const MAX_DATAGRAMS: usize = 8;

/// A query for a random name: its id and bytes.
fn query() -> (u16, Vec<u8>) {
    let mut id = [0u8; 2];
    let _ = getrandom::fill(&mut id);
    let id = u16::from_be_bytes(id);
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true);
    let name = Name::from_ascii(format!("{}.", random_name())).expect("a valid name");
    m.add_query(Query::query(name, RecordType::A));
    (id, m.to_vec().expect("a query serialises"))
}

/// What an answer shows: this proxy's refusal, or a server that answered.
fn judge(how: &str, answer: &Message) -> Part {
    let code = answer.response_code();
    let bare = answer.answers().is_empty()
        && answer.name_servers().is_empty()
        && answer.additionals().is_empty();
    if code == ResponseCode::NXDomain && answer.authoritative() && bare {
        return Part::closed(format!("{how}: NXDOMAIN from this proxy's DNS listener"));
    }
    Part::open(format!(
        "{how}: answered {code} with {} answer(s), {} authority record(s)",
        answer.answers().len(),
        answer.name_servers().len()
    ))
}

/// `udp-dns-system`: each `nameserver` of `/etc/resolv.conf`.
pub(super) async fn system(t: Duration) -> Vec<Part> {
    let servers = match std::fs::read_to_string("/etc/resolv.conf") {
        Ok(text) => nameservers(&text),
        Err(e) => return vec![Part::unknown(format!("/etc/resolv.conf: {e}"))],
    };
    if servers.is_empty() {
        return vec![Part::unknown("no nameserver in /etc/resolv.conf")];
    }
    let mut tasks = JoinSet::new();
    for ip in servers.into_iter().take(8) {
        tasks.spawn(udp(SocketAddr::new(ip, 53), t));
    }
    let mut parts = Vec::new();
    while let Some(part) = tasks.join_next().await {
        parts.extend(part.ok());
    }
    parts
}

/// The addresses of `nameserver` lines (a scoped IPv6 address is left out).
pub(super) fn nameservers(resolv_conf: &str) -> Vec<IpAddr> {
    resolv_conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

/// `udp-dns-direct`: the target's port 53, over UDP and TCP.
pub(super) async fn direct(addr: SocketAddr, t: Duration) -> Vec<Part> {
    let (u, t) = tokio::join!(udp(addr, t), tcp(addr, t));
    vec![u, t]
}

async fn udp(addr: SocketAddr, t: Duration) -> Part {
    let how = format!("udp {addr}");
    let deadline = Instant::now() + t;
    let local: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = match UdpSocket::bind(local).await {
        Ok(s) => s,
        Err(e) => return Part::unknown(format!("{how}: cannot bind: {e}")),
    };
    let (id, bytes) = query();
    if let Err(e) = async {
        socket.connect(addr).await?;
        socket.send(&bytes).await
    }
    .await
    {
        return Part::closed(format!("{how}: {e}"));
    }
    let mut buf = [0u8; 4096];
    for _ in 0..MAX_DATAGRAMS {
        match timeout_at(deadline, socket.recv(&mut buf)).await {
            Err(_) => return Part::closed(format!("{how}: no answer in {} ms", t.as_millis())),
            Ok(Err(e)) => return Part::closed(format!("{how}: {e}")),
            Ok(Ok(n)) => match Message::from_vec(&buf[..n]) {
                Ok(m) if m.id() == id => return judge(&how, &m),
                _ => continue,
            },
        }
    }
    Part::open(format!(
        "{how}: {MAX_DATAGRAMS} datagrams back, none an answer"
    ))
}

async fn tcp(addr: SocketAddr, t: Duration) -> Part {
    let how = format!("tcp {addr}");
    let deadline = Instant::now() + t;
    let (id, bytes) = query();
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let mut framed = u16::try_from(bytes.len())
            .unwrap_or(0)
            .to_be_bytes()
            .to_vec();
        framed.extend_from_slice(&bytes);
        stream.write_all(&framed).await?;
        let mut len = [0u8; 2];
        if let Err(e) = stream.read_exact(&mut len).await {
            return Ok(Err(e));
        }
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut answer).await?;
        Ok::<_, std::io::Error>(Ok(answer))
    };
    match timeout_at(deadline, exchange).await {
        Err(_) => Part::closed(format!("{how}: no answer in {} ms", t.as_millis())),
        Ok(Err(e)) => Part::closed(format!("{how}: {e}")),
        Ok(Ok(Err(e))) => Part::closed(format!("{how}: handshake taken, then no answer ({e})")),
        Ok(Ok(Ok(answer))) => match Message::from_vec(&answer) {
            Ok(m) if m.id() == id => judge(&how, &m),
            _ => Part::open(format!(
                "{how}: {} bytes back, not the answer",
                answer.len()
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_are_read_from_resolv_conf() {
        let conf = "# c\nnameserver 10.0.0.2\nsearch x\nnameserver fe80::1%eth0\nnameserver ::1\n";
        let want: Vec<IpAddr> = vec!["10.0.0.2".parse().unwrap(), "::1".parse().unwrap()];
        assert_eq!(nameservers(conf), want);
    }

    #[test]
    fn only_a_bare_authoritative_nxdomain_is_this_proxys_refusal() {
        let (_, bytes) = query();
        let q = Message::from_vec(&bytes).unwrap();
        let mut refusal = Message::new();
        refusal
            .set_id(q.id())
            .set_message_type(MessageType::Response);
        refusal
            .set_response_code(ResponseCode::NXDomain)
            .set_authoritative(true);
        assert_eq!(judge("x", &refusal).verdict, super::super::Verdict::Closed);
        refusal.set_authoritative(false);
        assert_eq!(judge("x", &refusal).verdict, super::super::Verdict::Open);
    }
}
