//! The judgement of one request, in the order of judgement (docs/reference/answers.md):
//! target, credentials (a session), request-level policies, organization and request
//! decisions, then (for allowed names only) resolving and the address check. Ends in
//! addresses the proxy may dial, or in why it stops. Writing the records is
//! [`super::record`]'s.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use hyper::{Request, StatusCode};

use super::approved::{Approved, Judged};
use super::ask;
use super::budget;
use super::policies::Policies;
use super::record::{audit_would_deny, inspected_url, plain_url, Client};
use super::refusal::{Failure, Refusal, Stop};
use super::request;
use super::state::State;
use crate::net::dial::{guard, CheckedAddr};
use crate::policy::Target;
use crate::policy::{
    check_narrowing, decide, decide_request, upload_budget, Budget, Decision, Effective, Host,
    Http, Reason, RequestPolicy, Verdict,
};
use crate::session::{self, AuthError, Session, SessionPolicy};

/// Judge `req`: Ok with the approved addresses, or why it stops.
pub async fn judge<B>(req: &Request<B>, state: &State, client: &Client) -> Result<Approved, Stop> {
    let has_upgrade = request::head_within(req, state.limits.max_header_bytes)?;
    let target = request::target(req)?;
    let websocket =
        has_upgrade && req.method() != hyper::Method::CONNECT && request::upgrade(req, &target)?;
    refuse_while_unaudited(state, &target)?;
    let policies = state.policies();
    let session = credentials(req, state, &target).await?;
    let tag = |r: Refusal| r.in_session(&session);
    let header = request::header_policy(req.headers(), &target).map_err(tag)?;
    let own = session.as_ref().map(|s| s.policy());
    if let Some(own) = &own {
        covered(own, &policies, &target).map_err(tag)?;
    }
    let headers = [header.as_deref()];
    let levels = levels(&policies, own_policy(&own), &headers, &target).map_err(tag)?;
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    let asking = Asking::of(req);
    let (mut decision, mut judged, limit) = decide_levels(&eff, &target, &asking).map_err(tag)?;
    // Set when a reviewer's approval let the request through: the policies they decided by.
    let mut approved_under = None;
    if let Some(timeout) = ask::asks(state, &session, header.is_some(), &decision) {
        let asked = ask::ask(
            state, client, &policies, &session, &target, &asking, &decision, timeout,
        );
        match Box::pin(asked).await {
            ask::Asked::Allowed(allowed, now) => {
                (decision, judged) = allowed;
                approved_under = Some(now);
            }
            ask::Asked::Refused(refusal) => return Err(tag(refusal).into()),
            ask::Asked::NotHeld => {}
        }
    }
    settle(&decision, &target, &session, state, client, || {
        plain_url(req)
    })
    .await?;
    if matches!(judged, Judged::Intercept) && state.interception.is_none() {
        // Rules that cannot be enforced without reading the requests: refused whole.
        let refusal = Refusal::from_decision(&decision, Reason::MethodNotAllowed, &target)
            .with_detail("this host's rules need its requests read, and the proxy has no --ca");
        return Err(tag(refusal).into());
    }
    // The budget comes last of the policy's judgements, before any lookup.
    let allowance = state.budgets.allowance(session.as_ref(), limit);
    budget::fill(req, &allowance, &target, state.limits.max_header_bytes)
        .await
        .map_err(tag)?;
    budget::admit(req, &allowance, &target).map_err(tag)?;
    let addrs = {
        // An approved request's addresses are checked by the policies it was approved by.
        let (now_levels, now_eff);
        let eff = match &approved_under {
            Some(now) => {
                now_levels = self::levels(now, own_policy(&own), &headers, &target).map_err(tag)?;
                now_eff = Effective {
                    org: &now.org,
                    levels: &now_levels,
                };
                &now_eff
            }
            None => &eff,
        };
        checked_addrs(&decision, eff, &session, &target, state).await?
    };
    drop(levels);
    Ok(Approved {
        addrs,
        target,
        decision,
        policies: approved_under.unwrap_or(policies),
        session,
        decided_at: Instant::now(),
        upstream_tls: None,
        header,
        judged,
        budget: allowance,
        websocket,
    })
}

/// Judge a request read inside an intercepted tunnel (docs/reference/inspection.md):
/// the tunnel's target, session and policies (those the `CONNECT` was decided with),
/// narrowed by the `CONNECT`'s `X-Network-Policy` and then the request's own, decided by
/// the same code as every other request. It goes to the tunnel's checked addresses.
pub async fn judge_inner<B>(
    req: &Request<B>,
    tunnel: &Approved,
    state: &State,
    client: &Client,
) -> Result<Approved, Stop> {
    let has_upgrade = request::head_within(req, state.limits.max_header_bytes)?;
    let session = tunnel.session.clone();
    let tag = |r: Refusal| r.in_session(&session);
    let target = request::inner_target(req, &tunnel.target).map_err(tag)?;
    let websocket = has_upgrade && request::upgrade(req, &target).map_err(tag)?;
    refuse_while_unaudited(state, &target)?;
    let policies = tunnel.policies.clone();
    let header = request::header_policy(req.headers(), &target).map_err(tag)?;
    let headers = [tunnel.header.as_deref(), header.as_deref()];
    let own = session.as_ref().map(|s| s.policy());
    let levels = levels(&policies, own_policy(&own), &headers, &target).map_err(tag)?;
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    let (decision, judged, limit) = decide_levels(&eff, &target, &Asking::of(req)).map_err(tag)?;
    drop(levels);
    let url = || Some(inspected_url(req, &target));
    settle(&decision, &target, &session, state, client, url).await?;
    // The tunnel's session (or the proxy) pays for what each request inside sends.
    let allowance = state.budgets.allowance(session.as_ref(), limit);
    budget::fill(req, &allowance, &target, state.limits.max_header_bytes)
        .await
        .map_err(tag)?;
    budget::admit(req, &allowance, &target).map_err(tag)?;
    Ok(Approved {
        target,
        addrs: tunnel.addrs.clone(),
        decision,
        policies,
        session,
        decided_at: Instant::now(),
        upstream_tls: Some(Arc::from(tunnel.target.host.to_string())),
        header: None,
        judged,
        budget: allowance,
        websocket,
    })
}

/// Nothing goes through unrecorded (docs/reference/audit-log.md).
fn refuse_while_unaudited(state: &State, target: &Target) -> Result<(), Refusal> {
    if !state.audit.refusing() {
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
) -> Result<Vec<&'a RequestPolicy>, Refusal> {
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

/// The compiled policy of a session's snapshot, if any.
fn own_policy(own: &Option<Arc<SessionPolicy>>) -> Option<&RequestPolicy> {
    own.as_deref().map(|p| &p.compiled)
}

/// What a request asks beyond its destination: a method and a path, or a tunnel.
pub(super) enum Asking<'r> {
    Request { method: &'r str, path: &'r str },
    Tunnel,
}

impl<'r> Asking<'r> {
    fn of<B>(req: &'r Request<B>) -> Asking<'r> {
        match *req.method() {
            hyper::Method::CONNECT => Asking::Tunnel,
            ref method => Asking::Request {
                method: method.as_str(),
                path: req.uri().path_and_query().map_or("/", |p| p.as_str()),
            },
        }
    }
}

/// Step 4: the decision under the levels in `eff`. Where an entry matching the destination
/// has rules (docs/reference/policy-files.md, "Entries with rules"), a request is judged
/// by its method and normalised path too (a path that does not normalise is
/// `invalid_request`), and a tunnel is marked for interception.
pub(super) fn decide_levels(
    eff: &Effective,
    target: &Target,
    asked: &Asking,
) -> Result<(Decision, Judged, Option<Budget>), Refusal> {
    // Section 13's budget: the narrowest of the levels in force.
    let budget = upload_budget(eff.org, eff.levels);
    if !eff.must_intercept(target) {
        return Ok((decide(eff, target), Judged::Whole, budget));
    }
    match *asked {
        Asking::Tunnel => Ok((decide(eff, target), Judged::Intercept, budget)),
        Asking::Request { method, path } => {
            let path = request::normal_path(path, target)?;
            let decision = decide_request(
                eff,
                target,
                &Http {
                    method,
                    path: &path,
                },
            );
            Ok((decision, Judged::Path(path), budget))
        }
    }
}

/// A denial stops here; a denial report mode lets through is recorded and goes on.
async fn settle(
    decision: &Decision,
    target: &Target,
    session: &Option<Arc<Session>>,
    state: &State,
    client: &Client,
    url: impl FnOnce() -> Option<String>,
) -> Result<(), Stop> {
    match decision.verdict {
        Verdict::Deny(reason) => Err(Refusal::from_decision(decision, reason, target)
            .in_session(session)
            .into()),
        Verdict::WouldDeny(reason) => {
            let would = Refusal::from_decision(decision, reason, target).in_session(session);
            // Boxed for the same reason as the denial's record in `crate::proxy::conn`'s
            // `handle`: the wait for room in the audit queue stays out of the hot future.
            Box::pin(audit_would_deny(state, client, &would, url())).await;
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
) -> Result<Vec<CheckedAddr>, Stop> {
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
                            status: StatusCode::BAD_GATEWAY,
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
    let mut addrs: Vec<CheckedAddr> = Vec::with_capacity(ips.len());
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
) -> Result<Vec<&'a RequestPolicy>, Refusal> {
    if let Some(widening) = &policies.widening {
        let what = "the proxy's --policy widens the reloaded organization policy";
        return Err(Refusal::widening(target, widening, what));
    }
    Ok(match session {
        Some(own) => policies.serve_policy.iter().chain([own]).collect(),
        None => vec![&policies.without_session],
    })
}
