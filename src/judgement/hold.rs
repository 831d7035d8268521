//! The approval step of the judgement (docs/reference/approvals.md): a request that the
//! organization and `--policy` allow and the session's own policy refuses (for whatever
//! reason that level gives: `not_in_request_policy`, or `port_not_allowed` for a host
//! it allows on other ports), under a session created with `"on_deny": "ask"` or,
//! without a session, under `serve --approval ask`, waits for a reviewer instead of
//! being refused.
//!
//! What a reviewer may let through is decided before anything is held, by the same
//! decision code as every request: the levels above the session's policy (`--policy`
//! for a session, none without one) and a policy of the one exact entry
//! (`HOST:PORT`) must allow it. So nothing the organization denies or does not allow,
//! and nothing `--policy` refuses a session, is ever held, and an approval can let
//! through only that destination. An allow is judged again the same way against the
//! policies in force when it was made: a reload that narrowed them since gets their
//! refusal, never the approval.

use std::sync::Arc;

use super::approvals::{self, Outcome};
use super::approved::Judged;
use super::ask::What;
use super::decide::decide_levels;
use super::policies::Policies;
use super::record::{audit_approval, Client};
use super::refusal::Refusal;
use super::state::State;
use crate::policy::{check_narrowing, Decision, Effective, Host, Level, Reason, RequestPolicy};
use crate::policy::{HostName, Target, Verdict};
use crate::session::Session;

/// What an approval lets through: the decision under the approved entry.
pub(super) type Allowed = (Decision, Judged);

/// Whether the request may wait for a reviewer, and how long: only a denial by a
/// request level for `not_in_request_policy` or `port_not_allowed`, by a session (or
/// proxy) that asks, of a request that did not narrow itself with `X-Network-Policy`.
/// Whether that level is the session's own (and not `--policy`) is [`hold`]'s check.
pub(super) fn may_hold(
    state: &State,
    session: &Option<Arc<Session>>,
    narrowed: bool,
    decision: &Decision,
) -> Option<std::time::Duration> {
    let by_request_level = matches!(
        decision.verdict,
        Verdict::Deny(Reason::NotInRequestPolicy | Reason::PortNotAllowed)
    ) && decision.level == Level::Request;
    if narrowed || !by_request_level {
        return None;
    }
    match session {
        Some(s) => s.ask,
        None => state.approvals.sessionless,
    }
}

/// What the approval step came to.
pub(super) enum Hold {
    /// Not held: refused as without approvals.
    NotHeld,
    /// Allowed: decided again under the approved entry, by the policies in force when
    /// the reviewer decided (what is judged after, the address check, is judged by them).
    Allowed(Allowed, Arc<Policies>),
    /// Held and refused: by a reviewer, the timeout, or the policies in force when a
    /// reviewer allowed it.
    Refused(Refusal),
}

/// The approval step, for a request [`may_hold`] lets wait `timeout`; `decision` is its
/// refusal without approvals.
#[allow(clippy::too_many_arguments)]
pub(super) async fn hold(
    state: &State,
    client: &Client,
    policies: &Policies,
    session: &Option<Arc<Session>>,
    target: &Target,
    what: &What<'_>,
    decision: &Decision,
    timeout: std::time::Duration,
) -> Hold {
    // A name only: an address is allowed by CIDR, never approved.
    let Host::Name(name) = &target.host else {
        return Hold::NotHeld;
    };
    let entry = format!("{}:{}", name.as_str(), target.port);
    if approvable(policies, session.is_some(), &entry, target, what).is_err() {
        return Hold::NotHeld;
    }
    let refused = |why: &str| {
        let reason = decision.reason().unwrap_or(Reason::NotInRequestPolicy);
        Refusal::from_decision(decision, reason, target).with_detail(why)
    };
    let (method, path) = match what {
        What::Tunnel | What::Name => ("CONNECT".to_string(), None),
        What::Request(r) => (r.method.to_string(), Some(r.path.to_string())),
    };
    let asked = approvals::Wanted {
        host: name.as_str().to_string(),
        port: target.port,
        method,
        path,
        entry,
    };
    let Ok(waiter) = state.approvals.join(session.as_ref(), asked, timeout) else {
        tracing::warn!(request_id = %client.request_id, "too many requests wait for approval; refused at once");
        return Hold::Refused(refused(
            "too many requests are waiting for a reviewer; it was not held",
        ));
    };
    let decided = state.approvals.wait(&waiter).await;
    let outcome = decided.outcome;
    let asked = &waiter.pending.asked;
    let ended = match (outcome, &decided.policies) {
        (Outcome::AllowOnce | Outcome::AllowSession, Some(now)) => {
            match approvable(now, session.is_some(), &asked.entry, target, what) {
                Ok(allowed) => Hold::Allowed(allowed, now.clone()),
                Err(refusal) => Hold::Refused(refusal.with_detail(
                    "a reviewer allowed it, but the policy in force when they decided refuses it",
                )),
            }
        }
        (Outcome::AllowOnce | Outcome::AllowSession, None) => {
            Hold::Refused(refused("the approval carried no policy to judge it by"))
        }
        (Outcome::Deny, _) => Hold::Refused(refused("a reviewer refused it")),
        (Outcome::Expired, _) => Hold::Refused(refused("no reviewer decided in time")),
    };
    let refusal = match &ended {
        Hold::Refused(r) => Some(r),
        _ => None,
    };
    Box::pin(audit_approval(
        state,
        client,
        &waiter.pending,
        outcome,
        refusal,
    ))
    .await;
    ended
}

/// The decision an approval of `entry` would give: the levels above the session's
/// policy and a policy of `entry` alone must allow the request, each narrowing what is
/// above it. `Err` says why they do not (the organization's or `--policy`'s refusal
/// first, in the order of judgement): such a request is refused, never held.
fn approvable(
    policies: &Policies,
    in_session: bool,
    entry: &str,
    target: &Target,
    what: &What,
) -> Result<Allowed, Refusal> {
    let json = serde_json::json!({"type": "allowlist", "allowed_domains": [entry]});
    let one = RequestPolicy::from_value(&json, "approval").map_err(|e| {
        Refusal::new(Reason::InvalidPolicy, target.host.to_string(), target.port)
            .with_detail(format!("the approved entry {entry} does not load: {e}"))
    })?;
    let mut levels: Vec<&RequestPolicy> = Vec::new();
    if in_session {
        levels.extend(policies.serve_policy.iter());
    }
    let uppers = levels.len();
    levels.push(&one);
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    let (decision, judged, _) = decide_levels(&eff, target, what)?;
    match decision.verdict {
        Verdict::Allow => {}
        Verdict::Deny(reason) | Verdict::WouldDeny(reason) => {
            return Err(Refusal::from_decision(&decision, reason, target));
        }
    }
    check_narrowing(&policies.org, &levels[..uppers], &one).map_err(|w| {
        Refusal::widening(target, &w, "the approved entry widens the policy in force")
    })?;
    Ok((decision, judged))
}

/// Whether the policies in force now still allow approval `pending`'s destination
/// (host and port, as a tunnel to it is judged): `Err` with their refusal when they do
/// not. Each held request is judged again by them, its method and path too.
pub(crate) fn allowed_now(
    policies: &Policies,
    pending: &approvals::Pending,
) -> Result<(), Refusal> {
    let asked = &pending.asked;
    let host = HostName::parse(&asked.host).map_err(|_| {
        Refusal::new(Reason::InvalidHost, asked.host.clone(), asked.port)
            .with_detail("the approval's host does not parse")
    })?;
    let target = Target {
        host: Host::Name(host),
        port: asked.port,
    };
    let in_session = pending.session.is_some();
    approvable(policies, in_session, &asked.entry, &target, &What::Tunnel).map(|_| ())
}

/// The entry `allow-session` adds to `session`'s policy, checked to stay inside the
/// policies in force; `Err` says why it cannot.
pub(crate) fn widen_session(
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
