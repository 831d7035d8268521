//! Reloading the organization policy (SIGHUP, `POST /v1/reload`), atomically.
//!
//! The new files are loaded and compiled first; if that fails, the running policies stay
//! and the error is logged (and returned to `POST /v1/reload`). Otherwise, under the
//! session store's lock: every session the new policies no longer cover is ended (audit
//! event `session.revoked`, naming the entries), then the new set is swapped in. New
//! requests see it; tunnels already open keep running. A `--policy` that the new
//! organization policy no longer covers does not fail the reload: it makes every request
//! refused with `policy_widening` until a later reload fixes it
//! (docs/reference/control-plane.md, "Reload").

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::audit::{new_request_id, Record};
use crate::load::{self, LoadError, Policies};
use crate::policy::{check_narrowing, Level, Reason, RequestPolicy};
use crate::proxy::State;
use crate::session::Ended;

/// What a successful reload did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reloaded {
    /// Sessions ended because the new policies no longer cover them.
    pub revoked_sessions: Vec<String>,
    /// Set when `--policy` now widens the organization policy (every request refused).
    pub policy_widening: Option<Vec<String>>,
}

/// Reloads the files `serve` started with.
pub struct Reloader {
    org_path: PathBuf,
    policy_path: Option<PathBuf>,
    state: Arc<State>,
    /// One reload at a time.
    running: Mutex<()>,
}

impl Reloader {
    pub fn new(org_path: PathBuf, policy_path: Option<PathBuf>, state: Arc<State>) -> Reloader {
        Reloader {
            org_path,
            policy_path,
            state,
            running: Mutex::new(()),
        }
    }

    /// Load the files again and put them in force. On error nothing changes; the error
    /// is logged and returned.
    pub fn reload(&self) -> Result<Reloaded, LoadError> {
        let _one = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let metrics = &self.state.metrics;
        let policies = match load::load(&self.org_path, self.policy_path.as_deref()) {
            Ok(p) => p,
            Err(e) => {
                metrics.reloads_failed.inc();
                tracing::error!(error = %e, "reload failed; the running policy stays in force");
                return Err(e);
            }
        };
        let policy_widening = policies.widening.as_ref().map(|w| w.offending.clone());
        if let Some(w) = &policies.widening {
            tracing::error!(
                policy = ?self.policy_path,
                offending = %w,
                "after the reload, --policy widens the organization policy: every request is refused with policy_widening until it is fixed"
            );
        }
        let revoked_sessions = self.swap(policies);
        metrics.reloads_ok.inc();
        tracing::info!(org = %self.org_path.display(), revoked = revoked_sessions.len(), "policy reloaded");
        Ok(Reloaded {
            revoked_sessions,
            policy_widening,
        })
    }

    /// End the sessions `new` does not cover, then put `new` in force; both under the
    /// store's lock, so no session is created in between. Returns the ended ids.
    fn swap(&self, new: Policies) -> Vec<String> {
        let state = &self.state;
        let sessions = &state.sessions;
        let mut map = sessions.lock();
        let uppers: Vec<&RequestPolicy> = new.proxy.iter().collect();
        let widening: Vec<(String, Vec<String>)> = map
            .values()
            .filter_map(|s| {
                check_narrowing(&new.org, &uppers, &s.policy)
                    .err()
                    .map(|w| (s.id.clone(), w.offending))
            })
            .collect();
        let mut revoked = Vec::with_capacity(widening.len());
        for (id, offending) in widening {
            if sessions.end_locked(&mut map, &id, Ended::Revoked).is_some() {
                let mut record = Record::new(
                    "session.revoked",
                    new_request_id(),
                    String::new(),
                    String::new(),
                    String::new(),
                    Some(0),
                );
                record.session = Some(id.clone());
                record.reason = Some(Reason::PolicyWidening.as_str());
                record.rule = Some(offending.join("; "));
                record.policy_level = Some(Level::Request.as_str());
                state.audit.write_detached(record);
                tracing::warn!(session = %id, offending = %offending.join("; "), "session revoked by the reload");
                revoked.push(id);
            }
        }
        state.swap_policies(new);
        drop(map);
        revoked
    }
}
