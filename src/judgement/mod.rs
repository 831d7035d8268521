//! The judgement of a request, below every listener: what the explicit proxy
//! (`crate::proxy`), the transparent listener (`crate::transparent`), the DNS listener
//! (`crate::dns`) and the admin API (`crate::admin`) share, so that a destination is
//! judged, recorded and refused the same way whichever door it came through
//! (docs/reference/answers.md, "Order of judgement"). None of those listeners imports
//! another's judgement; each imports this module.
//!
//! - [`policies`]: the policies in force ([`Policies`]), the snapshot a request is
//!   judged by, swapped whole by a reload.
//! - [`state`]: what every listener shares ([`State`]): that snapshot, the session store,
//!   the resolver, the audit log, the limits, the server's [`Phase`].
//! - [`request`]: reading what a request asks for (its target, the `Host` check, the
//!   `X-Network-Policy` header).
//! - [`judge`]: the order of judgement for one request: target, credentials, levels,
//!   decision, the approval step, the report-mode settlement, the upload budget step, then resolving and
//!   the address check. It ends in an [`approved::Approved`] or a [`refusal::Stop`].
//! - [`ask`] and [`approvals`]: the approval step (a refusal a reviewer may lift, held
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
//! A listener turns what its client asks into a request the judge reads, calls
//! [`judge::judge`], and then either records and refuses, or counts and goes on.
//! The transparent listener's tunnels show the whole of it (`crate::transparent`,
//! `tunnel_redirected`), and the SOCKS5 listener (`crate::socks`) plugs in the same
//! way: for a client's `CONNECT NAME:PORT`, build the `CONNECT` request of that
//! authority, make its [`record::Client`] with `via` set to the listener's
//! [`crate::audit::Via`], judge it; on a [`refusal::Stop`] record it with
//! [`record::record_stop`] and answer with SOCKS5's own reply (this module never
//! writes to a socket); on approval [`record::count_approved`], then judge the first
//! bytes with [`client_hello::admit`] and relay to the approved, checked addresses.

pub mod approvals;
pub mod approved;
pub mod ask;
pub mod budget;
pub mod client_hello;
pub mod hold;
pub mod judge;
pub mod pending;
pub mod policies;
pub mod record;
pub mod refusal;
pub mod relayed;
pub mod request;
pub mod state;
pub mod tunnel_counts;

pub use policies::Policies;
pub use state::{Limits, Phase, State};
