//! What one replica holds of a session's fleet-wide upload budget (docs/scale-out.md,
//! "One upload budget"): the bytes committed to it and not yet spent, taken by the
//! request path with one compare-and-swap, and the interface a shared store fills it
//! through ([`Leases`]). The arithmetic of drawing is [`super::lease`]'s.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::{now_ms, BoxFuture, StoreError};

/// The bytes of one session's budget this replica may spend.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Committed to this replica and not spent. Spending takes from it; giving back
    /// swaps it to zero, so a byte is either spent or given back, never both.
    avail: AtomicU64,
    /// Spent through this replica, for `uploaded_bytes`.
    spent: AtomicU64,
    /// When it was last spent from or drawn into ([`now_ms`]).
    pub(super) used_ms: AtomicU64,
    /// Whether a draw ever took anything into it (else there is nothing to give back).
    pub(super) drawn: AtomicBool,
    /// One draw at a time: the requests that found it short wait for that draw.
    pub(super) drawing: tokio::sync::Mutex<()>,
}

impl Held {
    /// Take up to `want` bytes; returns how many.
    pub(crate) fn take(&self, want: u64) -> u64 {
        let mut avail = self.avail.load(Ordering::Relaxed);
        loop {
            let grant = want.min(avail);
            if grant == 0 {
                return 0;
            }
            match self.avail.compare_exchange_weak(
                avail,
                avail - grant,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.spent.fetch_add(grant, Ordering::Relaxed);
                    self.used_ms.store(now_ms(), Ordering::Relaxed);
                    return grant;
                }
                Err(now) => avail = now,
            }
        }
    }

    /// Take all of `want` or nothing.
    pub(crate) fn take_whole(&self, want: u64) -> bool {
        let taken = self
            .avail
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |a| a.checked_sub(want))
            .is_ok();
        if taken {
            self.spent.fetch_add(want, Ordering::Relaxed);
            self.used_ms.store(now_ms(), Ordering::Relaxed);
        }
        taken
    }

    /// Committed here and not spent.
    pub(crate) fn avail(&self) -> u64 {
        self.avail.load(Ordering::Acquire)
    }

    /// Spent through this replica.
    pub(crate) fn spent(&self) -> u64 {
        self.spent.load(Ordering::Relaxed)
    }

    /// Count `n` bytes sent under no budget (for `uploaded_bytes`).
    pub(crate) fn count(&self, n: u64) {
        self.spent.fetch_add(n, Ordering::Relaxed);
        self.used_ms.store(now_ms(), Ordering::Relaxed);
    }

    pub(super) fn add(&self, n: u64) {
        self.drawn.store(true, Ordering::Relaxed);
        self.avail.fetch_add(n, Ordering::AcqRel);
        self.used_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Stop spending what is held: returns the bytes to give back.
    pub(super) fn drain(&self) -> u64 {
        self.avail.swap(0, Ordering::AcqRel)
    }
}

/// What a shared store shares besides sessions: upload budgets and tunnel counts.
pub(crate) trait Leases: Send + Sync {
    /// This replica's holding of session `id`'s budget of `budget` bytes (`None`: the
    /// count of what its requests under no budget send). A narrower budget has a holding
    /// of its own, drawn under it (docs/scale-out.md, "One upload budget").
    fn held(&self, id: &str, budget: Option<u64>) -> Arc<Held>;

    /// Make `held` hold at least `need` bytes of session `id`'s budget of `budget` bytes
    /// when the fleet has them (it may get less: the caller refuses then). Fails when
    /// the store cannot be reached; what is held stays spendable.
    fn fill<'a>(
        &'a self,
        id: &'a str,
        held: &'a Arc<Held>,
        budget: u64,
        need: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The bytes each session of `ids` sent through every replica (`uploaded_bytes`),
    /// in one round trip; what other replicas spent in the last few seconds may not be
    /// in it yet.
    fn uploaded<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<u64>, StoreError>>;

    /// Count a new tunnel of session `id` on the fleet: false when the fleet already
    /// holds `max` of them (`--max-tunnels-per-session`).
    fn open_tunnel<'a>(
        &'a self,
        id: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// One of session `id`'s tunnels counted by [`Leases::open_tunnel`] closed.
    fn close_tunnel(self: Arc<Self>, id: String);

    /// Session `id`'s open tunnels on every replica (`open_tunnels`).
    fn fleet_tunnels<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<usize, StoreError>>;
}
