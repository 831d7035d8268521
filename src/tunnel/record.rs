//! The one record of an approved tunnel ([`TunnelRecord`]): its allowed record with the
//! bytes it carried, or the budget's refusal that cut it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::judgement::approved::Approved;
use crate::judgement::budget;
use crate::judgement::record::{audit_allowed, audit_cut, Client};
use crate::judgement::relayed::ByteCounts;
use crate::judgement::State;
use crate::net::dial::CheckedAddr;

/// The allowed record of one approved tunnel, written exactly once: with the bytes it
/// carried when it ends, or, should its task be dropped first (its client gone before
/// the tunnel opened), when this is dropped. A refusal after the approval (a limit, the
/// first bytes) disarms it, having written its own record.
pub(super) struct TunnelRecord {
    pub(super) state: Arc<State>,
    pub(super) client: Client,
    pub(super) approved: Approved,
    pub(super) dialed: Option<CheckedAddr>,
    pub(super) up: Arc<AtomicU64>,
    pub(super) down: Arc<AtomicU64>,
    pub(super) armed: bool,
    /// The upload budget closed it: its one record says so (`upload_budget_exceeded`).
    pub(super) cut: bool,
    /// An intercepted tunnel's bytes: those of the requests relayed inside it, each
    /// already counted in the metrics by its own record (docs/reference/audit-log.md).
    pub(super) inside: Option<Arc<ByteCounts>>,
}

impl TunnelRecord {
    pub(super) fn new(state: Arc<State>, client: Client, approved: Approved) -> TunnelRecord {
        TunnelRecord {
            state,
            client,
            approved,
            dialed: None,
            up: Arc::default(),
            down: Arc::default(),
            armed: true,
            cut: false,
            inside: None,
        }
    }

    pub(super) fn write(&mut self) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        let (up, down) = match &self.inside {
            Some(inside) => inside.load(),
            None => {
                let bytes = (
                    self.up.load(Ordering::Relaxed),
                    self.down.load(Ordering::Relaxed),
                );
                self.state.metrics.bytes_up.inc_by(bytes.0);
                self.state.metrics.bytes_down.inc_by(bytes.1);
                bytes
            }
        };
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
