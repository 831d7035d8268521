//! The arithmetic of a session's upload budget shared by a fleet (docs/scale-out.md,
//! "One upload budget"), with no I/O: the Lua script of `super::redis_budget` does the
//! same steps inside Redis, and the property test drives this model through any
//! interleaving of draws, spends, returns and expiries.
//!
//! A budget `B` is split three ways:
//!
//! - **committed** (`C`): bytes handed to some replica to spend. Durable: a replica that
//!   dies may have spent any of its committed bytes, so they never come back by expiry.
//! - **reserves** (`R_r`, one per replica, each in a key with a TTL the replica refreshes
//!   while it lives): bytes a replica has taken but may not spend yet. A dead replica's
//!   reserve comes back when its key expires.
//! - **free**: `B - C - sum of the live R_r`.
//!
//! A replica spends only what was committed to it; a draw commits a slice from its
//! reserve, topping the reserve up from what is free. So a replica killed loses the
//! fleet at most its unspent slice; its reserve is back within the key's TTL.

use std::collections::BTreeMap;

/// The smallest slice a draw commits (unless less is free), for budgets of 64 MiB and
/// more; smaller budgets use `B / 1024`, so three replicas strand at most about 0.3 %.
pub(crate) const MIN_SLICE: u64 = 64 * 1024;
/// The largest slice one draw commits: a replica killed strands at most this.
pub(crate) const MAX_SLICE: u64 = 4 * 1024 * 1024;
/// A slice is this fraction of what the replica could reach (free plus its reserve).
pub(crate) const SLICE_DIVISOR: u64 = 64;
/// A reserve is topped up to this fraction of what the replica could reach.
pub(crate) const RESERVE_DIVISOR: u64 = 16;
/// The largest reserve top-up one draw takes.
pub(crate) const MAX_RESERVE: u64 = 4 * MAX_SLICE;

/// The floor of a slice for budget `budget`.
pub(crate) fn floor(budget: u64) -> u64 {
    (budget / 1024).clamp(1, MIN_SLICE)
}

/// What one draw does: how much moves from free into the replica's reserve, and how
/// much moves from its reserve to committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Draw {
    pub take: u64,
    pub commit: u64,
}

/// Plan a draw by a replica holding reserve `own`, with `free` bytes free, that needs
/// `need` bytes now (it gets at least that when the fleet has it).
///
/// The slice shrinks with what is left (`reach / 64`), so as the budget nears its end
/// replicas hold little each and the last bytes are not stranded on one of them.
pub(crate) fn plan(budget: u64, free: u64, own: u64, need: u64) -> Draw {
    let reach = free.saturating_add(own);
    let slice = need
        .max((reach / SLICE_DIVISOR).clamp(floor(budget), MAX_SLICE))
        .min(reach);
    let take = if own < slice {
        let reserve = (reach / RESERVE_DIVISOR).clamp(floor(budget), MAX_RESERVE);
        free.min((slice - own).max(reserve))
    } else {
        0
    };
    Draw {
        take,
        commit: slice.min(own + take),
    }
}

/// The budget's state as Redis holds it, for one session.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ledger {
    pub budget: u64,
    pub committed: u64,
    /// The live reserves, by replica.
    pub reserves: BTreeMap<u32, u64>,
}

impl Ledger {
    pub(crate) fn new(budget: u64) -> Ledger {
        Ledger {
            budget,
            ..Ledger::default()
        }
    }

    /// What is neither committed nor in a live reserve.
    pub(crate) fn free(&self) -> u64 {
        let reserved: u64 = self.reserves.values().sum();
        self.budget
            .saturating_sub(self.committed)
            .saturating_sub(reserved)
    }

    /// Replica `r` needs `need` bytes: returns the bytes committed to it.
    pub(crate) fn draw(&mut self, r: u32, need: u64) -> u64 {
        let own = self.reserves.get(&r).copied().unwrap_or(0);
        let d = plan(self.budget, self.free(), own, need);
        let left = own + d.take - d.commit;
        if left > 0 {
            self.reserves.insert(r, left);
        } else {
            self.reserves.remove(&r);
        }
        self.committed += d.commit;
        d.commit
    }

    /// Replica `r` gives back its reserve and `unspent` committed bytes it will not
    /// spend (it stopped spending them first).
    pub(crate) fn give_back(&mut self, r: u32, unspent: u64) {
        self.committed = self.committed.saturating_sub(unspent);
        self.reserves.remove(&r);
    }

    /// Replica `r`'s reserve key expired (it died, or could not refresh it).
    pub(crate) fn expire(&mut self, r: u32) {
        self.reserves.remove(&r);
    }
}

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
