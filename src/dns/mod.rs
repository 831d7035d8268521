//! The DNS listener (`serve --dns-listen`, docs/reference/confinement.md, "DNS
//! listener"): inside a jail every DNS query, UDP or TCP, to port 53 of any address is
//! redirected here, and answered from the policy alone. An allowed name gets the
//! synthetic address that stands for it; a denied one `NXDOMAIN` and an audit record.
//! No query is ever sent upstream: the proxy resolves a real name only when a
//! connection to it is allowed.
//!
//! - [`answer`]: the answer to one message (pure).
//! - [`recent`]: the refusals audited a moment ago, so a resolver's `A` and `AAAA` for
//!   one lookup make one record.
//! - here: the UDP and TCP loops, counting and auditing what each answer came to, on a
//!   thread of their own (with its own single-threaded runtime, as each proxy worker
//!   has): every connection in a jail starts with a lookup, so an answer never waits
//!   behind the admin API, a reload compiling a large policy, or the audit writer.

pub mod answer;
pub mod recent;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::audit::Via;
use crate::metrics::Outcome;
use crate::policy::Reason;
use crate::proxy::record::{audit_refusal, audit_would_deny, Asked, Client};
use crate::proxy::{Phase, State};
use answer::{answer, Answer, Ask, Judged};
use recent::Recent;

/// TCP connections served at once; more are closed at once (a stub resolver uses TCP
/// only for the rare answer too large for UDP, and retries).
pub const MAX_TCP_CONNECTIONS: usize = 256;

/// The largest UDP datagram.
const MAX_DATAGRAM: usize = 65_535;

/// After the proxy stops serving, how long open TCP connections get to finish the
/// answer in hand (each stops at its next message).
const CLOSING_WAIT: Duration = Duration::from_secs(2);

/// What the loops share.
struct Listener {
    state: Arc<State>,
    recent: Recent,
    tcp_slots: Arc<Semaphore>,
}

/// The DNS listener's thread.
pub struct DnsThread {
    thread: JoinHandle<()>,
}

/// Serve DNS on `udp` and `tcp` (normally bound to one address), on a thread of its own,
/// until the proxy stops serving. Must be called inside a tokio runtime (the sockets are
/// registered with it; they move to the thread's own).
pub fn start(udp: UdpSocket, tcp: TcpListener, state: Arc<State>) -> io::Result<DnsThread> {
    let (udp, tcp) = (udp.into_std()?, tcp.into_std()?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Registered with the thread's runtime, here, so that a failure is the caller's.
    let (udp, tcp) = {
        let _in = runtime.enter();
        (UdpSocket::from_std(udp)?, TcpListener::from_std(tcp)?)
    };
    let listener = Arc::new(Listener {
        state,
        recent: Recent::new(),
        tcp_slots: Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS)),
    });
    let thread = std::thread::Builder::new()
        .name("egress-dns".into())
        .spawn(move || {
            runtime.block_on(async move {
                let tcp = tokio::spawn(serve_tcp(tcp, listener.clone()));
                serve_udp(udp, listener).await;
                let _ = tcp.await;
            })
        })?;
    Ok(DnsThread { thread })
}

impl DnsThread {
    /// Wait for the thread to end (it does once the proxy stops serving): every record
    /// of its answers is queued by then.
    pub async fn join(self) {
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}

/// Resolves once the proxy stops serving.
async fn stopped(state: &State) {
    let mut phase = state.phase.subscribe();
    let _ = phase.wait_for(|p| *p != Phase::Serving).await;
}

async fn serve_udp(socket: UdpSocket, listener: Arc<Listener>) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let stop = stopped(&listener.state);
    tokio::pin!(stop);
    loop {
        let (n, peer) = tokio::select! {
            biased;
            _ = &mut stop => return,
            received = socket.recv_from(&mut buf) => match received {
                Ok(got) => got,
                // Not fatal (no buffer for a moment, an error queued by an earlier
                // reply); the pause keeps a lasting one from spinning.
                Err(e) => {
                    tracing::debug!(error = %e, "DNS receive failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        if let Some(reply) = listener.handle(&buf[..n], peer).await {
            if let Err(e) = socket.send_to(&reply, peer).await {
                tracing::debug!(client = %peer, error = %e, "DNS reply not sent");
            }
        }
    }
}

async fn serve_tcp(tcp: TcpListener, listener: Arc<Listener>) {
    let stop = stopped(&listener.state);
    tokio::pin!(stop);
    let mut conns = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = tcp.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "DNS accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        while conns.try_join_next().is_some() {}
        let Ok(slot) = listener.tcp_slots.clone().try_acquire_owned() else {
            tracing::info!(client = %peer, max = MAX_TCP_CONNECTIONS, "closed a DNS connection over the limit");
            continue;
        };
        let listener = listener.clone();
        conns.spawn(async move {
            serve_tcp_connection(stream, peer, &listener).await;
            drop(slot);
        });
    }
    drop(tcp);
    let all_closed = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(CLOSING_WAIT, all_closed)
        .await
        .is_err()
    {
        conns.shutdown().await;
    }
}

/// Answer length-prefixed messages, one at a time, until the client closes, sends
/// nothing for `--header-timeout`, or the proxy stops.
async fn serve_tcp_connection(mut stream: TcpStream, peer: SocketAddr, listener: &Listener) {
    let timeout = listener.state.limits.header_timeout;
    let stop = stopped(&listener.state);
    tokio::pin!(stop);
    loop {
        let read = tokio::select! {
            read = tokio::time::timeout(timeout, read_message(&mut stream)) => read,
            _ = &mut stop => return,
        };
        let message = match read {
            Ok(Ok(message)) => message,
            // Closed, cut or idle: nothing more to answer.
            Ok(Err(_)) => return,
            Err(_) => {
                tracing::debug!(client = %peer, ?timeout, "closed an idle DNS connection");
                return;
            }
        };
        let Some(reply) = listener.handle(&message, peer).await else {
            return;
        };
        let Ok(len) = u16::try_from(reply.len()) else {
            return;
        };
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&reply);
        match tokio::time::timeout(timeout, stream.write_all(&framed)).await {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
}

/// One message of a DNS TCP stream: a two-byte length, then that many bytes.
async fn read_message(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let len = stream.read_u16().await?;
    let mut message = vec![0u8; usize::from(len)];
    stream.read_exact(&mut message).await?;
    Ok(message)
}

impl Listener {
    /// Answer one message from `peer`, counting it and auditing a refusal (before the
    /// answer goes out, as for every refusal). `None`: nothing to send back.
    async fn handle(&self, bytes: &[u8], peer: SocketAddr) -> Option<Vec<u8>> {
        let state = &*self.state;
        let policies = state.policies();
        let ask = Ask {
            policies: &policies,
            synthetic: &state.synthetic,
            audit_refusing: state.audit.refusing(),
        };
        let Answer { message, judged } = answer(bytes, &ask);
        let metrics = &state.metrics;
        let client = || Client::new(peer, Asked::Dns).via(Via::Dns);
        match judged {
            Judged::Allowed => metrics.dns_query(Outcome::Allowed),
            Judged::WouldDeny(refusal) => {
                metrics.dns_query(Outcome::WouldDeny(refusal.reason));
                if self.recent.first(peer, &refusal) {
                    audit_would_deny(state, &client(), &refusal, None).await;
                }
            }
            Judged::Denied(refusal) => {
                if self.recent.first(peer, &refusal) {
                    // Counts it too.
                    audit_refusal(state, &client(), &refusal, None).await;
                } else {
                    metrics.dns_query(Outcome::Denied(refusal.reason));
                }
            }
            Judged::AuditUnavailable => {
                metrics.dns_query(Outcome::Denied(Reason::AuditUnavailable))
            }
            Judged::Exhausted => {
                tracing::warn!("every synthetic address is taken: new allowed names get SERVFAIL");
                metrics.dns_query(Outcome::Failed)
            }
            Judged::Malformed => metrics.dns_query(Outcome::Denied(Reason::InvalidRequest)),
        }
        message
    }
}
