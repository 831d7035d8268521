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
//! - here: the UDP and TCP loops, counting and auditing what each answer came to, on
//!   threads of their own: every connection in a jail starts with a lookup, so an answer
//!   never waits behind the admin API, a reload compiling a large policy, or the audit
//!   writer. UDP is a plain blocking loop (one `recvfrom` and one `sendto` a query, no
//!   readiness polling); TCP connections are tasks on a single-threaded runtime.

pub(crate) mod answer;
pub(crate) mod recent;

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::audit::Via;
use crate::judgement::record::{
    audit_flagged_query, audit_refusal, audit_would_deny, trace_allowed_query, Asked, Client,
};
use crate::judgement::refusal::Refusal;
use crate::judgement::{Phase, State};
use crate::metrics::Outcome;
use crate::policy::Reason;
use answer::{answer, Answer, Given, Settled};
use recent::Recent;

/// TCP connections served at once; more are closed at once (a stub resolver uses TCP
/// only for the rare answer too large for UDP, and retries).
pub(crate) const MAX_TCP_CONNECTIONS: usize = 256;

/// The largest UDP datagram.
const MAX_DATAGRAM: usize = 65_535;

/// After the proxy stops serving, how long open TCP connections get to finish the
/// answer in hand (each stops at its next message).
const CLOSING_WAIT: Duration = Duration::from_secs(2);

/// How long a quiet UDP loop waits for a datagram before it looks whether the proxy
/// still serves.
const STOP_POLL: Duration = Duration::from_millis(100);

/// What the loops share.
struct Listener {
    state: Arc<State>,
    recent: Recent,
    tcp_slots: Arc<Semaphore>,
}

/// The DNS listener's threads.
pub(crate) struct DnsThread {
    udp: JoinHandle<()>,
    tcp: JoinHandle<()>,
}

/// Serve DNS on `udp` and `tcp` (normally bound to one address), on threads of their
/// own, until the proxy stops serving. Must be called inside a tokio runtime (the
/// sockets are registered with it; they move to the threads).
pub(crate) fn start(udp: UdpSocket, tcp: TcpListener, state: Arc<State>) -> io::Result<DnsThread> {
    let udp = udp.into_std()?;
    udp.set_nonblocking(false)?;
    udp.set_read_timeout(Some(STOP_POLL))?;
    let tcp = tcp.into_std()?;
    let tcp_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Registered with the TCP thread's runtime, here, so that a failure is the caller's.
    let tcp = {
        let _in = tcp_runtime.enter();
        TcpListener::from_std(tcp)?
    };
    // Only to wait for room in the audit queue: no I/O or timer is driven on it.
    let audit_runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let listener = Arc::new(Listener {
        state,
        recent: Recent::new(),
        tcp_slots: Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS)),
    });
    let for_tcp = listener.clone();
    let tcp = std::thread::Builder::new()
        .name("egress-dns-tcp".into())
        .spawn(move || tcp_runtime.block_on(serve_tcp(tcp, for_tcp)))?;
    let udp = std::thread::Builder::new()
        .name("egress-dns-udp".into())
        .spawn(move || serve_udp(udp, &listener, &audit_runtime))?;
    Ok(DnsThread { udp, tcp })
}

impl DnsThread {
    /// Wait for the threads to end (they do once the proxy stops serving): every record
    /// of their answers is queued by then.
    pub(crate) async fn join(self) {
        let DnsThread { udp, tcp } = self;
        let _ = tokio::task::spawn_blocking(move || {
            let _ = udp.join();
            let _ = tcp.join();
        })
        .await;
    }
}

/// Resolves once the proxy stops serving.
async fn stopped(state: &State) {
    let mut phase = state.phase.subscribe();
    let _ = phase.wait_for(|p| *p != Phase::Serving).await;
}

fn serve_udp(socket: std::net::UdpSocket, listener: &Listener, audit: &tokio::runtime::Runtime) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while *listener.state.phase.borrow() == Phase::Serving {
        let (n, peer) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            // Quiet for STOP_POLL (or a signal): look at the phase again.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            // Not fatal (no buffer for a moment, an error queued by an earlier reply);
            // the pause keeps a lasting one from spinning.
            Err(e) => {
                tracing::debug!(error = %e, "DNS receive failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let (reply, record) = listener.judge(&buf[..n], peer);
        if let Some(record) = record {
            audit.block_on(record.write(&listener.state));
        }
        if let Some(reply) = reply {
            if let Err(e) = socket.send_to(&reply, peer) {
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

/// The audit record a refusal leaves, written before its answer goes out (as for every
/// refusal).
enum Record {
    Denied(Client, Refusal),
    WouldDeny(Client, Refusal),
    Flagged(Client, Refusal),
}

impl Record {
    async fn write(self, state: &State) {
        match self {
            // Counts it too.
            Record::Denied(client, refusal) => audit_refusal(state, &client, &refusal, None).await,
            Record::WouldDeny(client, refusal) => {
                audit_would_deny(state, &client, &refusal, None).await
            }
            Record::Flagged(client, refusal) => audit_flagged_query(state, &client, &refusal).await,
        }
    }
}

impl Listener {
    /// Answer one message from `peer` and count it; the record to write first, if any.
    /// The answer is `None` when nothing is sent back.
    fn judge(&self, bytes: &[u8], peer: SocketAddr) -> (Option<Vec<u8>>, Option<Record>) {
        let state = &*self.state;
        let policies = state.policies();
        let ask = Given {
            policies: &policies,
            synthetic: &state.synthetic,
            audit_refusing: state.audit.refusing(),
        };
        let Answer { message, judged } = answer(bytes, &ask);
        let metrics = &state.metrics;
        let client = || {
            Client::new(peer, Asked::Dns)
                .via(Via::Dns)
                .traced(state, || None)
        };
        let record = match judged {
            Settled::Allowed(granted) => {
                metrics.dns_query(Outcome::Allowed);
                // Its span alone: an allowed query writes no record.
                if let (true, Some(granted)) = (state.traced, granted) {
                    let (target, decision) = *granted;
                    trace_allowed_query(state, &client(), &target, &decision);
                }
                None
            }
            Settled::WouldDeny(refusal) => {
                metrics.dns_query(Outcome::WouldDeny(refusal.reason));
                let first = self.recent.first(peer, &refusal, bytes);
                first.then(|| Record::WouldDeny(client(), refusal))
            }
            Settled::Flagged(refusal) => {
                metrics.dns_query(Outcome::Allowed);
                let first = self.recent.first_flagged(peer, &refusal, bytes);
                first.then(|| Record::Flagged(client(), refusal))
            }
            Settled::Denied(refusal) => {
                if self.recent.first(peer, &refusal, bytes) {
                    Some(Record::Denied(client(), refusal))
                } else {
                    metrics.dns_query(Outcome::Denied(refusal.reason));
                    None
                }
            }
            Settled::AuditUnavailable => {
                metrics.dns_query(Outcome::Denied(Reason::AuditUnavailable));
                None
            }
            Settled::Exhausted => {
                tracing::warn!("every synthetic address is taken: new allowed names get SERVFAIL");
                metrics.dns_query(Outcome::Failed);
                None
            }
            Settled::Malformed => {
                metrics.dns_query(Outcome::Denied(Reason::InvalidRequest));
                None
            }
        };
        (message, record)
    }

    /// [`Listener::judge`], with its record written.
    async fn handle(&self, bytes: &[u8], peer: SocketAddr) -> Option<Vec<u8>> {
        let (message, record) = self.judge(bytes, peer);
        if let Some(record) = record {
            record.write(&self.state).await;
        }
        message
    }
}
