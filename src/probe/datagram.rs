//! The datagram checks: `quic` (one QUIC long-header Initial, 1,200 bytes) and `icmp`
//! (one echo, through a ping socket or a raw one, whichever the sandbox permits)
//! (docs/reference/command-line.md, "probe").

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::{timeout_at, Instant};

use super::Part;

/// The size a client's first QUIC datagram must have (RFC 9000, section 14.1).
pub(super) const QUIC_INITIAL_SIZE: usize = 1200;

/// At most this many datagrams are read while waiting for a reply.
const MAX_DATAGRAMS: usize = 8;

/// A QUIC long-header Initial: type Initial, random connection ids, no token, a
/// 4-byte packet number and PADDING to 1,200 bytes. Its version is a reserved one
/// (`0x?a?a?a?a`, RFC 9000 section 15), to which a server answers with a Version
/// Negotiation packet without any handshake: so a QUIC server anywhere shows itself,
/// and nothing is encrypted or sent but zeros.
pub(super) fn quic_initial() -> Vec<u8> {
    let mut ids = [0u8; 16];
    let _ = getrandom::fill(&mut ids);
    let mut p = Vec::with_capacity(QUIC_INITIAL_SIZE);
    p.push(0xc3); // long header, fixed bit, type Initial, packet number length 4
    p.extend_from_slice(&[0x1a, 0x2a, 0x3a, 0x4a]);
    p.push(8);
    p.extend_from_slice(&ids[..8]); // destination connection id
    p.push(8);
    p.extend_from_slice(&ids[8..]); // source connection id
    p.push(0); // token length
    let length = QUIC_INITIAL_SIZE - p.len() - 2; // packet number and payload
    let length = u16::try_from(length).expect("under 16,384") | 0x4000; // 2-byte varint
    p.extend_from_slice(&length.to_be_bytes());
    p.resize(QUIC_INITIAL_SIZE, 0); // packet number 0, then PADDING frames
    p
}

/// `quic`: one Initial to UDP `addr`; any datagram back is `open`.
pub(super) async fn quic(addr: SocketAddr, t: Duration) -> Vec<Part> {
    let deadline = Instant::now() + t;
    let socket = match UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).await {
        Ok(s) => s,
        Err(e) => return vec![Part::unknown(format!("cannot bind: {e}"))],
    };
    let sent = async {
        socket.connect(addr).await?;
        socket.send(&quic_initial()).await
    };
    if let Err(e) = sent.await {
        return vec![Part::closed(format!("udp {addr}: {e}"))];
    }
    let mut buf = [0u8; 2048];
    vec![match timeout_at(deadline, socket.recv(&mut buf)).await {
        Err(_) => Part::closed(format!("udp {addr}: nothing back in {} ms", t.as_millis())),
        Ok(Err(e)) => Part::closed(format!("udp {addr}: {e}")),
        Ok(Ok(n)) => Part::open(format!("udp {addr}: a {n}-byte datagram back")),
    }]
}

/// An ICMP socket: a ping socket (`net.ipv4.ping_group_range`), else a raw one
/// (`CAP_NET_RAW`); `raw` says which.
fn icmp_socket() -> Result<(OwnedFd, bool), String> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let open = |kind| socket(AddressFamily::Inet, kind, flags, SockProtocol::Icmp);
    match open(SockType::Datagram) {
        Ok(fd) => Ok((fd, false)),
        Err(ping) => match open(SockType::Raw) {
            Ok(fd) => Ok((fd, true)),
            Err(raw) => Err(format!(
                "no permission for either ICMP socket (ping socket: {ping}; raw socket: {raw})"
            )),
        },
    }
}

/// The Internet checksum (RFC 1071).
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An echo request: type 8, an id and sequence, 8 zero bytes.
fn echo_request() -> Vec<u8> {
    let mut id = [0u8; 2];
    let _ = getrandom::fill(&mut id);
    let mut p = vec![8, 0, 0, 0, id[0], id[1], 0, 1];
    p.extend_from_slice(&[0; 8]);
    let sum = checksum(&p);
    p[2..4].copy_from_slice(&sum.to_be_bytes());
    p
}

/// `icmp`: one echo to `target`; an echo reply is `open`.
pub(super) async fn icmp(target: Ipv4Addr, t: Duration) -> Vec<Part> {
    let deadline = Instant::now() + t;
    let (fd, raw) = match icmp_socket() {
        Ok(s) => s,
        Err(why) => return vec![Part::unknown(why)],
    };
    let kind = if raw { "raw socket" } else { "ping socket" };
    let socket = match UdpSocket::from_std(std::net::UdpSocket::from(fd)) {
        Ok(s) => s,
        Err(e) => return vec![Part::unknown(format!("{kind}: {e}"))],
    };
    let to = SocketAddr::from((target, 0));
    if let Err(e) = socket.send_to(&echo_request(), to).await {
        return vec![Part::closed(format!("{kind} to {target}: {e}"))];
    }
    vec![await_reply(&socket, raw, deadline).await.map_or_else(
        |e| match e.kind() {
            io::ErrorKind::TimedOut => Part::closed(format!(
                "{kind}: no echo reply from {target} in {} ms",
                t.as_millis()
            )),
            _ => Part::closed(format!("{kind}: {e}")),
        },
        |from| Part::open(format!("{kind}: echo reply from {from}")),
    )]
}

/// Wait for an echo reply (type 0); a raw socket's datagrams start with the IP header,
/// and it sees the request itself on loopback.
async fn await_reply(socket: &UdpSocket, raw: bool, deadline: Instant) -> io::Result<SocketAddr> {
    let mut buf = [0u8; 2048];
    for _ in 0..MAX_DATAGRAMS {
        let (n, from) = match timeout_at(deadline, socket.recv_from(&mut buf)).await {
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
            Ok(r) => r?,
        };
        let skip = match raw {
            true => usize::from(buf[0] & 0x0f) * 4,
            false => 0,
        };
        if n > skip && buf[skip] == 0 {
            return Ok(from);
        }
    }
    Err(io::ErrorKind::TimedOut.into())
}

#[cfg(test)]
mod tests {
    use super::{checksum, echo_request, quic_initial, QUIC_INITIAL_SIZE};

    #[test]
    fn the_quic_initial_is_a_long_header_padded_to_1200_bytes() {
        let p = quic_initial();
        assert_eq!(p.len(), QUIC_INITIAL_SIZE);
        assert_eq!(p[0] & 0xf0, 0xc0, "long header, fixed bit, type Initial");
        assert_eq!(p[5], 8);
        assert_eq!(p[14], 8);
        assert_eq!(p[23], 0, "no token");
        let length = u16::from_be_bytes([p[24], p[25]]);
        assert_eq!(length >> 14, 1, "a 2-byte varint");
        assert_eq!(usize::from(length & 0x3fff), QUIC_INITIAL_SIZE - 26);
    }

    #[test]
    fn an_echo_request_sums_to_zero() {
        let p = echo_request();
        assert_eq!((p[0], p[1]), (8, 0));
        assert_eq!(checksum(&p), 0);
    }
}
