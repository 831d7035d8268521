//! One client connection: the first-head look ([`super::preflight`]), then hyper's
//! HTTP/1.1 server, handing each request to [`handle`]: judge it, then forward, tunnel or
//! refuse.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{answer, connect, forward, pool, preflight, request, websocket, woken, Body};
use crate::audit::Via;
use crate::judgement::approved::Scope;
use crate::judgement::judge;
use crate::judgement::pending::PendingSlot;
use crate::judgement::record::{
    audit_refusal, audit_refusal_detached, count_approved, record_stop, Asked, Client,
};
use crate::judgement::refusal::{Limit, Refusal, Stop};
use crate::judgement::request::split_host_port;
use crate::judgement::{Phase, State};

/// Serve one client connection: the explicit proxy's, or (`redirected`: the authority
/// it was going to) an HTTP/1 connection the transparent listener took, whose requests
/// are judged by where they were going.
pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<State>,
    (done, pending): (mpsc::Sender<()>, PendingSlot),
    upstream: Arc<pool::Upstream>,
    redirected: Option<Arc<str>>,
) {
    let _ = stream.set_nodelay(true);
    let limits = &state.limits;
    match preflight::first_head(&stream, limits.max_header_bytes, limits.header_timeout).await {
        // The first head is complete: no longer counted against --max-pending-per-client.
        preflight::Preflight::Ready => drop(pending),
        preflight::Preflight::Gone => return,
        preflight::Preflight::TimedOut => {
            // A limit hit, counted and logged once per connection; there is no request
            // to audit.
            state.metrics.header_timeouts.inc();
            tracing::info!(client = %peer, timeout = ?limits.header_timeout, "closed a connection that sent no complete request head in time");
            return;
        }
        preflight::Preflight::Refuse(refusal) => {
            refuse_before_request(stream, peer, &state, refusal).await;
            return;
        }
    }
    let io = TokioIo::new(stream);
    let svc_state = state.clone();
    // Requests hyper handed on: each records itself.
    let dispatched = Arc::new(AtomicUsize::new(0));
    let counted = dispatched.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let state = svc_state.clone();
        let done = done.clone();
        let upstream = upstream.clone();
        let redirected = redirected.clone();
        counted.fetch_add(1, Ordering::Relaxed);
        let req = match &redirected {
            None => req,
            Some(to) => aimed(req, to),
        };
        let via = match redirected {
            None => Via::Proxy,
            Some(_) => Via::Transparent,
        };
        // Made before the work is: hyper may drop the work before it first runs.
        let client = Client::new(peer, request::asked(&req))
            .via(via)
            .traced(&state, || request::traceparent(&req));
        let unanswered = Unanswered::new(state, client, req.uri());
        handle(req, unanswered, done, upstream)
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(super::timer::HeadTimer)
        .header_read_timeout(state.limits.header_timeout)
        .max_buf_size(state.limits.max_header_bytes.max(8192))
        // An answer's head and body copied into one buffer and written at once: a
        // queue of buffers for `writev` cost ~900 instructions a keep-alive request in
        // its bookkeeping, more than the copy (docs/development.md, `instructions.sh`).
        .writev(false);
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let mut phase = state.phase.subscribe();
    // Polled only when the phase changes, not each time the connection wakes.
    let stopping = woken::Woken::new(async move {
        drop(phase.wait_for(|p| *p != Phase::Serving).await);
    });
    let result = tokio::select! {
        result = conn.as_mut() => result,
        _ = stopping => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        if e.is_parse() || e.is_parse_too_large() {
            // hyper has already answered 400/431; the attempt still goes to the audit log.
            let client = Client::new(peer, Asked::BeforeRequest);
            let refusal = Refusal::malformed(format!("unparseable request: {e}"));
            audit_refusal(&state, &client, &refusal, None).await;
        } else {
            tracing::debug!(client = %peer, error = %e, "connection ended with an error");
        }
    }
    if dispatched.load(Ordering::Relaxed) == 0 {
        // The preflight saw a complete first head, but hyper handed nothing on: a client
        // that sends a head and closes at once can be read as closed before its request
        // is dispatched. The attempt is recorded all the same.
        let client = Client::new(peer, Asked::BeforeRequest);
        let refusal = Refusal::malformed("the client closed before its request was answered");
        audit_refusal(&state, &client, &refusal, None).await;
    }
}

/// Over the connection limit: answer 503 `limit_exceeded` and close.
///
/// Recorded with the listener it came through (`via`). A SOCKS5 client is closed after
/// the record, unanswered: no SOCKS5 reply fits before its greeting is read, and an HTTP
/// answer would be bytes it cannot read (docs/reference/socks5.md, "Replies").
pub(crate) async fn refuse_over_limit(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<State>,
    via: Via,
) {
    let refusal = Refusal::limit(Limit::Connections, None);
    let client = Client::new(peer, Asked::BeforeRequest).via(via);
    audit_refusal(&state, &client, &refusal, None).await;
    if via != Via::Socks5 {
        answer::write_raw(stream, &refusal, client.request_id).await;
    }
}

/// Audit and answer a refusal on a connection no HTTP server reads, then close it.
async fn refuse_before_request(
    stream: TcpStream,
    peer: SocketAddr,
    state: &State,
    refusal: Refusal,
) {
    let client = Client::new(peer, Asked::BeforeRequest);
    audit_refusal(state, &client, &refusal, None).await;
    answer::write_raw(stream, &refusal, client.request_id).await;
}

/// A redirected request aimed where its connection was going: its target becomes
/// `http://AUTHORITY/path` (the name a synthetic address stands for, or the literal
/// address), whatever authority the request itself names. A `CONNECT` keeps its method
/// and is refused by the judge: a redirected connection is one destination already.
fn aimed<B>(req: Request<B>, to: &str) -> Request<B> {
    let (mut parts, body) = req.into_parts();
    if parts.method == hyper::Method::CONNECT {
        // A target without a host: `invalid_request`, recorded as the `CONNECT` it was.
        parts.uri = hyper::Uri::from_static("/");
        return Request::from_parts(parts, body);
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let path = if path.starts_with('/') {
        path
    } else {
        "/".to_string()
    };
    parts.uri = format!("http://{to}{path}")
        .parse()
        .unwrap_or_else(|_| hyper::Uri::from_static("/"));
    Request::from_parts(parts, body)
}

/// One request: judge it, then forward, tunnel, or refuse. Not an `async fn`, whose
/// future would keep a second copy of each argument: hyper moves this future by memcpy
/// several times per request, so what it holds is kept to the judge's future or the
/// forwarded request's, and the cold paths (a stop, a tunnel) are boxed.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps a copy of each argument"
)]
fn handle(
    req: Request<Incoming>,
    unanswered: Unanswered,
    done: mpsc::Sender<()>,
    upstream: Arc<pool::Upstream>,
) -> impl Future<Output = Result<Response<Body>, Infallible>> {
    async move {
        let state = &unanswered.state;
        let url = || req.uri().to_string();
        let url: Option<&(dyn Fn() -> String + Send + Sync)> = match req.method() {
            &hyper::Method::CONNECT => None,
            _ => Some(&url),
        };
        let judged = match request::ask(&req, None, state.limits.max_header_bytes, url) {
            Ok(ask) => judge::judge(ask, Scope::Connection, state, unanswered.client()).await,
            Err(refusal) => Err(refusal.into()),
        };
        let approved = match judged {
            Ok(approved) => approved,
            // Boxed: the wait for room in the audit queue stays out of every request's
            // future; a stop pays one allocation instead.
            Err(stop) => return Ok(Box::pin(stopped(&req, unanswered, stop)).await),
        };
        // From here the tunnel's or the forwarded request's own record is written
        // however it ends.
        let (state, client) = unanswered.answered();
        let answer = match client.asked {
            Asked::Connect => {
                count_approved(&state, &client, &approved);
                // Boxed: a tunnel opens once per connection, and its future is larger
                // than a forwarded request's.
                Box::pin(connect::open(req, approved, state, client, done, upstream)).await
            }
            // Boxed: rare, and its future holds the whole handshake.
            _ if approved.websocket => {
                Box::pin(websocket::forward(req, approved, state, client, upstream)).await
            }
            // Counted by `forward` once its head is paid for.
            _ => forward::forward(req, approved, state, client, &upstream).await,
        };
        Ok(answer)
    }
}

/// A request the judgement stopped: recorded (a denial) or counted and logged (a
/// failure), then answered.
async fn stopped(req: &Request<Incoming>, unanswered: Unanswered, stop: Stop) -> Response<Body> {
    let state = &unanswered.state;
    let client = unanswered.client();
    record_stop(state, client, &stop, || request::plain_url(req)).await;
    answer::stop(&stop, unanswered.answered().1.request_id)
}

/// A request hyper handed on, until its answer or its own record takes over: hyper may
/// drop the request's work (even before it first runs) when the client closes before
/// the answer, and the attempt is then recorded here: `invalid_request`, "the client
/// closed before its request was answered".
struct Unanswered {
    state: Arc<State>,
    /// `None` once answered.
    client: Option<Client>,
    /// The target, for the record's host, port and (plain HTTP) `url`: a cheap clone, no
    /// string built unless the record is written.
    uri: hyper::Uri,
}

impl Unanswered {
    fn new(state: Arc<State>, client: Client, uri: &hyper::Uri) -> Unanswered {
        Unanswered {
            state,
            client: Some(client),
            uri: uri.clone(),
        }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a request is answered once")
    }

    /// The request is answered, or handed to code that records it: disarmed, and out of
    /// the request's future.
    fn answered(mut self) -> (Arc<State>, Client) {
        let client = self.client.take().expect("a request is answered once");
        (self.state.clone(), client)
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let mut refusal =
                Refusal::malformed("the client closed before its request was answered");
            let authority = self.uri.authority().map(|a| a.as_str());
            if let Some((host, port)) = authority.and_then(split_host_port) {
                refusal.host = host.to_string();
                refusal.port = port.unwrap_or(80);
            }
            let url = (client.asked != Asked::Connect).then(|| self.uri.to_string());
            audit_refusal_detached(&self.state, &client, &refusal, url);
        }
    }
}
