//! One client connection: the first-head look ([`super::preflight`]), then hyper's
//! HTTP/1.1 server, handing each request to [`handle`]: judge it, then forward, tunnel or
//! refuse.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::record::{audit_refusal, count, count_approved, plain_url, Asked, Client};
use super::refusal::{Limit, Refusal, Stop};
use super::state::{Phase, State};
use super::transparent::Redirected;
use super::{answer, forward, judge, pool, preflight, tunnel, Body};
use crate::audit::Via;
use crate::metrics::Outcome;

/// Serve one client connection: the explicit proxy's, or (`redirected`) an HTTP/1
/// connection the transparent listener took, whose requests are judged by where they
/// were going.
pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<State>,
    done: mpsc::Sender<()>,
    upstream: Arc<pool::Upstream>,
    redirected: Option<Arc<Redirected>>,
) {
    let _ = stream.set_nodelay(true);
    let limits = &state.limits;
    match preflight::first_head(&stream, limits.max_header_bytes, limits.header_timeout).await {
        preflight::Preflight::Ready => {}
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
    let service = service_fn(move |req: Request<Incoming>| {
        let state = svc_state.clone();
        let done = done.clone();
        let upstream = upstream.clone();
        let redirected = redirected.clone();
        async move {
            let req = match &redirected {
                None => req,
                Some(to) => aimed(req, to),
            };
            let via = match redirected {
                None => Via::Proxy,
                Some(_) => Via::Transparent,
            };
            Ok::<_, Infallible>(handle(req, peer, via, state, done, &upstream).await)
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(state.limits.header_timeout)
        .max_buf_size(state.limits.max_header_bytes.max(8192));
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let mut phase = state.phase.subscribe();
    let result = tokio::select! {
        result = conn.as_mut() => result,
        _ = async { drop(phase.wait_for(|p| *p != Phase::Serving).await) } => {
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
}

/// Over the connection limit: answer 503 `limit_exceeded` and close.
pub(crate) async fn refuse_over_limit(stream: TcpStream, peer: SocketAddr, state: Arc<State>) {
    let refusal = Refusal::limit(Limit::Connections, None);
    refuse_before_request(stream, peer, &state, refusal).await;
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
    answer::write_raw(stream, &refusal, &client.request_id).await;
}

/// A redirected request aimed where its connection was going: its target becomes
/// `http://AUTHORITY/path` (the name a synthetic address stands for, or the literal
/// address), whatever authority the request itself names. A `CONNECT` keeps its method
/// and is refused by the judge: a redirected connection is one destination already.
fn aimed<B>(req: Request<B>, to: &Redirected) -> Request<B> {
    let (mut parts, body) = req.into_parts();
    if parts.method == hyper::Method::CONNECT {
        // An empty target: `invalid_request`.
        parts.uri = hyper::Uri::from_static("/");
        parts.method = hyper::Method::GET;
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
    parts.uri = format!("http://{}{path}", to.authority())
        .parse()
        .unwrap_or_else(|_| hyper::Uri::from_static("/"));
    Request::from_parts(parts, body)
}

/// One request: judge it, then forward, tunnel, or refuse.
async fn handle(
    req: Request<Incoming>,
    peer: SocketAddr,
    via: Via,
    state: Arc<State>,
    done: mpsc::Sender<()>,
    upstream: &Arc<pool::Upstream>,
) -> Response<Body> {
    let client = Client::new(peer, Asked::of(&req)).via(via);
    let approved = match judge::judge(&req, &state, &client).await {
        Ok(approved) => approved,
        Err(stop) => {
            match &stop {
                Stop::Denied(refusal) => {
                    // Boxed: the wait for room in the audit queue stays out of every
                    // request's future (moved by memcpy per request); a denial pays
                    // one allocation instead.
                    Box::pin(audit_refusal(&state, &client, refusal, plain_url(&req))).await
                }
                Stop::Failed(failure) => {
                    count(&state, &client, Outcome::Failed);
                    tracing::info!(request_id = %client.request_id, "{}", failure.message)
                }
            }
            return answer::stop(&stop, &client.request_id);
        }
    };
    count_approved(&state, &client, &approved);
    match client.asked {
        Asked::Connect => tunnel::open(req, approved, state, client, done).await,
        _ => forward::forward(req, approved, state, client, upstream).await,
    }
}
