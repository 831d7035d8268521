//! The SOCKS5 listener (`serve --socks-listen`, docs/reference/socks5.md), over raw
//! TCP on loopback. Every proxy here sends its lookups to a test DNS server that
//! records them, so "no query for a denied name" is observed, not assumed.
//!
//! - [`reach`]: every address type, the tunnel's bytes, `[tunnels]`, the records.
//! - [`replies`]: every reply code of docs/reference/socks5.md ("Replies"), each with
//!   its audit record.
//! - [`auth`]: username/password as the session id and token.
//! - [`refusals`]: names with bad bytes, SOCKS4, garbage, a stalled handshake.
//! - [`same_judgement`]: report mode, the upload budget, tunnel limits, IPv6 opened.
//! - [`curl`]: a real client, `curl --socks5-hostname`.
//! - [`pysocks`]: a real Python client, PySocks from `ALL_PROXY=socks5h://`.
//! - [`ssh`]: OpenSSH and git over `ssh://` through `nc -X 5`, to a local sshd.

mod auth;
mod curl;
mod pysocks;
mod reach;
mod refusals;
mod replies;
mod same_judgement;
mod ssh;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::dns::DnsServer;
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::IO_TIMEOUT;

/// A SOCKS5 destination as the request carries it.
#[derive(Clone, Debug)]
pub(crate) enum To {
    Name(Vec<u8>),
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

impl To {
    pub(crate) fn name(name: &str) -> To {
        To::Name(name.as_bytes().to_vec())
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            To::V4(ip) => [&[1u8][..], &ip.octets()].concat(),
            To::V6(ip) => [&[4u8][..], &ip.octets()].concat(),
            To::Name(name) => [&[3u8, name.len() as u8][..], name].concat(),
        }
    }
}

/// The SOCKS5 commands.
pub(crate) const CONNECT: u8 = 1;
pub(crate) const BIND: u8 = 2;
pub(crate) const UDP_ASSOCIATE: u8 = 3;

/// The SOCKS5 listener's address, from the proxy's `SOCKS5 listener on ADDR` line.
pub(crate) fn socks_addr(proxy: &Proxy) -> SocketAddr {
    let text = proxy.stderr();
    text.lines()
        .find_map(|l| l.split("SOCKS5 listener on ").nth(1))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `SOCKS5 listener on` line before `listening on`\n{text}"))
}

/// One raw SOCKS5 client connection.
pub(crate) struct Socks {
    pub stream: TcpStream,
}

impl Socks {
    pub(crate) async fn open(addr: SocketAddr) -> Socks {
        let stream = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect to the SOCKS5 listener");
        Socks { stream }
    }

    pub(crate) async fn send(&mut self, bytes: &[u8]) {
        tokio::time::timeout(IO_TIMEOUT, self.stream.write_all(bytes))
            .await
            .expect("write in time")
            .expect("write");
    }

    /// Exactly `n` bytes; panics if the proxy closes first.
    pub(crate) async fn read(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        tokio::time::timeout(IO_TIMEOUT, self.stream.read_exact(&mut buf))
            .await
            .expect("read in time")
            .unwrap_or_else(|e| panic!("the proxy closed before {n} bytes: {e}"));
        buf
    }

    /// Offer `methods`; the method the proxy picked.
    pub(crate) async fn greet(&mut self, methods: &[u8]) -> u8 {
        self.send(&[&[5u8, methods.len() as u8][..], methods].concat())
            .await;
        let reply = self.read(2).await;
        assert_eq!(reply[0], 5, "{reply:?}");
        reply[1]
    }

    /// RFC 1929: the status the proxy answers `user`/`pass` with.
    pub(crate) async fn user_pass(&mut self, user: &str, pass: &str) -> u8 {
        let msg = [
            &[1u8, user.len() as u8][..],
            user.as_bytes(),
            &[pass.len() as u8],
            pass.as_bytes(),
        ]
        .concat();
        self.send(&msg).await;
        let reply = self.read(2).await;
        assert_eq!(reply[0], 1, "{reply:?}");
        reply[1]
    }

    /// Send a request; the reply code and the bound address.
    pub(crate) async fn request(&mut self, command: u8, to: &To, port: u16) -> (u8, SocketAddr) {
        let msg = [&[5u8, command, 0][..], &to.bytes(), &port.to_be_bytes()].concat();
        self.send(&msg).await;
        self.reply().await
    }

    /// Read a reply: its code and bound address.
    pub(crate) async fn reply(&mut self) -> (u8, SocketAddr) {
        let head = self.read(4).await;
        assert_eq!((head[0], head[2]), (5, 0), "{head:?}");
        let bound = match head[3] {
            1 => {
                let b = self.read(6).await;
                let ip = Ipv4Addr::new(b[0], b[1], b[2], b[3]);
                SocketAddr::new(ip.into(), u16::from_be_bytes([b[4], b[5]]))
            }
            4 => {
                let b = self.read(18).await;
                let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&b[..16]).unwrap());
                SocketAddr::new(ip.into(), u16::from_be_bytes([b[16], b[17]]))
            }
            other => panic!("reply address type {other}"),
        };
        (head[1], bound)
    }

    /// No session: method 0x00, then a `CONNECT`; the reply code.
    pub(crate) async fn connect(addr: SocketAddr, to: &To, port: u16) -> (u8, Socks) {
        let mut socks = Socks::open(addr).await;
        assert_eq!(socks.greet(&[0]).await, 0);
        let (code, _) = socks.request(CONNECT, to, port).await;
        (code, socks)
    }

    /// Whether the proxy closes the connection (EOF or reset) within `within`.
    pub(crate) async fn closed_within(&mut self, within: std::time::Duration) -> bool {
        let mut buf = [0u8; 64];
        let started = tokio::time::Instant::now();
        loop {
            match tokio::time::timeout_at(started + within, self.stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
            }
        }
    }

    /// A plain HTTP GET through the open tunnel; the whole response.
    pub(crate) async fn http_get(mut self, host: &str) -> String {
        let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        self.send(req.as_bytes()).await;
        let mut out = Vec::new();
        tokio::time::timeout(IO_TIMEOUT, self.stream.read_to_end(&mut out))
            .await
            .expect("response in time")
            .expect("read response");
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// The names the tests ask for, all known to the test DNS server, on loopback.
const NAMES: &[&str] = &["allowed.test", "evil.test", "other.test"];

/// A proxy with a SOCKS5 listener, the standard org (`allowed.test` on the origin's
/// port, loopback open), `--policy` allowing `allowed.test`, and every lookup sent to
/// a recording DNS server.
pub(crate) struct Setup {
    pub origin: Origin,
    pub dns: DnsServer,
    pub proxy: Proxy,
    pub socks: SocketAddr,
}

impl Setup {
    pub(crate) async fn start(extra: &[&str]) -> Setup {
        Setup::start_with(|org| org, extra).await
    }

    /// With the standard org changed by `org` (its port is the origin's).
    /// The org and `--policy` also allow `*.allowed.test`.
    pub(crate) async fn start_with(org: impl FnOnce(Org) -> Org, extra: &[&str]) -> Setup {
        let policy = allowlist_json(&["allowed.test", "*.allowed.test"]);
        Setup::start_policy(|o| org(o.allow("*.allowed.test")), &policy, extra).await
    }

    /// With `--policy` this request policy JSON.
    pub(crate) async fn start_policy(
        org: impl FnOnce(Org) -> Org,
        policy: &str,
        extra: &[&str],
    ) -> Setup {
        let policy = policy.to_string();
        Setup::start_custom(org, move |mut builder| {
            builder = builder.policy(policy);
            for arg in extra {
                builder = builder.arg(arg);
            }
            builder
        })
        .await
    }

    /// With the proxy's flags set by `proxy` (no `--policy` unless it adds one).
    pub(crate) async fn start_custom(
        org: impl FnOnce(Org) -> Org,
        proxy: impl FnOnce(ProxyBuilder) -> ProxyBuilder,
    ) -> Setup {
        let origin = Origin::start().await;
        let mut dns = DnsServer::builder();
        for name in NAMES {
            dns = dns.record(name, Ipv4Addr::LOCALHOST);
        }
        let dns = dns.start().await;
        let org = org(Org::standard(origin.port()));
        let builder = ProxyBuilder::new(org.to_toml())
            .dns_server(dns.addr())
            .audit_allowed()
            .arg("--socks-listen")
            .arg("127.0.0.1:0");
        let proxy = proxy(builder).start().await;
        let socks = socks_addr(&proxy);
        Setup {
            origin,
            dns,
            proxy,
            socks,
        }
    }
}

/// The fields every SOCKS5 record has: `via`, the method of the `CONNECT` it is judged
/// as, the client's address.
pub(crate) fn assert_socks_record(record: &Value, event: &str, reason: Option<&str>) {
    assert_eq!(record["via"], "socks5", "{record}");
    assert_eq!(record["event"], event, "{record}");
    match reason {
        Some(reason) => assert_eq!(record["reason"], reason, "{record}"),
        None => assert!(record["reason"].is_null(), "{record}"),
    }
    let client = record["client"].as_str().unwrap_or("");
    assert!(client.starts_with("127.0.0.1:"), "{record}");
}
