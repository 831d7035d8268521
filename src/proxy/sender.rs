//! One upstream connection's request side, HTTP/1.1 or h2 (docs/reference/inspection.md,
//! "HTTP/2"): an h2 stream inside an intercepted tunnel is sent over h2 when the origin
//! offers it by ALPN, one connection multiplexing the tunnel's streams; everything else
//! goes over HTTP/1.1.

use hyper::body::Incoming;
use hyper::client::conn::{http1, http2, TrySendError};
use hyper::header::{HeaderValue, HOST, TE};
use hyper::http::uri::{Authority, Scheme};
use hyper::{Request, Response, Uri, Version};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::Body;
use crate::net::dial::CheckedAddr;

/// Marks a request read from an h2 stream: its connection upstream offers h2 too.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WantsH2;

/// A connection's sender: HTTP/1.1 serves one exchange at a time; h2 is cloned, one
/// clone per exchange, all multiplexed on the connection.
pub(crate) enum Sender {
    H1(http1::SendRequest<Body>),
    H2(http2::SendRequest<Body>),
}

impl Sender {
    pub(crate) fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    pub(crate) fn is_ready(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_ready(),
            Sender::H2(s) => s.is_ready(),
        }
    }

    /// Whether it multiplexes (h2): kept in the pool while lent.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, Sender::H2(_))
    }

    /// Another handle on a shared (h2) connection.
    pub(crate) fn share(&self) -> Option<Sender> {
        match self {
            Sender::H2(s) => Some(Sender::H2(s.clone())),
            Sender::H1(_) => None,
        }
    }

    /// Send `req`, giving it back unsent if the connection had already closed.
    pub(crate) async fn try_send(
        &mut self,
        req: Request<Body>,
    ) -> Result<Response<Incoming>, TrySendError<Request<Body>>> {
        match self {
            Sender::H1(s) => s.try_send_request(req).await,
            Sender::H2(s) => s.try_send_request(for_h2(req)).await,
        }
    }

    pub(crate) async fn send(&mut self, req: Request<Body>) -> hyper::Result<Response<Incoming>> {
        match self {
            Sender::H1(s) => s.send_request(req).await,
            Sender::H2(s) => s.send_request(for_h2(req)).await,
        }
    }
}

/// A request built for HTTP/1.1 upstream (origin form, `Host` the approved authority)
/// made an h2 one: the target absolute (`:scheme https`, `:authority` from `Host`),
/// `Host` removed, and `te: trailers`, which gRPC servers require and which is the one
/// `TE` h2 allows (the proxy passes trailers on).
fn for_h2(mut req: Request<Body>) -> Request<Body> {
    if let Some(authority) = req
        .headers_mut()
        .remove(HOST)
        .and_then(|h| Authority::try_from(h.as_bytes()).ok())
    {
        let mut parts = req.uri().clone().into_parts();
        parts.scheme = Some(Scheme::HTTPS);
        parts.authority = Some(authority);
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
    *req.version_mut() = Version::HTTP_2;
    req.headers_mut()
        .insert(TE, HeaderValue::from_static("trailers"));
    req
}

/// h2 over `io` (TLS that chose it), its connection driven by a task of its own.
pub(crate) async fn http2<I>(io: I, addr: CheckedAddr) -> hyper::Result<Sender>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(io)
        .await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(upstream = %addr.addr(), error = %e, "upstream h2 connection ended with an error");
        }
    });
    Ok(Sender::H2(sender))
}

/// HTTP/1.1 over `io`, its connection driven by a task of its own; with `upgrades`, a
/// `101` hands the connection over (a WebSocket's, `super::websocket`).
pub(crate) async fn http1<I>(io: I, addr: CheckedAddr, upgrades: bool) -> hyper::Result<Sender>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = http1::handshake(io).await?;
    tokio::spawn(async move {
        let ended = match upgrades {
            true => conn.with_upgrades().await,
            false => conn.await,
        };
        if let Err(e) = ended {
            tracing::debug!(upstream = %addr.addr(), error = %e, "upstream connection ended with an error");
        }
    });
    Ok(Sender::H1(sender))
}
