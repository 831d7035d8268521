//! What the judgement of an allowed request hands its listener: the [`Approved`]
//! request, its checked addresses, and how its rules judged it ([`Judged`]). Its own
//! module so that the judge (which makes it) and the records (which read it) both
//! depend on it and not on each other.

use std::sync::Arc;
use std::time::Instant;

use super::budget::Allowance;
use super::policies::Policies;
use crate::dlp::{Detectors, FoundIn, Scanner};
use crate::net::dial::CheckedAddrs;
use crate::policy::{Decision, NormalPath, RequestPolicy, Target};
use crate::session::Session;

/// A request the policy allowed, with the addresses that passed the address check.
#[derive(Debug, Clone)]
pub(crate) struct Approved {
    pub target: Target,
    pub addrs: CheckedAddrs,
    pub decision: Decision,
    /// The policies it was decided with: whatever is judged later for this request (a
    /// tunnel's first bytes) is judged by these, even across a reload.
    pub policies: Arc<Policies>,
    /// The session the request runs under: its tunnels close when it ends.
    pub session: Option<Arc<Session>>,
    /// When the request was allowed, for the decision-to-first-byte latency.
    pub decided_at: Instant,
    /// A request read inside an intercepted tunnel goes upstream over TLS verified for
    /// this name (the `CONNECT` host); `None` for plain HTTP and for tunnels.
    pub upstream_tls: Option<Arc<str>>,
    /// The request's `X-Network-Policy`: a `CONNECT`'s narrows every request read
    /// inside its tunnel when it is intercepted. Boxed: most requests send none, and
    /// every request's futures carry this value (moved by memcpy).
    pub header: Option<Box<RequestPolicy>>,
    /// How rules judged it: the path to send upstream, or a tunnel to intercept.
    pub judged: Judged,
    /// What it may send upstream: its session's (or the proxy's) upload budget.
    pub budget: Allowance,
    /// A WebSocket handshake, forwarded with its upgrade (`crate::proxy::websocket`).
    pub websocket: bool,
    /// The secret detectors in force for it: its body, messages and first bytes are
    /// scanned with them (docs/reference/dlp.md).
    pub detectors: Arc<Detectors>,
    /// Where a secret was found and let through (`[dlp] action = "report"`): its
    /// records then give neither its URL nor, found there, its name.
    pub flagged: Option<FoundIn>,
}

impl Approved {
    /// The canaries in force for what its client sends (docs/reference/dlp.md): the
    /// organization's, then its session's.
    pub(crate) fn canaries(&self) -> Vec<&Scanner> {
        let session = self.session.as_ref().map(|s| &*s.canaries);
        [Some(&*self.policies.canaries), session]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect()
    }
}

/// How a request was judged beyond its host and port.
#[derive(Debug, Clone)]
pub(crate) enum Judged {
    /// No entry that matched had rules: the request goes on as it came.
    Whole,
    /// Its path was judged in this normalised form, which is what upstream is sent.
    Path(NormalPath),
    /// A tunnel whose requests must be judged one by one (intercepted).
    Intercept,
}

/// Where the question is asked: on a connection of its own, or inside an intercepted
/// tunnel (whose target, session, policies and addresses it keeps).
#[derive(Clone, Copy)]
pub(crate) enum Scope<'a> {
    Connection,
    Inside(&'a Approved),
}
