//! The judgement of a request, below every listener: what the explicit proxy
//! (`crate::proxy`), the transparent listener (`crate::transparent`), the SOCKS5
//! listener (`crate::socks`), the DNS listener (`crate::dns`) and the admin API
//! (`crate::admin`) share, so that a destination is judged, recorded and refused the
//! same way whichever door it came through (docs/reference/answers.md, "Order of
//! judgement"). It speaks no protocol (docs/ARCHITECTURE.md, "One judgement"): each
//! listener reads its own wire into the same question.
//!
//! - [`ask`]: the question ([`ask::Ask`]): target, credentials, what is asked (a tunnel,
//!   a request, a name on any port), the client's narrowing; and where ([`ask::Scope`]).
//! - [`policies`]: the policies in force ([`Policies`]), the snapshot a request is
//!   judged by, swapped whole by a reload.
//! - [`state`]: what every listener shares ([`State`]): that snapshot, the session store,
//!   the resolver, the audit log, the limits, the server's [`Phase`].
//! - [`request`]: the parts every listener shares: `host:port` split, a normalised path.
//! - [`judge`]: the order of judgement for one question: credentials, narrowing,
//!   levels, decision, the approval step, the report-mode settlement, the upload budget
//!   step, then resolving and the address check. It ends in an [`approved::Approved`]
//!   or a [`refusal::Stop`]. [`judge::decide_now`] is the same steps up to the decision,
//!   for a listener that cannot wait (DNS).
//! - [`exfiltration`] and [`secrets`]: the canaries' and the secret detectors' steps,
//!   first of all: what a request carries that must not leave.
//! - [`decide`]: step 4, the decision under the levels (by host and port, or by
//!   method and path where rules say so).
//! - [`hold`] and [`approvals`]: the approval step (a refusal a reviewer may lift, held
//!   until decided) and the pending approvals the admin API lists and decides.
//! - [`approved`]: what an allowed request hands its listener.
//! - [`refusal`]: why a request stops ([`refusal::Refusal`], [`refusal::Failure`]).
//! - [`record`]: the audit records and metric counts of a decision, each built from one
//!   constructor.
//! - [`budget`]: the upload meters and allowances, and the budget step of the judgement.
//! - [`relayed`]: the bytes of the requests relayed inside an intercepted tunnel, which
//!   its record gives.
//! - [`tunnel_counts`]: open tunnels per client address.
//! - [`client_hello`]: a tunnel's first bytes (the ClientHello's server name) read
//!   without terminating TLS, and judged by `[tunnels]`.
//!
//! # A new listener
//!
//! A listener reads what its client asks into an [`ask::Ask`] (a small adapter of its
//! own: `crate::proxy::request` for HTTP, `ask` in `crate::socks`), calls
//! [`judge::judge`], and then either records and refuses, or counts and goes on. The
//! SOCKS5 listener shows the whole of it: for a client's `CONNECT NAME:PORT`, ask for a
//! tunnel to that target with the session its handshake verified, make its
//! [`record::Client`] with `via` set to the listener's [`crate::audit::Via`], judge it; on
//! a [`refusal::Stop`] record it with [`record::record_stop`] and answer with SOCKS5's own
//! reply (this module never writes to a socket); on approval [`record::count_approved`],
//! then hand the tunnel to the tunnel engine (`crate::tunnel`), which dials the
//! approved, checked addresses, judges the first bytes with [`client_hello::admit`] and
//! relays.

pub(crate) mod approvals;
pub(crate) mod approved;
pub(crate) mod ask;
pub(crate) mod budget;
pub(crate) mod client_hello;
pub(crate) mod decide;
pub(crate) mod exfiltration;
pub(crate) mod hold;
pub(crate) mod judge;
pub(crate) mod levels;
pub(crate) mod pending;
pub(crate) mod policies;
pub(crate) mod record;
pub(crate) mod refusal;
pub(crate) mod relayed;
pub(crate) mod request;
pub(crate) mod secrets;
pub(crate) mod state;
pub(crate) mod tunnel_counts;

pub(crate) use policies::Policies;
pub(crate) use state::{Limits, Phase, State};
