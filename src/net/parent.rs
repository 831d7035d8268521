//! A parent HTTP proxy (`serve --upstream-proxy`, docs/reference/parent-proxy.md): every
//! allowed connection goes through it, after the proxy's own decision and address check.
//!
//! The parent is the one destination dialed without the address guard (it is the
//! operator's, usually on a private network): its addresses become [`CheckedAddr`]s
//! here, from the configuration, and nowhere else. What it is asked for was decided and
//! checked already: by name, or with `--upstream-proxy-by-address` by the checked
//! address. Its credentials are a header value marked sensitive and are never printed,
//! `Debug` included.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use hyper::header::HeaderValue;
use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::dial::{dial, CheckedAddr, DialError};
use crate::policy::host::DomainEntry;
use crate::policy::Host;

/// The longest response head a parent may send to a `CONNECT`.
const MAX_HEAD: usize = 16 * 1024;

/// A destination dialed directly (`--upstream-no-proxy`): a destination pattern (any
/// port when it names none), or an address block matched against the destination's
/// literal or first checked address.
#[derive(Debug, Clone)]
pub enum NoProxy {
    Name(DomainEntry),
    Net(IpNet),
}

impl NoProxy {
    /// `example.com`, `*.example.com`, either with `:PORT`, or `10.0.0.0/8`, `10.1.2.3`.
    pub fn parse(s: &str) -> Result<NoProxy, String> {
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(NoProxy::Net(net));
        }
        if let Ok(ip) = s.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
            return Ok(NoProxy::Net(IpNet::from(ip)));
        }
        DomainEntry::parse(s)
            .map(NoProxy::Name)
            .map_err(|e| e.to_string())
    }

    fn matches(&self, host: &Host, port: u16, addrs: &[CheckedAddr]) -> bool {
        match (self, host) {
            (NoProxy::Name(entry), Host::Name(name)) => {
                entry.matches_host(name) && entry.port.is_none_or(|p| p == port)
            }
            (NoProxy::Name(_), Host::Ip(_)) => false,
            (NoProxy::Net(net), Host::Ip(ip)) => net.contains(ip),
            (NoProxy::Net(net), Host::Name(_)) => {
                addrs.first().is_some_and(|a| net.contains(&a.addr().ip()))
            }
        }
    }
}

/// Why `--upstream-proxy` was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ParentError {
    #[error("must be http://[USER:PASS@]HOST:PORT")]
    Shape,
    #[error("only http:// parents are supported (the connection to the parent is not TLS)")]
    Scheme,
    #[error("a port is required (http://HOST:PORT)")]
    Port,
    #[error("the user name or password is not valid percent-encoding")]
    Userinfo,
    #[error("cannot resolve the parent's host {0}: {1}")]
    Resolve(String, io::Error),
}

/// The parent proxy every allowed connection goes through.
pub struct Parent {
    /// Where it listens, resolved once at start.
    addrs: Vec<CheckedAddr>,
    /// `HOST:PORT` as given, without credentials: for messages.
    name: String,
    /// `Proxy-Authorization: Basic ...` for it, marked sensitive.
    authorization: Option<HeaderValue>,
    by_address: bool,
    no_proxy: Vec<NoProxy>,
}

impl fmt::Debug for Parent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parent")
            .field("name", &self.name)
            .field(
                "credentials",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .field("by_address", &self.by_address)
            .field("no_proxy", &self.no_proxy)
            .finish()
    }
}

impl Parent {
    /// Parse `http://[USER:PASS@]HOST:PORT` (user and password percent-decoded) and
    /// resolve HOST, once, with the system's resolver (an address needs none).
    pub fn new(url: &str, by_address: bool, no_proxy: Vec<NoProxy>) -> Result<Parent, ParentError> {
        let rest = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some(_) => return Err(ParentError::Scheme),
            None => return Err(ParentError::Shape),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(ParentError::Shape);
        }
        let (userinfo, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        let authorization = userinfo.map(basic).transpose()?;
        let (host, port) = hostport.rsplit_once(':').ok_or(ParentError::Port)?;
        let port: u16 = port.parse().map_err(|_| ParentError::Port)?;
        if host.is_empty() || port == 0 {
            return Err(ParentError::Shape);
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match bare.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => std::net::ToSocketAddrs::to_socket_addrs(&(bare, port))
                .map_err(|e| ParentError::Resolve(bare.to_string(), e))?
                .collect(),
        };
        Ok(Parent {
            addrs: addrs.into_iter().map(CheckedAddr::parent).collect(),
            name: hostport.to_string(),
            authorization,
            by_address,
            no_proxy,
        })
    }

    /// The parent's `HOST:PORT`, as configured (never its credentials).
    /// `--upstream-proxy-by-address`: the parent is asked for the checked address.
    pub fn by_address(&self) -> bool {
        self.by_address
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the parent listens: what a plain-HTTP request through it is sent to.
    pub fn addrs(&self) -> &[CheckedAddr] {
        &self.addrs
    }

    /// Its `Proxy-Authorization` value, if it has credentials.
    pub fn authorization(&self) -> Option<&HeaderValue> {
        self.authorization.as_ref()
    }

    /// What to ask the parent for, to reach `host:port` whose checked addresses are
    /// `addrs`: `NAME:PORT`, or the first checked address with `--upstream-proxy-by-address`;
    /// `None` when `--upstream-no-proxy` says to dial it directly.
    pub fn route(&self, host: &Host, port: u16, addrs: &[CheckedAddr]) -> Option<String> {
        if self.no_proxy.iter().any(|p| p.matches(host, port, addrs)) {
            return None;
        }
        match (host, addrs.first()) {
            (Host::Name(_), Some(addr)) if self.by_address => Some(addr.to_string()),
            _ => Some(host.authority(port)),
        }
    }

    /// A tunnel through the parent to `authority` (`CONNECT authority`), its `200` read
    /// and nothing after it: the stream is at the first byte from upstream. `timeout`
    /// bounds the dial and the parent's answer together.
    pub async fn tunnel(&self, authority: &str, timeout: Duration) -> Result<TcpStream, DialError> {
        let deadline = Instant::now() + timeout;
        let (mut stream, _) = dial(&self.addrs, timeout).await.map_err(|e| {
            DialError::Parent(format!(
                "cannot connect to the parent proxy {}: {e}",
                self.name
            ))
        })?;
        let mut head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
        if let Some(auth) = &self.authorization {
            head.push_str("Proxy-Authorization: ");
            head.push_str(auth.to_str().unwrap_or_default());
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let exchange = async {
            stream.write_all(head.as_bytes()).await?;
            read_head(&mut stream).await
        };
        let answer = match tokio::time::timeout_at(deadline, exchange).await {
            Err(_) => return Err(DialError::Timeout),
            Ok(Err(e)) => {
                return Err(DialError::Parent(format!(
                    "the parent proxy {} failed: {e}",
                    self.name
                )))
            }
            Ok(Ok(head)) => head,
        };
        match status_of(&answer) {
            Some((200..=299, _)) => Ok(stream),
            Some((code, reason)) => Err(DialError::Parent(format!(
                "the parent proxy {} answered {code} {reason}",
                self.name
            ))),
            None => Err(DialError::Parent(format!(
                "the parent proxy {} sent no valid HTTP answer",
                self.name
            ))),
        }
    }
}

/// Connect to `host:port`, whose checked addresses are `addrs`: through `parent` when
/// there is one and `--upstream-no-proxy` does not name it, else directly to the first
/// of `addrs` that accepts. Returns the stream with the checked address it stands for
/// (through a parent, the first: what the record's `resolved_ip` names).
pub(crate) async fn open(
    parent: Option<&Parent>,
    host: &Host,
    port: u16,
    addrs: &[CheckedAddr],
    timeout: Duration,
) -> Result<(TcpStream, CheckedAddr), DialError> {
    let through = parent.and_then(|p| Some((p, p.route(host, port, addrs)?)));
    match (through, addrs.first()) {
        (Some((parent, authority)), Some(&first)) => {
            Ok((parent.tunnel(&authority, timeout).await?, first))
        }
        _ => dial(addrs, timeout).await,
    }
}

/// `Basic base64(user:pass)` of a URL's percent-encoded `user:pass`, marked sensitive.
fn basic(userinfo: &str) -> Result<HeaderValue, ParentError> {
    let decoded = super::percent_decode(userinfo).ok_or(ParentError::Userinfo)?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(decoded);
    let mut value =
        HeaderValue::try_from(format!("Basic {encoded}")).map_err(|_| ParentError::Userinfo)?;
    value.set_sensitive(true);
    Ok(value)
}

/// Read one response head, and not a byte past it: what follows is the tunnel's.
/// Bytes are peeked first and only the head's are consumed.
async fn read_head(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed the connection before answering",
            ));
        }
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&buf[..n]);
        let end = head[from..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|p| from + p + 4);
        let take = match end {
            Some(end) => end - (head.len() - n),
            None => n,
        };
        stream.read_exact(&mut buf[..take]).await?;
        if let Some(end) = end {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > MAX_HEAD {
            return Err(io::Error::other("answered with a head over 16 KiB"));
        }
    }
}

/// The status code and reason of a response head.
fn status_of(head: &[u8]) -> Option<(u16, String)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => {
            Some((resp.code?, resp.reason.unwrap_or_default().to_string()))
        }
        _ => None,
    }
}

#[cfg(test)]
#[path = "parent_tests.rs"]
mod tests;
