//! WebSocket (docs/reference/inspection.md, "WebSocket"): an HTTP/1.1 `Upgrade:
//! websocket` request, plain or inside an intercepted tunnel, that the judgement allowed
//! (its method and path like any request's; every other upgrade it refuses) is sent
//! upstream with its upgrade, over a connection of its own. After upstream's `101` the
//! bytes are relayed both ways, those sent upstream drawn from the upload budget; the
//! connection is audited when it opens (`websocket.opened`) and when it closes
//! (`websocket.closed`, with the bytes each way, or the budget's `egress.denied` when
//! it cut the connection).
//!
//! An h2 stream's WebSocket (RFC 8441's extended `CONNECT`) is made that same HTTP/1.1
//! handshake before it is judged ([`extended`]), and takes this same path: only the
//! client's answer differs (`200` on its stream, not `101`).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, UPGRADE};
use hyper::upgrade::OnUpgrade;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::allowed::{record_url, AllowedRecord};
use super::forward::{answered, dialed, hop, outcome, parent_route, prepare, Ready};
use super::head::strip_hop_by_hop;
use super::pool::Upstream;
use super::scanned::{self, Tripped};
use super::{answer, Body};
use crate::dlp::Hit;
use crate::judgement::approved::Approved;
use crate::judgement::budget::{self, Allowance};
use crate::judgement::record::{audit_cut, audit_flagged, audit_websocket, Client};
use crate::judgement::State;
use crate::tunnel::idle::Activity;

mod extended;
mod upward;

use upward::Upward;

pub(crate) use extended::as_handshake;

/// The most bytes one read moves, each way.
const CHUNK: usize = 16 * 1024;

/// Forward an allowed WebSocket handshake (its head built, paid for and its upgrade
/// kept by `forward::prepare`, as every request's); after upstream's `101`, relay the
/// connection in a task of its own and answer the client's `101` (over h2, its `200`).
/// Any other answer is passed on as a forwarded request's is, metered and recorded.
pub(crate) async fn forward(
    mut req: Request<Incoming>,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    pool: Arc<Upstream>,
) -> Response<Body> {
    // An h2 stream's upgrade is its own (the stream), as an HTTP/1.1 connection's is.
    let from_client = hyper::upgrade::on(&mut req);
    let over_h2 = req.extensions_mut().remove::<extended::SentKey>();
    let Ready {
        mut record, req, ..
    } = match prepare(req, approved, state, client) {
        Ok(ready) => ready,
        Err(refused) => return refused.await,
    };
    let route = parent_route(&record.state, &record.approved);
    let (addrs, via) = hop(&route, &record.approved);
    let tls = record.approved.upstream_tls.as_ref();
    let sent = pool.send_upgrade(addrs, req, tls, via).await;
    let (mut resp, lease) = match outcome(&mut record, sent, &route) {
        Ok(sent) => sent,
        Err(stopped) => return *stopped,
    };
    let dialed = dialed(&route, &record.approved, &lease);
    let status = resp.status();
    // Over h2 any `2xx` would open the client's stream (RFC 8441 5), so only a `101`
    // answering the proxy's key may: another `2xx`, or a `101` that does not answer the
    // key, is upstream failing the handshake.
    let opens =
        status == StatusCode::SWITCHING_PROTOCOLS || (over_h2.is_some() && status.is_success());
    if !opens {
        // Upstream declined the upgrade: its answer is the client's, nothing opened, and
        // its connection (made for the upgrade) is not kept.
        return answered(record, resp, dialed, None);
    }
    if let Some(Err(why)) = over_h2.as_ref().map(|key| extended::opened(&resp, key)) {
        let failure = extended::not_opened(&record.approved.target, &why);
        tracing::info!(request_id = %record.client.request_id, "{}", failure.message);
        // It reached upstream: its allowed record is written as a failed request's.
        record.dialed = dialed;
        return answer::fail(&failure, record.client.request_id);
    }
    let from_upstream = hyper::upgrade::on(&mut resp);
    let accepted = resp.headers().get(UPGRADE).cloned();
    // Its records are the WebSocket's own from here.
    record.armed = false;
    record.dialed = dialed;
    let url = record
        .uri
        .take()
        .map(|uri| record_url(&uri, &record.approved));
    let (state, client, approved) = (&record.state, &record.client, &record.approved);
    audit_websocket(
        state,
        client,
        approved,
        "websocket.opened",
        dialed,
        url.clone(),
        None,
    );
    tokio::spawn(Open { record, url }.relay(from_client, from_upstream));
    let (mut parts, _) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if over_h2.is_some() {
        extended::switched_to_ok(&mut parts);
        return Response::from_parts(parts, answer::empty());
    }
    parts
        .headers
        .insert(CONNECTION, HeaderValue::from_static("upgrade"));
    if let Some(value) = accepted {
        parts.headers.insert(UPGRADE, value);
    }
    Response::from_parts(parts, answer::empty())
}

/// An opened WebSocket: its request's record (disarmed: the WebSocket writes its own),
/// whose byte count the relay goes on adding to, and its URL.
struct Open {
    record: Box<AllowedRecord>,
    url: Option<String>,
}

impl Open {
    /// Relay once both sides are handed over, until either closes, the upload budget is
    /// spent, or nothing moves for `--tunnel-idle-timeout`; then the closing record.
    async fn relay(self, from_client: OnUpgrade, from_upstream: OnUpgrade) {
        let Open { mut record, url } = self;
        let (up, down) = (&record.sent.bytes, AtomicU64::new(0));
        let (state, client, approved) = (&record.state, &record.client, &record.approved);
        let relayed = match tokio::join!(from_client, from_upstream) {
            (Ok(from), Ok(to)) => {
                let activity = Activity::of(approved.session.clone());
                let idle = state.limits.tunnel_idle_timeout;
                let io = (TokioIo::new(from), TokioIo::new(to));
                let scan = scanned::lookout(approved)
                    .map(|l| (Upward::new(l, record.sent.clone()), &record.sent.dlp));
                let meters = (&approved.budget, up, &down, &activity);
                tokio::select! {
                    relayed = both_ways(io, meters, scan) => relayed,
                    () = activity.idle_for(idle) => Ok(()),
                }
            }
            (Err(e), _) | (_, Err(e)) => Err(io::Error::other(e)),
        };
        let bytes = (up.load(Ordering::Relaxed), down.load(Ordering::Relaxed));
        if let Some(tunnel) = &client.within {
            tunnel.add(bytes);
        }
        let metrics = &state.metrics;
        metrics.bytes_up.inc_by(bytes.0);
        metrics.bytes_down.inc_by(bytes.1);
        if let Some(hit) = record.sent.flagged.get() {
            // A secret in a message, let through: recorded (docs/reference/dlp.md).
            audit_flagged(state, client, approved, hit.clone(), None);
        }
        if let Some(refusal) = record.tripped() {
            // A message carried a canary: the connection was closed before its last
            // byte went; one record, the session ended (docs/reference/dlp.md).
            audit_cut(state, client, &refusal, None, bytes);
            record.end_session().await;
            return;
        }
        match relayed {
            Err(e) if budget::is_spent(&e) => {
                let limit = approved.budget.budget().expect("only a budget is spent");
                let refusal = budget::refusal(&approved.target, limit)
                    .in_session(&approved.session)
                    .with_detail(
                        "the WebSocket's bytes went past the upload budget: it was closed",
                    );
                audit_cut(state, client, &refusal, url, bytes);
            }
            relayed => {
                if let Err(e) = relayed {
                    tracing::debug!(request_id = %client.request_id, error = %e, "a WebSocket ended with an error");
                }
                let dialed = record.dialed;
                audit_websocket(
                    state,
                    client,
                    approved,
                    "websocket.closed",
                    dialed,
                    url,
                    Some(bytes),
                );
            }
        }
    }
}

/// What the relay counts against: the upload budget, the bytes each way, the traffic.
type Meters<'a> = (&'a Allowance, &'a AtomicU64, &'a AtomicU64, &'a Activity);

/// Copy both ways until both ends have closed or either fails: bytes from the client
/// are scanned for canaries (`scan`, with where its hit goes) and drawn from the
/// allowance before they are sent. Once the budget is spent exactly the bytes that fit
/// have gone upstream, upstream's side is shut down, and the copy ends with
/// [`budget::Spent`]; a canary ends it at once with [`Tripped`], both sides dropped.
async fn both_ways<C, U>(
    (client, upstream): (C, U),
    (allowance, up, down, activity): Meters<'_>,
    mut scan: Option<(Upward, &OnceLock<Hit>)>,
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
            let scanned;
            let out = match &mut scan {
                None => &buf[..n],
                Some((scan, _)) if n == 0 => {
                    scanned = scan.finish();
                    &scanned[..]
                }
                Some((scan, hit_in)) => match scan.feed(&buf[..n]) {
                    Ok(out) => {
                        scanned = out;
                        &scanned[..]
                    }
                    Err(hit) => {
                        let _ = hit_in.set(hit);
                        return Err(io::Error::other(Tripped));
                    }
                },
            };
            if n > 0 {
                activity.relayed();
            }
            // A fleet-wide budget draws from the store when this replica holds too
            // little (docs/scale-out.md, "One upload budget").
            let granted = match out.len() {
                0 => 0,
                len => allowance.grant_filled(len).await,
            };
            up.fetch_add(granted as u64, Ordering::Relaxed);
            upstream_write.write_all(&out[..granted]).await?;
            if granted < out.len() {
                upstream_write.shutdown().await?;
                return Err(budget::spent());
            }
            if n == 0 {
                return upstream_write.shutdown().await;
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
