//! SOCKS5's handshake messages (RFC 1928, and RFC 1929's username/password), read from
//! bytes and written to bytes, with no I/O (docs/reference/socks5.md). The listener
//! ([`super`]) reads exactly the bytes a parser asks for ([`Progress::Need`]), so no
//! byte the client sends after its request is taken by the handshake: those are the
//! tunnel's first bytes, judged by `[tunnels]`.
//!
//! A name is checked byte by byte before anything else reads it: only letters, digits,
//! `-`, `.` and `_` make a [`Dest::Name`]; anything else (a NUL, a `:`, a space, a byte
//! over 127) is a [`Dest::BadName`], refused without a lookup.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// The version byte of every SOCKS5 message but the username/password ones.
pub(crate) const VERSION: u8 = 5;
/// The version byte of SOCKS4 and 4a, which are refused.
pub(crate) const SOCKS4: u8 = 4;
/// The version byte of RFC 1929's messages.
pub(crate) const AUTH_VERSION: u8 = 1;

/// Authentication methods (RFC 1928, section 3).
pub(crate) const METHOD_NONE: u8 = 0x00;
pub(crate) const METHOD_USER_PASS: u8 = 0x02;
pub(crate) const NO_ACCEPTABLE_METHOD: u8 = 0xFF;

/// Commands (RFC 1928, section 4).
pub(crate) const CONNECT: u8 = 0x01;
pub(crate) const BIND: u8 = 0x02;
pub(crate) const UDP_ASSOCIATE: u8 = 0x03;

const ATYP_V4: u8 = 0x01;
const ATYP_NAME: u8 = 0x03;
const ATYP_V6: u8 = 0x04;

/// How far a parser got with the bytes so far.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Progress<T> {
    /// The message needs at least this many bytes in all (never more than it has).
    Need(usize),
    /// The message, and how many bytes it took.
    Done(T, usize),
    /// Bytes that are not this message.
    Bad(Bad),
}

/// Why bytes are not the message that was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Bad {
    #[error("SOCKS4 and SOCKS4a are not served: SOCKS5 only")]
    Socks4,
    #[error("not a SOCKS5 client (first byte {0:#04x})")]
    NotSocks(u8),
    #[error("the username/password message has version {0:#04x}, not 0x01")]
    AuthVersion(u8),
    #[error("the SOCKS5 request has version {0:#04x}, not 0x05")]
    RequestVersion(u8),
    #[error("the SOCKS5 request's reserved byte is {0:#04x}, not 0x00")]
    Reserved(u8),
    #[error("the SOCKS5 request's address type {0:#04x} is none of 0x01, 0x03, 0x04")]
    AddressType(u8),
}

/// The client's first message: the authentication methods it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Greeting {
    pub methods: Vec<u8>,
}

/// RFC 1929's user name and password. Its `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct UserPass {
    pub user: Vec<u8>,
    pub pass: Vec<u8>,
}

impl fmt::Debug for UserPass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserPass")
            .field("user", &self.user.escape_ascii().to_string())
            .field("pass", &"<redacted>")
            .finish()
    }
}

/// Where a request asks to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Dest {
    /// A name made only of letters, digits, `-`, `.` and `_` (not yet normalised).
    Name(String),
    /// A name with any other byte, or none: refused before anything reads it.
    BadName(Vec<u8>),
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

impl Dest {
    /// The host as an audit record shows it: a bad name's bytes escaped.
    pub(crate) fn host_text(&self) -> String {
        match self {
            Dest::Name(name) => name.clone(),
            Dest::BadName(bytes) => bytes.escape_ascii().to_string(),
            Dest::V4(ip) => ip.to_string(),
            Dest::V6(ip) => ip.to_string(),
        }
    }
}

/// The client's request: a command, a destination and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub command: u8,
    pub dest: Dest,
    pub port: u16,
}

impl Request {
    /// The command's name, for refusals.
    pub(crate) fn command_name(&self) -> String {
        match self.command {
            CONNECT => "CONNECT".into(),
            BIND => "BIND".into(),
            UDP_ASSOCIATE => "UDP ASSOCIATE".into(),
            other => format!("{other:#04x}"),
        }
    }
}

/// A byte a host name may hold, as SOCKS5 names are judged (docs/reference/socks5.md).
pub(crate) fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')
}

/// The greeting: `VER NMETHODS METHODS...`.
pub(crate) fn parse_greeting(buf: &[u8]) -> Progress<Greeting> {
    match buf.first() {
        None => return Progress::Need(1),
        Some(&VERSION) => {}
        Some(&SOCKS4) => return Progress::Bad(Bad::Socks4),
        Some(&other) => return Progress::Bad(Bad::NotSocks(other)),
    }
    let Some(&n) = buf.get(1) else {
        return Progress::Need(2);
    };
    let total = 2 + usize::from(n);
    match buf.get(2..total) {
        None => Progress::Need(total),
        Some(methods) => Progress::Done(
            Greeting {
                methods: methods.to_vec(),
            },
            total,
        ),
    }
}

/// RFC 1929's request: `VER ULEN UNAME PLEN PASSWD`.
pub(crate) fn parse_user_pass(buf: &[u8]) -> Progress<UserPass> {
    match buf.first() {
        None => return Progress::Need(1),
        Some(&AUTH_VERSION) => {}
        Some(&other) => return Progress::Bad(Bad::AuthVersion(other)),
    }
    let Some(&ulen) = buf.get(1) else {
        return Progress::Need(2);
    };
    let user_end = 2 + usize::from(ulen);
    let Some(&plen) = buf.get(user_end) else {
        return Progress::Need(user_end + 1);
    };
    let total = user_end + 1 + usize::from(plen);
    match buf.get(user_end + 1..total) {
        None => Progress::Need(total),
        Some(pass) => Progress::Done(
            UserPass {
                user: buf[2..user_end].to_vec(),
                pass: pass.to_vec(),
            },
            total,
        ),
    }
}

/// The request: `VER CMD RSV ATYP DST.ADDR DST.PORT`.
pub(crate) fn parse_request(buf: &[u8]) -> Progress<Request> {
    match buf.first() {
        None => return Progress::Need(1),
        Some(&VERSION) => {}
        Some(&other) => return Progress::Bad(Bad::RequestVersion(other)),
    }
    if buf.len() < 4 {
        return Progress::Need(4);
    }
    if buf[2] != 0 {
        return Progress::Bad(Bad::Reserved(buf[2]));
    }
    let (addr_start, addr_len) = match buf[3] {
        ATYP_V4 => (4, 4),
        ATYP_V6 => (4, 16),
        ATYP_NAME => match buf.get(4) {
            None => return Progress::Need(5),
            Some(&n) => (5, usize::from(n)),
        },
        other => return Progress::Bad(Bad::AddressType(other)),
    };
    let port_at = addr_start + addr_len;
    let total = port_at + 2;
    if buf.len() < total {
        return Progress::Need(total);
    }
    let addr = &buf[addr_start..port_at];
    let dest = match buf[3] {
        ATYP_V4 => Dest::V4(Ipv4Addr::from(<[u8; 4]>::try_from(addr).expect("4 bytes"))),
        ATYP_V6 => Dest::V6(Ipv6Addr::from(
            <[u8; 16]>::try_from(addr).expect("16 bytes"),
        )),
        _ if !addr.is_empty() && addr.iter().all(|&b| is_host_byte(b)) => {
            Dest::Name(String::from_utf8(addr.to_vec()).expect("host bytes are ASCII"))
        }
        _ => Dest::BadName(addr.to_vec()),
    };
    let port = u16::from_be_bytes([buf[port_at], buf[port_at + 1]]);
    Progress::Done(
        Request {
            command: buf[1],
            dest,
            port,
        },
        total,
    )
}

/// The reply codes the listener sends (RFC 1928, section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Reply {
    Succeeded = 0x00,
    GeneralFailure = 0x01,
    NotAllowed = 0x02,
    HostUnreachable = 0x04,
    ConnectionRefused = 0x05,
    CommandNotSupported = 0x07,
}

/// The method the server picks from those offered: username/password whenever sessions
/// are served and the client offers it (a client that offers credentials expects them
/// used); else none, unless a session is required; [`NO_ACCEPTABLE_METHOD`] when nothing
/// fits. Without sessions, a client offering only username/password is let through it
/// (its credentials are not judged, as `Proxy-Authorization` is not).
pub(crate) fn choose_method(offered: &[u8], sessions: bool, require_session: bool) -> u8 {
    let offers = |m| offered.contains(&m);
    match (sessions, require_session) {
        (true, _) if offers(METHOD_USER_PASS) => METHOD_USER_PASS,
        (true, true) => NO_ACCEPTABLE_METHOD,
        _ if offers(METHOD_NONE) => METHOD_NONE,
        _ if offers(METHOD_USER_PASS) => METHOD_USER_PASS,
        _ => NO_ACCEPTABLE_METHOD,
    }
}

/// The server's choice of method: `VER METHOD`.
pub(crate) fn method_reply(method: u8) -> [u8; 2] {
    [VERSION, method]
}

/// RFC 1929's status: `VER STATUS`, 0x00 for success, 0x01 for failure.
pub(crate) fn user_pass_reply(ok: bool) -> [u8; 2] {
    [AUTH_VERSION, if ok { 0x00 } else { 0x01 }]
}

/// The reply to a request: `VER REP RSV ATYP BND.ADDR BND.PORT`, the bound address
/// only with a success (`0.0.0.0:0` otherwise).
pub(crate) fn reply(code: Reply, bound: Option<SocketAddr>) -> Vec<u8> {
    let mut out = vec![VERSION, code as u8, 0];
    match bound.map(|b| (b.ip().to_canonical(), b.port())) {
        Some((std::net::IpAddr::V6(ip), port)) => {
            out.push(ATYP_V6);
            out.extend_from_slice(&ip.octets());
            out.extend_from_slice(&port.to_be_bytes());
        }
        Some((std::net::IpAddr::V4(ip), port)) => {
            out.push(ATYP_V4);
            out.extend_from_slice(&ip.octets());
            out.extend_from_slice(&port.to_be_bytes());
        }
        None => out.extend_from_slice(&[ATYP_V4, 0, 0, 0, 0, 0, 0]),
    }
    out
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
