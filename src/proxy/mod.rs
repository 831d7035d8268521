//! The server: per-connection HTTP/1.1, and the path every request takes
//! (target -> policy levels -> decide -> resolve -> address check -> forward or tunnel).
//!
//! - [`workers`]: the accept side, a single-threaded runtime per worker thread.
//! - [`preflight`]: a look at a connection's first request head, so that even a request
//!   hyper could not parse gets a full refusal.
//! - [`request`]: reading the target, the `Host` check and the `X-Network-Policy` header.
//! - [`judge`]: the policy and address decisions for one request, ending in approved
//!   addresses or a [`Refusal`].
//! - [`answer`]: the one place a refusal becomes a response.
//! - [`forward`]: plain HTTP forwarding; [`pool`] keeps each worker's upstream
//!   connections open between requests.
//! - [`tunnel`]: `CONNECT` tunnels; [`relay`] copies their bytes (on Linux bulk bytes
//!   go through `splice`, socket to pipe to socket, read in batches), [`idle`] watches
//!   for quiet ones and [`inspect`] judges their first bytes.

pub mod answer;
pub mod forward;
pub mod idle;
pub mod inspect;
pub mod judge;
pub mod limits;
pub mod pool;
pub mod preflight;
pub mod relay;
pub mod request;
#[cfg(target_os = "linux")]
pub mod splice;
pub mod tunnel;
pub mod workers;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use crate::audit::AuditLog;
use crate::metrics::{Metrics, Outcome};
use crate::net::resolve::Resolver;
use crate::policy::{OrgPolicy, Reason, RequestPolicy, Verdict, Widening};
use crate::session::SessionStore;

pub use judge::Refusal;
pub use workers::Server;

/// The body type of every response the proxy sends.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// Limits and timeouts of the server.
#[derive(Debug, Clone)]
pub struct Limits {
    pub connect_timeout: Duration,
    pub header_timeout: Duration,
    pub max_connections: usize,
    /// How long a connection over `max_connections` waits for a slot before its 503.
    pub connection_wait: Duration,
    pub max_header_bytes: usize,
    pub tunnel_idle_timeout: Duration,
    /// Open tunnels one session may hold (`--max-tunnels-per-session`).
    pub max_tunnels_per_session: usize,
    pub shutdown_grace: Duration,
}

/// The policies in force. A reload builds a new one and swaps it in whole, so a request
/// sees either the old set or the new one, never a mix.
#[derive(Debug)]
pub struct Policies {
    pub org: OrgPolicy,
    /// `--policy`, when given: the level above every session.
    pub proxy: Option<RequestPolicy>,
    /// The request-level policy of a request without a session: `--policy`, or the
    /// organization's default.
    pub policy: RequestPolicy,
    /// Set when a reload left `--policy` widening the new organization policy: every
    /// request is refused with `policy_widening` until a reload fixes it (SPEC 10).
    pub widening: Option<Widening>,
}

impl Policies {
    /// The policies at start-up, where `--policy` is already known to narrow `org`.
    pub fn new(org: OrgPolicy, proxy: Option<RequestPolicy>) -> Policies {
        let policy = proxy
            .clone()
            .unwrap_or_else(|| org.default_policy().clone());
        Policies {
            org,
            proxy,
            policy,
            widening: None,
        }
    }
}

/// What every connection shares: the compiled policies, the resolver, the audit log.
pub struct State {
    /// Read once per request ([`State::policies`]); replaced whole by a reload.
    pub policies: RwLock<Arc<Policies>>,
    pub sessions: Arc<SessionStore>,
    pub metrics: Arc<Metrics>,
    /// Sessions exist only with the admin API (`--admin-listen`). Without it,
    /// `Proxy-Authorization` is not judged (and is still stripped before forwarding).
    pub sessions_enabled: bool,
    /// `--require-session`: every proxied request needs session credentials.
    pub require_session: bool,
    pub resolver: Resolver,
    pub audit: AuditLog,
    pub audit_allowed: bool,
    /// The proxy's own listening addresses, always refused as destinations.
    pub own: Vec<SocketAddr>,
    pub limits: Limits,
    /// Open tunnels per client address (`--max-tunnels-per-client`).
    pub tunnels: Arc<limits::TunnelCounts>,
    /// The server's phase; connections and tunnels subscribe to it.
    pub phase: watch::Sender<Phase>,
}

impl State {
    /// The policies in force now. The lock is held only to clone the `Arc`.
    pub fn policies(&self) -> Arc<Policies> {
        self.policies
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Put `new` in force for every request judged from now on.
    pub fn swap_policies(&self, new: Policies) {
        *self.policies.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
    }
}

/// Who is asking: carried through a request for the audit record.
#[derive(Debug, Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub request_id: String,
    pub method: String,
}

/// Where the server is in its life: connections and tunnels watch this to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Serving,
    /// A shutdown signal came: finish in-flight requests, no more keep-alive.
    Draining,
    /// The grace period is over: tunnels close.
    Closing,
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<State>,
    done: mpsc::Sender<()>,
    upstream: Arc<pool::Upstream>,
) {
    let _ = stream.set_nodelay(true);
    let limits = &state.limits;
    match preflight::first_head(&stream, limits.max_header_bytes, limits.header_timeout).await {
        preflight::Preflight::Ready => {}
        preflight::Preflight::Gone => return,
        preflight::Preflight::TimedOut => {
            // A limit hit, logged once per connection; there is no request to audit.
            tracing::info!(client = %peer, timeout = ?limits.header_timeout, "closed a connection that sent no complete request head in time");
            return;
        }
        preflight::Preflight::Refuse(status, refusal) => {
            let client = Client {
                addr: peer,
                request_id: crate::audit::new_request_id(),
                method: String::new(),
            };
            judge::audit_refusal(&state, &client, &refusal, None);
            answer::write_raw(stream, &refusal, &client.request_id, status).await;
            return;
        }
    }
    let io = TokioIo::new(stream);
    let svc_state = state.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let state = svc_state.clone();
        let done = done.clone();
        let upstream = upstream.clone();
        async move { Ok::<_, Infallible>(handle(req, peer, state, done, &upstream).await) }
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
            let client = Client {
                addr: peer,
                request_id: crate::audit::new_request_id(),
                method: String::new(),
            };
            let refusal = Refusal::malformed(format!("unparseable request: {e}"));
            judge::audit_refusal(&state, &client, &refusal, None);
        } else {
            tracing::debug!(client = %peer, error = %e, "connection ended with an error");
        }
    }
}

/// Over the connection limit: answer 503 `limit_exceeded` and close.
async fn refuse_over_limit(stream: TcpStream, peer: SocketAddr, state: Arc<State>) {
    let refusal = Refusal::new(Reason::LimitExceeded, String::new(), 0);
    let client = Client {
        addr: peer,
        request_id: crate::audit::new_request_id(),
        method: String::new(),
    };
    judge::audit_refusal(&state, &client, &refusal, None);
    answer::write_raw(stream, &refusal, &client.request_id, 503).await;
}

/// One request: judge it, then forward, tunnel, or refuse.
async fn handle(
    req: Request<Incoming>,
    peer: SocketAddr,
    state: Arc<State>,
    done: mpsc::Sender<()>,
    upstream: &Arc<pool::Upstream>,
) -> Response<Body> {
    let client = Client {
        addr: peer,
        request_id: crate::audit::new_request_id(),
        method: req.method().to_string(),
    };
    let approved = match judge::judge(&req, &state, &client).await {
        Ok(approved) => approved,
        Err(stop) => {
            match &stop {
                judge::Stop::Denied(refusal) => {
                    judge::audit_refusal(&state, &client, refusal, judge::plain_url(&req))
                }
                judge::Stop::Failed(failure) => {
                    judge::count(&state, &client, Outcome::Failed);
                    tracing::info!(request_id = %client.request_id, "{}", failure.message)
                }
            }
            return answer::stop(&stop, &client.request_id);
        }
    };
    let outcome = match (approved.decision.verdict, approved.decision.reason) {
        (Verdict::WouldDeny, Some(reason)) => Outcome::WouldDeny(reason),
        _ => Outcome::Allowed,
    };
    judge::count(&state, &client, outcome);
    if req.method() == hyper::Method::CONNECT {
        tunnel::open(req, approved, state, client, done).await
    } else {
        forward::forward(req, approved, state, client, upstream).await
    }
}
