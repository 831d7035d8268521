//! A session's policy, and the one change it may see while it lives: an approved
//! `allow-session` adds the exact destination a reviewer allowed
//! (docs/reference/approvals.md). The policy is swapped whole, so a request judges by
//! the old one or the new one, never a mix.

use std::any::Any;
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;

use super::Session;
use crate::dlp::Detectors;
use crate::policy::RequestPolicy;

/// How long a request waits for a reviewer when `ask_timeout_seconds` is not given.
pub(crate) const DEFAULT_ASK_SECS: u64 = 30;
/// The longest a request may wait for a reviewer (`ask_timeout_seconds`).
pub(crate) const MAX_ASK_SECS: u64 = 300;

/// A session's `network_policy`: compiled, and as the client sent it (what `GET` shows).
/// Its coverage by the policies in force is cached with it, so a policy swapped in is
/// checked afresh by construction.
#[derive(Debug)]
pub(crate) struct SessionPolicy {
    pub compiled: RequestPolicy,
    pub json: Value,
    /// The policies snapshot this policy was last found covered by (see
    /// [`SessionPolicy::covered_under`]). A `Weak` keeps the allocation, so the address
    /// cannot be reused by a later snapshot while it is held.
    covered: Mutex<Option<Snapshot>>,
    /// The secret detectors in force under this policy, with the policies snapshot they
    /// were built for (see [`SessionPolicy::detectors_under`]).
    detectors: Mutex<Option<(Snapshot, Arc<Detectors>)>>,
}

/// A policies snapshot something was found or built for, held weakly.
type Snapshot = Weak<dyn Any + Send + Sync>;

/// Whether `slot` was filled for `snapshot`: the same allocation, still held.
fn same_snapshot<T: Any + Send + Sync>(
    slot: &Weak<dyn Any + Send + Sync>,
    snapshot: &Arc<T>,
) -> bool {
    std::ptr::addr_eq(slot.as_ptr(), Arc::as_ptr(snapshot))
}

impl SessionPolicy {
    pub(crate) fn new(compiled: RequestPolicy, json: Value) -> SessionPolicy {
        SessionPolicy {
            compiled,
            json,
            covered: Mutex::new(None),
            detectors: Mutex::new(None),
        }
    }

    /// Whether this policy is covered by the policies `snapshot`, asking
    /// `check` only once per snapshot that covers it. A fleet can run two policy
    /// versions during a rollout, and a session made on a replica with a wider policy
    /// must not be taken at its word on a narrower one (docs/scale-out.md).
    pub(crate) fn covered_under<T, E>(
        &self,
        snapshot: &Arc<T>,
        check: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E>
    where
        T: Any + Send + Sync,
    {
        let mut slot = self.covered.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|w| same_snapshot(w, snapshot)) {
            return Ok(());
        }
        check()?;
        let any: Arc<dyn Any + Send + Sync> = snapshot.clone();
        *slot = Some(Arc::downgrade(&any));
        Ok(())
    }

    /// The secret detectors in force under this policy and the policies `snapshot`,
    /// made by `build` once per snapshot (docs/reference/dlp.md, "Secret detectors"):
    /// every request of the session shares them, and a reload or a policy swapped in
    /// builds them afresh.
    pub(crate) fn detectors_under<T>(
        &self,
        snapshot: &Arc<T>,
        build: impl FnOnce() -> Arc<Detectors>,
    ) -> Arc<Detectors>
    where
        T: Any + Send + Sync,
    {
        let mut slot = self.detectors.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, detectors)) = slot.as_ref().filter(|(w, _)| same_snapshot(w, snapshot)) {
            return detectors.clone();
        }
        let detectors = build();
        let any: Arc<dyn Any + Send + Sync> = snapshot.clone();
        *slot = Some((Arc::downgrade(&any), detectors.clone()));
        detectors
    }

    /// This policy with `entry` (a destination pattern such as `api.example.com:443`)
    /// added to its `allowed_domains`; `None` when it has no list to add to (a
    /// `disabled` policy) or the result does not compile.
    pub(crate) fn with_entry(&self, entry: &str) -> Option<SessionPolicy> {
        let mut json = self.json.clone();
        let list = json.get_mut("allowed_domains")?.as_array_mut()?;
        if !list.iter().any(|e| e.as_str() == Some(entry)) {
            list.push(Value::String(entry.to_string()));
        }
        let compiled = RequestPolicy::from_value(&json, "network_policy").ok()?;
        Some(SessionPolicy::new(compiled, json))
    }
}

impl Session {
    /// The policy in force for the session now.
    pub(crate) fn policy(&self) -> Arc<SessionPolicy> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Put `new` in force for every request judged from now on (its coverage is its
    /// own, so it is checked at the next request).
    pub(crate) fn set_policy(&self, new: SessionPolicy) {
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
    }
}
