//! The judgement of one request, in the order of judgement (docs/reference/answers.md):
//! target, credentials (a session), request-level policies, organization and request
//! decisions, then (for allowed names only) resolving and the address check. Ends in
//! addresses the proxy may dial, or in why it stops. Writing the records is
//! [`super::record`]'s.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use super::approved::{Approved, Judged, Scope};
use super::ask::{Ask, Credentials, Narrowing, What};
use super::budget;
use super::decide::decide_levels;
use super::exfiltration;
use super::hold::{self, Hold};
use super::levels::Levels;
use super::policies::Policies;
use super::record::{audit_flagged, audit_would_deny, Client};
use super::refusal::{Failure, Refusal, Stop};
use super::secrets;
use super::state::State;
use crate::dlp::{By, Hit};
use crate::net::dial::{guard, CheckedAddrs};
use crate::policy::Target;
use crate::policy::{check_narrowing, Decision, Effective, Host, Reason, RequestPolicy, Verdict};
use crate::session::{AuthError, Session, SessionPolicy};

/// Judge `ask`, on a connection of its own or inside an intercepted tunnel: Ok with the
/// addresses it may go to, or why it stops. Inside a tunnel, the tunnel's target,
/// session and policies (those its `CONNECT` was decided with) are kept, narrowed by
/// the `CONNECT`'s `X-Network-Policy` and then the request's own, and the request goes
/// to the tunnel's checked addresses (docs/reference/inspection.md).
pub(crate) async fn judge(
    ask: Ask<'_>,
    scope: Scope<'_>,
    state: &State,
    client: &Client,
) -> Result<Approved, Stop> {
    let target = &ask.target;
    unaudited(state.audit.refusing(), target)?;
    let policies = match scope {
        Scope::Connection => state.policies(),
        Scope::Inside(tunnel) => tunnel.policies.clone(),
    };
    let inside = matches!(scope, Scope::Inside(_));
    if let Some(hit) = exfiltration::scan(&ask, &policies.canaries, inside) {
        // The reason recorded whatever else would refuse it; the session it names, if
        // its credentials hold, is the one a trip ends.
        let session = match scope {
            Scope::Connection => credentials(&ask, state).await.ok().flatten(),
            Scope::Inside(tunnel) => tunnel.session.clone(),
        };
        let on_trip = exfiltration::on_trip(&policies, session.as_ref());
        return Err(exfiltration::tripped(state, on_trip, session, hit, &ask)
            .await
            .into());
    }
    let session = match scope {
        Scope::Connection => credentials(&ask, state).await?,
        Scope::Inside(tunnel) => tunnel.session.clone(),
    };
    if let Some(s) = &session {
        // The session's own canaries, beside the organization's (docs/reference/dlp.md).
        if let Some(hit) = exfiltration::scan(&ask, &s.canaries, inside) {
            let on_trip = exfiltration::on_trip(&policies, Some(s));
            let refusal = exfiltration::tripped(state, on_trip, session.clone(), hit, &ask);
            return Err(refusal.await.into());
        }
    }
    let tag = |r: Refusal| r.in_session(&session);
    let header = narrowing(ask.narrowing, target).map_err(tag)?;
    let own = session.as_ref().map(|s| s.policy());
    let headers = match scope {
        Scope::Connection => {
            if let Some(own) = &own {
                covered(own, &policies, target).map_err(tag)?;
            }
            [header.as_deref(), None]
        }
        Scope::Inside(tunnel) => [tunnel.header.as_deref(), header.as_deref()],
    };
    let levels = levels(&policies, own_policy(&own), &headers, target).map_err(tag)?;
    // The secret detectors in force, before anything else may refuse (docs/reference/dlp.md).
    let detectors = secrets::in_force(&policies, own.as_deref(), &headers_of(&headers));
    let flagged = match secrets::scan(&ask, &detectors, inside) {
        Some(hit) if hit.by == By::Reported => Some(hit),
        Some(hit) => return Err(tag(Refusal::exfiltration(hit, target)).into()),
        None => None,
    };
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    // A secret only reported is the reason recorded whatever else refuses the request
    // (docs/reference/dlp.md): no record or answer then names the host or URL that
    // carried it, and nothing is held for a reviewer or recorded `egress.would_deny`.
    let secret_first = |refusal: Refusal| match &flagged {
        Some(hit) => tag(Refusal::exfiltration(hit.clone(), target)),
        None => tag(refusal),
    };
    let (mut decision, mut judged, limit) =
        decide_levels(&eff, target, &ask.what).map_err(secret_first)?;
    if let (Some(_), Verdict::Deny(reason)) = (&flagged, decision.verdict) {
        let refusal = Refusal::from_decision(&decision, reason, target);
        return Err(secret_first(refusal).into());
    }
    // Set when a reviewer's approval let the request through: the policies they decided by.
    let mut approved_under = None;
    let held = match scope {
        Scope::Connection => hold::may_hold(state, &session, header.is_some(), &decision),
        Scope::Inside(_) => None,
    };
    if let Some(timeout) = held {
        let held = hold::hold(
            state, client, &policies, &session, target, &ask.what, &decision, timeout,
        );
        match Box::pin(held).await {
            Hold::Allowed(allowed, now) => {
                (decision, judged) = allowed;
                approved_under = Some(now);
            }
            Hold::Refused(refusal) => return Err(tag(refusal).into()),
            Hold::NotHeld => {}
        }
    }
    if flagged.is_none() {
        settle(&decision, target, &session, state, client, ask.url).await?;
    }
    if matches!(judged, Judged::Intercept) && state.interception.is_none() {
        // Rules that cannot be enforced without reading the requests: refused whole.
        let refusal = Refusal::from_decision(&decision, Reason::MethodNotAllowed, target)
            .with_detail("this host's rules need its requests read, and the proxy has no --ca");
        return Err(secret_first(refusal).into());
    }
    // The budget comes last of the policy's judgements, before any lookup.
    let allowance = state.budgets.allowance(session.as_ref(), limit);
    budget::fill(&ask, &allowance, state.limits.max_header_bytes)
        .await
        .map_err(secret_first)?;
    budget::admit(&ask, &allowance).map_err(secret_first)?;
    let (addrs, upstream_tls) = match scope {
        Scope::Inside(tunnel) => (
            tunnel.addrs.clone(),
            Some(Arc::from(tunnel.target.host.to_string())),
        ),
        Scope::Connection => {
            // An approved request's addresses are checked by the policies it was
            // approved by.
            let (now_levels, now_eff);
            let eff = match &approved_under {
                Some(now) => {
                    now_levels =
                        self::levels(now, own_policy(&own), &headers, target).map_err(tag)?;
                    now_eff = Effective {
                        org: &now.org,
                        levels: &now_levels,
                    };
                    &now_eff
                }
                None => &eff,
            };
            let addrs = checked_addrs(&decision, eff, &session, target, state).await?;
            (addrs, None)
        }
    };
    let websocket = matches!(&ask.what, What::Request(r) if r.websocket);
    let approved = Approved {
        addrs,
        target: ask.target,
        decision,
        policies: approved_under.unwrap_or(policies),
        session,
        decided_at: Instant::now(),
        upstream_tls,
        header: match scope {
            Scope::Connection => header,
            Scope::Inside(_) => None,
        },
        judged,
        budget: allowance,
        websocket,
        detectors,
        flagged: flagged.as_ref().map(|h| h.found_in),
    };
    if let Some(hit) = flagged {
        // Let through, and recorded: `[dlp] action = "report"`.
        audit_flagged(state, client, &approved, hit, ask.url.map(|u| u()));
    }
    Ok(approved)
}

/// The judgement of a question without credentials that waits for nothing (a DNS
/// query): the audit check, its narrowing, the levels of a connection without a
/// session, the decision, by the same steps as [`judge`]'s. Whatever comes after the
/// decision (a reviewer, a budget, resolving) is not a name's. With the decision, the
/// secret a detector found and only reports (`[dlp] action = "report"`), which the
/// listener records `egress.flagged` as it answers; where the question is refused
/// anyway, that secret is the reason (docs/reference/dlp.md), so the name that carries
/// it is never recorded.
pub(crate) fn decide_now(
    ask: &Ask<'_>,
    policies: &Policies,
    audit_refusing: bool,
) -> Result<(Decision, Option<Hit>), Refusal> {
    unaudited(audit_refusing, &ask.target)?;
    if let Some(hit) = exfiltration::scan(ask, &policies.canaries, false) {
        // No session to end: a question without credentials.
        return Err(Refusal::exfiltration(hit, &ask.target));
    }
    let header = narrowing(ask.narrowing, &ask.target)?;
    let levels = levels(policies, None, &[header.as_deref(), None], &ask.target)?;
    // A name with a secret is refused; one only reported is answered and recorded by
    // its listener (docs/reference/dlp.md).
    let detectors = secrets::without_session(policies, &headers_of(&[header.as_deref()]));
    let flagged = match secrets::scan(ask, &detectors, false) {
        Some(hit) if hit.by == By::Reported => Some(hit),
        Some(hit) => return Err(Refusal::exfiltration(hit, &ask.target)),
        None => None,
    };
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    let secret_first = |refusal: Refusal| match &flagged {
        Some(hit) => Refusal::exfiltration(hit.clone(), &ask.target),
        None => refusal,
    };
    let (decision, _, _) = decide_levels(&eff, &ask.target, &ask.what).map_err(secret_first)?;
    if let (Verdict::Deny(reason), Some(_)) = (decision.verdict, &flagged) {
        let refusal = Refusal::from_decision(&decision, reason, &ask.target);
        return Err(secret_first(refusal));
    }
    Ok((decision, flagged))
}

/// Nothing goes through unrecorded (docs/reference/audit-log.md): while the audit log
/// cannot be written (`refusing`), every question is refused.
fn unaudited(refusing: bool, target: &Target) -> Result<(), Refusal> {
    if !refusing {
        return Ok(());
    }
    let refusal = Refusal::new(
        Reason::AuditUnavailable,
        target.host.to_string(),
        target.port,
    )
    .with_detail("the audit log cannot be written; every request is refused until it can");
    Err(refusal)
}

/// Step 3: the request levels, then each narrowing header in order, checked to narrow
/// what is above it.
fn levels<'a>(
    policies: &'a Policies,
    session: Option<&'a RequestPolicy>,
    headers: &[Option<&'a RequestPolicy>],
    target: &Target,
) -> Result<Levels<'a>, Refusal> {
    let mut levels = base_levels(policies, session, target)?;
    for narrower in headers.iter().flatten() {
        if let Err(widening) = check_narrowing(&policies.org, &levels, narrower) {
            let what = "X-Network-Policy widens the policy";
            return Err(Refusal::widening(target, &widening, what));
        }
        levels.push(narrower);
    }
    Ok(levels)
}

/// The narrowing headers given, widest first.
fn headers_of<'a>(headers: &[Option<&'a RequestPolicy>]) -> Vec<&'a RequestPolicy> {
    headers.iter().flatten().copied().collect()
}

/// The compiled policy of a session's snapshot, if any.
fn own_policy(own: &Option<Arc<SessionPolicy>>) -> Option<&RequestPolicy> {
    own.as_deref().map(|p| &p.compiled)
}

/// A denial stops here; a denial report mode lets through is recorded and goes on.
async fn settle(
    decision: &Decision,
    target: &Target,
    session: &Option<Arc<Session>>,
    state: &State,
    client: &Client,
    url: Option<&(dyn Fn() -> String + Send + Sync)>,
) -> Result<(), Stop> {
    match decision.verdict {
        Verdict::Deny(reason) => Err(Refusal::from_decision(decision, reason, target)
            .in_session(session)
            .into()),
        Verdict::WouldDeny(reason) => {
            let would = Refusal::from_decision(decision, reason, target).in_session(session);
            // Boxed for the same reason as the denial's record in `crate::proxy::conn`'s
            // `handle`: the wait for room in the audit queue stays out of the hot future.
            Box::pin(audit_would_deny(state, client, &would, url.map(|u| u()))).await;
            Ok(())
        }
        Verdict::Allow => Ok(()),
    }
}

/// Step 5, for an allowed request: resolve a name, and keep the addresses that pass the
/// address check (under the same levels the request was decided with).
async fn checked_addrs(
    decision: &Decision,
    eff: &Effective<'_>,
    session: &Option<Arc<Session>>,
    target: &Target,
    state: &State,
) -> Result<CheckedAddrs, Stop> {
    // A literal address and a pinned name are checked where they are, not copied.
    let resolved;
    let ips: &[IpAddr] = match &target.host {
        Host::Ip(ip) => std::slice::from_ref(ip),
        Host::Name(name) => {
            state.metrics.dns_lookups.inc();
            match state.resolver.pinned(name.as_str()) {
                Some(pinned) => pinned,
                None => {
                    resolved = state.resolver.resolve(name.as_str()).await.map_err(|e| {
                        state.metrics.dns_failures.inc();
                        Stop::Failed(Failure {
                            status: 502,
                            message: format!("cannot resolve {name}: {e}"),
                            detail: None,
                        })
                    })?;
                    &resolved
                }
            }
        }
    };
    let tag = |r: Refusal| Stop::from(r.in_session(session));
    let mut addrs = CheckedAddrs::default();
    let mut refused = None;
    for &ip in ips {
        match guard(eff, ip, &state.own, target.port) {
            Ok(addr) => addrs.push(addr),
            Err((verdict, reason)) if refused.is_none() => refused = Some((verdict, reason, ip)),
            Err(_) => {}
        }
    }
    if addrs.is_empty() {
        let (verdict, reason, ip) =
            refused.expect("a lookup that succeeded returned at least one address");
        let mut refusal = Refusal::from_decision(&verdict, reason, target);
        refusal.shared_hosting = decision.shared_hosting;
        refusal.resolved_ip = Some(ip);
        return Err(tag(refusal));
    }
    Ok(addrs)
}

/// Step 2: the session the credentials name, if any. Wrong credentials are refused
/// even when sessions are optional: a client that offers them expects them used. A
/// proxy without the admin API has no sessions and leaves credentials unjudged. A store
/// that cannot be reached refuses with `session_store_unavailable` (503): the
/// credentials are never taken unverified.
async fn credentials(ask: &Ask<'_>, state: &State) -> Result<Option<Arc<Session>>, Refusal> {
    if !state.sessions_enabled {
        return Ok(None);
    }
    let found = match &ask.credentials {
        Credentials::None => Ok(None),
        Credentials::Presented { id, token } => state.sessions.verify(id, token).await.map(Some),
        Credentials::Unreadable(why) => Err(*why),
        // Ended since its listener verified it: as unknown as a deleted session's.
        Credentials::Verified(session) if session.is_ended() => Err(AuthError::Unknown),
        Credentials::Verified(session) => Ok(Some(session.clone())),
    };
    match found {
        Ok(None) if state.require_session => {
            Err(Refusal::auth_required(AuthError::Missing, &ask.target))
        }
        Ok(found) => Ok(found),
        Err(why) => Err(Refusal::auth_required(why, &ask.target)),
    }
}

/// Step 3's input: the client's `X-Network-Policy`, at most one, and it must parse.
fn narrowing(
    narrowing: Narrowing<'_>,
    target: &Target,
) -> Result<Option<Box<RequestPolicy>>, Refusal> {
    let invalid = |detail: String| {
        Refusal::new(Reason::InvalidPolicy, target.host.to_string(), target.port)
            .with_detail(detail)
    };
    match narrowing {
        Narrowing::Absent => Ok(None),
        Narrowing::Several => Err(invalid("more than one X-Network-Policy header".into())),
        Narrowing::NotText => Err(invalid("X-Network-Policy is not ASCII text".into())),
        Narrowing::One(text) => RequestPolicy::from_json(text, "X-Network-Policy")
            .map(|policy| Some(Box::new(policy)))
            .map_err(|e| invalid(e.to_string())),
    }
}

/// The session's policy must narrow the policies this proxy runs now. A reload here
/// ends the sessions it no longer covers; with a shared store, a session made on a
/// replica running another policy version is refused here (`policy_widening`) until
/// the two agree (docs/scale-out.md, "Two policy versions"). Checked once per session
/// and policy snapshot.
fn covered(own: &SessionPolicy, policies: &Arc<Policies>, target: &Target) -> Result<(), Refusal> {
    own.covered_under(policies, || {
        let uppers: Vec<&RequestPolicy> = policies.serve_policy.iter().collect();
        check_narrowing(&policies.org, &uppers, &own.compiled).map_err(|w| {
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
    session: Option<&'a RequestPolicy>,
    target: &Target,
) -> Result<Levels<'a>, Refusal> {
    if let Some(widening) = &policies.widening {
        let what = "the proxy's --policy widens the reloaded organization policy";
        return Err(Refusal::widening(target, widening, what));
    }
    let mut levels = Levels::default();
    match session {
        Some(own) => {
            if let Some(serve) = &policies.serve_policy {
                levels.push(serve);
            }
            levels.push(own);
        }
        None => levels.push(&policies.without_session),
    }
    Ok(levels)
}
