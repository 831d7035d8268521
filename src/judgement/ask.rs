//! The approval step of the judgement (docs/reference/approvals.md): a request whose
//! only refusal is `not_in_request_policy` (the organization allows it, the session's
//! policy does not), under a session created with `"on_deny": "ask"` or, without a
//! session, under `serve --approval ask`, waits for a reviewer instead of being refused.
//!
//! What a reviewer may let through is decided before anything is held, by the same
//! decision code as every request: the levels above the session's policy (`--policy`
//! for a session, none without one) and a policy of the one exact entry
//! (`HOST:PORT`) must allow it. So nothing the organization denies or does not allow,
//! and nothing `--policy` refuses a session, is ever held, and an approval can let
//! through only that destination.

use std::sync::Arc;

use super::approvals::{self, Outcome};
use super::approved::Judged;
use super::judge::{decide_levels, Asking};
use super::policies::Policies;
use super::record::{audit_approval, Client};
use super::state::State;
use crate::policy::{check_narrowing, Decision, Effective, Host, Reason, RequestPolicy};
use crate::policy::{Target, Verdict};
use crate::session::Session;

/// What an approval lets through: the decision under the approved entry.
pub(super) type Allowed = (Decision, Judged);

/// Whether the request may wait for a reviewer, and how long: only a denial for
/// `not_in_request_policy`, by a session (or proxy) that asks, of a request that did
/// not narrow itself with `X-Network-Policy`.
pub(super) fn asks(
    state: &State,
    session: &Option<Arc<Session>>,
    narrowed: bool,
    decision: &Decision,
) -> Option<std::time::Duration> {
    if narrowed || decision.verdict != Verdict::Deny(Reason::NotInRequestPolicy) {
        return None;
    }
    match session {
        Some(s) => s.ask,
        None => state.approvals.sessionless,
    }
}

/// What the approval step came to.
pub(super) enum Asked {
    /// Not held: refused as without approvals.
    NotHeld,
    /// Allowed: decided again under the approved entry.
    Allowed(Allowed),
    /// Held and refused: why, for the refusal's detail (and its `message`).
    Refused(&'static str),
}

/// The approval step, for a request [`asks`] lets wait `timeout`.
pub(super) async fn ask(
    state: &State,
    client: &Client,
    policies: &Policies,
    session: &Option<Arc<Session>>,
    target: &Target,
    asking: &Asking<'_>,
    timeout: std::time::Duration,
) -> Asked {
    // A name only: an address is allowed by CIDR, never approved.
    let Host::Name(name) = &target.host else {
        return Asked::NotHeld;
    };
    let entry = format!("{}:{}", name.as_str(), target.port);
    let Some(allowed) = approvable(policies, session.is_some(), &entry, target, asking) else {
        return Asked::NotHeld;
    };
    let (method, path) = match *asking {
        Asking::Tunnel => ("CONNECT".to_string(), None),
        Asking::Request { method, path } => (method.to_string(), Some(path.to_string())),
    };
    let asked = approvals::Asked {
        host: name.as_str().to_string(),
        port: target.port,
        method,
        path,
        entry,
    };
    let Ok(waiter) = state.approvals.join(session.as_ref(), asked, timeout) else {
        tracing::warn!(request_id = %client.request_id, "too many requests wait for approval; refused at once");
        return Asked::Refused("too many requests are waiting for a reviewer; it was not held");
    };
    let outcome = state.approvals.wait(&waiter).await;
    Box::pin(audit_approval(state, client, &waiter.pending, outcome)).await;
    match outcome {
        Outcome::AllowOnce | Outcome::AllowSession => Asked::Allowed(allowed),
        Outcome::Deny => Asked::Refused("a reviewer refused it"),
        Outcome::Expired => Asked::Refused("no reviewer decided in time"),
    }
}

/// The decision an approval of `entry` would give: the levels above the session's
/// policy and a policy of `entry` alone must allow the request, each narrowing what is
/// above it. `None` when they do not: such a request is refused, never held.
fn approvable(
    policies: &Policies,
    in_session: bool,
    entry: &str,
    target: &Target,
    asking: &Asking,
) -> Option<Allowed> {
    let json = serde_json::json!({"type": "allowlist", "allowed_domains": [entry]});
    let one = RequestPolicy::from_value(&json, "approval").ok()?;
    let mut levels: Vec<&RequestPolicy> = Vec::new();
    if in_session {
        levels.extend(policies.serve_policy.iter());
    }
    check_narrowing(&policies.org, &levels, &one).ok()?;
    levels.push(&one);
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    let (decision, judged, _) = decide_levels(&eff, target, asking).ok()?;
    (decision.verdict == Verdict::Allow).then_some((decision, judged))
}

/// The entry `allow-session` adds to `session`'s policy, checked to stay inside the
/// policies in force; `Err` says why it cannot.
pub fn widen_session(
    policies: &Policies,
    session: &Session,
    entry: &str,
) -> Result<crate::session::SessionPolicy, String> {
    let current = session.policy();
    let widened = current
        .with_entry(entry)
        .ok_or_else(|| "the session's policy has no allowed_domains to add to".to_string())?;
    let uppers: Vec<&RequestPolicy> = policies.serve_policy.iter().collect();
    check_narrowing(&policies.org, &uppers, &widened.compiled)
        .map_err(|w| format!("the widened policy would widen the policy in force: {w}"))?;
    Ok(widened)
}
