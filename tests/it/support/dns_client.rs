//! A DNS client for the proxy's DNS listener (`serve --dns-listen`), over UDP and TCP,
//! built with hickory-proto's message types.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::proxy::Proxy;
use super::IO_TIMEOUT;

/// The DNS listener's address, from the proxy's `DNS listener on ADDR` line.
pub(crate) fn dns_listener(proxy: &Proxy) -> SocketAddr {
    let text = proxy.stderr();
    text.lines()
        .find_map(|l| l.split("DNS listener on ").nth(1))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `DNS listener on` line before `listening on`\n{text}"))
}

/// A query message for `name` (sent as written: case and dots as given).
pub(crate) fn query(id: u16, name: &str, qtype: RecordType) -> Vec<u8> {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m.to_vec().unwrap()
}

/// The addresses of the `A` records of `m`.
pub(crate) fn a_records(m: &Message) -> Vec<Ipv4Addr> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

fn parse(bytes: &[u8], id: u16) -> Message {
    let m = Message::from_vec(bytes).expect("the reply is a DNS message");
    assert_eq!(m.id(), id, "the reply carries the query's id");
    assert_eq!(m.message_type(), MessageType::Response);
    m
}

/// One UDP socket: queries from it share a client address, as a stub resolver's do.
pub(crate) struct UdpClient {
    socket: UdpSocket,
    server: SocketAddr,
    next_id: u16,
}

impl UdpClient {
    pub(crate) async fn new(server: SocketAddr) -> UdpClient {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind udp");
        UdpClient {
            socket,
            server,
            next_id: 0x4000,
        }
    }

    /// Ask `name` for `qtype`; panics without an answer within [`IO_TIMEOUT`].
    pub(crate) async fn query(&mut self, name: &str, qtype: RecordType) -> Message {
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        let reply = self
            .exchange(&query(id, name, qtype), IO_TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("no UDP answer for {name} {qtype}"));
        parse(&reply, id)
    }

    /// Send `bytes` and wait up to `wait` for a datagram back.
    pub(crate) async fn exchange(&self, bytes: &[u8], wait: Duration) -> Option<Vec<u8>> {
        self.socket
            .send_to(bytes, self.server)
            .await
            .expect("send udp");
        let mut buf = vec![0u8; 65_535];
        match tokio::time::timeout(wait, self.socket.recv_from(&mut buf)).await {
            Ok(Ok((n, _))) => Some(buf[..n].to_vec()),
            _ => None,
        }
    }
}

/// One TCP connection carrying length-prefixed messages.
pub(crate) struct TcpClient {
    pub stream: TcpStream,
    next_id: u16,
}

impl TcpClient {
    pub(crate) async fn connect(server: SocketAddr) -> TcpClient {
        let stream = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(server))
            .await
            .expect("connect timed out")
            .expect("connect to the DNS listener");
        TcpClient {
            stream,
            next_id: 0x8000,
        }
    }

    pub(crate) async fn query(&mut self, name: &str, qtype: RecordType) -> Message {
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        let bytes = query(id, name, qtype);
        let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        self.stream.write_all(&framed).await.expect("write tcp");
        let reply = tokio::time::timeout(IO_TIMEOUT, async {
            let len = self.stream.read_u16().await?;
            let mut reply = vec![0u8; usize::from(len)];
            self.stream.read_exact(&mut reply).await?;
            Ok::<_, std::io::Error>(reply)
        })
        .await
        .unwrap_or_else(|_| panic!("no TCP answer for {name} {qtype}"))
        .expect("read the TCP answer");
        parse(&reply, id)
    }
}
