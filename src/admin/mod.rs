//! The control plane (docs/reference/control-plane.md): an HTTP API on its own listener, never the proxy port.
//!
//! Every call is first checked by [`guard`] (its `Host`, its `Origin`, a JSON body), then
//! every call but `GET /healthz` and the console's files needs `Authorization: Bearer
//! <token>`, compared in constant time; without it the answer is `401` and nothing else.
//! Bodies are JSON.
//!
//! - [`sessions`]: `POST/GET /v1/sessions`, `GET/DELETE /v1/sessions/{id}`.
//! - [`reload`]: reloading the policies (SIGHUP and `POST /v1/reload`).
//! - [`watch`]: reloading when the policy files change (`--watch-policy`).
//! - [`events`]: `GET /v1/events`, audit records as Server-Sent Events.
//! - [`approvals`]: `GET /v1/approvals`, `POST /v1/approvals/{id}`: requests held for a
//!   reviewer.
//! - [`ui`]: `GET /ui`, the console: one page from the binary, a client of this API.
//!
//! `GET /metrics` serves [`crate::metrics`] as Prometheus text.

pub(crate) mod approvals;
pub(crate) mod events;
pub(crate) mod guard;
pub(crate) mod reload;
pub(crate) mod sessions;
pub(crate) mod ui;
pub(crate) mod watch;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::judgement::{Phase, State};
use crate::session::constant_time_eq;
use reload::Reloader;

/// The body of every admin answer: whole, built before it is sent, so it never fails.
pub(crate) type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// The largest request body the API reads.
const MAX_BODY: usize = 256 * 1024;

/// What the API serves from.
pub(crate) struct Admin {
    pub state: Arc<State>,
    /// The bearer token; `None` only on a loopback listener started without a token file.
    pub token: Option<String>,
    pub reloader: Arc<Reloader>,
    /// The names the listener answers to (`--admin-host`).
    pub names: guard::Names,
}

/// Connections the admin listener serves at once; past it, new ones wait in the kernel's
/// backlog, unaccepted (docs/reference/control-plane.md, "Limits").
const MAX_CONNECTIONS: usize = 256;

/// Serve the API on `listener` until the proxy starts shutting down.
pub(crate) async fn serve(listener: TcpListener, admin: Arc<Admin>) {
    let mut phase = admin.state.phase.subscribe();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A slot first, then accept: past the cap a connection waits in the backlog and
        // holds no descriptor of this process.
        let slot = tokio::select! {
            _ = async { drop(phase.wait_for(|p| *p != Phase::Serving).await) } => return,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = async { drop(phase.wait_for(|p| *p != Phase::Serving).await) } => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        bound_send_buffer(&stream);
        let local = stream.local_addr().ok();
        let admin = admin.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let closer = events::Closer::default();
            let closed = closer.clone();
            let header_timeout = admin.state.limits.header_timeout;
            let service = service_fn(move |req| {
                let (admin, closer) = (admin.clone(), closer.clone());
                async move { Ok::<_, Infallible>(handle(req, &admin, local, &closer).await) }
            });
            // An idle connection, new or kept alive, is closed after --header-timeout.
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                done = conn => if let Err(e) = done {
                    tracing::debug!(client = %peer, error = %e, "admin connection ended with an error");
                },
                // An event reader dropped (docs/reference/control-plane.md, "Events"):
                // its socket is closed here, whatever is still unsent.
                () = closed.notified() => {}
            }
        });
    }
}

async fn handle(
    req: Request<Incoming>,
    admin: &Admin,
    local: Option<std::net::SocketAddr>,
    closer: &events::Closer,
) -> Response<Body> {
    if let Some(refused) = guard::refuse(&req, &admin.names, local) {
        return refused;
    }
    let path = req.uri().path().to_string();
    if path == "/healthz" {
        return match *req.method() {
            // While the audit log cannot be written the proxy refuses everything: not
            // healthy, so a load balancer sends clients elsewhere.
            Method::GET | Method::HEAD if admin.state.audit.refusing() => error(
                StatusCode::SERVICE_UNAVAILABLE,
                "audit_unavailable",
                "the audit log cannot be written; every request is refused until it can",
            ),
            // Nor while the session store cannot be reached: sessions cannot be served.
            Method::GET | Method::HEAD if !admin.state.sessions.available() => error(
                StatusCode::SERVICE_UNAVAILABLE,
                "session_store_unavailable",
                "the session store cannot be reached; requests with session credentials are refused until it can",
            ),
            Method::GET | Method::HEAD => {
                json_response(StatusCode::OK, json!({"status": "serving"}))
            }
            _ => method_not_allowed(),
        };
    }
    // The console's files hold no secret; the page sends the token on its own calls.
    if let Some(resp) = ui::serve(req.method(), &path) {
        return resp;
    }
    if !authorized(&req, admin.token.as_deref()) {
        let mut resp = error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid bearer token is required",
        );
        resp.headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return resp;
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = req.method().clone();
    match (method, segments.as_slice()) {
        (Method::GET, ["metrics"]) => metrics(admin),
        (_, ["metrics"]) => method_not_allowed(),
        (Method::POST, ["v1", "reload"]) => match admin.reloader.reload().await {
            Ok(done) => json_response(StatusCode::OK, json!(done)),
            Err(e) => error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "reload_failed",
                &e.to_string(),
            ),
        },
        (_, ["v1", "reload"]) => method_not_allowed(),
        (Method::GET, ["v1", "events"]) => events::stream(admin, req.uri().query(), closer),
        (_, ["v1", "events"]) => method_not_allowed(),
        (Method::GET, ["v1", "approvals"]) => approvals::list(admin),
        (_, ["v1", "approvals"]) => method_not_allowed(),
        (Method::POST, ["v1", "approvals", id]) => match read_json(req).await {
            Ok(body) => approvals::decide(admin, id, body).await,
            Err(resp) => resp,
        },
        (_, ["v1", "approvals", _]) => method_not_allowed(),
        (Method::POST, ["v1", "sessions"]) => match read_json(req).await {
            Ok(body) => sessions::create(admin, body).await,
            Err(resp) => resp,
        },
        (Method::GET, ["v1", "sessions"]) => sessions::list(admin).await,
        (_, ["v1", "sessions"]) => method_not_allowed(),
        (Method::GET, ["v1", "sessions", id]) => sessions::get(admin, id).await,
        (Method::DELETE, ["v1", "sessions", id]) => sessions::delete(admin, id).await,
        (_, ["v1", "sessions", _]) => method_not_allowed(),
        _ => error(StatusCode::NOT_FOUND, "not_found", "no such endpoint"),
    }
}

/// The kernel's send buffer of an admin connection, fixed rather than grown up to
/// megabytes: a stuck event reader then fills it, and its queue, within a few hundred
/// records and is dropped (docs/reference/control-plane.md, "Events"), holding little
/// memory until it is. Every other answer of the API is small.
const SEND_BUFFER: usize = 64 * 1024;

#[cfg(target_os = "linux")]
fn bound_send_buffer(stream: &tokio::net::TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    if let Err(e) = setsockopt(stream, sockopt::SndBuf, &SEND_BUFFER) {
        tracing::debug!(error = %e, "cannot bound an admin connection's send buffer");
    }
}

#[cfg(not(target_os = "linux"))]
fn bound_send_buffer(_stream: &tokio::net::TcpStream) {}

/// `Authorization: Bearer <token>`, compared in constant time.
fn authorized<B>(req: &Request<B>, token: Option<&str>) -> bool {
    let Some(token) = token else {
        return true;
    };
    let mut values = req.headers().get_all(AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Some(given) = value
        .as_bytes()
        .strip_prefix(b"Bearer ")
        .or_else(|| value.as_bytes().strip_prefix(b"bearer "))
    else {
        return false;
    };
    constant_time_eq(given.trim_ascii(), token.as_bytes())
}

fn metrics(admin: &Admin) -> Response<Body> {
    let audit = &admin.state.audit;
    let text =
        admin
            .state
            .metrics
            .encode(audit.lines_written(), audit.lines_lost(), audit.failing());
    let mut resp = Response::new(full(text));
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

/// The request body as JSON, or the `400` to answer.
async fn read_json(req: Request<Incoming>) -> Result<Value, Response<Body>> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_BODY);
    let bytes = match limited.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                &format!("cannot read the body: {e}"),
            ))
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            &format!("the body is not JSON: {e}"),
        )
    })
}

fn full(text: impl Into<Bytes>) -> Body {
    Full::new(text.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A JSON answer.
pub(crate) fn json_response(status: StatusCode, body: Value) -> Response<Body> {
    let mut resp = Response::new(full(format!("{body}\n")));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// `{"error": {"type": KIND, "message": MESSAGE}}` with `status`.
pub(crate) fn error(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    json_response(status, json!({"error": {"type": kind, "message": message}}))
}

fn method_not_allowed() -> Response<Body> {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method",
    )
}

/// An empty answer with `status` (the `204` of a DELETE).
pub(crate) fn empty(status: StatusCode) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}
