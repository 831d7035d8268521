//! The transparent listener (docs/reference/confinement.md, "Transparent listener"):
//! connections redirected to it by nftables (a jail's, or a sidecar pod's) are judged as
//! the explicit proxy judges a `CONNECT` or an absolute-form request, through the same
//! judge, answer and records (`"via": "transparent"`).
//!
//! The original destination comes from the socket (`SO_ORIGINAL_DST`,
//! `IP6T_SO_ORIGINAL_DST`). A synthetic address (one the DNS listener handed out) stands
//! for its name; any other address is judged as that IP destination, whatever name the
//! client sends: a name never rescues a literal address. The first bytes are peeked,
//! never consumed, until they are decided ([`opening`]), however the client split
//! its writes:
//!
//! - an HTTP/1 request line (after any empty lines) goes to the connection code
//!   (`crate::proxy::conn`) with its target set from the original destination, so its head is
//!   judged as `http://NAME:PORT/path` would be (a `Host` naming another authority is
//!   `host_mismatch`) and forwarded as hyper read it;
//! - a whole ClientHello, bytes that can become neither, or a client of a synthetic
//!   address silent for [`SILENT_CLIENT`] (its server speaks first) is judged as
//!   `CONNECT NAME:PORT` would be: a TLS server name other than the name the address
//!   stands for is `host_mismatch`, then the policies, then `[tunnels]` on the first
//!   bytes; only then is upstream dialed, and the unread bytes are relayed unchanged. A
//!   refusal is audited and the connection closed before any byte reaches upstream;
//! - bytes still undecided at `--header-timeout` are never relayed: an unfinished
//!   ClientHello is refused, and so is anything else unfinished ([`unfinished`]), each
//!   with its own record: every refused connection is recorded.

pub(crate) mod opening;
mod unfinished;

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use opening::{classify, Opening};

use crate::audit::Via;
use crate::judgement::approved::Scope;
use crate::judgement::ask::{Ask, Credentials};
use crate::judgement::client_hello::{self, MAX_HELLO_BYTES, TLS_HANDSHAKE};
use crate::judgement::exfiltration;
use crate::judgement::judge;
use crate::judgement::pending::PendingSlot;
use crate::judgement::record::{
    audit_flagged_first, audit_refusal, count_approved, record_stop, Asked, Client,
};
use crate::judgement::refusal::Refusal;
use crate::judgement::State;
use crate::net::synthetic::SyntheticNames;
use crate::policy::FirstBytes;
use crate::policy::{Host, HostName, Reason, Target};
// The one dependency on the HTTP proxy: an HTTP connection is served by its connection
// code, and a tunnel by its tunnel code (relay, idle watch, interception).
use crate::proxy::{conn, pool};
use crate::tunnel;

/// Where a redirected connection was going.
#[derive(Debug, Clone)]
struct Redirected {
    /// The original destination.
    pub orig: SocketAddr,
    /// The name a synthetic `orig` stands for.
    pub name: Option<HostName>,
}

impl Redirected {
    /// The authority it is judged by: `NAME:PORT`, or the literal address.
    fn authority(&self) -> String {
        match &self.name {
            Some(name) => format!("{name}:{}", self.orig.port()),
            None => SocketAddr::new(self.orig.ip().to_canonical(), self.orig.port()).to_string(),
        }
    }

    fn target(&self) -> Target {
        Target {
            host: match &self.name {
                Some(name) => Host::Name(name.clone()),
                None => Host::Ip(self.orig.ip().to_canonical()),
            },
            port: self.orig.port(),
        }
    }
}

/// The destination a redirected connection was sent to, as the kernel's connection
/// tracking kept it.
#[cfg(target_os = "linux")]
pub(crate) fn original_dst(stream: &TcpStream) -> io::Result<SocketAddr> {
    use nix::sys::socket::{getsockopt, sockopt};
    let local = stream.local_addr()?;
    let v4 = |sa: nix::libc::sockaddr_in| {
        SocketAddr::new(
            IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr))),
            u16::from_be(sa.sin_port),
        )
    };
    if local.is_ipv4() {
        return getsockopt(stream, sockopt::OriginalDst)
            .map(v4)
            .map_err(io::Error::from);
    }
    match getsockopt(stream, sockopt::Ip6tOriginalDst) {
        Ok(sa) => Ok(SocketAddr::new(
            IpAddr::V6(Ipv6Addr::from(sa.sin6_addr.s6_addr)),
            u16::from_be(sa.sin6_port),
        )),
        // An IPv4 connection accepted on a dual-stack socket.
        Err(_) => getsockopt(stream, sockopt::OriginalDst)
            .map(v4)
            .map_err(io::Error::from),
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn original_dst(_: &TcpStream) -> io::Result<SocketAddr> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the transparent listener needs Linux",
    ))
}

/// How long a client of a synthetic address may stay silent before its server is taken
/// to speak first (SSH, SMTP, MySQL servers greet their clients).
const SILENT_CLIENT: Duration = Duration::from_secs(1);

/// What the first bytes of a redirected connection are.
enum Peeked {
    /// An HTTP/1 request line: the connection code reads its head.
    Http,
    /// A whole ClientHello, bytes that cannot become TLS or HTTP, or nothing: judged as
    /// a tunnel, with the bytes peeked (still unread), which canaries are looked for in.
    Tunnel(FirstBytes, Vec<u8>),
    /// Bytes that are still the start of a request line when the header timeout
    /// passed, or of anything when the client reset the connection (`tls`: of a
    /// ClientHello).
    Unfinished { tls: bool, timed_out: bool },
    /// The client closed before sending anything.
    Gone,
}

/// Peek (never consume) until the first bytes are decided ([`classify`]). A
/// client that sends nothing for `silence` has a server that speaks first; once it has
/// sent a byte, it has until `timeout` to finish a request line or a ClientHello, or
/// `max_head` bytes of a request line (the connection code then refuses the head).
async fn peek_first(
    stream: &TcpStream,
    silence: Duration,
    timeout: Duration,
    max_head: usize,
) -> Peeked {
    let start = Instant::now();
    let deadline = start + timeout;
    let limit = max_head.max(MAX_HELLO_BYTES);
    let mut buf = vec![0u8; FIRST_PEEK.min(limit)];
    let mut backoff = Duration::from_millis(1);
    let mut wait = start + silence.min(timeout);
    let mut first = None;
    loop {
        let n = match tokio::time::timeout_at(wait, stream.peek(&mut buf)).await {
            Err(_) => return Peeked::Tunnel(FirstBytes::ServerFirst, Vec::new()),
            // Gone with bytes sent: refused (and recorded) as unfinished.
            Ok(Ok(0) | Err(_)) => {
                return match first {
                    None => Peeked::Gone,
                    Some(byte) => Peeked::Unfinished {
                        tls: byte == TLS_HANDSHAKE,
                        timed_out: false,
                    },
                }
            }
            Ok(Ok(n)) => n,
        };
        first = Some(buf[0]);
        // A byte has come: the silence no longer counts, only the header timeout.
        wait = deadline;
        match classify(&buf[..n]) {
            Opening::Http => return Peeked::Http,
            Opening::Tunnel(first) => {
                buf.truncate(n);
                return Peeked::Tunnel(first, buf);
            }
            Opening::Undecided if n >= max_head && buf[0] != TLS_HANDSHAKE => return Peeked::Http,
            Opening::Undecided if n == buf.len() && n < limit => buf.resize((n * 4).min(limit), 0),
            Opening::Undecided => {
                // The bytes stay unread, so readiness stays set: look again a little later
                // rather than spinning.
                if Instant::now() + backoff > deadline {
                    return match buf[0] {
                        TLS_HANDSHAKE => Peeked::Tunnel(FirstBytes::Unreadable, buf[..n].to_vec()),
                        _ => Peeked::Unfinished {
                            tls: false,
                            timed_out: true,
                        },
                    };
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
        }
    }
}

/// The first peek's size: a request head or a ClientHello usually fits.
const FIRST_PEEK: usize = 4096;

/// Serve one connection accepted on the transparent listener.
pub(crate) async fn serve_redirected(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<State>,
    (done, pending): (mpsc::Sender<()>, PendingSlot),
    upstream: Arc<pool::Upstream>,
) {
    let _ = stream.set_nodelay(true);
    // A connection made to the listener itself was not redirected: it has nowhere to go.
    let not_redirected = |orig: SocketAddr| stream.local_addr().is_ok_and(|l| l == orig);
    let orig = match original_dst(&stream) {
        Ok(orig) if not_redirected(orig) => {
            let client = Client::new(peer, Asked::BeforeRequest).via(Via::Transparent);
            let refusal = Refusal::malformed("a connection to the transparent listener itself");
            audit_refusal(&state, &client, &refusal, None).await;
            return;
        }
        Ok(orig) => orig,
        Err(e) => {
            // Not redirected (connected to the listener directly): nothing to judge by.
            let client = Client::new(peer, Asked::BeforeRequest).via(Via::Transparent);
            let refusal =
                Refusal::malformed(format!("no original destination for this connection: {e}"));
            audit_refusal(&state, &client, &refusal, None).await;
            return;
        }
    };
    let name = match SyntheticNames::in_range(orig.ip()) {
        true => state.synthetic.name_for(orig.ip()),
        false => None,
    };
    // Only a name has a server that may speak first: a literal address waits as long as
    // for a request head.
    let limits = &state.limits;
    let silence = match name {
        Some(_) => SILENT_CLIENT,
        None => limits.header_timeout,
    };
    let redirected = Redirected { orig, name };
    match peek_first(
        &stream,
        silence,
        limits.header_timeout,
        limits.max_header_bytes,
    )
    .await
    {
        Peeked::Gone => {}
        Peeked::Unfinished { tls, timed_out } => {
            if timed_out {
                state.metrics.header_timeouts.inc();
                tracing::info!(client = %peer, timeout = ?limits.header_timeout, "refused a redirected connection that finished no request line in time");
            }
            unfinished::refuse(&state, peer, &redirected, tls).await;
        }
        Peeked::Http => {
            let aimed_at = Some(Arc::from(redirected.authority()));
            // Counted until its first request head is complete.
            conn::serve_connection(stream, peer, state, (done, pending), upstream, aimed_at).await
        }
        Peeked::Tunnel(first, bytes) => {
            drop(pending);
            let first = (first, bytes);
            tunnel_redirected(stream, peer, redirected, first, state, done, upstream).await
        }
    }
}

/// Judge a redirected connection as a tunnel to `NAME:PORT` (or its address), then open
/// it or close it.
async fn tunnel_redirected(
    stream: TcpStream,
    peer: SocketAddr,
    redirected: Redirected,
    (first, bytes): (FirstBytes, Vec<u8>),
    state: Arc<State>,
    done: mpsc::Sender<()>,
    pool: Arc<pool::Upstream>,
) {
    let client = Client::new(peer, Asked::Connect)
        .via(Via::Transparent)
        .traced(&state, || None);
    let target = redirected.target();
    // The address stands for one name: a server name naming another is domain fronting.
    if let (
        Some(name),
        FirstBytes::Tls {
            server_name: Some(sni),
        },
    ) = (&redirected.name, &first)
    {
        if HostName::parse(sni).ok().as_ref() != Some(name) {
            let refusal = Refusal::new(Reason::HostMismatch, name.to_string(), target.port)
                .with_detail(format!(
                    "server name {sni} is not {name}, the name this address stands for"
                ));
            audit_refusal(&state, &client, &refusal, None).await;
            return;
        }
    }
    let ask = Ask::tunnel(target, Credentials::None);
    let approved = match judge::judge(ask, Scope::Connection, &state, &client).await {
        Ok(approved) => approved,
        Err(stop) => return record_stop(&state, &client, &stop, || None).await,
    };
    let tunnels = approved.policies.org.tunnels();
    let canaries = approved.canaries();
    let judged = client_hello::judge_first(
        &first,
        &bytes,
        &approved.target,
        tunnels,
        &canaries,
        &approved.detectors,
    );
    match judged {
        Err(refusal) => {
            let refusal = refusal.in_session(&approved.session);
            let on_trip = exfiltration::on_trip(&approved.policies, approved.session.as_ref());
            exfiltration::end_session(&state, on_trip, approved.session.as_ref(), &refusal).await;
            return audit_refusal(&state, &client, &refusal, None).await;
        }
        // Let through and recorded: `[dlp] action = "report"` (docs/reference/dlp.md).
        Ok(Some(hit)) => audit_flagged_first(&state, &client, &approved, hit),
        Ok(None) => {}
    }
    count_approved(&state, &client, &approved);
    tunnel::open_redirected(stream, approved, state, client, done, Arc::new(pool)).await;
}
