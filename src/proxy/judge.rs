//! The judgement of one request, in the order of judgement (docs/reference/answers.md):
//! target, credentials (a session), request-level policies, organization and request
//! decisions, then (for allowed names only) resolving and the address check. Ends in
//! addresses the proxy may dial, or in why it stops. Writing the records is
//! [`super::record`]'s.

use std::sync::Arc;
use std::time::Instant;

use hyper::{Request, StatusCode};

use super::record::{audit_would_deny, plain_url, Client};
use super::refusal::{Failure, Refusal, Stop};
use super::request;
use super::state::State;
use crate::load::Policies;
use crate::net::dial::{guard, CheckedAddr};
use crate::policy::Target;
use crate::policy::{
    check_narrowing, decide, Decision, Effective, Host, Reason, RequestPolicy, Verdict,
};
use crate::session::{self, AuthError, Session};

/// A request the policy allowed, with the addresses that passed the address check.
#[derive(Debug)]
pub struct Approved {
    pub target: Target,
    pub addrs: Vec<CheckedAddr>,
    pub decision: Decision,
    /// The policies it was decided with: whatever is judged later for this request (a
    /// tunnel's first bytes) is judged by these, even across a reload.
    pub policies: Arc<Policies>,
    /// The session the request runs under: its tunnels close when it ends.
    pub session: Option<Arc<Session>>,
    /// When the request was allowed, for the decision-to-first-byte latency.
    pub decided_at: Instant,
}

/// Judge `req`: Ok with the approved addresses, or why it stops.
pub async fn judge<B>(req: &Request<B>, state: &State, client: &Client) -> Result<Approved, Stop> {
    request::head_within(req, state.limits.max_header_bytes)?;
    let target = request::target(req)?;
    if state.audit.refusing() {
        // Nothing goes through unrecorded (docs/reference/audit-log.md).
        let refusal = Refusal::new(
            Reason::AuditUnavailable,
            target.host.to_string(),
            target.port,
        )
        .with_detail("the audit log cannot be written; every request is refused until it can");
        return Err(refusal.into());
    }
    let policies = state.policies();
    let session = credentials(req, state, &target).await?;
    let tag = |r: Refusal| r.in_session(&session);
    let header = request::header_policy(req.headers(), &target).map_err(tag)?;
    if let Some(s) = &session {
        covered(s, &policies, &target).map_err(tag)?;
    }
    let mut levels = base_levels(&policies, session.as_deref(), &target).map_err(tag)?;
    if let Some(narrower) = &header {
        if let Err(widening) = check_narrowing(&policies.org, &levels, narrower) {
            let what = "X-Network-Policy widens the policy";
            return Err(tag(Refusal::widening(&target, &widening, what)).into());
        }
        levels.push(narrower);
    }
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    let decision = decide(&eff, &target);
    match decision.verdict {
        Verdict::Deny(reason) => {
            return Err(tag(Refusal::from_decision(&decision, reason, &target)).into())
        }
        Verdict::WouldDeny(reason) => {
            let would = tag(Refusal::from_decision(&decision, reason, &target));
            // Boxed for the same reason as the denial's record in `conn::handle`.
            Box::pin(audit_would_deny(state, client, &would, plain_url(req))).await;
        }
        Verdict::Allow => {}
    }
    let ips = match &target.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => {
            state.metrics.dns_lookups.inc();
            state.resolver.resolve(name.as_str()).await.map_err(|e| {
                state.metrics.dns_failures.inc();
                Stop::Failed(Failure {
                    status: StatusCode::BAD_GATEWAY,
                    message: format!("cannot resolve {name}: {e}"),
                })
            })?
        }
    };
    let mut addrs: Vec<CheckedAddr> = Vec::with_capacity(ips.len());
    let mut refused = None;
    for ip in ips {
        match guard(&eff, ip, &state.own, target.port) {
            Ok(addr) => addrs.push(addr),
            Err((verdict, reason)) if refused.is_none() => refused = Some((verdict, reason, ip)),
            Err(_) => {}
        }
    }
    if addrs.is_empty() {
        let (verdict, reason, ip) =
            refused.expect("a lookup that succeeded returned at least one address");
        let mut refusal = Refusal::from_decision(&verdict, reason, &target);
        refusal.shared_hosting = decision.shared_hosting;
        refusal.resolved_ip = Some(ip);
        return Err(tag(refusal).into());
    }
    drop(levels);
    Ok(Approved {
        target,
        addrs,
        decision,
        policies,
        session,
        decided_at: Instant::now(),
    })
}

/// Step 2: the session named by `Proxy-Authorization`, if any. Wrong credentials are
/// refused even when sessions are optional: a client that offers them expects them used.
/// A proxy without the admin API has no sessions and leaves the header unjudged.
/// A store that cannot be reached refuses with `session_store_unavailable` (503): the
/// credentials are never taken unverified.
async fn credentials<B>(
    req: &Request<B>,
    state: &State,
    target: &Target,
) -> Result<Option<Arc<Session>>, Refusal> {
    if !state.sessions_enabled {
        return Ok(None);
    }
    let named = session::credentials(req.headers());
    let found = match named {
        Ok(Some((id, token))) => state.sessions.verify(&id, &token).await.map(Some),
        Ok(None) => Ok(None),
        Err(why) => Err(why),
    };
    match found {
        Ok(None) if state.require_session => {
            Err(Refusal::auth_required(AuthError::Missing, target))
        }
        Ok(found) => Ok(found),
        Err(why) => Err(Refusal::auth_required(why, target)),
    }
}

/// The session's policy must narrow the policies this proxy runs now. A reload here
/// ends the sessions it no longer covers; with a shared store, a session made on a
/// replica running another policy version is refused here (`policy_widening`) until
/// the two agree (docs/scale-out.md, "Two policy versions"). Checked once per session
/// and policy snapshot.
fn covered(session: &Session, policies: &Arc<Policies>, target: &Target) -> Result<(), Refusal> {
    session.covered_under(policies, || {
        let uppers: Vec<&RequestPolicy> = policies.proxy.iter().collect();
        check_narrowing(&policies.org, &uppers, &session.policy).map_err(|w| {
            let what = "the session's policy widens this proxy's policy";
            Refusal::widening(target, &w, what)
        })
    })
}

/// The request levels above the header (docs/reference/policy-files.md, "How the levels
/// stack"): `--policy` if given, then the session's policy; with neither, the
/// organization's default. While a reload has left `--policy` widening, every request
/// (and DNS query) is refused with `policy_widening`.
pub(crate) fn base_levels<'a>(
    policies: &'a Policies,
    session: Option<&'a Session>,
    target: &Target,
) -> Result<Vec<&'a RequestPolicy>, Refusal> {
    if let Some(widening) = &policies.widening {
        let what = "the proxy's --policy widens the reloaded organization policy";
        return Err(Refusal::widening(target, widening, what));
    }
    Ok(match session {
        Some(s) => policies.proxy.iter().chain([&s.policy]).collect(),
        None => vec![&policies.policy],
    })
}
