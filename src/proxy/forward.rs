//! Plain HTTP forwarding: hop-by-hop headers stripped, `Host` rewritten to the approved
//! authority, the request sent over a pooled connection to exactly the checked address.

use std::error::Error as _;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, HOST};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;

use super::judge::{audit_allowed, plain_url, Approved, Failure};
use super::{answer, Body, Client, State};
use crate::net::dial::CheckedAddr;
use crate::policy::Host;

/// Headers that describe one hop and are never forwarded (SPEC 10), besides those the
/// `Connection` header names. `X-Network-Policy` is ours and stops here too.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    super::request::NETWORK_POLICY_HEADER,
];

/// A pool of upstream connections (one per worker thread, so a connection's task runs
/// on the thread of the requests that use it). Its URIs only ever carry addresses that passed the
/// address check (see [`upstream_uri`]), so the pool is keyed by the checked address and
/// the connector never resolves a name.
#[derive(Clone)]
pub struct Upstream {
    client: HyperClient<HttpConnector, Body>,
}

impl Upstream {
    pub fn new(connect_timeout: Duration) -> Upstream {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(connect_timeout));
        connector.enforce_http(true);
        let client = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .set_host(false)
            .build(connector);
        Upstream { client }
    }
}

/// Forward an approved plain-HTTP request and return upstream's answer.
pub async fn forward(
    req: Request<Incoming>,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    upstream: &Upstream,
) -> Response<Body> {
    // The URL is only for the allowed record: no string built when none is written.
    let url = if state.audit_allowed {
        plain_url(&req)
    } else {
        None
    };
    let checked = &approved.addrs[0];
    let (mut parts, body) = req.into_parts();
    let up_bytes = Arc::new(AtomicU64::new(0));
    let counter = up_bytes.clone();
    let body = body
        .map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                counter.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            frame
        })
        .boxed();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(
        HOST,
        host_value(&approved.target.host, approved.target.port),
    );
    parts.uri = upstream_uri(checked, &parts.uri);
    let head_up = parts.method.as_str().len() + parts.uri.path().len() + head_len(&parts.headers);
    up_bytes.fetch_add(head_up as u64, Ordering::Relaxed);
    let upstream_req = Request::from_parts(parts, body);

    let resp = match upstream.client.request(upstream_req).await {
        Ok(resp) => resp,
        Err(e) => {
            let failure = upstream_failure(&e, &approved);
            tracing::info!(request_id = %client.request_id, error = %e, "{}", failure.message);
            return answer::fail(&failure, &client.request_id);
        }
    };
    state
        .metrics
        .observe_first_byte(approved.decided_at.elapsed());
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let dialed = checked.addr();
    let on_done: Box<dyn FnOnce(u64) + Send + Sync> = Box::new(move |down| {
        let up = up_bytes.load(Ordering::Relaxed);
        state.metrics.bytes_up.inc_by(up);
        state.metrics.bytes_down.inc_by(down);
        audit_allowed(&state, &client, &approved, dialed, url, (up, down));
    });
    let body = Metered {
        inner: body,
        down: head_len(&parts.headers) as u64,
        on_done: Some(on_done),
    };
    Response::from_parts(parts, body.boxed())
}

/// About what a head takes on the wire: its headers plus a request or status line.
/// Counted into `bytes_up`/`bytes_down` so a body-less request still shows its size.
fn head_len(headers: &HeaderMap) -> usize {
    let lines: usize = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    lines + 16
}

/// Remove `Connection`, every header it names, and the fixed hop-by-hop set.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
}

/// The `Host` upstream sees: the approved authority, the port only when not 80.
fn host_value(host: &Host, port: u16) -> HeaderValue {
    let text = match (host, port) {
        (Host::Ip(std::net::IpAddr::V6(v6)), 80) => format!("[{v6}]"),
        (_, 80) => host.to_string(),
        _ => host.authority(port),
    };
    HeaderValue::from_str(&text).expect("a normalised host is a valid header value")
}

/// The URI the pool dials: the checked address itself, with the request's path.
fn upstream_uri(checked: &CheckedAddr, original: &Uri) -> Uri {
    let path = original.path_and_query().map_or("/", |p| p.as_str());
    let addr = checked.addr();
    Uri::try_from(format!("http://{addr}{path}")).expect("an address and a parsed path form a URI")
}

fn upstream_failure(e: &hyper_util::client::legacy::Error, approved: &Approved) -> Failure {
    let mut source = e.source();
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::TimedOut {
                return Failure::connect(&approved.target, true);
            }
        }
        source = err.source();
    }
    if e.is_connect() {
        return Failure::connect(&approved.target, false);
    }
    let target = approved.target.host.authority(approved.target.port);
    Failure {
        status: StatusCode::BAD_GATEWAY,
        message: format!("upstream failed: {target}"),
    }
}

/// A response body that counts the bytes it carries and reports the total once, when it
/// ends or is dropped (the client went away), for the allowed-connection audit record.
struct Metered {
    inner: Incoming,
    down: u64,
    on_done: Option<Box<dyn FnOnce(u64) + Send + Sync>>,
}

impl HttpBody for Metered {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                self.down += data.len() as u64;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        if let Some(done) = self.on_done.take() {
            done(self.down);
        }
    }
}
