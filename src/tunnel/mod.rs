//! The tunnel engine (docs/ARCHITECTURE.md, "The tunnel engine"): `CONNECT`s of the
//! HTTP listener (`crate::proxy`), connections redirected to the transparent listener
//! (`crate::transparent`), and SOCKS5 `CONNECT`s (`crate::socks`), each handed over as
//! a TCP connection; it speaks no listener's protocol. The upstream connection is made
//! to a checked address before the client is answered, so a refusal or an unreachable
//! upstream is told in the listener's own way (a status code, a SOCKS5 reply) and no
//! tunnel ever opens for it. Once open, a `CONNECT` or SOCKS5 tunnel's first bytes are
//! judged (TLS server name, `[tunnels]`) before any of them reaches upstream; a
//! redirected connection's were judged before it was dialed. An intercepted tunnel is
//! served by the listener that knows HTTP, through [`Inspect`].

pub(crate) mod batch;
mod carry;
pub(crate) mod idle;
mod open;
mod prefixed;
mod record;
pub(crate) mod relay;
#[cfg(target_os = "linux")]
pub(crate) mod splice;
#[cfg(test)]
mod test_pair;
mod way;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::audit::Via;
use crate::judgement::approved::{Approved, Judged};
use crate::judgement::record::{audit_refusal, Client};
use crate::judgement::refusal::{Failure, Limit, Refusal};
use crate::judgement::relayed::{self, RelayedSum};
use crate::judgement::tunnel_counts::TunnelSlot;
use crate::judgement::{exfiltration, Phase, State};
use crate::net::dial::{CheckedAddr, DialError};
use crate::net::parent::open as open_upstream;
use crate::session::until_ended;
use carry::{carry, Carried};
use idle::{Activity, Watched};
use open::TunnelOpen;
pub(crate) use prefixed::Prefixed;
use record::TunnelRecord;

/// A tunnel's client side as the engine holds it: its TCP connection, the bytes already
/// read from it in front, its traffic watched.
pub(crate) type ClientSide = Watched<Prefixed<TcpStream>>;

/// The tunnel an intercepted connection is served for: what every request inside is
/// judged against.
pub(crate) struct Tunnel<'a> {
    pub approved: &'a Approved,
    pub state: &'a Arc<State>,
    pub peer: SocketAddr,
    pub via: Via,
    /// What the requests inside add their bytes to, for the tunnel's record.
    pub relayed: Option<relayed::Relayed>,
}

/// What serves an intercepted tunnel (docs/reference/inspection.md): the HTTP listener's
/// interception, given by whoever hands the engine a tunnel, so the engine itself
/// imports no listener. Boxed: only an intercepted tunnel pays for its future.
pub(crate) trait Inspect: Send + Sync {
    /// Serve `client` until it closes: `first` are its bytes already read (its
    /// ClientHello), `upstream` the connection made to `dialed` for the tunnel.
    fn serve<'a>(
        &'a self,
        client: ClientSide,
        first: Vec<u8>,
        upstream: TcpStream,
        dialed: CheckedAddr,
        tunnel: Tunnel<'a>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// Why a tunnel did not open: a refusal (already audited) or an unreachable upstream
/// (with whether it refused the connection, which SOCKS5 tells apart).
pub(crate) enum NotOpened {
    Refused(Refusal),
    Failed { failure: Failure, refused: bool },
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
    let slots = match state.tunnels.try_take(client.addr.ip()) {
        None => Err(limit("too many open tunnels from this client")),
        Some(slot) => match TunnelOpen::try_new(state, approved.session.as_ref()).await {
            Ok(None) => Err(limit("too many open tunnels in this session")),
            Ok(Some(open)) => Ok((slot, open)),
            Err(_) => Err(Refusal::auth_required(
                crate::session::AuthError::StoreUnavailable,
                &approved.target,
            )
            .in_session(&approved.session)),
        },
    };
    let (slot, open) = match slots {
        Ok(slots) => slots,
        Err(refusal) => {
            audit_refusal(state, client, &refusal, None).await;
            return Err(NotOpened::Refused(refusal));
        }
    };
    let target = &approved.target;
    let parent = state.parent.as_deref();
    let timeout = state.limits.connect_timeout;
    let (upstream, dialed) =
        match open_upstream(parent, &target.host, target.port, &approved.addrs, timeout).await {
            Ok(pair) => pair,
            Err(e) => {
                let failure = Failure::dial(&approved.target, &e);
                tracing::info!(request_id = %client.request_id, error = %e, "{}", failure.message);
                let refused = matches!(e, DialError::Refused(_));
                return Err(NotOpened::Failed { failure, refused });
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

/// A redirected connection (the transparent listener) whose first bytes were already
/// judged: open its tunnel in place, or close it. Its bytes are still unread, so they
/// reach upstream unchanged.
pub(crate) async fn open_redirected(
    stream: TcpStream,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    done: mpsc::Sender<()>,
    inspect: Arc<dyn Inspect>,
) {
    let mut record = TunnelRecord::new(state, client, approved);
    match prepare(&record.approved, &record.state, &record.client).await {
        Ok(opened) => {
            relay(
                Downstream::Redirected(stream),
                opened,
                record,
                done,
                inspect,
            )
            .await
        }
        Err(_) => record.armed = false,
    }
}

/// A tunnel whose client is answered in its own protocol once upstream is dialed (a
/// `CONNECT`'s 200, a SOCKS5 reply): its slots taken and its upstream connected, not
/// yet relaying. Dropped unrelayed (the client went away before it was handed over), it
/// writes its allowed record as any tunnel does.
pub(crate) struct Dialed {
    opened: Opened,
    record: TunnelRecord,
}

/// Take the slots of an approved tunnel and dial it, before its client is answered; a
/// refusal is audited here.
pub(crate) async fn dial_tunnel(
    approved: Approved,
    state: Arc<State>,
    client: Client,
) -> Result<Dialed, NotOpened> {
    let mut record = TunnelRecord::new(state, client, approved);
    match prepare(&record.approved, &record.state, &record.client).await {
        Ok(opened) => Ok(Dialed { opened, record }),
        Err(stopped) => {
            record.armed = false;
            Err(stopped)
        }
    }
}

impl Dialed {
    /// The proxy's end of the upstream connection (SOCKS5's bound address).
    pub(crate) fn bound(&self) -> Option<SocketAddr> {
        self.opened.upstream.local_addr().ok()
    }

    /// Relay, once the client has been told the tunnel is open: `ahead` are its bytes
    /// already read (past a `CONNECT`'s head), which with the rest of its first bytes
    /// are judged (`[tunnels]`) before any reaches upstream.
    pub(crate) async fn relay(
        self,
        stream: TcpStream,
        ahead: Vec<u8>,
        done: mpsc::Sender<()>,
        inspect: Arc<dyn Inspect>,
    ) {
        let downstream = Downstream::Unjudged(Prefixed::new(ahead, stream));
        relay(downstream, self.opened, self.record, done, inspect).await
    }
}

/// Where a tunnel's client bytes come from.
enum Downstream {
    /// A redirected connection, its first bytes already judged.
    Redirected(TcpStream),
    /// A connection already told the tunnel is open (a `CONNECT`, SOCKS5); its first
    /// bytes are judged here.
    Unjudged(Prefixed<TcpStream>),
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
    inspect: Arc<dyn Inspect>,
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
    // An intercepted tunnel's record gives the bytes of the requests inside it, once
    // every one of them has written its own.
    let (relayed, mut sum) = match matches!(approved.judged, Judged::Intercept) {
        true => {
            let (relayed, sum) = relayed::relayed();
            (Some(relayed), Some(sum))
        }
        false => (None, None),
    };
    let inside_counts = sum.as_ref().map(RelayedSum::counts);
    let limits = &state.limits;
    let carried = Carried {
        approved,
        state: &state,
        client,
        activity: &activity,
        inspect: &*inspect,
        relayed,
        up,
        down,
        sent,
    };
    // The futures are made in place, never moved into another once made: a future moved
    // keeps its first slot too, and an idle tunnel's task would carry it twice.
    let outcome = tokio::select! {
        outcome = carry(downstream, upstream, dialed, carried, sum.as_mut()) => outcome,
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
            let refusal: Refusal = refusal;
            record.armed = false;
            let approved = &record.approved;
            // A canary in its server name or first bytes ends its session too.
            let refusal = match refusal.dlp.is_some() {
                true => refusal.in_session(&approved.session),
                false => refusal,
            };
            let on_trip = exfiltration::on_trip(&approved.policies, approved.session.as_ref());
            Box::pin(exfiltration::end_session(
                &state,
                on_trip,
                approved.session.as_ref(),
                &refusal,
            ))
            .await;
            Box::pin(audit_refusal(&state, &record.client, &refusal, None)).await;
        }
        Ok(cut) => {
            record.cut = cut;
            record.inside = inside_counts;
            record.write()
        }
    }
    drop((open, slot, done));
}
