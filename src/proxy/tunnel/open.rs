//! An open tunnel's place in the counts: `egress_tunnels_active`, and its session's
//! open tunnels (`--max-tunnels-per-session`).

use std::sync::Arc;

use crate::judgement::State;
use crate::metrics::Metrics;
use crate::session::{tunnel_opened, Session, TunnelGuard};

/// An open tunnel: counted in `egress_tunnels_active`, and among its session's open
/// tunnels, until dropped.
pub(super) struct TunnelOpen {
    metrics: Arc<Metrics>,
    _session: Option<TunnelGuard>,
}

impl TunnelOpen {
    /// Count a new tunnel, or `None` when its session is at its tunnel limit.
    pub(super) fn try_new(state: &State, session: Option<&Arc<Session>>) -> Option<TunnelOpen> {
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
