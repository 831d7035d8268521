//! Carrying an open tunnel's bytes (docs/ARCHITECTURE.md, step 10): its first bytes
//! judged by `[tunnels]` (unless the transparent listener judged them before it
//! dialed), then relayed both ways, or served intercepted through [`Inspect`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::idle::{Activity, Watched};
use super::{relay, ClientSide, Downstream, Inspect, Prefixed, Tunnel};
use crate::judgement::approved::{Approved, Judged};
use crate::judgement::record::{self, Client};
use crate::judgement::refusal::Refusal;
use crate::judgement::relayed::{Relayed, RelayedSum};
use crate::judgement::{budget, client_hello, State};
use crate::net::dial::CheckedAddr;

/// What a tunnel's first bytes left to do.
enum Admitted {
    /// Relay the rest both ways.
    Relay(ClientSide, Watched<TcpStream>),
    /// Served (intercepted) or ended; `true` when the upload budget cut it.
    Ended(bool),
}

/// What judging a tunnel's first bytes needs to know.
struct FirstBytesOf<'a> {
    approved: &'a Approved,
    state: &'a Arc<State>,
    client: &'a Client,
    activity: &'a Activity,
    inspect: &'a dyn Inspect,
    inside: Tunnel<'a>,
    down: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
}

/// Judge a tunnel's first bytes (`[tunnels]`), by the policies its `CONNECT` was
/// decided with, not those in force now: a reload between the two must not judge one
/// tunnel by two policies. A secret in them that a detector only reports goes on,
/// recorded `egress.flagged` (docs/reference/dlp.md). Then serve an intercepted tunnel,
/// or send on what the budget grants of them and hand the rest to the relay.
async fn admit_first(
    mut downstream: ClientSide,
    upstream: TcpStream,
    dialed: CheckedAddr,
    of: FirstBytesOf<'_>,
) -> Result<Admitted, Refusal> {
    let approved = of.approved;
    let limits = &of.state.limits;
    let (target, tunnels) = (&approved.target, approved.policies.org.tunnels());
    let wait = limits.header_timeout.min(limits.tunnel_idle_timeout);
    let canaries = approved.canaries();
    let detectors = &approved.detectors;
    let (first, reported) = client_hello::admit(
        &mut downstream,
        &upstream,
        target,
        tunnels,
        &canaries,
        detectors,
        wait,
    )
    .await?;
    if let Some(hit) = reported {
        record::audit_flagged_first(of.state, of.client, approved, hit);
    }
    if matches!(approved.judged, Judged::Intercept) {
        // Each request inside pays the budget for its own body.
        (of.inspect
            .serve(downstream, first, upstream, dialed, of.inside))
        .await;
        return Ok(Admitted::Ended(false));
    }
    let mut upstream = of.activity.watch_counting(upstream, of.down);
    // The first bytes were counted as read; only what the budget grants is sent.
    let granted = approved.budget.grant_filled(first.len()).await;
    of.sent
        .fetch_sub((first.len() - granted) as u64, Ordering::Relaxed);
    if upstream.write_all(&first[..granted]).await.is_err() {
        return Ok(Admitted::Ended(false));
    }
    if granted < first.len() {
        let _ = upstream.shutdown().await;
        return Ok(Admitted::Ended(true));
    }
    Ok(Admitted::Relay(downstream, upstream))
}

/// What carrying a tunnel's bytes needs besides its two connections.
pub(super) struct Carried<'a> {
    pub(super) approved: &'a Approved,
    pub(super) state: &'a Arc<State>,
    pub(super) client: &'a Client,
    pub(super) activity: &'a Activity,
    pub(super) inspect: &'a dyn Inspect,
    pub(super) relayed: Option<Relayed>,
    pub(super) up: Arc<AtomicU64>,
    pub(super) down: Arc<AtomicU64>,
    pub(super) sent: Arc<AtomicU64>,
}

/// Carry a tunnel's bytes: judge its first bytes (unless judged already), then relay
/// both ways or serve it intercepted, until it ends; then wait for the requests inside
/// an intercepted one to write their records. `Ok(true)`: the upload budget cut it.
pub(super) async fn carry(
    downstream: Downstream,
    upstream: TcpStream,
    dialed: CheckedAddr,
    of: Carried<'_>,
    sum: Option<&mut RelayedSum>,
) -> Result<bool, Refusal> {
    let outcome = carry_bytes(downstream, upstream, dialed, of).await;
    if let Some(sum) = sum {
        sum.settled().await;
    }
    outcome
}

async fn carry_bytes(
    downstream: Downstream,
    upstream: TcpStream,
    dialed: CheckedAddr,
    of: Carried<'_>,
) -> Result<bool, Refusal> {
    let (activity, allowance) = (of.activity, &of.approved.budget);
    let splice = of.state.limits.tunnel_splice;
    let tunnel = Tunnel {
        approved: of.approved,
        state: of.state,
        peer: of.client.addr,
        via: of.client.via,
        relayed: of.relayed,
    };
    match downstream {
        Downstream::Unjudged(stream) => {
            let downstream = activity.watch_counting(stream, of.up);
            let first = FirstBytesOf {
                approved: of.approved,
                state: of.state,
                client: of.client,
                activity,
                inspect: of.inspect,
                inside: tunnel,
                down: of.down,
                sent: of.sent,
            };
            // Boxed: the first bytes' judgement is over before the relay starts, and an
            // idle tunnel's task need not keep room for it.
            match Box::pin(admit_first(downstream, upstream, dialed, first)).await? {
                Admitted::Ended(cut) => Ok(cut),
                Admitted::Relay(downstream, upstream) => {
                    let relayed =
                        relay::both_ways(downstream, upstream, activity, allowance, splice).await;
                    Ok(ended(relayed, of.client))
                }
            }
        }
        Downstream::Redirected(stream) => {
            let downstream = activity.watch_counting(Prefixed::new(Vec::new(), stream), of.up);
            if matches!(of.approved.judged, Judged::Intercept) {
                // Its ClientHello is still unread: the handshake reads it.
                let serve = of
                    .inspect
                    .serve(downstream, Vec::new(), upstream, dialed, tunnel);
                serve.await;
                return Ok(false);
            }
            let upstream = activity.watch_counting(upstream, of.down);
            let relayed = relay::both_ways(downstream, upstream, activity, allowance, splice).await;
            Ok(ended(relayed, of.client))
        }
    }
}

/// How a relay ended: whether the upload budget closed it (anything else is the
/// tunnel's ordinary end, an error logged at debug level).
fn ended(relayed: std::io::Result<()>, client: &Client) -> bool {
    match relayed {
        Ok(()) => false,
        Err(e) if budget::is_spent(&e) => {
            tracing::info!(request_id = %client.request_id, "tunnel closed: the upload budget was reached");
            true
        }
        Err(e) => {
            tracing::debug!(request_id = %client.request_id, error = %e, "tunnel closed with an error");
            false
        }
    }
}
