//! Reloading the organization policy (SIGHUP, `POST /v1/reload`), atomically.
//!
//! The new files are loaded and compiled first; if that fails, the running policies stay
//! and the error is logged (and returned to `POST /v1/reload`). Otherwise every session
//! the new policies no longer cover is ended (audit event `session.revoked`, naming the
//! entries) and the new set is swapped in: under the memory store's lock; with a shared
//! store, swapped first, then the sessions are ended on every replica
//! (docs/scale-out.md, "Two policy versions"). New
//! requests see it; tunnels already open keep running. A `--policy` that the new
//! organization policy no longer covers does not fail the reload: it makes every request
//! refused with `policy_widening` until a later reload fixes it
//! (docs/reference/control-plane.md, "Reload").

use std::path::PathBuf;
use std::sync::Arc;

use crate::audit::{new_request_id, Record};
use crate::dlp::Canary;
use crate::judgement::{Policies, State};
use crate::load::{self, LoadError};
use crate::policy::{check_narrowing, Level, Reason, RequestPolicy};

/// What a successful reload did.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Reloaded {
    /// Sessions ended because the new policies no longer cover them.
    pub revoked_sessions: Vec<String>,
    /// Set when `--policy` now widens the organization policy (every request refused).
    pub policy_widening: Option<Vec<String>>,
}

/// Reloads the files `serve` started with.
pub(crate) struct Reloader {
    org_path: PathBuf,
    policy_path: Option<PathBuf>,
    /// Canaries besides the organization's (`run --canary`), kept by every reload.
    canaries: Arc<[Canary]>,
    state: Arc<State>,
    /// One reload at a time.
    running: tokio::sync::Mutex<()>,
}

impl Reloader {
    pub(crate) fn new(
        (org_path, policy_path): (PathBuf, Option<PathBuf>),
        canaries: Arc<[Canary]>,
        state: Arc<State>,
    ) -> Reloader {
        Reloader {
            org_path,
            policy_path,
            canaries,
            state,
            running: tokio::sync::Mutex::new(()),
        }
    }

    /// Load the files again and put them in force. On error nothing changes; the error
    /// is logged and returned.
    pub(crate) async fn reload(&self) -> Result<Reloaded, LoadError> {
        let _one = self.running.lock().await;
        let metrics = &self.state.metrics;
        let files = (&self.org_path, self.policy_path.as_deref());
        let policies = match load::load_with(files.0, files.1, &self.canaries) {
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
        let revoked_sessions = self.swap(policies).await;
        metrics.reloads_ok.inc();
        tracing::info!(org = %self.org_path.display(), revoked = revoked_sessions.len(), "policy reloaded");
        Ok(Reloaded {
            revoked_sessions,
            policy_widening,
        })
    }

    /// End the sessions `new` does not cover and put `new` in force (how, and in which
    /// order, is the store's: [`crate::session::Store::revoke`]). Returns the ended ids.
    async fn swap(&self, new: Policies) -> Vec<String> {
        let state = self.state.clone();
        let new = Arc::new(new);
        let uncovered = |policy: &RequestPolicy| {
            let uppers: Vec<&RequestPolicy> = new.serve_policy.iter().collect();
            check_narrowing(&new.org, &uppers, policy)
                .err()
                .map(|w| w.offending)
        };
        let in_force = new.clone();
        let swap = Box::new(move || state.swap_policies(in_force));
        let revoked = self.state.sessions.revoke(&uncovered, swap).await;
        revoked
            .into_iter()
            .map(|(id, offending)| {
                self.audit_revoked(&id, &offending);
                id
            })
            .collect()
    }

    /// The `session.revoked` record of a session this reload ended.
    fn audit_revoked(&self, id: &str, offending: &[String]) {
        let mut record = Record::new(
            "session.revoked",
            new_request_id(),
            String::new(),
            String::new(),
            String::new(),
            Some(0),
        );
        record.session = Some(id.to_string());
        record.reason = Some(Reason::PolicyWidening.as_str());
        record.rule = Some(offending.join("; "));
        record.policy_level = Some(Level::Request.as_str());
        self.state.audit.write_detached(record);
        tracing::warn!(session = %id, offending = %offending.join("; "), "session revoked by the reload");
    }
}
