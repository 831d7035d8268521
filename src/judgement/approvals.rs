//! Requests held for a reviewer (docs/reference/approvals.md): the pending approvals,
//! one per session and destination, that `GET /v1/approvals` lists and
//! `POST /v1/approvals/{id}` decides. What may be held, and what an approval lets
//! through, is [`super::ask`]'s; this module only keeps them and wakes their waiters.
//!
//! Bounded: at most [`MAX_PENDING`] approvals wait on the proxy and
//! [`MAX_PENDING_PER_SESSION`] per session (requests without a session count as one);
//! past either, a request is refused at once, so a flood of held requests cannot
//! exhaust the proxy. Every held request keeps its connection, so it counts against
//! `--max-connections` as any other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::policies::Policies;
use crate::session::Session;

/// Approvals pending on the proxy at once, at most.
pub(crate) const MAX_PENDING: usize = 256;
/// Approvals pending for one session (or for requests without one) at once, at most.
pub(crate) const MAX_PENDING_PER_SESSION: usize = 16;
/// The longest path an approval shows, in bytes.
const MAX_PATH: usize = 256;

/// How an approval ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    AllowOnce,
    AllowSession,
    Deny,
    Expired,
}

impl Outcome {
    /// A reviewer's decision as `POST /v1/approvals/{id}` spells it.
    pub(crate) fn parse(text: &str) -> Option<Outcome> {
        match text {
            "allow-once" => Some(Outcome::AllowOnce),
            "allow-session" => Some(Outcome::AllowSession),
            "deny" => Some(Outcome::Deny),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::AllowOnce => "allow-once",
            Outcome::AllowSession => "allow-session",
            Outcome::Deny => "deny",
            Outcome::Expired => "expired",
        }
    }

    /// The audit event each held request writes when it ends.
    pub(crate) fn event(self) -> &'static str {
        match self {
            Outcome::AllowOnce | Outcome::AllowSession => "approval.allowed",
            Outcome::Deny => "approval.denied",
            Outcome::Expired => "approval.expired",
        }
    }

    pub(crate) fn allows(self) -> bool {
        matches!(self, Outcome::AllowOnce | Outcome::AllowSession)
    }
}

/// A decision as its waiters get it: the outcome, and for an allow the policies in
/// force when it was made, which each held request is judged by again (an approval
/// never outlives a reload that narrowed them).
#[derive(Clone)]
pub(crate) struct Decided {
    pub outcome: Outcome,
    /// `None` for `deny` and the timeout.
    pub policies: Option<Arc<Policies>>,
}

/// One request held on an approval, as the list shows it.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub method: String,
    /// Path and query cut to 256 bytes; `None` for a tunnel.
    pub path: Option<String>,
    pub since: SystemTime,
}

/// What a held request asks for, as the list shows it.
#[derive(Debug, Clone)]
pub(crate) struct Wanted {
    pub host: String,
    pub port: u16,
    pub method: String,
    /// `None` for a tunnel.
    pub path: Option<String>,
    /// The narrowest entry that would allow it: the exact host and port.
    pub entry: String,
}

/// One pending approval.
pub(crate) struct Pending {
    pub id: String,
    pub session: Option<Arc<Session>>,
    pub asked: Wanted,
    pub since: SystemTime,
    pub expires_at: SystemTime,
    deadline: tokio::time::Instant,
    /// The requests waiting on it now, each under its waiter's serial number, in the
    /// order they came.
    held: Mutex<Vec<(u64, Held)>>,
    outcome: watch::Sender<Option<Decided>>,
}

impl Pending {
    fn held(&self) -> MutexGuard<'_, Vec<(u64, Held)>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests waiting on it now.
    pub(crate) fn waiting(&self) -> usize {
        self.held().len()
    }

    /// The requests waiting on it now, oldest first.
    pub(crate) fn requests(&self) -> Vec<Held> {
        self.held().iter().map(|(_, h)| h.clone()).collect()
    }

    fn decided(&self) -> bool {
        self.outcome.borrow().is_some()
    }

    fn session_id(&self) -> Option<&str> {
        self.session.as_deref().map(|s| s.id.as_str())
    }

    fn same(&self, session: Option<&str>, asked: &Wanted) -> bool {
        self.session_id() == session
            && self.asked.host == asked.host
            && self.asked.port == asked.port
    }
}

/// The pending approvals of the proxy (with a shared store, of this replica).
pub(crate) struct Approvals {
    pending: Mutex<HashMap<String, Arc<Pending>>>,
    /// The next waiter's serial number.
    serial: AtomicU64,
    /// `serve --approval ask`: requests without a session wait this long.
    pub sessionless: Option<Duration>,
}

/// Too many approvals are pending.
#[derive(Debug)]
pub(crate) struct Full;

/// A request waiting on an approval; it stops waiting when dropped (its client went
/// away), and an approval nobody waits for any more is withdrawn.
pub(crate) struct Waiter<'a> {
    approvals: &'a Approvals,
    serial: u64,
    pub pending: Arc<Pending>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        // The map first, then the list, as `join` takes them.
        let mut map = self.approvals.lock();
        let mut held = self.pending.held();
        held.retain(|(serial, _)| *serial != self.serial);
        // Only while undecided: a decision already removed it.
        if held.is_empty() && !self.pending.decided() {
            map.remove(&self.pending.id);
        }
    }
}

impl Approvals {
    pub(crate) fn new(sessionless: Option<Duration>) -> Approvals {
        Approvals {
            pending: Mutex::new(HashMap::new()),
            serial: AtomicU64::new(0),
            sessionless,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Pending>>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait on the approval for `asked` under `session`: the one already pending for
    /// that destination (its list then shows this request too), or a new one that
    /// expires after `timeout`. A decided approval is no longer pending: a request that
    /// comes after a decision waits on a new one.
    pub(crate) fn join(
        &self,
        session: Option<&Arc<Session>>,
        mut asked: Wanted,
        timeout: Duration,
    ) -> Result<Waiter<'_>, Full> {
        let id = session.map(|s| s.id.as_str());
        if let Some(path) = &mut asked.path {
            clip(path, MAX_PATH);
        }
        let since = SystemTime::now();
        let held = Held {
            method: asked.method.clone(),
            path: asked.path.clone(),
            since,
        };
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        if let Some(found) = map.values().find(|p| p.same(id, &asked)) {
            found.held().push((serial, held));
            let pending = found.clone();
            return Ok(Waiter {
                approvals: self,
                serial,
                pending,
            });
        }
        let of_session = map.values().filter(|p| p.session_id() == id).count();
        if map.len() >= MAX_PENDING || of_session >= MAX_PENDING_PER_SESSION {
            return Err(Full);
        }
        let pending = Arc::new(Pending {
            id: crate::audit::new_request_id(),
            session: session.cloned(),
            asked,
            since,
            expires_at: since + timeout,
            deadline: tokio::time::Instant::now() + timeout,
            held: Mutex::new(vec![(serial, held)]),
            outcome: watch::Sender::new(None),
        });
        map.insert(pending.id.clone(), pending.clone());
        Ok(Waiter {
            approvals: self,
            serial,
            pending,
        })
    }

    /// Wait for the decision, the timeout, or the end of the session.
    pub(crate) async fn wait(&self, waiter: &Waiter<'_>) -> Decided {
        let pending = &waiter.pending;
        let mut rx = pending.outcome.subscribe();
        let ended = crate::session::until_ended(pending.session.as_deref());
        tokio::select! {
            decided = rx.wait_for(Option::is_some) => {
                if let Ok(d) = decided {
                    if let Some(d) = d.clone() {
                        return d;
                    }
                }
            }
            () = tokio::time::sleep_until(pending.deadline) => {}
            () = ended => {}
        }
        // Timed out, or the session ended: expired, unless a decision came first.
        let expired = Decided {
            outcome: Outcome::Expired,
            policies: None,
        };
        self.settle(&pending.id, expired.clone());
        let decided = pending.outcome.borrow().clone();
        decided.unwrap_or(expired)
    }

    /// Decide approval `id`: the requests waiting on it now go on with `decided`, and
    /// only they (a request that comes later waits on a new approval). Returns them;
    /// `None` when it is no longer pending (decided, expired or withdrawn).
    pub(crate) fn decide(&self, id: &str, decided: Decided) -> Option<Vec<Held>> {
        self.settle(id, decided)
    }

    fn settle(&self, id: &str, decided: Decided) -> Option<Vec<Held>> {
        // Removed under the lock `join` takes: from here on, no request joins it.
        let pending = self.lock().remove(id)?;
        // Listed before they are woken: once woken, they go.
        let released = pending.requests();
        pending.outcome.send_replace(Some(decided));
        Some(released)
    }

    /// The approval `id`, if pending.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Pending>> {
        self.lock().get(id).cloned()
    }

    /// Every pending approval, oldest first.
    pub(crate) fn list(&self) -> Vec<Arc<Pending>> {
        let mut all: Vec<Arc<Pending>> = self.lock().values().cloned().collect();
        all.sort_by_key(|p| p.since);
        all
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn clip(text: &mut String, max: usize) {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
}

#[cfg(test)]
#[path = "approvals_tests.rs"]
mod tests;
