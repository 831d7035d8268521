//! WebSocket (docs/reference/inspection.md, "WebSocket"): an HTTP/1.1 `Upgrade:
//! websocket` request, plain or inside an intercepted tunnel, that the judgement allowed
//! (its method and path like any request's; every other upgrade it refuses) is sent
//! upstream with its upgrade, over a connection of its own. After upstream's `101` the
//! bytes are relayed both ways, those sent upstream drawn from the upload budget; the
//! connection is audited when it opens (`websocket.opened`) and when it closes
//! (`websocket.closed`, with the bytes each way, or the budget's `egress.denied` when
//! it cut the connection).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, UPGRADE};
use hyper::upgrade::OnUpgrade;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::budgeted::admit_head;
use super::forward::{parent_route, record_url, upstream_failure};
use super::head::{self, strip_hop_by_hop};
use super::idle::Activity;
use super::pool::{Upstream, Via};
use super::{answer, Body, BoxError};
use crate::judgement::approved::Approved;
use crate::judgement::budget::{self, Allowance};
use crate::judgement::record::{audit_cut, audit_refusal, audit_websocket, count_approved, Client};
use crate::judgement::State;

/// The most bytes one read moves, each way.
const CHUNK: usize = 16 * 1024;

/// Forward an allowed WebSocket handshake; after upstream's `101`, relay the
/// connection in a task of its own and answer the client's `101`.
pub(crate) async fn forward(
    mut req: Request<Incoming>,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    pool: Arc<Upstream>,
) -> Response<Body> {
    let from_client = hyper::upgrade::on(&mut req);
    let asked_for = req.headers().get(UPGRADE).cloned();
    let url = record_url(req.uri(), &approved);
    let (mut parts, body) = req.into_parts();
    head::rewrite(&mut parts, &approved);
    // The upgrade is this hop's to pass on: kept, as the client asked for it.
    parts
        .headers
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    if let Some(value) = asked_for {
        parts.headers.insert(UPGRADE, value);
    }
    let route = parent_route(&state, &approved);
    if let (Some((parent, authority)), None) = (&route, &approved.upstream_tls) {
        head::through_parent(&mut parts, authority, parent.authorization());
    }
    let head_up = head::wire_len(&parts, &body);
    if let Err(refusal) = admit_head(&approved.budget, head_up, &parts.headers, &approved.target) {
        let refusal = refusal.in_session(&approved.session);
        audit_refusal(&state, &client, &refusal, Some(url)).await;
        return answer::refuse(&refusal, &client.request_id);
    }
    count_approved(&state, &client, &approved);
    let req = Request::from_parts(parts, body.map_err(BoxError::from).boxed());
    let tls = approved.upstream_tls.as_ref();
    let (addrs, via) = match (&route, tls) {
        (Some((parent, _)), None) => (parent.addrs(), None),
        (Some((parent, authority)), Some(_)) => {
            (&approved.addrs[..], Some(Via { parent, authority }))
        }
        (None, _) => (&approved.addrs[..], None),
    };
    let (mut resp, lease) = match pool.send_upgrade(addrs, req, tls, via).await {
        Ok(sent) => sent,
        Err(e) => {
            let failure = upstream_failure(&e, &approved);
            tracing::info!(request_id = %client.request_id, error = %e, "{}", failure.message);
            return answer::fail(&failure, &client.request_id);
        }
    };
    let dialed = match (&route, tls) {
        (Some(_), None) => approved.addrs.first().map(|a| a.addr()),
        _ => Some(lease.addr().addr()),
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Upstream declined the upgrade: its answer is the client's, and nothing was
        // opened.
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let body = body.map_err(BoxError::from).boxed();
        return Response::from_parts(parts, body);
    }
    let from_upstream = hyper::upgrade::on(&mut resp);
    let accepted = resp.headers().get(UPGRADE).cloned();
    audit_websocket(
        &state,
        &client,
        &approved,
        "websocket.opened",
        dialed,
        Some(url.clone()),
        None,
    );
    let open = Open {
        approved,
        state,
        client,
        url,
        dialed,
        head_up,
    };
    tokio::spawn(open.relay(from_client, from_upstream));
    let (mut parts, _) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    if let Some(value) = accepted {
        parts.headers.insert(UPGRADE, value);
    }
    Response::from_parts(parts, answer::empty())
}

/// An opened WebSocket: what its closing record needs.
struct Open {
    approved: Approved,
    state: Arc<State>,
    client: Client,
    url: String,
    dialed: Option<std::net::SocketAddr>,
    head_up: u64,
}

impl Open {
    /// Relay once both sides are handed over, until either closes, the upload budget is
    /// spent, or nothing moves for `--tunnel-idle-timeout`; then the closing record.
    async fn relay(self, from_client: OnUpgrade, from_upstream: OnUpgrade) {
        let (up, down) = (AtomicU64::new(self.head_up), AtomicU64::new(0));
        let relayed = match tokio::join!(from_client, from_upstream) {
            (Ok(client), Ok(upstream)) => {
                let activity = Activity::of(self.approved.session.clone());
                let idle = self.state.limits.tunnel_idle_timeout;
                let io = (TokioIo::new(client), TokioIo::new(upstream));
                tokio::select! {
                    relayed = both_ways(io, &self.approved.budget, (&up, &down), &activity) => relayed,
                    () = activity.idle_for(idle) => Ok(()),
                }
            }
            (Err(e), _) | (_, Err(e)) => Err(io::Error::other(e)),
        };
        let bytes = (up.load(Ordering::Relaxed), down.load(Ordering::Relaxed));
        tracing::debug!(request_id = %self.client.request_id, ?bytes, ended = ?relayed.as_ref().err(), "a WebSocket closed");
        let metrics = &self.state.metrics;
        metrics.bytes_up.inc_by(bytes.0);
        metrics.bytes_down.inc_by(bytes.1);
        let (state, client, approved) = (&self.state, &self.client, &self.approved);
        match relayed {
            Err(e) if budget::is_spent(&e) => {
                let limit = approved.budget.budget().expect("only a budget is spent");
                let refusal = budget::refusal(&approved.target, limit)
                    .in_session(&approved.session)
                    .with_detail(
                        "the WebSocket's bytes went past the upload budget: it was closed",
                    );
                audit_cut(state, client, &refusal, Some(self.url.clone()), bytes);
            }
            relayed => {
                if let Err(e) = relayed {
                    tracing::debug!(request_id = %client.request_id, error = %e, "a WebSocket ended with an error");
                }
                let url = Some(self.url.clone());
                audit_websocket(
                    state,
                    client,
                    approved,
                    "websocket.closed",
                    self.dialed,
                    url,
                    Some(bytes),
                );
            }
        }
    }
}

/// Copy both ways until both ends have closed or either fails: bytes from the client
/// are drawn from `allowance` before they are sent, and once it is spent exactly the
/// bytes that fit have gone upstream, upstream's side is shut down, and the copy ends
/// with [`budget::Spent`].
async fn both_ways<C, U>(
    (client, upstream): (C, U),
    allowance: &Allowance,
    (up, down): (&AtomicU64, &AtomicU64),
    activity: &Activity,
) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut upstream_read, mut upstream_write) = tokio::io::split(upstream);
    let upward = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                return upstream_write.shutdown().await;
            }
            activity.relayed();
            // A fleet-wide budget draws from the store when this replica holds too
            // little (docs/scale-out.md, "One upload budget").
            let granted = allowance.grant_filled(n).await;
            up.fetch_add(granted as u64, Ordering::Relaxed);
            upstream_write.write_all(&buf[..granted]).await?;
            if granted < n {
                upstream_write.shutdown().await?;
                return Err(budget::spent());
            }
        }
    };
    let downward = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = upstream_read.read(&mut buf).await?;
            if n == 0 {
                return client_write.shutdown().await;
            }
            activity.relayed();
            down.fetch_add(n as u64, Ordering::Relaxed);
            client_write.write_all(&buf[..n]).await?;
        }
    };
    tokio::try_join!(upward, downward).map(drop)
}
