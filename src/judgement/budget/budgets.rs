//! The meters by session (docs/reference/policy-files.md, "Upload budget"), and the
//! allowance each request draws from: a session's meter here, the proxy's, or with a
//! shared store what this replica holds of the session's fleet-wide budget
//! (docs/scale-out.md, "One upload budget").

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::{Allowance, Fleet, Meter};
use crate::policy::Budget;
use crate::session::{Leases, Session, StoreError};

/// One session's meter, kept while the session may still send.
pub(super) struct Entry {
    session: Weak<Session>,
    idle_timeout: Duration,
    used: Instant,
    meter: Arc<Meter>,
}

impl Entry {
    /// A meter may go once nobody holds its session (the store has let it go, and no
    /// request or tunnel runs under it) and it has been unused past the session's idle
    /// timeout, so the session has expired whatever store keeps it. Ids are never
    /// reused, so a meter let go is never needed again.
    fn done(&self, now: Instant) -> bool {
        self.session.strong_count() == 0 && now.duration_since(self.used) > self.idle_timeout
    }
}

/// The meters: one per session, one for the requests without a session.
#[derive(Default)]
pub(crate) struct Budgets {
    proxy: Arc<Meter>,
    pub(super) sessions: Mutex<Sessions>,
    /// A shared store's fleet-wide session budgets; the proxy's own budget (requests
    /// without a session) stays this replica's.
    leases: Option<Arc<dyn Leases>>,
}

#[derive(Default)]
pub(super) struct Sessions {
    pub(super) by_id: HashMap<String, Entry>,
    /// Prune the map when it grows past this (doubling, so pruning is amortised).
    prune_at: usize,
}

impl Budgets {
    /// Session budgets shared through `leases` (a shared store), or kept here (`None`).
    pub(crate) fn new(leases: Option<Arc<dyn Leases>>) -> Budgets {
        Budgets {
            leases,
            ..Budgets::default()
        }
    }

    /// The allowance of a request under `budget`, drawn from its session's meter (or
    /// the proxy's), or from what this replica holds of the session's fleet budget.
    pub(crate) fn allowance(
        &self,
        session: Option<&Arc<Session>>,
        budget: Option<Budget>,
    ) -> Allowance {
        if let (Some(s), Some(leases)) = (session, &self.leases) {
            return Allowance {
                meter: self.proxy.clone(),
                budget,
                fleet: Some(Fleet {
                    id: Arc::from(s.id.as_str()),
                    held: leases.held(&s.id, budget.map(|b| b.bytes)),
                    leases: leases.clone(),
                }),
            };
        }
        let meter = match session {
            None => self.proxy.clone(),
            Some(s) => self.session_meter(s),
        };
        Allowance {
            meter,
            budget,
            fleet: None,
        }
    }

    /// The shared store's budgets and tunnel counts, when there is one.
    pub(crate) fn shared(&self) -> Option<&Arc<dyn Leases>> {
        self.leases.as_ref()
    }

    /// What session `id` has sent upstream (`uploaded_bytes`): through this proxy, or
    /// with a shared store, through every replica.
    pub(crate) async fn uploaded(&self, id: &str) -> Result<u64, StoreError> {
        let all = self.uploaded_all(&[id.to_string()]).await?;
        Ok(all.first().copied().unwrap_or(0))
    }

    /// [`Budgets::uploaded`] of each session of `ids`, with a shared store in one round
    /// trip (`GET /v1/sessions`).
    pub(crate) async fn uploaded_all(&self, ids: &[String]) -> Result<Vec<u64>, StoreError> {
        if let Some(leases) = &self.leases {
            return leases.uploaded(ids).await;
        }
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        Ok(ids
            .iter()
            .map(|id| sessions.by_id.get(id).map_or(0, |e| e.meter.spent()))
            .collect())
    }

    fn session_meter(&self, s: &Arc<Session>) -> Arc<Meter> {
        let now = Instant::now();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.by_id.len() >= sessions.prune_at {
            sessions.by_id.retain(|_, e| !e.done(now));
            sessions.prune_at = (2 * sessions.by_id.len()).max(64);
        }
        let entry = sessions.by_id.entry(s.id.clone()).or_insert_with(|| Entry {
            session: Arc::downgrade(s),
            idle_timeout: s.idle_timeout,
            used: now,
            meter: Arc::default(),
        });
        entry.used = now;
        entry.session = Arc::downgrade(s);
        entry.meter.clone()
    }
}
