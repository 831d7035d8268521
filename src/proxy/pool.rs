//! One worker's upstream HTTP/1.1 connections, kept open between requests.
//!
//! Connections are made by [`dial`], so only checked addresses are ever reached, and are
//! kept by the address they reached: a request can only be sent over a connection to one
//! of its own approved addresses. A TLS connection (to an inspected host,
//! docs/reference/inspection.md) is kept by its address and the name its certificate was
//! verified for, so it serves only requests for that name. Every worker thread has its
//! own pool, so a connection's task runs on the thread of the requests that use it.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use foldhash::fast::RandomState;
use http_body_util::{BodyExt, Empty};
use hyper::body::{Body as _, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::sender::{self, Sender, WantsH2};
use super::Body;
use crate::net::dial::{dial, CheckedAddr, DialError};
use crate::net::parent::Parent;

/// A kept-open connection unused for this long is closed.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// At most this many kept-open connections per address; more are closed when returned.
const MAX_IDLE_PER_ADDR: usize = 512;
/// A kept-open connection idle this long may be closed by upstream (its own keep-alive
/// timeout) just as a request goes out over it. An idempotent request without a body
/// sent over such a connection is kept, and sent again over a new connection if the
/// first gets no answer (RFC 9110 9.2.2). Connections in steady use skip the copy.
const RETRY_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Why a request got no response from upstream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// No approved address took a connection.
    #[error("{0}")]
    Dial(#[from] DialError),
    /// The connection failed during the exchange.
    #[error("{0}")]
    Upstream(#[from] hyper::Error),
    /// The TLS handshake with upstream failed: its certificate did not verify for the
    /// name, or it does not speak TLS.
    #[error("TLS with upstream failed: {0}")]
    Tls(std::io::Error),
}

/// What a kept connection serves: its checked address and, for TLS, the name its
/// certificate was verified for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    addr: SocketAddr,
    tls: Option<Arc<str>>,
    /// Made for h2 streams: its TLS offered h2 ([`WantsH2`]).
    h2: bool,
}

/// A parent proxy a new connection goes through, and the authority it is asked for.
#[derive(Clone, Copy)]
pub(crate) struct Via<'a> {
    pub parent: &'a Parent,
    pub authority: &'a str,
}

/// A connection lent to one exchange; [`Upstream::put_back`] keeps it for the next
/// once the response body has been read to its end.
pub(crate) struct Lease {
    sender: Sender,
    addr: CheckedAddr,
    tls: Option<Arc<str>>,
    h2: bool,
}

impl Lease {
    /// The address this connection reached.
    pub(crate) fn addr(&self) -> CheckedAddr {
        self.addr
    }
}

struct Idle {
    sender: Sender,
    since: Instant,
}

/// The pool of one worker.
pub(crate) struct Upstream {
    connect_timeout: Duration,
    /// The client side of TLS to inspected hosts (`serve --ca`); `None` without it.
    tls: Option<TlsConnector>,
    /// The same, offering h2 as well, for the connections of h2 streams.
    tls_h2: Option<TlsConnector>,
    idle: Mutex<HashMap<Key, Vec<Idle>, RandomState>>,
}

impl Upstream {
    /// A pool that can also speak TLS to upstream, with `tls`.
    pub(crate) fn with_tls(
        connect_timeout: Duration,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Upstream {
        let tls_h2 = tls.as_ref().map(|config| {
            let mut config = (**config).clone();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            TlsConnector::from(Arc::new(config))
        });
        Upstream {
            connect_timeout,
            tls: tls.map(TlsConnector::from),
            tls_h2,
            idle: Mutex::new(HashMap::with_hasher(RandomState::default())),
        }
    }

    /// Send `req` over a kept-open connection to one of `addrs`, or else over a new one
    /// to the first of `addrs` (in order) that accepts. With `tls`, over TLS verified
    /// for that name. A request that went out over a kept connection which then failed
    /// is sent again only if `resend` says so (it pays for the second copy's head from
    /// the upload budget). With `via`, a new connection is a tunnel through that parent
    /// proxy to that authority (docs/reference/parent-proxy.md), kept by the same key.
    ///
    /// Not an `async fn` (whose future would hold each argument twice), and what is
    /// rare is boxed: a new connection, and the copy kept for a retry. This future is
    /// part of every forwarded request's, moved by memcpy.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps a copy of each argument"
    )]
    pub(crate) fn send<'a, R: FnMut() -> bool + 'a>(
        &'a self,
        addrs: &'a [CheckedAddr],
        mut req: Request<Body>,
        tls: Option<&'a Arc<str>>,
        via: Option<Via<'a>>,
        mut resend: R,
    ) -> impl Future<Output = Result<(Response<Incoming>, Lease), SendError>> + 'a {
        async move {
            // A kept-open connection that upstream closed meanwhile gives the request
            // back unsent; it then goes to the next one, or to a new connection.
            let h2 = req.extensions().get::<WantsH2>().is_some();
            while let Some((mut sender, addr, idle)) = self.checkout(addrs, tls, h2) {
                let again = (idle >= RETRY_AFTER_IDLE)
                    .then(|| retry_copy(&req).map(Box::new))
                    .flatten();
                match sender.try_send(req).await {
                    Ok(resp) => {
                        let tls = tls.cloned();
                        return Ok((
                            resp,
                            Lease {
                                sender,
                                addr,
                                tls,
                                h2,
                            },
                        ));
                    }
                    Err(mut e) => match (e.take_message(), again) {
                        (Some(unsent), _) => req = unsent,
                        (None, Some(copy)) if resend() => {
                            tracing::debug!(upstream = %addr.addr(), error = %e.error(), "a kept-open connection failed; sending the request again over a new one");
                            req = *copy;
                            break;
                        }
                        (None, _) => return Err(SendError::Upstream(e.into_error())),
                    },
                }
            }
            // Boxed: a new connection is rare on the request path, and the dial's and
            // handshake's futures (TLS included) would otherwise be part of every
            // request's.
            let mut lease = Box::pin(self.connect(addrs, tls, via, h2)).await?;
            let resp = lease.sender.send(req).await?;
            Ok((resp, lease))
        }
    }

    /// Send `req`, a WebSocket's handshake (`super::websocket`), over a new connection
    /// of its own, whose `101` hands the connection over: never one from the pool, and
    /// never kept (the pool's own connections need no upgrade machinery).
    pub(crate) async fn send_upgrade(
        &self,
        addrs: &[CheckedAddr],
        req: Request<Body>,
        tls: Option<&Arc<str>>,
        via: Option<Via<'_>>,
    ) -> Result<(Response<Incoming>, Lease), SendError> {
        let (stream, addr) = self.dial_via(addrs, via).await?;
        let mut lease = self.start(stream, addr, tls, false, true).await?;
        let resp = lease.sender.send(req).await?;
        Ok((resp, lease))
    }

    /// A new connection to the first of `addrs` (in order) that accepts, HTTP/1.1 started
    /// on it.
    async fn connect(
        &self,
        addrs: &[CheckedAddr],
        tls: Option<&Arc<str>>,
        via: Option<Via<'_>>,
        h2: bool,
    ) -> Result<Lease, SendError> {
        let (stream, addr) = self.dial_via(addrs, via).await?;
        self.start(stream, addr, tls, h2, false).await
    }

    /// A connection to the first of `addrs` that accepts, or through the parent.
    async fn dial_via(
        &self,
        addrs: &[CheckedAddr],
        via: Option<Via<'_>>,
    ) -> Result<(TcpStream, CheckedAddr), SendError> {
        let (stream, addr) = match (via, addrs.first()) {
            (Some(via), Some(&first)) => {
                let tunnel = via.parent.tunnel(via.authority, self.connect_timeout);
                (tunnel.await?, first)
            }
            _ => dial(addrs, self.connect_timeout).await?,
        };
        Ok((stream, addr))
    }

    /// Start HTTP/1.1 (over TLS verified for `tls`, when given) on a connection made to
    /// the checked address `addr`; with `h2`, over TLS that offers h2 too, and h2 when
    /// upstream takes it.
    pub(crate) async fn handshake(
        &self,
        stream: TcpStream,
        addr: CheckedAddr,
        tls: Option<&Arc<str>>,
        h2: bool,
    ) -> Result<Lease, SendError> {
        self.start(stream, addr, tls, h2, false).await
    }

    /// [`Upstream::handshake`], with HTTP/1.1's upgrades when `upgrades`.
    async fn start(
        &self,
        stream: TcpStream,
        addr: CheckedAddr,
        tls: Option<&Arc<str>>,
        h2: bool,
        upgrades: bool,
    ) -> Result<Lease, SendError> {
        let sender = match tls {
            None => sender::http1(TokioIo::new(stream), addr, upgrades).await?,
            Some(name) => {
                let connector = if h2 { &self.tls_h2 } else { &self.tls };
                let connector = connector.as_ref().ok_or_else(|| {
                    SendError::Tls(std::io::Error::other("no TLS client configured"))
                })?;
                let server_name = ServerName::try_from(name.to_string())
                    .map_err(|e| SendError::Tls(std::io::Error::other(e)))?;
                let handshake = connector.connect(server_name, stream);
                let tls_stream = tokio::time::timeout(self.connect_timeout, handshake)
                    .await
                    .map_err(|_| {
                        SendError::Tls(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "handshake timed out",
                        ))
                    })?
                    .map_err(SendError::Tls)?;
                match tls_stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                    true => sender::http2(TokioIo::new(tls_stream), addr).await?,
                    false => sender::http1(TokioIo::new(tls_stream), addr, upgrades).await?,
                }
            }
        };
        Ok(Lease {
            sender,
            addr,
            tls: tls.cloned(),
            h2,
        })
    }

    /// Keep a connection whose exchange is complete, for the next request to its address.
    pub(crate) fn put_back(&self, lease: Lease) {
        if lease.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let key = Key {
            addr: lease.addr.addr(),
            tls: lease.tls,
            h2: lease.h2,
        };
        let list = idle.entry(key).or_default();
        // An h2 connection stays in the list while lent: this is one of its handles.
        let shared = lease.sender.is_shared() && list.iter().any(|e| e.sender.is_shared());
        if !shared && list.len() < MAX_IDLE_PER_ADDR {
            list.push(Idle {
                sender: lease.sender,
                since: Instant::now(),
            });
        }
    }

    /// Close kept-open connections that upstream closed or that sat unused too long.
    pub(crate) fn sweep(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        for list in idle.values_mut() {
            list.retain(|e| !e.sender.is_closed() && e.since.elapsed() < IDLE_TIMEOUT);
        }
        idle.retain(|_, list| !list.is_empty());
    }

    /// The most recently returned usable connection to the first of `addrs` that has one,
    /// and how long it sat idle.
    fn checkout(
        &self,
        addrs: &[CheckedAddr],
        tls: Option<&Arc<str>>,
        h2: bool,
    ) -> Option<(Sender, CheckedAddr, Duration)> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        for &addr in addrs {
            let key = Key {
                addr: addr.addr(),
                tls: tls.cloned(),
                h2,
            };
            let Some(list) = idle.get_mut(&key) else {
                continue;
            };
            // An h2 connection serves every stream at once: lent as another handle,
            // and kept. Only connections made for h2 streams can be one, so a plain
            // request's checkout never scans its list for them.
            if h2 {
                list.retain(|e| !(e.sender.is_shared() && e.sender.is_closed()));
                if let Some(entry) = list.iter_mut().find(|e| e.sender.is_shared()) {
                    let idle = entry.since.elapsed();
                    entry.since = Instant::now();
                    if let Some(shared) = entry.sender.share() {
                        return Some((shared, addr, idle));
                    }
                }
            }
            let mut busy = Vec::new();
            let mut found = None;
            // One clock read for the whole list (each read is a vDSO call).
            let now = Instant::now();
            while let Some(entry) = list.pop() {
                let idle = now.saturating_duration_since(entry.since);
                if idle >= IDLE_TIMEOUT {
                    // Returned in time order: everything below is older still.
                    list.clear();
                    break;
                }
                if entry.sender.is_closed() {
                    continue;
                }
                // Not yet ready for another request (its connection task has not
                // caught up with the end of the last response): leave it for later.
                if !entry.sender.is_ready() {
                    busy.push(entry);
                    continue;
                }
                found = Some((entry.sender, idle));
                break;
            }
            list.extend(busy.into_iter().rev());
            if let Some((sender, idle)) = found {
                return Some((sender, addr, idle));
            }
        }
        None
    }
}

/// A copy of `req` to send again, if it may be: an idempotent method and no body.
fn retry_copy(req: &Request<Body>) -> Option<Request<Body>> {
    if !req.method().is_idempotent() || !req.body().is_end_stream() {
        return None;
    }
    let empty = Empty::new().map_err(|never| match never {}).boxed();
    let mut copy = Request::new(empty);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// Sweep `pool` every few seconds, for as long as the worker runs.
pub(crate) async fn sweep_every(pool: Arc<Upstream>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        pool.sweep();
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
