//! Plain HTTP forwarding: hop-by-hop headers stripped, `Host` rewritten to the approved
//! authority, the request sent over a pooled connection to a checked address.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION,
    TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use hyper::http::uri::PathAndQuery;
use hyper::{Request, Response, StatusCode, Uri};

use super::budget::{self, Budgeted};
use super::judge::{Approved, Judged};
use super::pool::{Lease, SendError, Upstream};
use super::record::{audit_allowed, audit_cut, inspected_url, plain_url, Client};
use super::refusal::Failure;
use super::state::State;
use super::{answer, Body, BoxError};
use crate::net::dial::DialError;
use crate::policy::{Host, NormalPath};

/// Headers that describe one hop and are never forwarded
/// (docs/reference/answers.md, "What upstream sees"), besides those the
/// `Connection` header names. `X-Network-Policy` is ours and stops here too. `Connection`
/// comes first: [`strip_hop_by_hop`] reads it before removing it.
static HOP_BY_HOP: LazyLock<[HeaderName; 10]> = LazyLock::new(|| {
    [
        CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        PROXY_AUTHENTICATE,
        PROXY_AUTHORIZATION,
        TE,
        TRAILER,
        TRANSFER_ENCODING,
        UPGRADE,
        HeaderName::from_static(super::request::NETWORK_POLICY_HEADER),
    ]
});

/// Forward an approved plain-HTTP request and return upstream's answer.
pub async fn forward(
    req: Request<Incoming>,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    upstream: &Arc<Upstream>,
) -> Response<Body> {
    // The URL is only for the allowed record: no string built when none is written.
    let url = if state.audit_allowed || approved.budget.budget().is_some() {
        match &approved.upstream_tls {
            None => plain_url(&req),
            Some(_) => Some(inspected_url(&req, &approved.target)),
        }
    } else {
        None
    };
    let (mut parts, body) = req.into_parts();
    let up_bytes = Arc::new(AtomicU64::new(0));
    let cut = Arc::new(AtomicBool::new(false));
    // Body bytes are drawn from the upload budget as they go; a body that does not fit
    // is cut, and the upstream request with it.
    let body = Budgeted::new(body, approved.budget.clone(), up_bytes.clone(), cut.clone()).boxed();
    strip_hop_by_hop(&mut parts.headers);
    let default_port = match approved.upstream_tls {
        None => 80,
        Some(_) => 443,
    };
    parts.headers.insert(
        HOST,
        host_value(&approved.target.host, approved.target.port, default_port),
    );
    // `[[credentials]]` of the approved host, replacing what the client sent; set after
    // the client's headers are taken apart, so only the approved host ever gets them.
    approved
        .policies
        .credentials
        .apply(&approved.target.host, &mut parts.headers);
    let judged = match &approved.judged {
        Judged::Path(path) => Some(path),
        _ => None,
    };
    parts.uri = origin_form(&parts.uri, judged);
    let head_up = parts.method.as_str().len() + parts.uri.path().len() + head_len(&parts.headers);
    up_bytes.fetch_add(head_up as u64, Ordering::Relaxed);
    let upstream_req = Request::from_parts(parts, body);
    let request_id = client.request_id.clone();
    // From here the request may reach upstream: its allowed record is written however
    // the exchange ends (the client gone before the answer included), exactly once.
    let mut record = AllowedRecord {
        state,
        client,
        approved,
        url,
        up: up_bytes,
        cut,
        dialed: None,
        armed: true,
    };
    let (resp, lease) = match upstream
        .send(
            &record.approved.addrs,
            upstream_req,
            record.approved.upstream_tls.as_ref(),
        )
        .await
    {
        Ok(sent) => sent,
        Err(SendError::Upstream(e)) if budget::is_spent(&e) => {
            // No answer had started: the client is told why its request was cut. The
            // record (written when `record` is dropped) says so too.
            let refusal = record.cut_refusal();
            return answer::refuse(&refusal, &request_id);
        }
        Err(e) => {
            let failure = upstream_failure(&e, &record.approved);
            tracing::info!(request_id = %request_id, error = %e, "{}", failure.message);
            if let SendError::Dial(_) = e {
                // Nothing reached upstream: a failure, not an allowed connection.
                record.armed = false;
            }
            return answer::fail(&failure, &request_id);
        }
    };
    record
        .state
        .metrics
        .observe_first_byte(record.approved.decided_at.elapsed());
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    record.dialed = Some(lease.addr().addr());
    let body = Metered {
        inner: body,
        down: head_len(&parts.headers) as u64,
        record: Some(record),
        ended: false,
        lease: Some((lease, upstream.clone())),
    };
    Response::from_parts(parts, body.map_err(BoxError::from).boxed())
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
    // One pass over the names finds which of the set are there (often none, or only
    // `Connection`), so only those are looked up and removed.
    let mut present = 0u16;
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|hop| hop == name) {
            present |= 1 << i;
        }
    }
    if present & 1 != 0 {
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
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(name);
        }
    }
}

/// The `Host` upstream sees: the approved authority, the port only when not the
/// scheme's default.
fn host_value(host: &Host, port: u16, default_port: u16) -> HeaderValue {
    let text = match host {
        Host::Ip(std::net::IpAddr::V6(v6)) if port == default_port => format!("[{v6}]"),
        _ if port == default_port => host.to_string(),
        _ => host.authority(port),
    };
    HeaderValue::from_maybe_shared(Bytes::from(text))
        .expect("a normalised host is a valid header value")
}

/// The request target upstream sees: the origin form (path and query) of `original`,
/// with the normalised path the rules judged in place of the path when there is one.
fn origin_form(original: &Uri, judged: Option<&NormalPath>) -> Uri {
    let mut parts = hyper::http::uri::Parts::default();
    let path_and_query = match (judged, original.path_and_query()) {
        (Some(path), pq) => {
            let text = match pq.and_then(|pq| pq.query()) {
                Some(query) => format!("{path}?{query}"),
                None => path.to_string(),
            };
            PathAndQuery::from_maybe_shared(Bytes::from(text))
                .expect("a normalised path and a query that parsed are a valid target")
        }
        (None, Some(pq)) => pq.clone(),
        (None, None) => PathAndQuery::from_static("/"),
    };
    parts.path_and_query = Some(path_and_query);
    Uri::from_parts(parts).expect("a path alone is a valid URI")
}

fn upstream_failure(e: &SendError, approved: &Approved) -> Failure {
    match e {
        SendError::Dial(DialError::Timeout) => Failure::connect(&approved.target, true),
        SendError::Dial(_) => Failure::connect(&approved.target, false),
        SendError::Tls(e) => {
            let target = approved.target.host.authority(approved.target.port);
            Failure {
                status: StatusCode::BAD_GATEWAY,
                message: format!("TLS with upstream {target} failed: {e}"),
            }
        }
        SendError::Upstream(_) => {
            let target = approved.target.host.authority(approved.target.port);
            Failure {
                status: StatusCode::BAD_GATEWAY,
                message: format!("upstream failed: {target}"),
            }
        }
    }
}

/// The allowed record of one forwarded request and its byte counts, written once: when
/// its response body ends or is dropped, or, when no response came (upstream failed
/// after the request went out, or the client went away first), when this is dropped.
struct AllowedRecord {
    state: Arc<State>,
    client: Client,
    approved: Approved,
    url: Option<String>,
    up: Arc<AtomicU64>,
    /// Set when the upload budget cut the request body.
    cut: Arc<AtomicBool>,
    /// The address the request went to, once known.
    dialed: Option<std::net::SocketAddr>,
    armed: bool,
}

impl AllowedRecord {
    /// The refusal of a request whose body the upload budget cut.
    fn cut_refusal(&self) -> super::refusal::Refusal {
        let approved = &self.approved;
        let budget = approved.budget.budget().expect("only a budget cuts a body");
        let mut refusal = budget::refusal(&approved.target, budget)
            .in_session(&approved.session)
            .with_detail("the request body went past the upload budget: it was cut");
        refusal.resolved_ip = self.dialed.map(|d| d.ip());
        refusal
    }

    fn write(&mut self, down: u64) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        let up = self.up.load(Ordering::Relaxed);
        let metrics = &self.state.metrics;
        metrics.bytes_up.inc_by(up);
        metrics.bytes_down.inc_by(down);
        let (state, client, approved) = (&self.state, &self.client, &self.approved);
        if approved.budget.budget().is_some() && self.cut.load(Ordering::Relaxed) {
            let refusal = self.cut_refusal();
            audit_cut(state, client, &refusal, self.url.take(), (up, down));
            return;
        }
        audit_allowed(
            state,
            client,
            approved,
            self.dialed,
            self.url.take(),
            (up, down),
        );
    }
}

impl Drop for AllowedRecord {
    fn drop(&mut self) {
        self.write(0);
    }
}

/// A response body that counts the bytes it carries and writes the allowed record once,
/// when it ends or is dropped (the client went away). Its upstream connection goes back
/// to the pool only if the body was read to its end.
struct Metered {
    inner: Incoming,
    down: u64,
    record: Option<AllowedRecord>,
    ended: bool,
    lease: Option<(Lease, Arc<Upstream>)>,
}

impl HttpBody for Metered {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.down += data.len() as u64;
                }
            }
            Poll::Ready(None) => self.ended = true,
            _ => {}
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
        if let Some(mut record) = self.record.take() {
            record.write(self.down);
        }
        if let Some((lease, pool)) = self.lease.take() {
            // hyper stops polling a body of known length after its last byte, so the end
            // is also when nothing is left to read.
            if self.ended || self.inner.is_end_stream() {
                pool.put_back(lease);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_removes_the_set_and_what_connection_names_and_keeps_the_rest() {
        let mut headers = HeaderMap::new();
        for name in HOP_BY_HOP.iter() {
            headers.insert(name.clone(), HeaderValue::from_static("x"));
        }
        headers.insert(CONNECTION, HeaderValue::from_static("close, X-Named"));
        headers.insert("x-named", HeaderValue::from_static("hop"));
        headers.insert("x-kept", HeaderValue::from_static("end to end"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);
    }
}
