//! One direction of a relay: what it counts into and the allowance it draws from, shared
//! by the copy ([`super::relay`]) and the splice ([`super::splice`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::judgement::budget::Allowance;

/// One direction's counter, and (upstream-bound only) the allowance it draws from.
#[derive(Clone, Copy)]
pub(crate) struct Way<'a> {
    pub count: &'a AtomicU64,
    pub allowance: Option<&'a Allowance>,
}

impl Way<'_> {
    /// Count `n` bytes read, granting them from the allowance if there is one: returns
    /// how many may be sent on.
    pub(crate) fn moved(&self, n: usize) -> usize {
        let granted = self.allowance.map_or(n, |a| a.grant(n));
        self.count.fetch_add(granted as u64, Ordering::Relaxed);
        granted
    }

    /// [`Way::moved`], drawing from the store when a fleet-wide budget's holding here
    /// is short (docs/scale-out.md, "One upload budget").
    pub(crate) async fn moved_filled(&self, n: usize) -> usize {
        let granted = match self.allowance {
            Some(a) if a.leased() => a.grant_filled(n).await,
            _ => return self.moved(n),
        };
        self.count.fetch_add(granted as u64, Ordering::Relaxed);
        granted
    }
}
