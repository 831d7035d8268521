//! Intercepted tunnels (docs/reference/inspection.md): for a `CONNECT` (or a redirected
//! TLS connection) to an inspected host, the proxy completes the client's handshake with
//! a leaf certificate for the host, reads the requests inside (HTTP/1.1, or h2's
//! streams), and judges each one with the same code as every other request
//! ([`judge::judge`], `Scope::Inside`). An allowed request is forwarded by [`forward::forward`]
//! over TLS to the tunnel's checked addresses, verified for the `CONNECT` name; a
//! refusal is answered by [`answer`] over the intercepted connection.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::h2_limits;
use super::pool::Upstream;
use super::{answer, forward, request, websocket, Body};
use crate::audit::Via;
use crate::judgement::approved::Approved;
use crate::judgement::approved::Scope;
use crate::judgement::judge;
use crate::judgement::record::{record_stop, Client};
use crate::judgement::relayed::Relayed;
use crate::judgement::State;
use crate::net::dial::CheckedAddr;
use crate::tunnel::{ClientSide, Inspect, Prefixed, Tunnel};

/// Interception for the tunnel engine: a worker's upstream pool serves the tunnels it
/// hands over ([`crate::tunnel::Inspect`]).
impl Inspect for Arc<Upstream> {
    fn serve<'a>(
        &'a self,
        client: ClientSide,
        first: Vec<u8>,
        upstream: TcpStream,
        dialed: CheckedAddr,
        tunnel: Tunnel<'a>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        let inside = Inside {
            tunnel: tunnel.approved,
            state: tunnel.state,
            peer: tunnel.peer,
            via: tunnel.via,
            pool: self,
            relayed: tunnel.relayed,
        };
        Box::pin(serve(client, first, upstream, dialed, inside))
    }
}

/// The tunnel being intercepted: what every request inside is judged against.
pub(crate) struct Inside<'a> {
    pub tunnel: &'a Approved,
    pub state: &'a Arc<State>,
    pub peer: SocketAddr,
    pub via: Via,
    pub pool: &'a Arc<Upstream>,
    /// What the requests inside add their bytes to, for the tunnel's record.
    pub relayed: Option<Relayed>,
}

/// Serve an intercepted tunnel until the client closes it: `first` are the client bytes
/// already read (its ClientHello), `upstream` the connection made to the checked address
/// when the tunnel was approved (kept for the first request).
pub(crate) async fn serve<S>(
    io: S,
    first: Vec<u8>,
    upstream: TcpStream,
    dialed: CheckedAddr,
    inside: Inside<'_>,
) where
    // Sent and kept: a WebSocket's upgrade hands the connection over.
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = inside.state;
    let Some(interception) = state.interception.as_ref() else {
        // Start-up refuses a policy that inspects without `--ca`; a tunnel never gets here
        // without one.
        tracing::warn!("an intercepted tunnel without a CA: closed");
        return;
    };
    let name = inside.tunnel.target.host.to_string();
    let config = match interception.leaves.config_for(&name) {
        Ok(config) => config,
        Err(e) => {
            tracing::warn!(error = %e, "cannot make a certificate; tunnel closed");
            return;
        }
    };
    let accept = TlsAcceptor::from(config).accept(Prefixed::new(first, io));
    let tls = match tokio::time::timeout(state.limits.header_timeout, accept).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::info!(host = %name, error = %e, "client refused the TLS handshake of an intercepted tunnel (does it trust the proxy's CA?)");
            return;
        }
        Err(_) => return,
    };
    let tls_name: Arc<str> = Arc::from(name.as_str());
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    match inside
        .pool
        .handshake(upstream, dialed, Some(&tls_name), h2)
        .await
    {
        Ok(lease) => inside.pool.put_back(lease),
        // The first request dials again, and answers 502 if it fails the same way.
        Err(e) => tracing::debug!(host = %name, error = %e, "upstream TLS failed"),
    }
    if h2 {
        return serve_h2(tls, &inside, &name).await;
    }
    let service = service_fn(|req: Request<Incoming>| {
        let inside = &inside;
        async move { Ok::<_, Infallible>(handle(req, inside).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(super::timer::HeadTimer)
        .header_read_timeout(state.limits.header_timeout)
        .max_buf_size(state.limits.max_header_bytes.max(8192));
    let served = builder
        .serve_connection(TokioIo::new(tls), service)
        .with_upgrades();
    if let Err(e) = served.await {
        tracing::debug!(host = %name, error = %e, "intercepted connection ended with an error");
    }
}

/// What the streams of an HTTP/2 connection share. Each stream is a task of its own
/// (hyper's executor spawns it), so it holds the tunnel by `Arc`, not by reference.
struct Shared {
    tunnel: Approved,
    state: Arc<State>,
    peer: SocketAddr,
    via: Via,
    pool: Arc<Upstream>,
    relayed: Option<Relayed>,
}

impl Shared {
    fn inside(&self) -> Inside<'_> {
        Inside {
            tunnel: &self.tunnel,
            state: &self.state,
            peer: self.peer,
            via: self.via,
            pool: &self.pool,
            relayed: self.relayed.clone(),
        }
    }
}

/// An intercepted connection that chose `h2` (docs/reference/inspection.md, "HTTP/2"):
/// every stream a request judged and answered by [`handle`], as an HTTP/1.1 request is;
/// a refused stream gets its 403 and the connection goes on. The limits hold off a
/// hostile client: at most [`h2_limits::MAX_STREAMS`] streams at once, header lists no
/// larger than `--max-header-bytes` (CONTINUATION floods end there), and resets a client
/// provokes or sends bounded (rapid reset).
async fn serve_h2<S>(tls: S, inside: &Inside<'_>, name: &str)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let shared = Arc::new(Shared {
        tunnel: inside.tunnel.clone(),
        state: inside.state.clone(),
        peer: inside.peer,
        via: inside.via,
        pool: inside.pool.clone(),
        relayed: inside.relayed.clone(),
    });
    let service = service_fn(move |req: Request<Incoming>| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(req, &shared.inside()).await) }
    });
    let limits = &inside.state.limits;
    let mut builder = http2::Builder::new(TokioExecutor::new());
    h2_limits::apply(&mut builder, limits.max_header_bytes);
    // RFC 8441's SETTINGS_ENABLE_CONNECT_PROTOCOL: a WebSocket over h2 is an extended
    // `CONNECT` stream, judged and forwarded as the HTTP/1.1 handshake it stands for
    // (docs/reference/inspection.md, "WebSocket over HTTP/2"); it is one of the
    // connection's streams for the limits, for as long as it is open.
    builder.enable_connect_protocol();
    if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
        tracing::debug!(host = %name, error = %e, "intercepted h2 connection ended with an error");
    }
}

/// One request inside: judge it, then forward it or refuse it. An h2 stream's WebSocket
/// (an extended `CONNECT`) is judged and forwarded as the HTTP/1.1 handshake it stands
/// for, by the same code.
async fn handle(req: Request<Incoming>, inside: &Inside<'_>) -> Response<Body> {
    let req = websocket::as_handshake(req);
    let state = inside.state;
    let client = Client::new(inside.peer, request::asked(&req))
        .via(inside.via)
        .within(inside.relayed.clone())
        .traced(state, || request::traceparent(&req));
    tracing::debug!(request_id = %client.request_id, host = %inside.tunnel.target.host, method = %req.method(), path = req.uri().path(), "a request inside an intercepted tunnel");
    let tunnel = inside.tunnel;
    let url = || request::inspected_url(&req, &tunnel.target);
    let max_head = state.limits.max_header_bytes;
    let judged = match request::ask(&req, Some(&tunnel.target), max_head, Some(&url)) {
        Ok(ask) => judge::judge(ask, Scope::Inside(tunnel), state, &client).await,
        Err(refusal) => Err(refusal.in_session(&tunnel.session).into()),
    };
    match judged {
        // Counted by `forward` once its head is paid for.
        Ok(approved) if approved.websocket => {
            let pool = inside.pool.clone();
            Box::pin(websocket::forward(
                req,
                approved,
                state.clone(),
                client,
                pool,
            ))
            .await
        }
        Ok(approved) => forward::forward(req, approved, state.clone(), client, inside.pool).await,
        Err(stop) => {
            let url = || Some(request::inspected_url(&req, &inside.tunnel.target));
            Box::pin(record_stop(state, &client, &stop, url)).await;
            let answer = answer::stop(&stop, client.request_id);
            match req.version() {
                // An h2 stream's unread request body, dropped before its answer is sent,
                // would reset the stream (CANCEL) and the client would never read the
                // answer. Held until the answer's end, the stream is closed cleanly
                // (RST_STREAM NO_ERROR, RFC 9113 8.1) and nothing more of it is read.
                Version::HTTP_2 => answer.map(|body| Holding::new(body, req.into_body()).boxed()),
                _ => answer,
            }
        }
    }
}

/// A response body that keeps the request's body alive until the response ends.
struct Holding {
    inner: Body,
    _held: Incoming,
}

impl Holding {
    fn new(inner: Body, held: Incoming) -> Holding {
        Holding { inner, _held: held }
    }
}

impl hyper::body::Body for Holding {
    type Data = bytes::Bytes;
    type Error = super::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
