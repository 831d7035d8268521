//! What this replica holds of each session's fleet-wide upload budget, by session and
//! budget (docs/scale-out.md, "One upload budget"): the table the store's request path
//! draws from and `redis_budget`'s upkeep refreshes and gives back. Its own module so
//! that the store (which owns it) and the upkeep both use it and not each other.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::held::Held;
use super::now_ms;

/// This replica's holdings, by session id, then budget (a session has one, or a few
/// while a narrower budget is in force for some of its requests).
#[derive(Default)]
pub(super) struct Holdings {
    pub(super) by_id: std::sync::Mutex<HashMap<String, Vec<Slot>>>,
}

pub(super) struct Slot {
    /// The budget it is drawn under; `None`: counted only, never drawn.
    pub(super) budget: Option<u64>,
    pub(super) held: Arc<Held>,
    /// Spent through this replica and added to the fleet's `uploaded` key.
    pub(super) reported: u64,
    pub(super) refreshed_ms: u64,
}

impl Holdings {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Slot>>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn slot(
        &self,
        id: &str,
        budget: Option<u64>,
        held: Option<&Arc<Held>>,
    ) -> Arc<Held> {
        let mut by_id = self.lock();
        // The request path: found, without making a key.
        if let Some(slot) = by_id
            .get(id)
            .and_then(|v| v.iter().find(|s| s.budget == budget))
        {
            return slot.held.clone();
        }
        let held = held.cloned().unwrap_or_else(|| {
            let held = Arc::new(Held::default());
            held.used_ms.store(now_ms(), Ordering::Relaxed);
            held
        });
        by_id.entry(id.to_string()).or_default().push(Slot {
            budget,
            held: held.clone(),
            reported: 0,
            refreshed_ms: now_ms(),
        });
        held
    }

    /// Bytes spent here and not yet reported to the fleet, for session `id`.
    pub(super) fn unreported(&self, id: &str) -> u64 {
        self.lock().get(id).map_or(0, |slots| {
            slots
                .iter()
                .map(|s| s.held.spent().saturating_sub(s.reported))
                .sum()
        })
    }
}
