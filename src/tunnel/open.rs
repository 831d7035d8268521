//! An open tunnel's place in the counts: `egress_tunnels_active`, and its session's
//! open tunnels (`--max-tunnels-per-session`), on this proxy and, with a shared store,
//! on every replica (docs/scale-out.md, "Tunnel counts").

use std::sync::Arc;

use crate::judgement::State;
use crate::metrics::Metrics;
use crate::session::{tunnel_opened, Leases, Session, StoreError, TunnelGuard};

/// An open tunnel: counted in `egress_tunnels_active`, and among its session's open
/// tunnels, until dropped.
pub(super) struct TunnelOpen {
    metrics: Arc<Metrics>,
    _session: Option<TunnelGuard>,
    _fleet: Option<FleetSlot>,
}

/// A tunnel counted on the fleet, until dropped.
struct FleetSlot {
    shared: Arc<dyn Leases>,
    id: String,
}

impl Drop for FleetSlot {
    fn drop(&mut self) {
        self.shared
            .clone()
            .close_tunnel(std::mem::take(&mut self.id));
    }
}

impl TunnelOpen {
    /// Count a new tunnel, or `None` when its session is at its tunnel limit here or on
    /// the fleet. Fails when a shared store cannot be asked.
    pub(super) async fn try_new(
        state: &State,
        session: Option<&Arc<Session>>,
    ) -> Result<Option<TunnelOpen>, StoreError> {
        let max = state.limits.max_tunnels_per_session;
        let (guard, fleet) = match session {
            None => (None, None),
            Some(s) => {
                // This replica's count first: the fleet's holds it, so it is never over.
                let Some(guard) = tunnel_opened(s, max) else {
                    return Ok(None);
                };
                let fleet = match state.budgets.shared() {
                    None => None,
                    Some(shared) => {
                        if !shared.open_tunnel(&s.id, max).await? {
                            return Ok(None);
                        }
                        Some(FleetSlot {
                            shared: shared.clone(),
                            id: s.id.clone(),
                        })
                    }
                };
                (Some(guard), fleet)
            }
        };
        state.metrics.tunnels_active.inc();
        Ok(Some(TunnelOpen {
            metrics: state.metrics.clone(),
            _session: guard,
            _fleet: fleet,
        }))
    }
}

impl Drop for TunnelOpen {
    fn drop(&mut self) {
        self.metrics.tunnels_active.dec();
    }
}
