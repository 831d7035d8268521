//! Plain HTTP forwarding: the head built for upstream ([`super::head`]) and paid for
//! from the upload budget, the request sent over a pooled connection to a checked
//! address, its answer metered and its record written once.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::future::Either;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use super::allowed::{record_url, AllowedRecord};
use super::budgeted::{admit_head, Budgeted, Sent};
use super::head;
use super::metered::Metered;
use super::pool::{Lease, SendError, Upstream, Via};
use super::scanned::{self, Scanned};
use super::{answer, Body, BoxError};
use crate::judgement::approved::Approved;
use crate::judgement::budget;
use crate::judgement::record::{audit_refusal, count_approved, Client};
use crate::judgement::refusal::{Failure, Refusal};
use crate::judgement::State;
use crate::net::dial::{CheckedAddr, DialError};
use crate::net::parent::Parent;

pub(crate) use head::strip_hop_by_hop;

/// Forward an approved plain-HTTP request (or one read inside an intercepted tunnel) and
/// return upstream's answer. Its head is built for upstream first and paid for from the
/// upload budget whole; one that does not fit is refused here, before any of it is
/// sent, and counted and recorded as the refusal it is rather than as allowed.
///
/// Not an `async fn`: the head is built before the future is, so the future holds only
/// the exchange (the record, the request, the pool's send) and no second copy of its
/// arguments; a refusal's future (its wait for room in the audit queue) is boxed.
pub(crate) fn forward<'u>(
    req: Request<Incoming>,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    upstream: &'u Arc<Upstream>,
) -> impl Future<Output = Response<Body>> + 'u {
    match prepare(req, approved, state, client) {
        Ok(Ready {
            record,
            req,
            head_up,
        }) => Either::Left(exchange(record, req, head_up, upstream)),
        Err(refused) => Either::Right(refused),
    }
}

/// A request ready to go upstream: its allowed record (armed), the request with its
/// head built, and the length of that head.
pub(super) struct Ready {
    /// Boxed once here: the record is moved into the exchange and then the answer's
    /// body, each move 8 bytes instead of the record's 500.
    pub(super) record: Box<AllowedRecord>,
    pub(super) req: Request<Body>,
    pub(super) head_up: u64,
}

/// The head built for upstream and paid for; the request counted; its allowed record
/// armed. Or, for a head over the upload budget, the (boxed) recording and answer of
/// its refusal.
pub(super) fn prepare(
    req: Request<Incoming>,
    approved: Approved,
    state: Arc<State>,
    client: Client,
) -> Result<Ready, Pin<Box<impl Future<Output = Response<Body>>>>> {
    // The target is kept for the record's URL only when a record may be written, and
    // the URL is built only when one is: a budget alone writes one only for a cut body;
    // a WebSocket's records are always written.
    let recorded = state.audit_allowed || state.traced;
    let uri = if recorded || approved.budget.budget().is_some() || approved.websocket {
        match &approved.upstream_tls {
            None => (req.method() != Method::CONNECT).then(|| req.uri().clone()),
            Some(_) => Some(req.uri().clone()),
        }
    } else {
        None
    };
    let (mut parts, body) = req.into_parts();
    head::rewrite(&mut parts, &approved);
    if approved.upstream_tls.is_none() {
        if let Some((parent, authority)) = parent_route(&state, &approved) {
            head::through_parent(&mut parts, &authority, parent.authorization());
        }
    }
    let head_up = head::wire_len(&parts, &body);
    if let Err(refusal) = admit_head(&approved.budget, head_up, &parts.headers, &approved.target) {
        let refusal = refusal.in_session(&approved.session);
        let url = uri.map(|uri| record_url(&uri, &approved));
        return Err(Box::pin(refuse(state, client, refusal, url)));
    }
    count_approved(&state, &client, &approved);
    let sent = Arc::new(Sent {
        bytes: AtomicU64::new(head_up),
        ..Sent::default()
    });
    // Body bytes are scanned for canaries, then drawn from the upload budget as they
    // go; a body that carries one, or does not fit, is cut, and the upstream request.
    let body = match scanned::lookout(&approved) {
        None => Budgeted::new(body, approved.budget.clone(), sent.clone()).boxed(),
        Some(lookout) => {
            let body = Scanned::new(body, lookout, sent.clone());
            Budgeted::new(body, approved.budget.clone(), sent.clone()).boxed()
        }
    };
    // From here the request may reach upstream: its allowed record is written however
    // the exchange ends (the client gone before the answer included), exactly once.
    let record = Box::new(AllowedRecord {
        state,
        client,
        approved,
        uri,
        sent,
        dialed: None,
        armed: true,
        trip_ended: false,
    });
    let req = Request::from_parts(parts, body);
    Ok(Ready {
        record,
        req,
        head_up,
    })
}

/// Send the request upstream and return its answer, metered. The arguments are used
/// where the future holds them, never moved into locals of their own.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps a copy of each argument"
)]
fn exchange(
    mut record: Box<AllowedRecord>,
    upstream_req: Request<Body>,
    head_up: u64,
    upstream: &Arc<Upstream>,
) -> impl Future<Output = Response<Body>> + '_ {
    async move {
        // A request sent again over a new connection (the pool's retry after a kept one
        // failed) puts its head on the wire twice: the second pays too, or is not sent.
        let resend = || {
            let paid = record.approved.budget.grant_whole(head_up);
            if paid {
                record.sent.bytes.fetch_add(head_up, Ordering::Relaxed);
            }
            paid
        };
        let route = parent_route(&record.state, &record.approved);
        let (addrs, via) = hop(&route, &record.approved);
        let tls = record.approved.upstream_tls.as_ref();
        let sent = upstream.send(addrs, upstream_req, tls, via, resend).await;
        let (resp, lease) = match outcome(&mut record, sent, &route) {
            Ok(sent) => sent,
            Err(stopped) => {
                // A canary's trip ends its session before the client hears of it.
                record.end_session().await;
                return *stopped;
            }
        };
        let dialed = dialed(&route, &record.approved, &lease);
        answered(record, resp, dialed, Some((lease, upstream.clone())))
    }
}

/// Where an approved request's connection goes (docs/reference/parent-proxy.md): its
/// checked addresses; or, through a parent, plain HTTP to the parent itself (in absolute
/// form) and TLS through a tunnel the parent opens.
pub(super) fn hop<'a>(
    route: &'a Option<Route>,
    approved: &'a Approved,
) -> (&'a [CheckedAddr], Option<Via<'a>>) {
    match (route, &approved.upstream_tls) {
        (Some((parent, _)), None) => (parent.addrs(), None),
        (Some((parent, authority)), Some(_)) => {
            (&approved.addrs[..], Some(Via { parent, authority }))
        }
        (None, _) => (&approved.addrs[..], None),
    }
}

/// The address the record names: the one the connection reached, or through a parent
/// to which plain HTTP was sent, the first checked address (not the parent's).
pub(super) fn dialed(
    route: &Option<Route>,
    approved: &Approved,
    lease: &Lease,
) -> Option<std::net::SocketAddr> {
    match (route, &approved.upstream_tls) {
        (Some(_), None) => approved.addrs.first().map(|a| a.addr()),
        _ => Some(lease.addr().addr()),
    }
}

/// What upstream's send came to: its answer, or the client's answer for a request that
/// got none (cut by the budget, failed, or refused by the parent), with the record
/// disarmed where nothing reached upstream.
pub(super) fn outcome(
    record: &mut AllowedRecord,
    sent: Result<(Response<Incoming>, Lease), SendError>,
    route: &Option<Route>,
) -> Result<(Response<Incoming>, Lease), Box<Response<Body>>> {
    let to_parent = route.is_some() && record.approved.upstream_tls.is_none();
    let request_id = record.client.request_id;
    if let (Err(_), Some(refusal)) = (&sent, record.tripped()) {
        // Its body carried a canary: abandoned before the answer started.
        return Err(Box::new(answer::refuse(&refusal, request_id)));
    }
    let e = match sent {
        Ok((resp, _))
            if to_parent && resp.status() == StatusCode::PROXY_AUTHENTICATION_REQUIRED =>
        {
            // The parent refused its own credentials: no origin saw the request.
            let said = format!(
                "the parent proxy {} answered 407 Proxy Authentication Required",
                route.as_ref().map_or("", |(p, _)| p.name())
            );
            record.armed = false;
            let failure = Failure::dial(&record.approved.target, &DialError::Parent(said));
            return Err(Box::new(answer::fail(&failure, request_id)));
        }
        Ok(sent) => return Ok(sent),
        Err(SendError::Dial(e)) if to_parent => SendError::Dial(parent_unreachable(route, e)),
        Err(e) => e,
    };
    if let SendError::Upstream(e) = &e {
        if budget::is_spent(e) {
            // No answer had started: the client is told why its request was cut. The
            // record (written when `record` is dropped) says so too.
            return Err(Box::new(answer::refuse(&record.cut_refusal(), request_id)));
        }
    }
    let failure = upstream_failure(&e, &record.approved);
    tracing::info!(request_id = %request_id, error = %e, "{}", failure.message);
    if let SendError::Dial(_) = e {
        // Nothing reached upstream: a failure, not an allowed connection.
        record.armed = false;
    }
    Err(Box::new(answer::fail(&failure, request_id)))
}

/// Upstream's answer to the client, its body metered and the allowed record written
/// when it ends; `lease` goes back to the pool if the body was read to its end.
pub(super) fn answered(
    mut record: Box<AllowedRecord>,
    resp: Response<Incoming>,
    dialed: Option<std::net::SocketAddr>,
    lease: Option<(Lease, Arc<Upstream>)>,
) -> Response<Body> {
    record
        .state
        .metrics
        .observe_first_byte(record.approved.decided_at.elapsed());
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    record.dialed = dialed;
    let body = Metered {
        inner: body,
        down: head::response_len(&parts.headers),
        record: Some(record),
        ended: false,
        lease,
    };
    Response::from_parts(parts, body.map_err(BoxError::from).boxed())
}

/// Record and answer a request refused after its judgement (its head over the upload
/// budget), as every refusal is: one `egress.denied` record, the one answer function.
async fn refuse(
    state: Arc<State>,
    client: Client,
    refusal: Refusal,
    url: Option<String>,
) -> Response<Body> {
    audit_refusal(&state, &client, &refusal, url).await;
    answer::refuse(&refusal, client.request_id)
}

/// The parent proxy `approved` goes through and what it is asked for, if any.
pub(super) fn parent_route(state: &State, approved: &Approved) -> Option<Route> {
    let parent = state.parent.as_ref()?;
    let target = &approved.target;
    let authority = parent.route(&target.host, target.port, &approved.addrs)?;
    Some((parent.clone(), authority))
}

/// The parent a request goes through and what it is asked for (held by `Arc`: only
/// requests that go through a parent pay for it).
pub(super) type Route = (Arc<Parent>, String);

/// A failed dial to the parent itself, told as the parent's failure.
fn parent_unreachable(route: &Option<Route>, e: DialError) -> DialError {
    match (route, e) {
        (_, e @ (DialError::Timeout | DialError::Parent(_))) => e,
        (Some((parent, _)), e) => DialError::Parent(format!(
            "cannot connect to the parent proxy {}: {e}",
            parent.name()
        )),
        (None, e) => e,
    }
}

pub(super) fn upstream_failure(e: &SendError, approved: &Approved) -> Failure {
    match e {
        SendError::Dial(e) => Failure::dial(&approved.target, e),
        SendError::Tls(e) => {
            let target = approved.target.host.authority(approved.target.port);
            Failure {
                status: 502,
                message: format!("TLS with upstream {target} failed: {e}"),
                detail: None,
            }
        }
        SendError::Upstream(_) => {
            let target = approved.target.host.authority(approved.target.port);
            Failure {
                status: 502,
                message: format!("upstream failed: {target}"),
                detail: None,
            }
        }
    }
}
