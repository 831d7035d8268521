//! Tunnels: `CONNECT`s, and connections redirected to the transparent listener. The
//! upstream connection is made to a checked address before the client is answered, so
//! a refusal or an unreachable upstream is told with a status code and no tunnel ever
//! opens for it. Once open, a `CONNECT` tunnel's first bytes are judged (TLS server
//! name, `[tunnels]`) before any of them reaches upstream; a redirected connection's
//! were judged before it was dialed (`crate::transparent`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::idle::Activity;
use super::pool::Upstream;
use super::{answer, intercept, relay, Body};
use crate::judgement::approved::{Approved, Judged};
use crate::judgement::record::{audit_allowed, audit_cut, audit_refusal, Client};
use crate::judgement::refusal::{Failure, Limit, Refusal};
use crate::judgement::tunnel_counts::TunnelSlot;
use crate::judgement::{budget, client_hello, Phase, State};
use crate::metrics::Metrics;
use crate::net::dial::{dial, CheckedAddr, DialError};
use crate::session::{tunnel_opened, until_ended, Session, TunnelGuard};

/// Why a tunnel did not open: a refusal (already audited) or an unreachable upstream.
enum NotOpened {
    Refused(Refusal),
    Failed(Failure),
}

/// What an opening tunnel holds: its slots and its upstream connection.
struct Opened {
    slot: TunnelSlot,
    open: TunnelOpen,
    upstream: TcpStream,
    dialed: CheckedAddr,
}

/// Take the tunnel's slots (per client, per session) and dial the approved destination.
async fn prepare(approved: &Approved, state: &State, client: &Client) -> Result<Opened, NotOpened> {
    let limit = |detail: &str| {
        Refusal::limit(Limit::Rate, Some(&approved.target))
            .in_session(&approved.session)
            .with_detail(detail)
    };
    let slots = match state.tunnels.try_open(client.addr.ip()) {
        None => Err(limit("too many open tunnels from this client")),
        Some(slot) => match TunnelOpen::try_new(state, approved.session.as_ref()) {
            None => Err(limit("too many open tunnels in this session")),
            Some(open) => Ok((slot, open)),
        },
    };
    let (slot, open) = match slots {
        Ok(slots) => slots,
        Err(refusal) => {
            audit_refusal(state, client, &refusal, None).await;
            return Err(NotOpened::Refused(refusal));
        }
    };
    let (upstream, dialed) = match dial(&approved.addrs, state.limits.connect_timeout).await {
        Ok(pair) => pair,
        Err(e) => {
            let failure = Failure::connect(&approved.target, matches!(e, DialError::Timeout));
            tracing::info!(request_id = %client.request_id, error = %e, "{}", failure.message);
            return Err(NotOpened::Failed(failure));
        }
    };
    state
        .metrics
        .observe_first_byte(approved.decided_at.elapsed());
    Ok(Opened {
        slot,
        open,
        upstream,
        dialed,
    })
}

/// The allowed record of one approved tunnel, written exactly once: with the bytes it
/// carried when it ends, or, should its task be dropped first (its client gone before
/// the tunnel opened), when this is dropped. A refusal after the approval (a limit, the
/// first bytes) disarms it, having written its own record.
struct TunnelRecord {
    state: Arc<State>,
    client: Client,
    approved: Approved,
    dialed: Option<CheckedAddr>,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
    armed: bool,
    /// The upload budget closed it: its one record says so (`upload_budget_exceeded`).
    cut: bool,
}

impl TunnelRecord {
    fn new(state: Arc<State>, client: Client, approved: Approved) -> TunnelRecord {
        TunnelRecord {
            state,
            client,
            approved,
            dialed: None,
            up: Arc::default(),
            down: Arc::default(),
            armed: true,
            cut: false,
        }
    }

    fn write(&mut self) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        let (up, down) = (
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        );
        self.state.metrics.bytes_up.inc_by(up);
        self.state.metrics.bytes_down.inc_by(down);
        let dialed = self.dialed.map(|d| d.addr());
        if let Some(budget) = self.approved.budget.budget().filter(|_| self.cut) {
            let mut refusal = budget::refusal(&self.approved.target, budget)
                .in_session(&self.approved.session)
                .with_detail("the upload budget was reached: the tunnel was closed");
            refusal.resolved_ip = dialed.map(|d| d.ip());
            audit_cut(&self.state, &self.client, &refusal, None, (up, down));
            return;
        }
        audit_allowed(
            &self.state,
            &self.client,
            &self.approved,
            dialed,
            None,
            (up, down),
        );
    }
}

impl Drop for TunnelRecord {
    fn drop(&mut self) {
        self.write();
    }
}

/// Dial the approved destination, answer 200, then relay bytes both ways once the
/// client's connection is handed over.
pub async fn open(
    mut req: Request<Incoming>,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    done: mpsc::Sender<()>,
    pool: Arc<Upstream>,
) -> Response<Body> {
    let mut record = TunnelRecord::new(state, client, approved);
    let opened = match prepare(&record.approved, &record.state, &record.client).await {
        Ok(opened) => opened,
        Err(stopped) => {
            record.armed = false;
            let id = &record.client.request_id;
            return match stopped {
                NotOpened::Refused(refusal) => answer::refuse(&refusal, id),
                NotOpened::Failed(failure) => answer::fail(&failure, id),
            };
        }
    };
    let downstream = Downstream::Connect(hyper::upgrade::on(&mut req));
    tokio::spawn(relay(downstream, opened, record, done, pool));
    Response::new(answer::empty())
}

/// A redirected connection (the transparent listener) whose first bytes were already
/// judged: open its tunnel in place, or close it. Its bytes are still unread, so they
/// reach upstream unchanged.
pub(crate) async fn open_redirected(
    stream: TcpStream,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    done: mpsc::Sender<()>,
    pool: Arc<Upstream>,
) {
    let mut record = TunnelRecord::new(state, client, approved);
    match prepare(&record.approved, &record.state, &record.client).await {
        Ok(opened) => relay(Downstream::Redirected(stream), opened, record, done, pool).await,
        Err(_) => record.armed = false,
    }
}

/// Where a tunnel's client bytes come from.
enum Downstream {
    /// A `CONNECT`, once hyper hands the connection over; its first bytes are judged
    /// here.
    Connect(OnUpgrade),
    /// A redirected connection, its first bytes already judged.
    Redirected(TcpStream),
}

/// The life of an open tunnel: judge its first bytes (a `CONNECT`), then copy both ways
/// (or, for an inspected host, serve the requests inside: [`intercept`]) until either
/// side closes, it idles out, its session ends, the server's grace period ends or its
/// upload budget is reached; then write its record with the bytes it carried.
async fn relay(
    downstream: Downstream,
    opened: Opened,
    mut record: TunnelRecord,
    done: mpsc::Sender<()>,
    pool: Arc<Upstream>,
) {
    let Opened {
        slot,
        open,
        upstream,
        dialed,
    } = opened;
    record.dialed = Some(dialed);
    let state = record.state.clone();
    let mut phase = state.phase.subscribe();
    // The idle clock starts when the tunnel opens, so a tunnel where nobody speaks
    // closes after the idle timeout, not after the first-bytes wait plus it. The bytes
    // it relays, and nothing else of it, are its session's traffic.
    let activity = Activity::of(record.approved.session.clone());
    let (up, down) = (record.up.clone(), record.down.clone());
    let sent = record.up.clone();
    let (client, approved) = (&record.client, &record.approved);
    let allowance = &approved.budget;
    let intercepted = matches!(approved.judged, Judged::Intercept);
    let inside = |state| intercept::Inside {
        tunnel: approved,
        state,
        peer: client.addr,
        via: client.via,
        pool: &pool,
    };
    let limits = &state.limits;
    let work = async {
        match downstream {
            Downstream::Connect(on_upgrade) => {
                let upgraded = match on_upgrade.await {
                    Ok(upgraded) => upgraded,
                    Err(e) => {
                        tracing::debug!(request_id = %client.request_id, error = %e, "CONNECT upgrade failed");
                        return Ok(false);
                    }
                };
                let mut downstream = activity.watch_counting(TokioIo::new(upgraded), up);
                // The policies the CONNECT was decided with, not those in force now: a
                // reload between the two must not judge one tunnel by two policies.
                let (target, tunnels) = (&approved.target, approved.policies.org.tunnels());
                let wait = limits.header_timeout.min(limits.tunnel_idle_timeout);
                let first =
                    client_hello::admit(&mut downstream, &upstream, target, tunnels, wait).await?;
                if intercepted {
                    // Each request inside pays the budget for its own body.
                    intercept::serve(downstream, first, upstream, dialed, inside(&state)).await;
                    return Ok(false);
                }
                let mut upstream = activity.watch_counting(upstream, down);
                // The first bytes were counted as read; only what the budget grants is sent.
                let granted = allowance.grant(first.len());
                sent.fetch_sub((first.len() - granted) as u64, Ordering::Relaxed);
                if upstream.write_all(&first[..granted]).await.is_err() {
                    return Ok(false);
                }
                if granted < first.len() {
                    let _ = upstream.shutdown().await;
                    return Ok(true);
                }
                let relayed = relay::both_ways(downstream, upstream, &activity, allowance).await;
                Ok(ended(relayed, client))
            }
            Downstream::Redirected(stream) => {
                let downstream = activity.watch_counting(stream, up);
                if intercepted {
                    // Its ClientHello is still unread: the handshake reads it.
                    intercept::serve(downstream, Vec::new(), upstream, dialed, inside(&state))
                        .await;
                    return Ok(false);
                }
                let upstream = activity.watch_counting(upstream, down);
                let relayed =
                    relay::tcp_both_ways(downstream, upstream, &activity, allowance).await;
                Ok(ended(relayed, client))
            }
        }
    };
    let outcome = tokio::select! {
        outcome = work => outcome,
        _ = activity.idle_for(limits.tunnel_idle_timeout) => {
            tracing::debug!(request_id = %client.request_id, "idle tunnel closed");
            Ok(false)
        }
        _ = async { drop(phase.wait_for(|p| *p == Phase::Closing).await) } => Ok(false),
        // DELETE, expiry or a revoking reload ends the session and its tunnels.
        _ = until_ended(approved.session.as_deref()) => Ok(false),
    };
    match outcome {
        Err(refusal) => {
            record.armed = false;
            audit_refusal(&state, &record.client, &refusal, None).await;
        }
        Ok(cut) => {
            record.cut = cut;
            record.write()
        }
    }
    drop((open, slot, done));
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

/// An open tunnel: counted in `egress_tunnels_active`, and among its session's open
/// tunnels, until dropped.
struct TunnelOpen {
    metrics: Arc<Metrics>,
    _session: Option<TunnelGuard>,
}

impl TunnelOpen {
    /// Count a new tunnel, or `None` when its session is at its tunnel limit.
    fn try_new(state: &State, session: Option<&Arc<Session>>) -> Option<TunnelOpen> {
        let max = state.limits.max_tunnels_per_session;
        let guard = match session {
            Some(s) => Some(tunnel_opened(s, max)?),
            None => None,
        };
        state.metrics.tunnels_active.inc();
        Some(TunnelOpen {
            metrics: state.metrics.clone(),
            _session: guard,
        })
    }
}

impl Drop for TunnelOpen {
    fn drop(&mut self) {
        self.metrics.tunnels_active.dec();
    }
}
